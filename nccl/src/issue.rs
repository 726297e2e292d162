//! Calls on their way to the GPU: what a collective, a send or a receive becomes, queued
//! inside a group or issued at once, and how the outermost `ncclGroupEnd` issues a group.
//!
//! A group's collectives go to the GPU per communicator, each in its call order, a run of
//! consecutive calls on one stream at a time, so that consecutive calls of one kernel (one
//! type, operator and protocol or algorithm) share a launch as NCCL fuses a group's calls
//! (`GpuComm::collectives`); each communicator's sends and receives go together as one
//! point-to-point group (`GpuComm::group`: one launch, or a few for more messages than one holds), after its collectives. Every kernel module the group needs is loaded before the first launch.
//! Communicators created inside the group are initialised first, each rank on its own
//! thread, since their initialisations wait for each other.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use weft_core::abi::DataType;
use weft_cuda::{CUstream, Stream};
use weft_runtime::bootstrap::UniqueId;
use weft_runtime::gpu::{GpuCollective, GpuP2p, GpuRedOp, PlannedGroup};

use crate::comm::{Comm, CommState};
use crate::debug;
use crate::group::GroupState;
use crate::result::ApiError;

/// One call, as queued.
#[derive(Debug)]
pub enum Call {
    /// `ncclCommInitRank*` inside a group.
    Init { comm: Arc<Comm>, id: UniqueId },
    Coll {
        comm: Arc<Comm>,
        /// The call's arguments; its operator a built-in one, or a `PreMulSum` resolved
        /// when the call was made (its scalar or the scalar's address copied: destroying
        /// the operator before the group ends does not change a queued call).
        call: GpuCollective,
        stream: usize,
    },
    P2p {
        comm: Arc<Comm>,
        op: GpuP2p,
        stream: usize,
    },
}

/// Consecutive collectives of one communicator on one stream (its raw handle), in call
/// order: what one `GpuComm::collectives` issues.
type StreamRun = (usize, Vec<GpuCollective>);

thread_local! {
    /// NCCL's groups are per thread.
    static GROUP: RefCell<GroupState<Call>> = RefCell::new(GroupState::default());
}

pub fn group_start() {
    GROUP.with(|g| g.borrow_mut().start());
}

pub fn in_group() -> bool {
    GROUP.with(|g| g.borrow().in_group())
}

/// Queues `calls` inside a group, or issues them now as a group of their own.
pub fn submit(calls: Vec<Call>) -> Result<(), ApiError> {
    for c in &calls {
        if let Call::Coll { comm, .. } | Call::P2p { comm, .. } = c {
            comm.check_usable()?;
        }
    }
    let queued = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if !g.in_group() {
            return Some(calls);
        }
        for c in calls {
            g.push(c);
        }
        None
    });
    match queued {
        Some(calls) => issue(calls),
        None => Ok(()),
    }
}

/// Records a failed call inside an open group, for its end to report.
pub fn record_failure(err: &ApiError) {
    GROUP.with(|g| g.borrow_mut().fail(err.clone()));
}

pub fn group_end() -> Result<(), ApiError> {
    let ops = GROUP.with(|g| g.borrow_mut().end())?;
    match ops {
        Some(calls) => issue(calls),
        None => Ok(()),
    }
}

/// Closes one group level as `ncclGroupSimulateEnd` does: at the outermost level the
/// queued calls are not issued but costed, and `check` (the caller's
/// `ncclSimInfo_t` header) runs first; nested, or with no call to cost, `None`.
pub fn group_simulate(
    check: impl FnOnce() -> Result<(), ApiError>,
) -> Result<Option<f64>, ApiError> {
    let ops = GROUP.with(|g| g.borrow_mut().end())?;
    let Some(calls) = ops else {
        return Ok(None);
    };
    if let Err(e) = check() {
        // Communicators created in the group still come up (or fail), so that none is
        // left waiting for an end that already happened.
        init_all(&inits_of(&calls))?;
        return Err(e);
    }
    estimate(calls)
}

/// The communicators a group creates.
fn inits_of(calls: &[Call]) -> Vec<(Arc<Comm>, UniqueId)> {
    calls
        .iter()
        .filter_map(|c| match c {
            Call::Init { comm, id } => Some((comm.clone(), *id)),
            _ => None,
        })
        .collect()
}

/// What `calls` would take, in microseconds, summed over them (NCCL reports the last
/// collective's estimate; a sum says the same for one call and more for several), launching
/// nothing; `None` when no call moves anything (NCCL then leaves the estimate as it was).
/// Communicators created in the group are initialised, as NCCL's simulation does.
fn estimate(calls: Vec<Call>) -> Result<Option<f64>, ApiError> {
    init_all(&inits_of(&calls))?;
    let mut total = None;
    for c in &calls {
        let us = match c {
            Call::Init { .. } => continue,
            Call::Coll { comm, call, .. } => comm.with_gpu(|gpu| Ok(gpu.predict_us(call)?))?,
            Call::P2p { comm, op, .. } => {
                let (_, _, bytes, _) = op.parts();
                comm.with_gpu(|gpu| Ok(gpu.predict_p2p_us(bytes)))?
            }
        };
        *total.get_or_insert(0.0) += us;
    }
    Ok(total)
}

