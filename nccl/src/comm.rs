//! The communicator behind an `ncclComm_t`: a [`GpuComm`] once initialised, the facts
//! NCCL's queries return, and the registry that turns a handle from C into a reference
//! (a handle weft did not hand out, or already destroyed, is an invalid argument rather
//! than a wild pointer).

use std::collections::HashMap;
use std::panic::Location;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, TryLockError};
use std::time::{Duration, Instant};

use weft_config::{Group, Settings};
use weft_core::abi::DataType;
use weft_runtime::bootstrap::{Cancel, UniqueId};
use weft_runtime::comm::CommOptions;
use weft_runtime::gpu::{AbortHandle, GpuComm};

use crate::config::CommSettings;
use crate::debug;
use crate::redop::UserRedOps;
use crate::result::{
    ApiError, NCCL_IN_PROGRESS, NCCL_INVALID_USAGE, NCCL_REMOTE_ERROR, NCCL_SUCCESS,
    NCCL_UNHANDLED_CUDA_ERROR, NcclResult,
};

/// Where a communicator is in its life.
#[derive(Debug)]
pub enum CommState {
    /// Created inside a group; initialised at its outermost `ncclGroupEnd`.
    Pending,
    Ready(Box<GpuComm>),
    /// Initialisation failed: every call returns this.
    Failed(ApiError),
}

/// How long `ncclCommGetAsyncError` waits, once the abort flag is up, for a call holding
/// the communicator to leave. A launch that sees the flag leaves within the health query
/// at a deadline (1.5 s); a synchronize drains for up to 5 s, and a split's or finalize's
/// bootstrap exchange runs to its own deadline: those get the placeholder error, naming
/// the call.
pub const DETAILS_WAIT: Duration = Duration::from_secs(2);

