//! Communicators: init (one rank, all local GPUs, a split), finalize, destroy, abort,
//! and the queries.

use std::ffi::c_int;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use weft_runtime::bootstrap::{BootstrapOptions, UniqueId};

use super::calls::call_code;
use super::{NcclComm, NcclUniqueId, index, non_null};
use crate::boundary::{run, run_code};
use crate::comm::{self, Comm, CommState};
use crate::config::{self, NcclConfig};
use crate::debug;
use crate::issue;
use crate::result::{ApiError, NCCL_IN_PROGRESS, NCCL_SUCCESS, NcclResult};

/// `NCCL_SPLIT_NOCOLOR`.
const SPLIT_NOCOLOR: c_int = -1;

fn parse_id(id: &NcclUniqueId) -> Result<UniqueId, ApiError> {
    UniqueId::from_bytes(&id.internal).map_err(|e| {
        ApiError::invalid_argument(format!(
            "the unique id is not one ncclGetUniqueId made ({e}); pass every rank the bytes \
             rank 0's ncclGetUniqueId wrote"
        ))
    })
}

fn check_ranks(nranks: c_int, rank: c_int) -> Result<(usize, usize), ApiError> {
    if nranks < 1 {
        return Err(ApiError::invalid_argument(format!(
            "nranks {nranks}: a communicator has at least one rank"
        )));
    }
    if rank < 0 || rank >= nranks {
        return Err(ApiError::invalid_argument(format!(
            "rank {rank} of {nranks} ranks: need 0 <= rank < nranks"
        )));
    }
    Ok((nranks as usize, rank as usize))
}

/// The body of `ncclCommInitRankConfig`: `ncclSuccess`, or `ncclInProgress` where the
/// config asked for a non-blocking communicator (its init runs in the background;
/// `ncclCommGetAsyncError` says when it is done, or why it failed).
///
/// # Safety
///
/// `out` is non-null and writable; `config` as [`config::read`].
unsafe fn init_rank(
    out: *mut NcclComm,
    nranks: c_int,
    id: &NcclUniqueId,
    rank: c_int,
    config: *const NcclConfig,
) -> Result<NcclResult, ApiError> {
    non_null(out, "comm")?;
    let (nranks, rank) = check_ranks(nranks, rank)?;
    // SAFETY: the caller's promise.
    let settings = unsafe { config::read(config) }?;
    let id = parse_id(id)?;
    let device = comm::current_device()?;
    let nonblocking = settings.nonblocking;
    let comm = Arc::new(Comm::new(rank, nranks, device, settings));
    let handle = comm::register(comm.clone());
    let mut code = NCCL_SUCCESS;
    if issue::in_group() {
        // NCCL too initialises at the group's end: one thread can then create the
        // communicators of several GPUs (nccl-tests does), whose inits wait for each other.
        issue::submit(vec![issue::Call::Init { comm, id }])?;
    } else if nonblocking {
        if let Err(e) = comm.init_in_background(id) {
            let _ = comm::unregister(handle);
            return Err(e);
        }
        code = NCCL_IN_PROGRESS;
    } else {
        comm.init(&id);
        if let CommState::Failed(e) = &*comm.state() {
            let _ = comm::unregister(handle);
            return Err(e.clone());
        }
    }
    // SAFETY: checked non-null; writable by the caller's promise.
    unsafe { out.write(handle as NcclComm) };
    Ok(code)
}

/// # Safety
///
/// `comm` must be null or writable; `config` null or an `ncclConfig_t` made with
/// `NCCL_CONFIG_INITIALIZER`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommInitRankConfig(
    comm: *mut NcclComm,
    nranks: c_int,
    comm_id: NcclUniqueId,
    rank: c_int,
    config: *mut NcclConfig,
) -> NcclResult {
    // SAFETY: the caller's promise, passed on.
    call_code("ncclCommInitRankConfig", || unsafe {
        init_rank(comm, nranks, &comm_id, rank, config)
    })
}