/// A caller's stream for `comm`'s GPU.
fn stream(gpu: &weft_runtime::gpu::GpuComm, raw: usize) -> Stream {
    // SAFETY: NCCL's contract: the stream belongs to the communicator's device and
    // outlives the call; Stream::from_raw borrows it without destroying it.
    unsafe { Stream::from_raw(gpu.context(), raw as CUstream) }
}

/// Issues a finished group: every queued call of every communicator is checked first
/// (the communicator ready, one stream for its sends and receives, the point-to-point
/// group's refusals), and only then is anything launched, so that a refusal never leaves
/// the group half-launched on some ranks.
pub fn issue(calls: Vec<Call>) -> Result<(), ApiError> {
    let mut inits = Vec::new();
    let mut colls = Vec::new();
    // Per communicator (by handle, in order of first appearance): its sends and receives,
    // and the stream they share.
    let mut p2p: Vec<(Arc<Comm>, usize, Vec<GpuP2p>)> = Vec::new();
    let mut index: HashMap<usize, usize> = HashMap::new();
    for c in calls {
        match c {
            Call::Init { comm, id } => inits.push((comm, id)),
            coll @ Call::Coll { .. } => colls.push(coll),
            Call::P2p { comm, op, stream } => {
                let key = Arc::as_ptr(&comm) as usize;
                let slot = *index.entry(key).or_insert_with(|| {
                    p2p.push((comm.clone(), stream, Vec::new()));
                    p2p.len() - 1
                });
                let entry = &mut p2p[slot];
                if entry.1 != stream {
                    return Err(ApiError::invalid_usage(format!(
                        "rank {}: sends and receives of one group on two streams ({:#x} and \
                         {stream:#x}): weft issues a communicator's point-to-point calls of a \
                         group as one launch, on one stream; nothing of the group was launched",
                        comm.rank, entry.1
                    )));
                }
                entry.2.push(op);
            }
        }
    }
    init_all(&inits)?;
    for c in &colls {
        if let Call::Coll { comm, .. } = c {
            comm.with_gpu(|_| Ok(()))?;
        }
    }
    for (comm, _, ops) in &p2p {
        comm.with_gpu(|_| Ok(()))?;
        weft_runtime::gpu::validate_p2p_group(comm.rank, comm.nranks, ops).map_err(|e| {
            ApiError::from(e).context(&format!(
                "rank {}: nothing of the group was launched",
                comm.rank
            ))
        })?;
    }
    // Every module the group runs is loaded before anything of it launches: loading one
    // waits for the GPU to be idle, and with one thread driving several GPUs an earlier
    // kernel of this group waits there for a peer this thread has not launched yet (two
    // H100, 2026-11-25: the group gave up after the 30 s deadline).
    let mut modules: Vec<(Arc<Comm>, Vec<DataType>)> = Vec::new();
    let mut add = |comm: &Arc<Comm>, dtype: DataType| match modules
        .iter_mut()
        .find(|(c, _)| Arc::ptr_eq(c, comm))
    {
        Some((_, types)) if types.contains(&dtype) => {}
        Some((_, types)) => types.push(dtype),
        None => modules.push((comm.clone(), vec![dtype])),
    };
    for c in &colls {
        if let Call::Coll { comm, call, .. } = c {
            add(comm, call.dtype);
        }
    }
    for (comm, _, _) in &p2p {
        // Sends and receives move bytes: the uint8 module's point-to-point kernel.
        add(comm, DataType::Uint8);
    }
    // Only a group over several communicators can wait that way; a call alone, or a group
    // on one, loads its modules at its launch as before, off this per-call path.
    if modules.len() > 1 {
        for (comm, types) in &modules {
            comm.with_gpu(|gpu| Ok(gpu.prepare(types)?))?;
        }
    }
    // Each communicator's collectives go to the GPU in its call order, a run of consecutive
    // calls on one stream at a time, so that consecutive calls of one kernel share a launch
    // (`GpuComm::collectives`); the communicators in order of first appearance. Calls of
    // different communicators are independent (one thread driving several GPUs interleaves
    // them: nccl-tests -g 2 -m 8), so only each communicator's own order is kept.
    let mut per_comm: Vec<(Arc<Comm>, Vec<StreamRun>)> = Vec::new();
    for c in colls {
        if let Call::Coll { comm, call, stream } = c {
            let runs = match per_comm.iter_mut().find(|(c, _)| Arc::ptr_eq(c, &comm)) {
                Some((_, runs)) => runs,
                None => {
                    per_comm.push((comm, Vec::new()));
                    &mut per_comm.last_mut().expect("just pushed").1
                }
            };
            match runs.last_mut() {
                Some((s, calls)) if *s == stream => calls.push(call),
                _ => runs.push((stream, vec![call])),
            }
        }
    }
    // Every call of every communicator checked and planned before anything launches.
    let mut planned: Vec<(Arc<Comm>, usize, PlannedGroup)> = Vec::new();
    for (comm, runs) in per_comm {
        for (raw, calls) in runs {
            let group = comm.with_gpu(|gpu| {
                gpu.plan_group(&calls).map_err(|e| {
                    ApiError::from(e).context(&format!(
                        "rank {}: nothing of the group was launched",
                        comm.rank
                    ))
                })
            })?;
            if debug::coll_enabled() {
                log_collectives(&comm, raw, &calls, &group);
            }
            planned.push((comm.clone(), raw, group));
        }
    }
    if debug::coll_enabled() {
        for (comm, raw, ops) in &p2p {
            log_p2p(comm, *raw, ops);
        }
    }
    for (comm, raw, group) in planned {
        comm.with_gpu(|gpu| {
            let s = stream(gpu, raw);
            // SAFETY: NCCL's contract for the buffers (device memory of the communicator's
            // GPU, valid until the stream reaches the call); the counts were checked when
            // each call was made.
            unsafe { gpu.launch_group(&group, &s) }?;
            Ok(())
        })?;
    }
    for (comm, raw, ops) in p2p {
        comm.with_gpu(|gpu| {
            let s = stream(gpu, raw);
            // SAFETY: as for collectives: NCCL's contract for the buffers.
            unsafe { gpu.group(&ops, &s) }?;
            Ok(())
        })?;
    }
    Ok(())
}