/// `mutex` within `wait` (at once for zero), or `None` while another thread holds it.
fn lock_within<T>(mutex: &Mutex<T>, wait: Duration) -> Option<MutexGuard<'_, T>> {
    let deadline = Instant::now() + wait;
    loop {
        match mutex.try_lock() {
            Ok(guard) => return Some(guard),
            // A panic while holding it was caught at the boundary; the state is whole.
            Err(TryLockError::Poisoned(p)) => return Some(p.into_inner()),
            Err(TryLockError::WouldBlock) if Instant::now() >= deadline => return None,
            Err(TryLockError::WouldBlock) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
}

/// One rank's communicator.
#[derive(Debug)]
pub struct Comm {
    pub rank: usize,
    pub nranks: usize,
    /// CUDA ordinal of its GPU.
    pub device: usize,
    pub settings: CommSettings,
    /// `ncclCommFinalize` was called: later calls on it are refused, as NCCL's.
    pub finalized: AtomicBool,
    /// `ncclCommRevoke` was called: collectives and point-to-point calls are refused;
    /// split, shrink, abort and destroy remain.
    pub revoked: AtomicBool,
    /// Held across blocking host calls (finalize's wait for the device, a split's
    /// exchanges): what must not wait for it lives outside, in `abort`.
    state: Mutex<CommState>,
    /// Where `state` was last taken (the call's file and line in this crate): named by a
    /// poll that finds it held past `DETAILS_WAIT`.
    state_taken_at: Mutex<Option<&'static Location<'static>>>,
    /// The GPU communicator's abort flag, set once it is ready: `ncclCommAbort` raises it
    /// before taking `state`, which ends the call holding `state`.
    abort: OnceLock<AbortHandle>,
    /// The asynchronous error `ncclCommGetAsyncError` last made the last error: a caller
    /// polling it (PyTorch's watchdog does, every few ms) records it once, not per poll.
    async_reported: Mutex<Option<String>>,
    /// Operators from `ncclRedOpCreatePreMulSum` on this communicator. Apart from `state`,
    /// so that creating or using one never waits for a call holding the GPU communicator.
    user_ops: Mutex<UserRedOps>,
    /// Calls issued on it, for `NCCL_DEBUG_SUBSYS=COLL` lines (NCCL's `opCount`).
    pub op_count: AtomicU64,
    /// A non-blocking communicator's init or finalize runs on a thread of its own
    /// ([`Comm::in_background`]), which holds `state`.
    in_background: AtomicBool,
    /// `ncclCommAbort` came while it ran: that thread aborts what it made.
    abort_requested: AtomicBool,
    /// Ends the init's bootstrap waits when `ncclCommAbort` comes while the init runs in
    /// the background (as NCCL's abort flag ends its init's waits); the NET connections'
    /// waits still run to their deadline.
    init_cancel: Cancel,
    /// What a background init or finalize failed with, for `ncclCommGetAsyncError`.
    background_failed: Mutex<Option<ApiError>>,
}

impl Comm {
    pub fn new(rank: usize, nranks: usize, device: usize, settings: CommSettings) -> Comm {
        Comm {
            rank,
            nranks,
            device,
            settings,
            finalized: AtomicBool::new(false),
            revoked: AtomicBool::new(false),
            state: Mutex::new(CommState::Pending),
            state_taken_at: Mutex::new(None),
            abort: OnceLock::new(),
            async_reported: Mutex::new(None),
            user_ops: Mutex::new(UserRedOps::default()),
            op_count: AtomicU64::new(0),
            in_background: AtomicBool::new(false),
            abort_requested: AtomicBool::new(false),
            init_cancel: Cancel::new(),
            background_failed: Mutex::new(None),
        }
    }

    /// This communicator's `PreMulSum` operators.
    pub fn user_ops(&self) -> MutexGuard<'_, UserRedOps> {
        // A panic while holding it was caught at the boundary; the table itself is whole.
        self.user_ops.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes `text` the last error unless this communicator's poll already did.
    pub fn report_async(&self, text: &str) {
        let mut last = self
            .async_reported
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if last.as_deref() != Some(text) {
            crate::boundary::set_last_error(text);
            *last = Some(text.to_string());
        }
    }

    #[track_caller]
    pub fn state(&self) -> MutexGuard<'_, CommState> {
        let at = Location::caller();
        // A panic while holding it was caught at the boundary; the state itself is whole.
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.note_held_at(at);
        state
    }

    /// Records that the state is now held from `at` (what a poll that finds it held names).
    fn note_held_at(&self, at: &'static Location<'static>) {
        *self
            .state_taken_at
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(at);
    }

    /// Refuses work on a finalized or revoked communicator (NCCL's ncclInvalidUsage).
    pub fn check_usable(&self) -> Result<(), ApiError> {
        if self.finalized.load(Ordering::SeqCst) {
            return Err(ApiError::invalid_usage(format!(
                "rank {}: the communicator was finalized (ncclCommFinalize); only \
                 ncclCommDestroy may follow",
                self.rank
            )));
        }
        if self.revoked.load(Ordering::SeqCst) {
            return Err(ApiError::invalid_usage(format!(
                "rank {}: the communicator was revoked (ncclCommRevoke); destroy, split or \
                 shrink it",
                self.rank
            )));
        }
        Ok(())
    }

    /// Raises the kernels' abort flag without waiting for the state lock (as `abort`), so
    /// that a call blocked holding it ends; `ncclCommRevoke` then drains and lowers it.
    pub fn raise_abort_flag(&self) {
        if let Some(flag) = self.abort.get() {
            flag.raise();
        }
    }

    /// Runs `f` on the initialised communicator.
    #[track_caller]
    pub fn with_gpu<T>(
        &self,
        f: impl FnOnce(&mut GpuComm) -> Result<T, ApiError>,
    ) -> Result<T, ApiError> {
        match &mut *self.state() {
            CommState::Ready(gpu) => f(gpu),
            CommState::Failed(e) => Err(ApiError::new(
                e.code,
                format!("the communicator's initialisation failed: {}", e.message),
            )),
            CommState::Pending => Err(ApiError::invalid_usage(
                "the communicator is initialised at the end of the group that created it; \
                 call ncclGroupEnd first",
            )),
        }
    }

    /// Raises the abort flag without waiting for the state lock (whose holder may be
    /// blocked on the GPU or on peers), then records the reason under the lock. During a
    /// non-blocking init it returns at once: the init's thread aborts what it made.
    pub fn abort(&self, why: &str) {
        if let Some(flag) = self.abort.get() {
            flag.raise();
        }
        // SeqCst with the init's thread's clearing of `in_background` then reading of this:
        // either that thread sees the request, or this sees the init over.
        self.abort_requested.store(true, Ordering::SeqCst);
        if self.in_background.load(Ordering::SeqCst) {
            // An init waiting for its peers ends now, not at its deadline (a finalize in the
            // background is not touched: the token let go of its bootstrap when the init
            // ended); the thread then aborts what it made.
            self.init_cancel
                .cancel(&format!("rank {}: {why}", self.rank));
            return;
        }
        if let CommState::Ready(gpu) = &mut *self.state() {
            gpu.abort(why);
        }
    }

    /// What a non-blocking init or finalize failed with, if one did.
    fn background_failure(&self) -> Option<ApiError> {
        self.background_failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// `ncclCommGetAsyncError`'s answer: `ncclInProgress` while the communicator waits for
    /// its group's end. When another thread holds the state (a blocking call in progress),
    /// a healthy communicator answers `ncclSuccess` at once; one whose abort flag is up
    /// waits up to [`DETAILS_WAIT`] for that call to leave, so that the error names the
    /// rank at fault (a caller such as PyTorch's watchdog reports the first error it sees
    /// and ends the process: a placeholder would be all its user ever read). Seen on two
    /// H200 (2026-11-28): a receive's deadline reached PyTorch as "the details come once
    /// its call in progress returns".
    pub fn async_error(&self) -> Result<NcclResult, ApiError> {
        let mut state = match lock_within(&self.state, Duration::ZERO) {
            Some(s) => s,
            // A non-blocking init's or finalize's thread holds it.
            None if self.in_background.load(Ordering::SeqCst) => return Ok(NCCL_IN_PROGRESS),
            // Healthy, and a blocking call in progress: nothing to report (unless a
            // non-blocking init or finalize failed, and a call made meanwhile holds it), and
            // no waiting for that call (which may take as long as its peers do).
            None if !self.abort.get().is_some_and(AbortHandle::is_raised) => {
                return match self.background_failure() {
                    Some(e) => Err(e),
                    None => Ok(NCCL_SUCCESS),
                };
            }
            // A failure: the call holding the state sees the flag and returns soon (at most
            // the health query's 1.5 s at a deadline), and the caller (PyTorch's watchdog
            // reports the first error it sees, once) gets the details instead of a stub.
            None => match lock_within(&self.state, DETAILS_WAIT) {
                Some(s) => s,
                None => {
                    let holder = self
                        .state_taken_at
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .map_or_else(
                            || "another call".to_string(),
                            |at| format!("the call at {at}"),
                        );
                    return Err(ApiError::new(
                        NCCL_REMOTE_ERROR,
                        format!(
                            "rank {}: the communicator was aborted or one of its kernels gave \
                             up; {holder} has held the communicator for over {:.0} s since, so \
                             the details come once it returns (ncclGetLastError then)",
                            self.rank,
                            DETAILS_WAIT.as_secs_f64()
                        ),
                    ));
                }
            },
        };
        // This poll holds it now: a later poll that finds it held names this place.
        self.note_held_at(Location::caller());
        if let Some(e) = self.background_failure() {
            return Err(e);
        }
        match &mut *state {
            CommState::Pending => Ok(NCCL_IN_PROGRESS),
            CommState::Failed(e) => Err(e.clone()),
            CommState::Ready(gpu) => {
                gpu.check()?;
                Ok(NCCL_SUCCESS)
            }
        }
    }

    /// Initialises it (collective with the other ranks of `id`): blocks until every rank
    /// has joined or the bootstrap gives up.
    pub fn init(&self, id: &UniqueId) {
        let made = self.initialised(id);
        *self.state() = made;
    }

    /// What init makes of this communicator: ready, or failed with the reason.
    fn initialised(&self, id: &UniqueId) -> CommState {
        let init = init_gpu(
            id,
            self.rank,
            self.nranks,
            self.device,
            &self.settings,
            &self.init_cancel,
        );
        // From here an abort must not cut the bootstrap: the communicator's teardown uses it.
        self.init_cancel.release();
        match init {
            Ok(gpu) => {
                let _ = self.abort.set(gpu.abort_handle());
                CommState::Ready(Box::new(gpu))
            }
            Err(e) => {
                debug::warn(self.device, &e.message);
                CommState::Failed(e)
            }
        }
    }

    /// A non-blocking init (`ncclConfig_t.blocking` 0): [`Comm::init`] on a thread of its
    /// own, which holds the state for the whole of it, so that another call on the
    /// communicator waits for the init's end (NCCL asks programs to poll first), while
    /// `ncclCommGetAsyncError` answers `ncclInProgress` and `ncclCommAbort` returns at once.
    /// Returns once that thread holds the state.
    pub fn init_in_background(self: &Arc<Self>, id: UniqueId) -> Result<(), ApiError> {
        self.in_background("init", move |comm, state| {
            *state = comm.initialised(&id);
            Ok(())
        })
    }

    /// A non-blocking communicator's finalize: as [`Comm::init_in_background`], its
    /// failure kept for `ncclCommGetAsyncError`.
    pub fn finalize_in_background(self: &Arc<Self>) -> Result<(), ApiError> {
        self.in_background("finalize", |comm, state| match state {
            CommState::Ready(gpu) => gpu.finalize().map_err(ApiError::from),
            CommState::Failed(e) => Err(e.clone()),
            CommState::Pending => Err(ApiError::invalid_usage(format!(
                "rank {}: finalize of a communicator whose group has not ended",
                comm.rank
            ))),
        })
    }

    /// Runs `op` (`what`: "init", "finalize") on a thread of its own that holds the state
    /// for the whole of it (see [`Comm::init_in_background`]); returns once it holds it.
    fn in_background(
        self: &Arc<Self>,
        what: &'static str,
        op: impl FnOnce(&Comm, &mut CommState) -> Result<(), ApiError> + Send + 'static,
    ) -> Result<(), ApiError> {
        // One at a time, as NCCL's: a program must see the previous one end first.
        if self.in_background.swap(true, Ordering::SeqCst) {
            return Err(ApiError::invalid_argument(format!(
                "rank {}: the communicator's previous non-blocking operation has not ended: \
                 poll ncclCommGetAsyncError until it is no longer ncclInProgress first",
                self.rank
            )));
        }
        let comm = Arc::clone(self);
        let (held, wait_held) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name(format!("weft-{what}-{}", self.rank))
            .spawn(move || {
                // Whatever happens below, a panic included: the flag goes down and a
                // deferred abort is carried out.
                let _done = BackgroundDone { comm: &comm, what };
                let mut state = comm.state();
                let _ = held.send(());
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    op(&comm, &mut state)
                }))
                .unwrap_or_else(|panic| {
                    let why = panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_default();
                    Err(ApiError::new(
                        crate::result::NCCL_INTERNAL_ERROR,
                        format!(
                            "rank {}: the non-blocking {what} panicked: {why}",
                            comm.rank
                        ),
                    ))
                });
                // A failed init too: a poll that finds the state held by a call made
                // meanwhile reads it here, not a healthy communicator.
                let failed = outcome.err().or_else(|| match &*state {
                    CommState::Failed(e) => Some(e.clone()),
                    _ => None,
                });
                if let Some(e) = failed {
                    debug::warn(comm.device, &e.message);
                    *comm
                        .background_failed
                        .lock()
                        .unwrap_or_else(|p| p.into_inner()) = Some(e);
                }
                drop(state);
            });
        if let Err(e) = spawned {
            self.in_background.store(false, Ordering::SeqCst);
            if self.abort_requested.load(Ordering::SeqCst) {
                self.abort(&format!("ncclCommAbort during the non-blocking {what}"));
            }
            return Err(ApiError::new(
                crate::result::NCCL_SYSTEM_ERROR,
                format!(
                    "rank {}: starting the non-blocking {what}'s thread: {e}",
                    self.rank
                ),
            ));
        }
        // The thread holds the state before this returns: nothing overtakes it.
        let _ = wait_held.recv();
        Ok(())
    }
}