/// # Safety
///
/// `comm` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommInitRank(
    comm: *mut NcclComm,
    nranks: c_int,
    comm_id: NcclUniqueId,
    rank: c_int,
) -> NcclResult {
    // SAFETY: the caller's promise; a null config means defaults (blocking).
    call_code("ncclCommInitRank", || unsafe {
        init_rank(comm, nranks, &comm_id, rank, std::ptr::null())
    })
}

/// `nId` > 1 (several roots) is not supported: weft's bootstrap has one root.
///
/// # Safety
///
/// `newcomm` writable; `comm_ids` null or `n_id` ids; `config` as for
/// [`ncclCommInitRankConfig`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommInitRankScalable(
    newcomm: *mut NcclComm,
    nranks: c_int,
    myrank: c_int,
    n_id: c_int,
    comm_ids: *mut NcclUniqueId,
    config: *mut NcclConfig,
) -> NcclResult {
    call_code("ncclCommInitRankScalable", || {
        non_null(comm_ids, "commIds")?;
        if n_id < 1 {
            return Err(ApiError::invalid_argument(format!(
                "nId {n_id}: need at least one id in commIds"
            )));
        }
        // NCCL spreads the ranks' check-ins over nId roots, to spare one root thousands
        // of connections; every rank passes the same ids. weft's root serves any number of
        // ranks, so every rank meets at the first; the other roots go unused and stop on
        // their own (bootstrap::root: an id nobody used is not an error).
        if n_id > 1 {
            debug::info(
                comm::current_device().unwrap_or(0),
                &format!("ncclCommInitRankScalable: {n_id} ids, every rank meets at the first"),
            );
        }
        // SAFETY: at least one id, checked non-null, by the caller's promise.
        let id = unsafe { &*comm_ids };
        // SAFETY: the caller's promise for the other pointers.
        unsafe { init_rank(newcomm, nranks, id, myrank, config) }
    })
}

/// # Safety
///
/// `comms` must be null or hold `ndev` writable handles; `devlist` null or `ndev` ints.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommInitAll(
    comms: *mut NcclComm,
    ndev: c_int,
    devlist: *const c_int,
) -> NcclResult {
    run("ncclCommInitAll", || {
        non_null(comms, "comms")?;
        if ndev < 1 {
            return Err(ApiError::invalid_argument(format!(
                "ndev {ndev}: need at least one device"
            )));
        }
        let n = ndev as usize;
        let devices: Vec<usize> = if devlist.is_null() {
            (0..n).collect()
        } else {
            // SAFETY: the caller's promise: `ndev` ints.
            let list = unsafe { std::slice::from_raw_parts(devlist, n) };
            list.iter()
                .map(|&d| index(d, "devlist entry"))
                .collect::<Result<_, _>>()?
        };
        // Fail early and plainly without a GPU, before starting a root.
        comm::current_device()?;
        let id = UniqueId::new(&BootstrapOptions::from_env())?;
        let made: Vec<(Arc<Comm>, UniqueId)> = devices
            .iter()
            .enumerate()
            .map(|(rank, &dev)| (Arc::new(Comm::new(rank, n, dev, Default::default())), id))
            .collect();
        let handles: Vec<usize> = made
            .iter()
            .map(|(c, _)| comm::register(c.clone()))
            .collect();
        if let Err(e) = issue::init_all(&made) {
            for h in handles {
                let _ = comm::unregister(h);
            }
            return Err(e);
        }
        for (i, h) in handles.into_iter().enumerate() {
            // SAFETY: `comms` holds `ndev` handles by the caller's promise, and i < ndev.
            let slot = unsafe { comms.add(i) };
            // SAFETY: as above: writable.
            unsafe { slot.write(h as NcclComm) };
        }
        Ok(())
    })
}

