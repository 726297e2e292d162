//! Collectives, sends and receives, and groups. Arguments are checked when the call is
//! made (inside a group too, where the failure is also the group's); the work is issued
//! at once, or at the outermost `ncclGroupEnd` ([`crate::issue`]).

use std::ffi::{c_int, c_void};

use weft_core::abi::RedOp;
use weft_core::sched::Collective;
use weft_runtime::gpu::{GpuCollective, GpuP2p, GpuRedOp};

use super::{CudaStream, NcclComm, index};
use crate::boundary::run;
use crate::comm;
use crate::issue::{self, Call};
use crate::result::{ApiError, NCCL_SUCCESS, NcclResult};
use crate::types::{NUM_OPS, bytes, data_type, red_op};

/// Runs a call's body; a failure inside a group is remembered for its end.
pub(super) fn call(entry: &str, body: impl FnOnce() -> Result<(), ApiError>) -> NcclResult {
    call_code(entry, || body().map(|()| NCCL_SUCCESS))
}

/// As [`call`], for a body that may succeed with another code than `ncclSuccess` (a
/// non-blocking init's `ncclInProgress`).
pub(super) fn call_code(
    entry: &str,
    body: impl FnOnce() -> Result<NcclResult, ApiError>,
) -> NcclResult {
    crate::boundary::run_code(entry, || {
        let r = body();
        if let Err(e) = &r {
            issue::record_failure(&e.clone().context(entry));
        }
        r
    })
}

fn need_buffer(p: *const c_void, name: &str, count: usize) -> Result<u64, ApiError> {
    if p.is_null() && count > 0 {
        return Err(ApiError::invalid_argument(format!(
            "{name} is NULL with count {count}"
        )));
    }
    Ok(p as u64)
}

fn root_of(root: c_int, nranks: usize) -> Result<u32, ApiError> {
    let r = index(root, "root")?;
    if r >= nranks {
        return Err(ApiError::invalid_argument(format!(
            "root {root} of {nranks} ranks"
        )));
    }
    Ok(r as u32)
}