/// The end of a background operation (see `Comm::in_background`), run on drop so that a
/// panic cannot skip it: the flag goes down, then an abort that came meanwhile (and found
/// the flag up) is carried out.
struct BackgroundDone<'a> {
    comm: &'a Comm,
    what: &'static str,
}

impl Drop for BackgroundDone<'_> {
    fn drop(&mut self) {
        self.comm.in_background.store(false, Ordering::SeqCst);
        if self.comm.abort_requested.load(Ordering::SeqCst) {
            self.comm.abort(&format!(
                "ncclCommAbort during the non-blocking {}",
                self.what
            ));
        }
    }
}

/// The variables set to other than their defaults, at INFO, as NCCL lists them
/// (`NCCL_SOCKET_IFNAME set by environment to eth0`); once per process.
fn changed_once(device: usize, env: &Settings) {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        for line in weft_config::listing::changed(env).lines() {
            debug::info(device, line);
        }
    });
}

/// `GpuComm::init` with options from the environment, logging what NCCL logs at INFO;
/// cancelling `cancel` ends its bootstrap's waits (`ncclCommAbort` of a non-blocking init).
pub fn init_gpu(
    id: &UniqueId,
    rank: usize,
    nranks: usize,
    device: usize,
    settings: &CommSettings,
    cancel: &Cancel,
) -> Result<GpuComm, ApiError> {
    crate::unload::arm();
    debug::version_once(device);
    for line in &settings.set_lines {
        debug::info(device, line);
    }
    for note in &settings.notes {
        debug::info(device, &format!("config: {note}"));
    }
    // The network backends' variables are the net plugin's business: a bad one must not
    // fail a communicator that connects its GPUs without them.
    let env = Settings::from_env_or_defaults();
    let own = [
        Group::Bootstrap,
        Group::Topology,
        Group::Transport,
        Group::Gpu,
        Group::Kernels,
        Group::Debug,
    ];
    env.check_groups(&own).map_err(|e| {
        ApiError::invalid_argument(format!("reading weft's environment variables: {e}"))
    })?;
    changed_once(device, &env);
    let mut opts = CommOptions::from_settings(&env);
    opts.channel_bounds = settings.channel_bounds;
    opts.bootstrap.cancel = Some(cancel.clone());
    let gpu = GpuComm::init(id, rank, nranks, device, &opts)?;
    // NCCL names the network it loaded. weft opens one only for ranks on other hosts; on
    // one host it says so after the name it would take (netName, else NCCL_NET, else
    // sockets).
    match gpu.network() {
        Some(net) => debug::info(device, &format!("Using network {net}")),
        None => {
            let net = settings
                .net_name
                .clone()
                .or_else(|| env.net.nccl_net.clone())
                .unwrap_or_else(|| "Socket".to_string());
            debug::info(
                device,
                &format!("Using network {net} (weft: GPUs of one host connect without it)"),
            );
        }
    }
    let name = settings.name.as_deref().unwrap_or("");
    debug::info(
        device,
        &format!(
            "comm rank {rank} nRanks {nranks} cudaDev {device} commName {name:?} - weft: \
             transport {}, {} channels of {} KiB steps",
            gpu.transport_name(),
            gpu.nchannels(),
            gpu.step_bytes() / 1024
        ),
    );
    for (c, ring) in gpu.rings().iter().enumerate() {
        let ranks: Vec<String> = ring.iter().map(u32::to_string).collect();
        debug::info(
            device,
            &format!(
                "Channel {c:02}/{:02} : {}",
                gpu.nchannels(),
                ranks.join(" ")
            ),
        );
    }
    for line in gpu.connection_lines() {
        debug::info(device, line);
    }
    debug::info(
        device,
        &format!("comm rank {rank} nRanks {nranks} - Init COMPLETE"),
    );
    Ok(gpu)
}