/// Waits for this rank's own work, for no peer, as NCCL's (the memory peers may still touch
/// is freed at destroy, once they let go: `GpuComm`'s teardown). On a non-blocking
/// communicator it returns `ncclInProgress` and finalizes in the background
/// (`ncclCommGetAsyncError` says when it is done, or why it failed).
#[unsafe(no_mangle)]
pub extern "C" fn ncclCommFinalize(comm: NcclComm) -> NcclResult {
    run_code("ncclCommFinalize", || {
        if comm.is_null() {
            return Ok(NCCL_SUCCESS);
        }
        let c = comm::lookup(comm as usize)?;
        if c.revoked.load(Ordering::SeqCst) {
            return Err(ApiError::invalid_argument(format!(
                "comm {:#x} (rank {}) was revoked (ncclCommRevoke): it cannot be finalized; \
                 destroy it (or split or shrink it first)",
                comm as usize, c.rank
            )));
        }
        // NCCL marks the communicator finalized on entry: a second call is an invalid
        // argument even when the first failed.
        if c.finalized.swap(true, Ordering::SeqCst) {
            return Err(ApiError::invalid_argument(format!(
                "comm {:#x} (rank {}) has already been finalized; call ncclCommDestroy next",
                comm as usize, c.rank
            )));
        }
        if c.settings.nonblocking {
            c.finalize_in_background()?;
            return Ok(NCCL_IN_PROGRESS);
        }
        c.with_gpu(|gpu| Ok(gpu.finalize()?))?;
        Ok(NCCL_SUCCESS)
    })
}

/// Frees the communicator (after its queued work has run: GpuComm's drop waits for the
/// device).
#[unsafe(no_mangle)]
pub extern "C" fn ncclCommDestroy(comm: NcclComm) -> NcclResult {
    run("ncclCommDestroy", || {
        if comm.is_null() {
            return Ok(());
        }
        drop(comm::unregister(comm as usize)?);
        Ok(())
    })
}

/// Stops the communicator's kernels at their next look at the abort flag, then frees it.
#[unsafe(no_mangle)]
pub extern "C" fn ncclCommAbort(comm: NcclComm) -> NcclResult {
    run("ncclCommAbort", || {
        if comm.is_null() {
            return Ok(());
        }
        let c = comm::unregister(comm as usize)?;
        c.abort("ncclCommAbort");
        Ok(())
    })
}

/// Splits by color, ordered by key then parent rank, as NCCL does: every rank of the
/// parent calls it. The first rank of each color starts the new bootstrap root and
/// passes its id through the parent's bootstrap.
///
/// # Safety
///
/// `newcomm` must be null or writable; `config` as for [`ncclCommInitRankConfig`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommSplit(
    comm: NcclComm,
    color: c_int,
    key: c_int,
    newcomm: *mut NcclComm,
    config: *mut NcclConfig,
) -> NcclResult {
    run_code("ncclCommSplit", || {
        non_null(newcomm, "newcomm")?;
        let parent = comm::lookup(comm as usize)?;
        if color < SPLIT_NOCOLOR {
            return Err(ApiError::invalid_argument(format!(
                "color {color}: need >= 0, or NCCL_SPLIT_NOCOLOR"
            )));
        }
        if issue::in_group() {
            return Err(ApiError::unsupported("ncclCommSplit inside a group"));
        }
        // NCCL: a NULL config inherits the parent's.
        let settings = if config.is_null() {
            parent.settings.clone()
        } else {
            // SAFETY: the caller's promise.
            unsafe { config::read(config) }?
        };
        let (id, rank, nranks) = parent.with_gpu(|gpu| {
            // A kernel of the parent that gave up holds its stream until the program has
            // heard of the failure: splitting is acting on it.
            gpu.release_failed();
            let mine = [color.to_le_bytes(), key.to_le_bytes()].concat();
            let all = gpu.exchange(&mine)?;
            let plan = split_plan(&all, parent.rank, color)?;
            let Some((rank, nranks, leader)) = plan else {
                // Still takes part in the id exchange below.
                gpu.exchange(&[])?;
                return Ok((None, 0, 0));
            };
            let id_bytes = if rank == 0 {
                UniqueId::new(&BootstrapOptions::from_env())?
                    .to_bytes()
                    .to_vec()
            } else {
                Vec::new()
            };
            let ids = gpu.exchange(&id_bytes)?;
            let id = UniqueId::from_bytes(&ids[leader]).map_err(|e| {
                ApiError::new(
                    crate::result::NCCL_INTERNAL_ERROR,
                    format!("rank {leader}'s split id did not parse: {e}"),
                )
            })?;
            Ok((Some(id), rank, nranks))
        })?;
        let Some(id) = id else {
            // SAFETY: checked non-null.
            unsafe { newcomm.write(std::ptr::null_mut()) };
            return Ok(NCCL_SUCCESS);
        };
        // SAFETY: checked non-null.
        unsafe { init_child(&parent, &id, rank, nranks, settings, newcomm) }
    })
}