/// NCCL's line per collective (`NCCL_DEBUG_SUBSYS=COLL`), with what weft made of it: what
/// a reader compares across ranks when calls seem to meet the wrong partner.
fn log_collectives(comm: &Comm, stream: usize, calls: &[GpuCollective], group: &PlannedGroup) {
    for (call, plan) in calls.iter().zip(group.describe()) {
        let (name, root) = (call.collective.name(), call.collective.root().unwrap_or(0));
        let op = match call.op {
            GpuRedOp::Builtin(op) => (op as u32).to_string(),
            GpuRedOp::PreMulSum(_) => "premulsum".to_string(),
        };
        let n = comm.op_count.fetch_add(1, Ordering::Relaxed);
        debug::info(
            comm.device,
            &format!(
                "{name}: opCount {n:x} sendbuff {:#x} recvbuff {:#x} count {} datatype {} op {op} \
                 root {root} comm {:p} [nranks={}] stream {stream:#x} rank {}: weft: {plan}",
                call.send,
                call.recv,
                call.count,
                call.dtype as u32,
                comm as *const Comm,
                comm.nranks,
                comm.rank
            ),
        );
    }
}

/// NCCL's line per send and receive (`NCCL_DEBUG_SUBSYS=COLL`).
fn log_p2p(comm: &Comm, stream: usize, ops: &[GpuP2p]) {
    for op in ops {
        let (peer, buf, bytes, sends) = op.parts();
        let name = if sends { "Send" } else { "Recv" };
        let n = comm.op_count.fetch_add(1, Ordering::Relaxed);
        debug::info(
            comm.device,
            &format!(
                "{name}: opCount {n:x} buff {buf:#x} bytes {bytes} peer {peer} comm {:p} \
                 [nranks={}] stream {stream:#x} rank {}",
                comm as *const Comm, comm.nranks, comm.rank
            ),
        );
    }
}

/// Initialises communicators created inside a group, each on its own thread (they wait
/// for each other), then readies ranks that share a GPU.
pub fn init_all(inits: &[(Arc<Comm>, UniqueId)]) -> Result<(), ApiError> {
    if inits.is_empty() {
        return Ok(());
    }
    std::thread::scope(|s| {
        for (comm, id) in inits {
            s.spawn(move || comm.init(id));
        }
    });
    let mut devices: Vec<usize> = inits.iter().map(|(c, _)| c.device).collect();
    devices.sort_unstable();
    let shared = devices.windows(2).any(|w| w[0] == w[1]);
    if shared {
        std::thread::scope(|s| {
            for (comm, _) in inits {
                s.spawn(move || {
                    let mut state = comm.state();
                    if let CommState::Ready(gpu) = &mut *state
                        && let Err(e) = crate::comm::prepare_shared(gpu)
                    {
                        *state = CommState::Failed(e);
                    }
                });
            }
        });
    }
    // The first failure, by rank order of the calls.
    for (comm, _) in inits {
        if let CommState::Failed(e) = &*comm.state() {
            return Err(ApiError::new(
                e.code,
                format!("initialising rank {}: {}", comm.rank, e.message),
            ));
        }
    }
    Ok(())
}