/// Checks and submits one collective. `op` is `None` for those that do not reduce.
#[allow(clippy::too_many_arguments)]
fn collective(
    handle: NcclComm,
    which: impl FnOnce(usize) -> Result<Collective, ApiError>,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: c_int,
    op: Option<c_int>,
    stream: CudaStream,
) -> Result<(), ApiError> {
    // Type and built-in operator first: they need no communicator, so a test without a
    // GPU can see them refused (NCCL's order differs; the code is the same).
    let dtype = data_type(dtype)?;
    let builtin = match op {
        Some(o) if o < NUM_OPS => Some(GpuRedOp::Builtin(red_op(o)?)),
        Some(_) => None,
        None => Some(GpuRedOp::Builtin(RedOp::Sum)),
    };
    let c = comm::lookup(handle as usize)?;
    // A user operator (ncclRedOpCreatePreMulSum) belongs to a communicator.
    let op = match (builtin, op) {
        (Some(b), _) => b,
        (None, Some(o)) => c.user_ops().resolve(o, dtype)?,
        (None, None) => GpuRedOp::Builtin(RedOp::Sum),
    };
    let collective = which(c.nranks)?;
    // The largest buffer any rank passes must have a size.
    bytes(count.saturating_mul(c.nranks), dtype)?;
    let (need_send, need_recv) = match collective {
        Collective::Broadcast { root } => (root as usize == c.rank, true),
        Collective::Reduce { root } => (true, root as usize == c.rank),
        _ => (true, true),
    };
    let send = if need_send {
        need_buffer(send, "sendbuff", count)?
    } else {
        send as u64
    };
    let recv = if need_recv {
        need_buffer(recv, "recvbuff", count)?
    } else {
        recv as u64
    };
    issue::submit(vec![Call::Coll {
        comm: c,
        call: GpuCollective {
            collective,
            send,
            recv,
            count,
            dtype,
            op,
        },
        stream: stream as usize,
    }])
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclAllReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    op: c_int,
    comm: NcclComm,
    stream: CudaStream,
) -> NcclResult {
    call("ncclAllReduce", || {
        collective(
            comm,
            |_| Ok(Collective::AllReduce),
            sendbuff,
            recvbuff,
            count,
            datatype,
            Some(op),
            stream,
        )
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclReduceScatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    recvcount: usize,
    datatype: c_int,
    op: c_int,
    comm: NcclComm,
    stream: CudaStream,
) -> NcclResult {
    call("ncclReduceScatter", || {
        collective(
            comm,
            |_| Ok(Collective::ReduceScatter),
            sendbuff,
            recvbuff,
            recvcount,
            datatype,
            Some(op),
            stream,
        )
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclAllGather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    sendcount: usize,
    datatype: c_int,
    comm: NcclComm,
    stream: CudaStream,
) -> NcclResult {
    call("ncclAllGather", || {
        collective(
            comm,
            |_| Ok(Collective::AllGather),
            sendbuff,
            recvbuff,
            sendcount,
            datatype,
            None,
            stream,
        )
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclBroadcast(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    root: c_int,
    comm: NcclComm,
    stream: CudaStream,
) -> NcclResult {
    call("ncclBroadcast", || {
        collective(
            comm,
            |n| {
                Ok(Collective::Broadcast {
                    root: root_of(root, n)?,
                })
            },
            sendbuff,
            recvbuff,
            count,
            datatype,
            None,
            stream,
        )
    })
}

/// The in-place broadcast of NCCL 1.
#[unsafe(no_mangle)]
pub extern "C" fn ncclBcast(
    buff: *mut c_void,
    count: usize,
    datatype: c_int,
    root: c_int,
    comm: NcclComm,
    stream: CudaStream,
) -> NcclResult {
    call("ncclBcast", || {
        collective(
            comm,
            |n| {
                Ok(Collective::Broadcast {
                    root: root_of(root, n)?,
                })
            },
            buff,
            buff,
            count,
            datatype,
            None,
            stream,
        )
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    op: c_int,
    root: c_int,
    comm: NcclComm,
    stream: CudaStream,
) -> NcclResult {
    call("ncclReduce", || {
        collective(
            comm,
            |n| {
                Ok(Collective::Reduce {
                    root: root_of(root, n)?,
                })
            },
            sendbuff,
            recvbuff,
            count,
            datatype,
            Some(op),
            stream,
        )
    })
}

/// One send or receive of `count` elements, checked.
fn p2p(
    handle: NcclComm,
    buf: *const c_void,
    count: usize,
    dtype: c_int,
    peer: c_int,
    send: bool,
) -> Result<(std::sync::Arc<comm::Comm>, GpuP2p), ApiError> {
    let dtype = data_type(dtype)?;
    let c = comm::lookup(handle as usize)?;
    let peer = index(peer, "peer")?;
    if peer >= c.nranks {
        return Err(ApiError::invalid_argument(format!(
            "peer {peer} of {} ranks",
            c.nranks
        )));
    }
    let n = bytes(count, dtype)?;
    let buf = need_buffer(buf, if send { "sendbuff" } else { "recvbuff" }, count)?;
    let op = if send {
        GpuP2p::Send {
            peer,
            buf,
            bytes: n,
        }
    } else {
        GpuP2p::Recv {
            peer,
            buf,
            bytes: n,
        }
    };
    Ok((c, op))
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclSend(
    sendbuff: *const c_void,
    count: usize,
    datatype: c_int,
    peer: c_int,
    comm: NcclComm,
    stream: CudaStream,
) -> NcclResult {
    call("ncclSend", || {
        let (comm, op) = p2p(comm, sendbuff, count, datatype, peer, true)?;
        issue::submit(vec![Call::P2p {
            comm,
            op,
            stream: stream as usize,
        }])
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclRecv(
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    peer: c_int,
    comm: NcclComm,
    stream: CudaStream,
) -> NcclResult {
    call("ncclRecv", || {
        let (comm, op) = p2p(comm, recvbuff, count, datatype, peer, false)?;
        issue::submit(vec![Call::P2p {
            comm,
            op,
            stream: stream as usize,
        }])
    })
}

/// Which sends and receives a rank makes for the three "v-less" exchanges, each block
/// `block` bytes: (peer, send?, offset in its buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exchange {
    AllToAll,
    Gather { root: usize },
    Scatter { root: usize },
}

/// The sends (from `send` + offset) and receives (into `recv` + offset) of `exchange`.
pub fn exchange_ops(
    exchange: Exchange,
    rank: usize,
    nranks: usize,
    send: u64,
    recv: u64,
    block: usize,
) -> Vec<GpuP2p> {
    let at = |base: u64, r: usize| base + (r * block) as u64;
    let mut ops = Vec::new();
    match exchange {
        Exchange::AllToAll => {
            for r in 0..nranks {
                ops.push(GpuP2p::Send {
                    peer: r,
                    buf: at(send, r),
                    bytes: block,
                });
                ops.push(GpuP2p::Recv {
                    peer: r,
                    buf: at(recv, r),
                    bytes: block,
                });
            }
        }
        Exchange::Gather { root } => {
            ops.push(GpuP2p::Send {
                peer: root,
                buf: send,
                bytes: block,
            });
            if rank == root {
                for r in 0..nranks {
                    ops.push(GpuP2p::Recv {
                        peer: r,
                        buf: at(recv, r),
                        bytes: block,
                    });
                }
            }
        }
        Exchange::Scatter { root } => {
            if rank == root {
                for r in 0..nranks {
                    ops.push(GpuP2p::Send {
                        peer: r,
                        buf: at(send, r),
                        bytes: block,
                    });
                }
            }
            ops.push(GpuP2p::Recv {
                peer: root,
                buf: recv,
                bytes: block,
            });
        }
    }
    ops
}

/// All-to-all, gather and scatter as one group of sends and receives.
fn exchange(
    handle: NcclComm,
    which: impl FnOnce(usize) -> Result<Exchange, ApiError>,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    dtype: c_int,
    stream: CudaStream,
) -> Result<(), ApiError> {
    let c = comm::lookup(handle as usize)?;
    let dtype = data_type(dtype)?;
    let x = which(c.nranks)?;
    let block = bytes(count, dtype)?;
    bytes(count.saturating_mul(c.nranks), dtype)?;
    // NCCL reads a gather's recvbuff on the root only, and a scatter's sendbuff on the
    // root only: elsewhere they may be NULL.
    let (needs_send, needs_recv) = match x {
        Exchange::AllToAll => (true, true),
        Exchange::Gather { root } => (true, c.rank == root),
        Exchange::Scatter { root } => (c.rank == root, true),
    };
    let send = if needs_send {
        need_buffer(send, "sendbuff", count)?
    } else {
        0
    };
    let recv = if needs_recv {
        need_buffer(recv, "recvbuff", count)?
    } else {
        0
    };
    let calls = exchange_ops(x, c.rank, c.nranks, send, recv, block)
        .into_iter()
        .map(|op| Call::P2p {
            comm: c.clone(),
            op,
            stream: stream as usize,
        })
        .collect();
    issue::submit(calls)
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclAlltoAll(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    comm: NcclComm,
    stream: CudaStream,
) -> NcclResult {
    call("ncclAlltoAll", || {
        exchange(
            comm,
            |_| Ok(Exchange::AllToAll),
            sendbuff,
            recvbuff,
            count,
            datatype,
            stream,
        )
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclGather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    root: c_int,
    comm: NcclComm,
    stream: CudaStream,
) -> NcclResult {
    call("ncclGather", || {
        exchange(
            comm,
            |n| {
                Ok(Exchange::Gather {
                    root: root_of(root, n)? as usize,
                })
            },
            sendbuff,
            recvbuff,
            count,
            datatype,
            stream,
        )
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclScatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    root: c_int,
    comm: NcclComm,
    stream: CudaStream,
) -> NcclResult {
    call("ncclScatter", || {
        exchange(
            comm,
            |n| {
                Ok(Exchange::Scatter {
                    root: root_of(root, n)? as usize,
                })
            },
            sendbuff,
            recvbuff,
            count,
            datatype,
            stream,
        )
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclGroupStart() -> NcclResult {
    run("ncclGroupStart", || {
        issue::group_start();
        Ok(())
    })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclGroupEnd() -> NcclResult {
    run("ncclGroupEnd", issue::group_end)
}

/// `ncclSimInfo_t`'s magic (`NCCL_SIM_INFO_INITIALIZER`).
pub const SIM_INFO_MAGIC: u32 = 0x7468_5283;
/// Bytes of `ncclSimInfo_t` up to and with `estimatedTime`.
const SIM_INFO_BYTES: usize = std::mem::offset_of!(NcclSimInfo, estimated_time) + 4;

/// NCCL's `ncclSimInfo_t`; `Default` is `NCCL_SIM_INFO_INITIALIZER`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NcclSimInfo {
    pub size: usize,
    pub magic: u32,
    pub version: u32,
    /// Microseconds; `NCCL_UNDEF_FLOAT` (-1) until a simulation sets it.
    pub estimated_time: f32,
}

impl Default for NcclSimInfo {
    fn default() -> Self {
        NcclSimInfo {
            size: std::mem::size_of::<NcclSimInfo>(),
            magic: SIM_INFO_MAGIC,
            version: crate::NCCL_VERSION_CODE as u32,
            estimated_time: -1.0,
        }
    }
}

/// Ends a group as NCCL's simulation does: the queued calls are not launched; their
/// predicted time (weft's model: NCCL's ring model over NVLink for each call's protocol and
/// channels, summed over the calls) goes into `estimatedTime`, in microseconds. Nested, it
/// closes one level only. A null `simInfo` is a plain `ncclGroupEnd`, as in NCCL; one not
/// made with `NCCL_SIM_INFO_INITIALIZER` is refused (the group is closed and its calls
/// dropped, as NCCL does).
///
/// # Safety
///
/// `sim_info`, when not null, must point to an `ncclSimInfo_t` of at least the `size` it
/// states.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ncclGroupSimulateEnd(sim_info: *mut c_void) -> NcclResult {
    if sim_info.is_null() {
        return ncclGroupEnd();
    }
    run("ncclGroupSimulateEnd", || {
        let base = sim_info.cast::<u8>();
        let field = |offset: usize| base.wrapping_add(offset);
        let mut size = 0usize;
        let check = || {
            // SAFETY: every ncclSimInfo_t starts with its size (a size_t); nothing past the
            // size it states is read or written.
            size = unsafe { base.cast::<usize>().read_unaligned() };
            let magic_at = std::mem::offset_of!(NcclSimInfo, magic);
            let magic = if size >= magic_at + 4 {
                // SAFETY: `size` covers the magic.
                unsafe { field(magic_at).cast::<u32>().read_unaligned() }
            } else {
                0
            };
            if magic != SIM_INFO_MAGIC {
                return Err(ApiError::invalid_argument(format!(
                    "ncclSimInfo_t of size {size} with magic {magic:#x}, not {SIM_INFO_MAGIC:#x}: \
                     initialise it with NCCL_SIM_INFO_INITIALIZER (the group was closed and its \
                     calls dropped)"
                )));
            }
            Ok(())
        };
        // `None`: nested, or nothing to cost (NCCL then leaves estimatedTime as it was).
        let Some(us) = issue::group_simulate(check)? else {
            return Ok(());
        };
        if size >= SIM_INFO_BYTES {
            let at = field(std::mem::offset_of!(NcclSimInfo, estimated_time));
            // SAFETY: `size` covers `estimatedTime`.
            unsafe { at.cast::<f32>().write_unaligned(us as f32) };
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peers(ops: &[GpuP2p]) -> Vec<(bool, usize, u64)> {
        ops.iter()
            .map(|o| match *o {
                GpuP2p::Send { peer, buf, .. } => (true, peer, buf),
                GpuP2p::Recv { peer, buf, .. } => (false, peer, buf),
            })
            .collect()
    }

    #[test]
    fn all_to_all_sends_and_receives_each_block() {
        let ops = exchange_ops(Exchange::AllToAll, 1, 3, 1000, 5000, 12);
        assert_eq!(
            peers(&ops),
            vec![
                (true, 0, 1000),
                (false, 0, 5000),
                (true, 1, 1012),
                (false, 1, 5012),
                (true, 2, 1024),
                (false, 2, 5024)
            ]
        );
    }

    #[test]
    fn gather_and_scatter_at_root_and_elsewhere() {
        let root = exchange_ops(Exchange::Gather { root: 2 }, 2, 3, 100, 700, 7);
        assert_eq!(
            peers(&root),
            vec![
                (true, 2, 100),
                (false, 0, 700),
                (false, 1, 707),
                (false, 2, 714)
            ]
        );
        let leaf = exchange_ops(Exchange::Gather { root: 2 }, 0, 3, 100, 700, 7);
        assert_eq!(peers(&leaf), vec![(true, 2, 100)]);
        let root = exchange_ops(Exchange::Scatter { root: 0 }, 0, 2, 100, 700, 5);
        assert_eq!(
            peers(&root),
            vec![(true, 0, 100), (true, 1, 105), (false, 0, 700)]
        );
        let leaf = exchange_ops(Exchange::Scatter { root: 0 }, 1, 2, 100, 700, 5);
        assert_eq!(peers(&leaf), vec![(false, 0, 700)]);
    }

    #[test]
    fn gather_and_scatter_take_null_where_nccl_reads_nothing() {
        use crate::result::{NCCL_INVALID_ARGUMENT, NCCL_SUCCESS};
        // Rank 1 of 3, never initialised: calls inside a group are checked and queued
        // without a GPU, and the group's end reports the one failure.
        let c = std::sync::Arc::new(crate::comm::Comm::new(1, 3, 0, Default::default()));
        let h = crate::comm::register(c) as NcclComm;
        let buf = 0x1000 as *mut c_void;
        let null = std::ptr::null_mut::<c_void>();
        assert_eq!(ncclGroupStart(), NCCL_SUCCESS);
        // Not the root: a gather's recvbuff and a scatter's sendbuff are not read.
        assert_eq!(ncclGather(buf, null, 5, 7, 0, h, null), NCCL_SUCCESS);
        assert_eq!(ncclScatter(null, buf, 5, 7, 0, h, null), NCCL_SUCCESS);
        // The root needs them.
        assert_eq!(
            ncclGather(buf, null, 5, 7, 1, h, null),
            NCCL_INVALID_ARGUMENT
        );
        assert_eq!(
            ncclScatter(null, buf, 5, 7, 1, h, null),
            NCCL_INVALID_ARGUMENT
        );
        // Every rank sends to a gather and receives from a scatter.
        assert_eq!(
            ncclGather(null, buf, 5, 7, 0, h, null),
            NCCL_INVALID_ARGUMENT
        );
        assert_eq!(ncclGroupEnd(), NCCL_INVALID_ARGUMENT);
        crate::comm::unregister(h as usize).unwrap();
    }

    #[test]
    fn simulate_end_costs_the_group_without_issuing_it() {
        let fresh = NcclSimInfo::default;
        let sim = |s: &mut NcclSimInfo| {
            // SAFETY: a whole ncclSimInfo_t.
            unsafe { ncclGroupSimulateEnd((s as *mut NcclSimInfo).cast()) }
        };
        // An empty group costs nothing; nested, only the level closes.
        assert_eq!(ncclGroupStart(), crate::result::NCCL_SUCCESS);
        assert_eq!(ncclGroupStart(), crate::result::NCCL_SUCCESS);
        let mut s = fresh();
        assert_eq!(sim(&mut s), crate::result::NCCL_SUCCESS);
        assert!(issue::in_group());
        assert_eq!(s.estimated_time, -1.0);
        assert_eq!(sim(&mut s), crate::result::NCCL_SUCCESS);
        assert!(!issue::in_group());
        // Nothing to cost: left as it was, as NCCL leaves it.
        assert_eq!(s.estimated_time, -1.0);
        // Not initialised: refused, and the group is closed all the same.
        assert_eq!(ncclGroupStart(), crate::result::NCCL_SUCCESS);
        let mut bad = fresh();
        bad.magic = 0;
        assert_eq!(sim(&mut bad), crate::result::NCCL_INVALID_ARGUMENT);
        assert!(!issue::in_group());
        // A size too small to hold the magic is refused the same way, nothing read past it.
        assert_eq!(ncclGroupStart(), crate::result::NCCL_SUCCESS);
        let mut short = fresh();
        short.size = 8;
        assert_eq!(sim(&mut short), crate::result::NCCL_INVALID_ARGUMENT);
        // Without a group open, the same misuse as an unmatched end.
        assert_eq!(sim(&mut fresh()), crate::result::NCCL_INVALID_USAGE);
        // Null: a plain end.
        assert_eq!(ncclGroupStart(), crate::result::NCCL_SUCCESS);
        // SAFETY: null is allowed.
        let rc = unsafe { ncclGroupSimulateEnd(std::ptr::null_mut()) };
        assert_eq!(rc, crate::result::NCCL_SUCCESS);
        assert!(!issue::in_group());
    }

    #[test]
    fn group_end_without_start_and_a_null_comm() {
        assert_eq!(ncclGroupEnd(), crate::result::NCCL_INVALID_USAGE);
        let rc = ncclAllReduce(
            std::ptr::null(),
            std::ptr::null_mut(),
            4,
            7,
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        assert_eq!(rc, crate::result::NCCL_INVALID_ARGUMENT);
    }
}