/// Initialises the communicator a split or a shrink agreed on (collective with the other
/// ranks of `id`) on `parent`'s GPU, and writes its handle into `newcomm`: `ncclSuccess`,
/// or, for a non-blocking child (its config's, or the parent's where it gave none),
/// `ncclInProgress` with the init running in the background (as `ncclCommInitRankConfig`).
///
/// # Safety
///
/// `newcomm` must be writable.
unsafe fn init_child(
    parent: &Comm,
    id: &UniqueId,
    rank: usize,
    nranks: usize,
    settings: config::CommSettings,
    newcomm: *mut NcclComm,
) -> Result<NcclResult, ApiError> {
    let nonblocking = settings.nonblocking;
    let child = Arc::new(Comm::new(rank, nranks, parent.device, settings));
    let code = if nonblocking {
        child.init_in_background(*id)?;
        NCCL_IN_PROGRESS
    } else {
        child.init(id);
        if let CommState::Failed(e) = &*child.state() {
            return Err(e.clone());
        }
        NCCL_SUCCESS
    };
    let handle = comm::register(child);
    // SAFETY: the caller's promise.
    unsafe { newcomm.write(handle as NcclComm) };
    Ok(code)
}

/// From every parent rank's (color, key) (8 little-endian bytes each): this rank's rank
/// and size in its color and the parent rank of the color's first member, or `None` for
/// `NCCL_SPLIT_NOCOLOR`.
pub fn split_plan(
    all: &[Vec<u8>],
    me: usize,
    color: c_int,
) -> Result<Option<(usize, usize, usize)>, ApiError> {
    let mut members = Vec::new();
    for (r, bytes) in all.iter().enumerate() {
        let (Some(c), Some(k)) = (bytes.get(0..4), bytes.get(4..8)) else {
            return Err(ApiError::new(
                crate::result::NCCL_INTERNAL_ERROR,
                format!(
                    "rank {r} sent {} bytes of split colour and key, not 8",
                    bytes.len()
                ),
            ));
        };
        let c = c_int::from_le_bytes(c.try_into().unwrap_or_default());
        let k = c_int::from_le_bytes(k.try_into().unwrap_or_default());
        if c == color && c != SPLIT_NOCOLOR {
            members.push((k, r));
        }
    }
    if color == SPLIT_NOCOLOR {
        return Ok(None);
    }
    members.sort_unstable();
    let rank = members.iter().position(|&(_, r)| r == me).ok_or_else(|| {
        ApiError::new(
            crate::result::NCCL_INTERNAL_ERROR,
            "this rank is missing from its own colour",
        )
    })?;
    Ok(Some((rank, members.len(), members[0].1)))
}