/// Compiles every type's kernels and waits for every rank: ranks sharing one GPU must
/// load their modules before any of them launches (a module load waits for the device,
/// and a peer's kernel waiting for this rank would never finish).
pub fn prepare_shared(gpu: &mut GpuComm) -> Result<(), ApiError> {
    let all: Vec<DataType> = (0..crate::types::NUM_TYPES)
        .filter_map(|t| crate::types::data_type(t).ok())
        .collect();
    gpu.prepare(&all)?;
    gpu.barrier()?;
    Ok(())
}

/// Live communicators by handle.
static LIVE: Mutex<Option<HashMap<usize, Arc<Comm>>>> = Mutex::new(None);

fn live() -> MutexGuard<'static, Option<HashMap<usize, Arc<Comm>>>> {
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// The next handle's number. Handles are never reused: a `Comm`'s address could be, once
/// it is freed, and a caller's stale handle would then name someone else's communicator.
static NEXT_HANDLE: AtomicUsize = AtomicUsize::new(1);

/// Handles are `HANDLE_BASE + 16 n`: non-null, aligned like a pointer, and far from any
/// address a heap hands out, so a caller that dereferences one faults at once.
const HANDLE_BASE: usize = 0x1_0000;

/// Registers `comm` and returns its handle (opaque to C, never reused).
pub fn register(comm: Arc<Comm>) -> usize {
    let n = NEXT_HANDLE.fetch_add(1, Ordering::Relaxed);
    let handle = HANDLE_BASE.wrapping_add(n.wrapping_mul(16));
    live().get_or_insert_with(HashMap::new).insert(handle, comm);
    handle
}

