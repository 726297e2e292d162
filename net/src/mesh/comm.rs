//! The data path of a mesh connection: each message cut over the rails ([`super::stripe`]),
//! one request per rail, completed when every rail's part is; a receive moves the parts into
//! place when the message was smaller than its buffer.
//!
//! A backend may refuse to post now (`Ok(None)`: its slots are full, or the receiver has not
//! posted yet). Rails already posted cannot be taken back, so the comm keeps the message
//! half-posted and the caller's retry of the same call posts the rest; a different call in
//! between is refused (NCCL retries the same one).
//!
//! A failure on one rail closes the rails that still carry parts of that request before the
//! error is returned, so that, as within one backend, nothing writes into the caller's
//! buffers once the caller has been told the request ended; the connection is dead after it.

use super::rail::{Backends, RailMr, RailRecv, RailRequest, RailSend};
use super::stripe::{part, placement};
use crate::{Completion, NET_MAX_RECVS, NetError, NetErrorKind, RecvBuffer};

/// A registration: one per rail of the comm it was made for.
#[derive(Debug)]
pub struct MeshMemHandle {
    pub(super) owner: u64,
    pub(super) rails: Vec<RailMr>,
}

/// A message posted on some rails but not all.
#[derive(Debug)]
struct Partial {
    /// (address, size, tag) of each buffer, to recognise the caller's retry.
    what: Vec<(usize, usize, u32)>,
    reqs: Vec<Option<RailRequest>>,
}

/// The sending end of a mesh connection.
#[derive(Debug)]
pub struct MeshSendComm {
    pub(super) id: u64,
    pub(super) rails: Vec<RailSend>,
    words: Vec<String>,
    partial: Option<Partial>,
}

/// The receiving end of a mesh connection.
#[derive(Debug)]
pub struct MeshRecvComm {
    pub(super) id: u64,
    pub(super) rails: Vec<RailRecv>,
    words: Vec<String>,
    partial: Option<Partial>,
}

/// An in-flight mesh request: one request per rail (`None` once that rail's part is done).
#[derive(Debug)]
pub struct MeshRequest {
    reqs: Vec<Option<RailRequest>>,
    /// Per rail, the sizes its request completed with.
    got: Vec<Vec<usize>>,
    kind: RequestKind,
}

#[derive(Debug)]
enum RequestKind {
    Send {
        size: usize,
    },
    /// (address, capacity) of each buffer.
    Recv {
        bufs: Vec<(usize, usize)>,
    },
    Done,
}

impl MeshSendComm {
    pub(super) fn new(rails: Vec<RailSend>, words: Vec<String>) -> MeshSendComm {
        MeshSendComm {
            id: super::handshake::random_u64(),
            rails,
            words,
            partial: None,
        }
    }

    /// Each rail: `192.168.101.2 over verbs from rxe0 port 1 (...) on 192.168.101.0/24`.
    pub fn rails(&self) -> &[String] {
        &self.words
    }
}

impl MeshRecvComm {
    pub(super) fn new(rails: Vec<RailRecv>, words: Vec<String>) -> MeshRecvComm {
        MeshRecvComm {
            id: super::handshake::random_u64(),
            rails,
            words,
            partial: None,
        }
    }

    /// Each rail's connector, as the listener saw it.
    pub fn rails(&self) -> &[String] {
        &self.words
    }
}

fn check_mr(owner: u64, mr: &MeshMemHandle, rails: usize) -> Result<(), NetError> {
    if mr.owner != owner || mr.rails.len() != rails {
        return Err(NetError::new(
            NetErrorKind::InvalidArgument,
            "mesh: a registration made for another comm",
        )
        .hint(
            "mesh registrations are per comm (regIsGlobal = 0): register the buffer with this comm",
        ));
    }
    Ok(())
}

fn retry_check(partial: &Option<Partial>, what: &[(usize, usize, u32)]) -> Result<(), NetError> {
    match partial {
        Some(p) if p.what != what => Err(NetError::new(
            NetErrorKind::InvalidArgument,
            format!(
                "mesh: a message was posted on some rails only ({:?}) and the next call posts \
                 another ({what:?})",
                p.what
            ),
        )
        .hint("after a post that returned \"not posted\", repeat the same call")),
        _ => Ok(()),
    }
}

/// Sends the rails' parts of one message.
///
/// # Safety
/// As for [`crate::Net::isend`].
pub(super) unsafe fn isend(
    backends: &Backends<'_>,
    comm: &mut MeshSendComm,
    data: *const u8,
    size: usize,
    tag: u32,
    mr: &MeshMemHandle,
) -> Result<Option<MeshRequest>, NetError> {
    let n = comm.rails.len();
    check_mr(comm.id, mr, n)?;
    let what = vec![(data as usize, size, tag)];
    retry_check(&comm.partial, &what)?;
    let mut partial = comm.partial.take().unwrap_or_else(|| Partial {
        what,
        reqs: (0..n).map(|_| None).collect(),
    });
    for (r, (rail, rmr)) in comm.rails.iter_mut().zip(&mr.rails).enumerate() {
        if partial.reqs[r].is_some() {
            continue;
        }
        let (off, len) = part(size, n, r);
        // SAFETY: `off + len <= size`: the part lies inside the caller's buffer, which the
        // caller's contract keeps valid and unmodified until the request completes.
        let posted = unsafe { backends.isend(rail, data.wrapping_add(off), len, tag, rmr) };
        match posted {
            Ok(Some(req)) => partial.reqs[r] = Some(req),
            Ok(None) => {
                // Nothing posted on any rail: nothing to finish later either.
                if partial.reqs.iter().any(Option::is_some) {
                    comm.partial = Some(partial);
                }
                return Ok(None);
            }
            Err(e) => {
                close_rails(&partial.reqs);
                return Err(e);
            }
        }
    }
    Ok(Some(MeshRequest {
        reqs: partial.reqs,
        got: vec![Vec::new(); n],
        kind: RequestKind::Send { size },
    }))
}