/// # Safety
///
/// `async_error` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommGetAsyncError(
    comm: NcclComm,
    async_error: *mut NcclResult,
) -> NcclResult {
    run("ncclCommGetAsyncError", || {
        non_null(async_error, "asyncError")?;
        let c = comm::lookup(comm as usize)?;
        let code = match c.async_error() {
            Ok(code) => code,
            Err(e) => {
                c.report_async(&e.message);
                e.code
            }
        };
        // SAFETY: checked non-null; writable by the caller's promise.
        unsafe { async_error.write(code) };
        Ok(())
    })
}

/// Writes `value(comm)` into `out`.
///
/// # Safety
///
/// `out` must be null or writable.
unsafe fn query(
    entry: &str,
    comm: NcclComm,
    out: *mut c_int,
    value: impl FnOnce(&Comm) -> usize,
) -> NcclResult {
    run(entry, || {
        non_null(out, "the output")?;
        let c = comm::lookup(comm as usize)?;
        let v = c_int::try_from(value(&c)).unwrap_or(c_int::MAX);
        // SAFETY: checked non-null; writable by the caller's promise.
        unsafe { out.write(v) };
        Ok(())
    })
}

/// # Safety
///
/// `count` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommCount(comm: NcclComm, count: *mut c_int) -> NcclResult {
    // SAFETY: passed on.
    unsafe { query("ncclCommCount", comm, count, |c| c.nranks) }
}

/// # Safety
///
/// `device` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommCuDevice(comm: NcclComm, device: *mut c_int) -> NcclResult {
    // SAFETY: passed on.
    unsafe { query("ncclCommCuDevice", comm, device, |c| c.device) }
}

/// # Safety
///
/// `rank` must be null or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommUserRank(comm: NcclComm, rank: *mut c_int) -> NcclResult {
    // SAFETY: passed on.
    unsafe { query("ncclCommUserRank", comm, rank, |c| c.rank) }
}

/// `NCCL_SHRINK_ABORT`: stop what runs on the parent first.
pub const SHRINK_ABORT: c_int = 0x01;
/// How long a revoked communicator, or a shrink's parent, gets to stop its kernels (they leave every wait at their next
/// look at the abort flag).
const DRAIN: std::time::Duration = std::time::Duration::from_secs(10);

/// `NCCL_REVOKE_DEFAULT`, the only flag value `ncclCommRevoke` takes.
pub const REVOKE_DEFAULT: c_int = 0x00;

/// NCCL's `ncclCommRevoke`: stops every call in flight on `comm` without waiting on any
/// peer (the kernels leave their waits at their next look at the abort flag; a call of
/// another thread blocked on the communicator ends too), then lowers the flag again, so
/// that the communicator reports no error of its own (`ncclCommGetAsyncError` says
/// `ncclSuccess`). Afterwards collectives and point-to-point calls on it return
/// `ncclInvalidUsage`; split, shrink, abort and destroy remain, `ncclCommFinalize` is
/// refused (`ncclInvalidArgument`), as NCCL's. Blocking: it returns once the kernels
/// stopped. Refused: a flag other than `NCCL_REVOKE_DEFAULT`, a NULL communicator, a second
/// revoke, a call inside a group.
#[unsafe(no_mangle)]
pub extern "C" fn ncclCommRevoke(comm: NcclComm, revoke_flags: c_int) -> NcclResult {
    run("ncclCommRevoke", || {
        if revoke_flags != REVOKE_DEFAULT {
            return Err(ApiError::invalid_argument(format!(
                "revokeFlags {revoke_flags:#x}: only NCCL_REVOKE_DEFAULT (0) is defined"
            )));
        }
        if comm.is_null() {
            return Err(ApiError::invalid_argument(
                "comm is NULL: pass the communicator to revoke",
            ));
        }
        let c = comm::lookup(comm as usize)?;
        if issue::in_group() {
            return Err(ApiError::unsupported("ncclCommRevoke inside a group"));
        }
        if c.revoked.swap(true, Ordering::SeqCst) {
            return Err(ApiError::invalid_argument(format!(
                "comm {:#x} (rank {}) was already revoked: destroy, split or shrink it",
                comm as usize, c.rank
            )));
        }
        // Before the state lock: a call of another thread blocked holding it ends now.
        c.raise_abort_flag();
        c.with_gpu(|gpu| Ok(gpu.revoke(DRAIN)?))
    })
}