/// The communicator of `handle`.
pub fn lookup(handle: usize) -> Result<Arc<Comm>, ApiError> {
    if handle == 0 {
        return Err(ApiError::invalid_argument("comm is NULL"));
    }
    live()
        .as_ref()
        .and_then(|m| m.get(&handle).cloned())
        .ok_or_else(|| {
            ApiError::invalid_argument(format!(
                "comm {handle:#x} is not a live communicator of weft's libnccl (destroyed \
                 already, or not from ncclCommInit*)"
            ))
        })
}

/// Unregisters `handle`; the communicator ends when its last queued call has.
pub fn unregister(handle: usize) -> Result<Arc<Comm>, ApiError> {
    let comm = lookup(handle)?;
    if let Some(m) = live().as_mut() {
        m.remove(&handle);
    }
    Ok(comm)
}

/// The CUDA ordinal current on this thread (`cudaGetDevice`'s answer): the device of
/// the current context, which `cudaSetDevice` makes current; 0 when none is.
pub fn current_device() -> Result<usize, ApiError> {
    let d = weft_cuda::driver().map_err(|e| {
        ApiError::from(e).context("no GPU available: loading the CUDA driver (libcuda.so.1)")
    })?;
    let count = weft_cuda::device_count()?;
    if count == 0 {
        return Err(ApiError::new(
            NCCL_UNHANDLED_CUDA_ERROR,
            "no GPU: the CUDA driver sees no device (CUDA_VISIBLE_DEVICES?)",
        ));
    }
    let mut ctx: weft_cuda::CUcontext = std::ptr::null_mut();
    // SAFETY: `ctx` is a valid out-pointer; the driver was initialised by device_count.
    let rc = unsafe { (d.cuCtxGetCurrent)(&mut ctx) };
    if !rc.is_success() || ctx.is_null() {
        return Ok(0);
    }
    let mut dev: weft_cuda::CUdevice = 0;
    // SAFETY: `dev` is a valid out-pointer; a context is current.
    let rc = unsafe { (d.cuCtxGetDevice)(&mut dev) };
    if !rc.is_success() {
        return Err(ApiError::new(
            NCCL_UNHANDLED_CUDA_ERROR,
            format!("cuCtxGetDevice failed with {rc:?}: cannot tell the current GPU"),
        ));
    }
    usize::try_from(dev).map_err(|_| ApiError::new(NCCL_INVALID_USAGE, "negative device"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn async_error_never_waits_for_the_state_lock() {
        let c = Comm::new(0, 2, 0, CommSettings::default());
        // Created inside a group, not initialised yet: in progress, not invalid usage.
        assert_eq!(c.async_error().unwrap(), NCCL_IN_PROGRESS);
        // Another call holds the state (as finalize does while it waits): the poll
        // answers at once instead of waiting for it.
        let held = c.state();
        assert_eq!(c.async_error().unwrap(), NCCL_SUCCESS);
        drop(held);
        *c.state() = CommState::Failed(ApiError::invalid_argument("bootstrap gave up"));
        let e = c.async_error().unwrap_err();
        assert_eq!(e.message, "bootstrap gave up");
    }

    #[test]
    fn a_held_lock_is_waited_for_only_within_the_bound() {
        let m = Mutex::new(0);
        let (taken, wait_taken) = std::sync::mpsc::channel();
        let (go, wait_go) = std::sync::mpsc::channel::<()>();
        std::thread::scope(|s| {
            let m = &m;
            s.spawn(move || {
                let held = m.lock().unwrap();
                taken.send(()).unwrap();
                wait_go.recv().unwrap();
                std::thread::sleep(Duration::from_millis(20));
                drop(held);
            });
            wait_taken.recv().unwrap();
            let t = Instant::now();
            assert!(lock_within(m, Duration::ZERO).is_none());
            assert!(lock_within(m, Duration::from_millis(30)).is_none());
            assert!(t.elapsed() >= Duration::from_millis(30));
            go.send(()).unwrap();
            // The holder leaves within the bound: the caller gets it.
            assert!(lock_within(m, Duration::from_secs(10)).is_some());
        });
    }

    /// `ncclCommGetAsyncError`'s answer once it is no longer `ncclInProgress` (at most
    /// 10 s of polling).
    fn settled(c: &Comm) -> Result<NcclResult, ApiError> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match c.async_error() {
                Ok(NCCL_IN_PROGRESS) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                other => return other,
            }
        }
    }

    #[test]
    fn a_non_blocking_init_is_in_progress_until_it_ends_and_abort_never_waits_for_it() {
        let settings = CommSettings {
            nonblocking: true,
            ..CommSettings::default()
        };
        let c = Arc::new(Comm::new(0, 2, 0, settings));
        let (open, gate) = std::sync::mpsc::channel::<()>();
        c.in_background("init", move |_, state| {
            // The init's peers are slow: it ends when the test says.
            let _ = gate.recv_timeout(Duration::from_secs(30));
            *state = CommState::Failed(ApiError::invalid_argument("rank 1 never joined"));
            Ok(())
        })
        .unwrap();
        assert_eq!(c.async_error().unwrap(), NCCL_IN_PROGRESS);
        assert_eq!(c.async_error().unwrap(), NCCL_IN_PROGRESS, "every poll");
        // A call made meanwhile waits for the init, then gets its outcome.
        std::thread::scope(|s| {
            let call = s.spawn(|| c.with_gpu(|_| Ok(())).unwrap_err().message);
            std::thread::sleep(Duration::from_millis(50));
            assert!(!call.is_finished(), "a call overtook the init");
            // ncclCommAbort from another thread returns at once, whatever the init does.
            let t = Instant::now();
            c.abort("test");
            // Well under the init's 30 s: it did not wait for it (generous for a loaded
            // CI machine).
            assert!(
                t.elapsed() < Duration::from_secs(3),
                "abort waited {:?}",
                t.elapsed()
            );
            open.send(()).unwrap();
            let text = call.join().unwrap();
            assert!(text.ends_with("rank 1 never joined"), "{text}");
        });
        let outcome = settled(&c);
        assert_eq!(outcome.unwrap_err().message, "rank 1 never joined");
    }

    /// `ncclCommAbort` ends a background init that waits for a rank that never comes at
    /// once, not at the bootstrap's deadline (NCCL's abort flag ends its init's waits).
    #[test]
    fn abort_ends_a_background_init_waiting_for_its_peers() {
        use weft_runtime::bootstrap::{Bootstrap, BootstrapOptions, BootstrapRoot};
        let settings = CommSettings {
            nonblocking: true,
            ..CommSettings::default()
        };
        let c = Arc::new(Comm::new(0, 2, 0, settings));
        let mut opts = BootstrapOptions::loopback(Duration::from_secs(30));
        let (id, _root) = BootstrapRoot::start(&opts).unwrap();
        // As `init_gpu` does: the init's bootstrap takes the communicator's token.
        opts.cancel = Some(c.init_cancel.clone());
        c.in_background("init", move |_, state| {
            // Rank 1 never comes: the wait ends by the abort, or at 30 s.
            *state = match Bootstrap::init(&id, 0, 2, &opts) {
                Ok(_) => CommState::Failed(ApiError::invalid_argument("rank 1 came")),
                Err(e) => CommState::Failed(ApiError::invalid_argument(e.to_string())),
            };
            Ok(())
        })
        .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let t = Instant::now();
        c.abort("test");
        let outcome = settled(&c);
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "the init ended {:?} after the abort",
            t.elapsed()
        );
        let text = outcome.unwrap_err().message;
        assert!(text.contains("rank 0: test"), "{text}");
    }

    #[test]
    fn a_background_finalize_reports_its_failure() {
        let c = Arc::new(Comm::new(1, 2, 0, CommSettings::default()));
        *c.state() = CommState::Failed(ApiError::invalid_argument("it never initialised"));
        c.finalize_in_background().unwrap();
        let outcome = settled(&c);
        assert_eq!(outcome.unwrap_err().message, "it never initialised");
    }

    #[test]
    fn a_destroyed_handle_never_names_a_new_comm() {
        let old = register(Arc::new(Comm::new(0, 1, 0, CommSettings::default())));
        unregister(old).unwrap();
        let new = register(Arc::new(Comm::new(0, 1, 0, CommSettings::default())));
        assert_ne!(old, new);
        let e = lookup(old).unwrap_err();
        assert_eq!(e.code, crate::result::NCCL_INVALID_ARGUMENT);
        assert!(
            e.message.contains("not a live communicator"),
            "{}",
            e.message
        );
        assert!(lookup(new).is_ok());
        unregister(new).unwrap();
    }

    #[test]
    fn abort_without_a_gpu_comm_returns() {
        let c = Comm::new(0, 1, 0, CommSettings::default());
        c.abort("test");
        assert_eq!(c.async_error().unwrap(), NCCL_IN_PROGRESS);
    }
}