/// Posts the rails' parts of a grouped receive.
///
/// # Safety
/// As for [`crate::Net::irecv`].
pub(super) unsafe fn irecv(
    backends: &Backends<'_>,
    comm: &mut MeshRecvComm,
    bufs: &[RecvBuffer<'_, MeshMemHandle>],
) -> Result<Option<MeshRequest>, NetError> {
    let n = comm.rails.len();
    if bufs.is_empty() || bufs.len() > NET_MAX_RECVS {
        return Err(NetError::new(
            NetErrorKind::InvalidArgument,
            format!(
                "irecv with {} buffers: a grouped receive takes 1 to {NET_MAX_RECVS}",
                bufs.len()
            ),
        ));
    }
    for b in bufs {
        check_mr(comm.id, b.mr, n)?;
    }
    let what: Vec<(usize, usize, u32)> = bufs
        .iter()
        .map(|b| (b.data as usize, b.size, b.tag))
        .collect();
    retry_check(&comm.partial, &what)?;
    let mut partial = comm.partial.take().unwrap_or_else(|| Partial {
        what,
        reqs: (0..n).map(|_| None).collect(),
    });
    for (r, rail) in comm.rails.iter_mut().enumerate() {
        if partial.reqs[r].is_some() {
            continue;
        }
        let parts: Vec<RecvBuffer<'_, RailMr>> = bufs
            .iter()
            .map(|b| {
                let (off, len) = part(b.size, n, r);
                RecvBuffer {
                    data: b.data.wrapping_add(off),
                    size: len,
                    tag: b.tag,
                    mr: &b.mr.rails[r],
                }
            })
            .collect();
        // SAFETY: each part lies inside its caller's buffer (`off + len <= size`), which the
        // caller's contract keeps valid and ours alone until the request completes.
        match unsafe { backends.irecv(rail, &parts) } {
            Ok(Some(req)) => partial.reqs[r] = Some(req),
            Ok(None) => {
                // Nothing posted on any rail: nothing to finish later either.
                if partial.reqs.iter().any(Option::is_some) {
                    comm.partial = Some(partial);
                }
                return Ok(None);
            }
            Err(e) => {
                close_rails(&partial.reqs);
                return Err(e);
            }
        }
    }
    Ok(Some(MeshRequest {
        reqs: partial.reqs,
        got: vec![Vec::new(); n],
        kind: RequestKind::Recv {
            bufs: bufs.iter().map(|b| (b.data as usize, b.size)).collect(),
        },
    }))
}

/// Closes the rails of the parts still in flight, after a failure of one.
fn close_rails(reqs: &[Option<RailRequest>]) {
    for r in reqs.iter().flatten() {
        r.close_comm();
    }
}

/// Progresses every rail's part; done when all are.
pub(super) fn test(
    backends: &Backends<'_>,
    request: &mut MeshRequest,
) -> Result<Option<Completion>, NetError> {
    if matches!(request.kind, RequestKind::Done) {
        return Err(NetError::new(
            NetErrorKind::InvalidArgument,
            "test of a mesh request that already completed",
        ));
    }
    let mut failed = None;
    for (r, slot) in request.reqs.iter_mut().enumerate() {
        let Some(req) = slot.as_mut() else { continue };
        match backends.test(req) {
            Ok(Some(done)) => {
                request.got[r] = done.sizes().to_vec();
                *slot = None;
            }
            Ok(None) => {}
            Err(e) => {
                *slot = None;
                failed = Some(e);
                break;
            }
        }
    }
    if let Some(e) = failed {
        // The rail's error names its peer address, which names the rail.
        close_rails(&request.reqs);
        request.kind = RequestKind::Done;
        return Err(e);
    }
    if request.reqs.iter().any(Option::is_some) {
        return Ok(None);
    }
    let kind = std::mem::replace(&mut request.kind, RequestKind::Done);
    match kind {
        RequestKind::Send { size } => Ok(Some(Completion::new(&[size]))),
        RequestKind::Recv { bufs } => {
            let mut sizes = Vec::with_capacity(bufs.len());
            for (k, &(addr, cap)) in bufs.iter().enumerate() {
                let got: Vec<usize> = request
                    .got
                    .iter()
                    .map(|g| g.get(k).copied().unwrap_or(0))
                    .collect();
                let (size, moves) = placement(cap, &got).map_err(|why| {
                    NetError::new(
                        NetErrorKind::Protocol,
                        format!("mesh receive of buffer {k} ({cap} bytes): {why}"),
                    )
                    .hint("both ends must run the same weft build")
                })?;
                for m in moves {
                    // SAFETY: `placement` checked that both ranges lie in the buffer's first
                    // `cap` bytes, which the caller's contract makes ours until this request
                    // completes (now, with every rail done writing); `copy` allows overlap.
                    unsafe {
                        std::ptr::copy(
                            (addr + m.from) as *const u8,
                            (addr + m.to) as *mut u8,
                            m.len,
                        );
                    }
                }
                sizes.push(size);
            }
            Ok(Some(Completion::new(&sizes)))
        }
        RequestKind::Done => Ok(None),
    }
}