/// The survivors of a shrink in parent order and this rank's rank among them
/// (`weft_runtime::comm::shrink::shrink_plan`), its refusals as `ncclInvalidArgument`
/// naming `excludeRanksList`.
pub fn shrink_plan(
    nranks: usize,
    me: usize,
    exclude: &[c_int],
) -> Result<(Vec<usize>, usize), ApiError> {
    let exclude: Vec<i64> = exclude.iter().map(|&r| i64::from(r)).collect();
    weft_runtime::comm::shrink::shrink_plan(nranks, me, &exclude)
        .map_err(|e| ApiError::invalid_argument(format!("excludeRanksList: {e}")))
}

/// NCCL 2.27's shrink: the ranks not in `excludeRanksList` (every one of them calls it; the
/// excluded ones do not, and may be dead) get a new communicator of their own, ranked in
/// parent order. With `NCCL_SHRINK_ABORT` the parent's kernels are stopped first (its calls
/// in flight end early) and its abort flag lowered again, as NCCL does, so the parent does
/// not report an error of its own; with `NCCL_SHRINK_DEFAULT` the parent must have nothing
/// in flight. The survivors agree through the parent's bootstrap (the
/// first survivor starts the new root and sends its id to the others only), then the new
/// communicator is set up from scratch, as a split's is: no resource of the parent's is
/// reused. The parent stays valid (destroy or abort it as usual). A NULL `config` inherits
/// the parent's.
///
/// # Safety
///
/// `exclude_ranks_list` must hold `exclude_ranks_count` ranks (or be null with a count of
/// 0); `newcomm` must be writable; `config` as for [`ncclCommInitRankConfig`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclCommShrink(
    comm: NcclComm,
    exclude_ranks_list: *mut c_int,
    exclude_ranks_count: c_int,
    newcomm: *mut NcclComm,
    config: *mut NcclConfig,
    shrink_flags: c_int,
) -> NcclResult {
    run_code("ncclCommShrink", || {
        non_null(newcomm, "newcomm")?;
        let parent = comm::lookup(comm as usize)?;
        if issue::in_group() {
            return Err(ApiError::unsupported("ncclCommShrink inside a group"));
        }
        if shrink_flags & !SHRINK_ABORT != 0 {
            return Err(ApiError::invalid_argument(format!(
                "shrinkFlags {shrink_flags:#x}: NCCL_SHRINK_DEFAULT (0) or NCCL_SHRINK_ABORT (1)"
            )));
        }
        let count = usize::try_from(exclude_ranks_count).map_err(|_| {
            ApiError::invalid_argument(format!("excludeRanksCount {exclude_ranks_count}"))
        })?;
        if count > 0 && exclude_ranks_list.is_null() {
            return Err(ApiError::invalid_argument(format!(
                "excludeRanksList is NULL with excludeRanksCount {count}"
            )));
        }
        let exclude: &[c_int] = if count == 0 {
            &[]
        } else {
            // SAFETY: the caller's promise: `count` ranks at a non-null pointer.
            unsafe { std::slice::from_raw_parts(exclude_ranks_list, count) }
        };
        let (survivors, rank) = shrink_plan(parent.nranks, parent.rank, exclude)?;
        let settings = if config.is_null() {
            parent.settings.clone()
        } else {
            // SAFETY: the caller's promise.
            unsafe { config::read(config) }?
        };
        // A kernel of the parent that gave up holds its stream until the program has heard
        // of the failure: shrinking (with or without NCCL_SHRINK_ABORT) is acting on it.
        parent.with_gpu(|gpu| {
            gpu.release_failed();
            Ok(())
        })?;
        if shrink_flags & SHRINK_ABORT != 0 {
            // As NCCL: the parent's kernels stop (abort flag up), then the flag goes down
            // again, so the parent reports no error of its own (PyTorch's watchdog polls
            // it) and its bootstrap serves the survivors' agreement below.
            parent.with_gpu(|gpu| Ok(gpu.stop_in_flight(DRAIN)?))?;
        }
        let id = parent.with_gpu(|gpu| {
            weft_runtime::comm::shrink::agree_on_id(
                parent.rank,
                &survivors,
                &BootstrapOptions::from_env(),
                |root, ranks, data| Ok(gpu.broadcast_among(root, ranks, data)?),
                |e| ApiError::new(crate::result::NCCL_INTERNAL_ERROR, e),
            )
        })?;
        // SAFETY: checked non-null.
        unsafe { init_child(&parent, &id, rank, survivors.len(), settings, newcomm) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::result::{NCCL_INVALID_ARGUMENT, NCCL_INVALID_USAGE, NCCL_SUCCESS};

    #[test]
    fn shrink_plans_rank_the_survivors_in_parent_order() {
        // The plan itself is weft_runtime::comm::shrink's (tested there): here, that its
        // refusals are ncclInvalidArgument naming NCCL's argument.
        assert_eq!(shrink_plan(4, 2, &[1]).unwrap(), (vec![0, 2, 3], 1));
        let e = shrink_plan(4, 0, &[1, 1]).unwrap_err();
        assert_eq!(e.code, NCCL_INVALID_ARGUMENT);
        assert!(e.message.contains("excludeRanksList: "), "{}", e.message);
        assert!(e.message.contains("twice"), "{}", e.message);
    }

    #[test]
    fn shrink_refuses_bad_arguments_before_touching_the_communicator() {
        let c = Arc::new(Comm::new(0, 3, 0, Default::default()));
        let h = comm::register(c) as NcclComm;
        let mut out: NcclComm = std::ptr::null_mut();
        let mut bad = [1, 1];
        // SAFETY: the list holds 2 ranks; `out` is writable.
        let rc =
            unsafe { ncclCommShrink(h, bad.as_mut_ptr(), 2, &mut out, std::ptr::null_mut(), 0) };
        assert_eq!(rc, NCCL_INVALID_ARGUMENT);
        // SAFETY: as above.
        let rc =
            unsafe { ncclCommShrink(h, bad.as_mut_ptr(), 1, &mut out, std::ptr::null_mut(), 4) };
        assert_eq!(rc, NCCL_INVALID_ARGUMENT);
        // SAFETY: a null list with a count is refused before it is read.
        let rc = unsafe {
            ncclCommShrink(
                h,
                std::ptr::null_mut(),
                1,
                &mut out,
                std::ptr::null_mut(),
                0,
            )
        };
        assert_eq!(rc, NCCL_INVALID_ARGUMENT);
        // Valid arguments on a communicator that never came up (no GPU here): its state
        // is the error.
        let mut two = [2];
        // SAFETY: as above.
        let rc =
            unsafe { ncclCommShrink(h, two.as_mut_ptr(), 1, &mut out, std::ptr::null_mut(), 0) };
        assert_eq!(rc, NCCL_INVALID_USAGE);
        assert!(out.is_null());
        crate::comm::unregister(h as usize).unwrap();
    }

    #[test]
    fn a_failed_init_inside_a_group_fails_the_group() {
        let id = NcclUniqueId { internal: [0; 128] };
        let mut out: NcclComm = std::ptr::null_mut();
        assert_eq!(crate::entry::calls::ncclGroupStart(), NCCL_SUCCESS);
        // SAFETY: `out` is writable.
        let rc = unsafe { ncclCommInitRank(&mut out, 0, id, 0) };
        assert_eq!(rc, NCCL_INVALID_ARGUMENT);
        assert_eq!(crate::entry::calls::ncclGroupEnd(), NCCL_INVALID_ARGUMENT);
    }

    #[test]
    fn finalize_twice_and_calls_after_finalize_are_refused() {
        let c = Arc::new(Comm::new(0, 2, 0, Default::default()));
        let h = comm::register(c) as NcclComm;
        // Never initialised (no GPU here): the first finalize fails on that, but marks it.
        assert_eq!(ncclCommFinalize(h), NCCL_INVALID_USAGE);
        assert_eq!(ncclCommFinalize(h), NCCL_INVALID_ARGUMENT);
        let buf = 0x1000 as *mut std::ffi::c_void;
        let rc = crate::entry::calls::ncclAllReduce(buf, buf, 4, 7, 0, h, std::ptr::null_mut());
        assert_eq!(rc, NCCL_INVALID_USAGE);
        assert_eq!(ncclCommDestroy(h), NCCL_SUCCESS);
    }

    #[test]
    fn revoke_refuses_bad_arguments_and_a_second_revoke_and_blocks_later_calls() {
        assert_eq!(
            ncclCommRevoke(std::ptr::null_mut(), 0),
            NCCL_INVALID_ARGUMENT
        );
        assert!(crate::boundary::last_error().contains("comm is NULL"));
        let c = Arc::new(Comm::new(0, 2, 0, Default::default()));
        let h = comm::register(c) as NcclComm;
        assert_eq!(ncclCommRevoke(h, 1), NCCL_INVALID_ARGUMENT);
        assert!(crate::boundary::last_error().contains("NCCL_REVOKE_DEFAULT"));
        // Never initialised (no GPU here): the revoke itself fails on that, but marks it.
        assert_eq!(ncclCommRevoke(h, REVOKE_DEFAULT), NCCL_INVALID_USAGE);
        assert_eq!(ncclCommRevoke(h, REVOKE_DEFAULT), NCCL_INVALID_ARGUMENT);
        assert!(crate::boundary::last_error().contains("already revoked"));
        let buf = 0x1000 as *mut std::ffi::c_void;
        let rc = crate::entry::calls::ncclAllReduce(buf, buf, 4, 7, 0, h, std::ptr::null_mut());
        assert_eq!(rc, NCCL_INVALID_USAGE);
        assert!(crate::boundary::last_error().contains("revoked"));
        assert_eq!(ncclCommFinalize(h), NCCL_INVALID_ARGUMENT);
        assert_eq!(ncclCommDestroy(h), NCCL_SUCCESS);
    }

    fn ck(color: i32, key: i32) -> Vec<u8> {
        [color.to_le_bytes(), key.to_le_bytes()].concat()
    }

    #[test]
    fn split_orders_by_key_then_rank() {
        // Ranks 0..5: colours 1 0 1 -1 1, keys 5 0 5 0 1.
        let all = vec![ck(1, 5), ck(0, 0), ck(1, 5), ck(-1, 0), ck(1, 1)];
        assert_eq!(split_plan(&all, 4, 1).unwrap(), Some((0, 3, 4)));
        assert_eq!(split_plan(&all, 0, 1).unwrap(), Some((1, 3, 4)));
        assert_eq!(split_plan(&all, 2, 1).unwrap(), Some((2, 3, 4)));
        assert_eq!(split_plan(&all, 1, 0).unwrap(), Some((0, 1, 1)));
        assert_eq!(split_plan(&all, 3, -1).unwrap(), None);
        let short = vec![ck(1, 1), vec![1, 2]];
        assert!(
            split_plan(&short, 0, 1)
                .unwrap_err()
                .message
                .contains("rank 1")
        );
    }

    #[test]
    fn rank_checks() {
        assert!(check_ranks(0, 0).unwrap_err().message.contains("nranks 0"));
        assert!(
            check_ranks(4, 4)
                .unwrap_err()
                .message
                .contains("rank 4 of 4")
        );
        assert!(check_ranks(4, -1).is_err());
        assert_eq!(check_ranks(4, 3).unwrap(), (4, 3));
    }
}
