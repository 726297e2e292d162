//! One NET connection as the proxy drives it: connect (or accept), then move slots.
//!
//! Send side ([`SendLink`]): wait until the executor posted a slot, `isend` its bytes, and
//! when `test` says done, return the credit (head). Receive side ([`RecvLink`]): `irecv`
//! into every slot the executor has freed (up to a ring ahead), `test` them in order, and
//! publish each completed one (size, then tail). Nothing here blocks: each `progress` call
//! does what is possible now and says whether it did anything.

use std::collections::VecDeque;
use std::fmt;
use std::time::{Duration, Instant};

use weft_core::fifo::{FifoError, Slice};

use super::fifo_side::{FifoDrain, FifoFill};
use super::staged::{StagedRecvLink, StagedSendLink};
use crate::conn::layout::DATA_OFFSET;
use crate::conn::{ConnError, ConnId, FifoRegion};
use crate::net::{CommRef, Net, NetError, NetErrorKind, NetHandle, PtrKind, RecvBuffer};

/// The tag of every message: one stream per comm, matched in order.
pub(crate) const NET_TAG: u32 = 0x7766;

/// What one `progress` call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Progress {
    /// Nothing could move now.
    Idle,
    /// Something moved: poll again soon.
    Busy,
    /// The connection is finished (both ends done): drop it.
    Finished,
}

/// Why a connection failed: the message the executor's wait will carry.
pub(crate) type Failure = String;

/// The slot ring as one registered range.
fn ring_span(region: &FifoRegion) -> (*mut u8, usize) {
    let layout = region.layout();
    let len = layout.slots().saturating_mul(layout.step_bytes());
    // DATA_OFFSET + len <= the region's length: FifoRegion validated the layout.
    (
        region.memory().base().as_ptr().wrapping_add(DATA_OFFSET),
        len,
    )
}

/// A FIFO protocol error as a failure cause, with the usual reason spelled out.
fn fifo_failure(err: &ConnError) -> Failure {
    match err {
        ConnError::Protocol {
            err: FifoError::SizeMissing { .. },
            ..
        }
        | ConnError::Oversize { .. } => format!(
            "{err}: the NET proxy moves one step per slice, so the executor must keep the \
             connection's default geometry (FifoGeometry::new(slots, 1, 1)) and post every step"
        ),
        other => other.to_string(),
    }
}

pub(super) fn describe(conn: ConnId, what: &str, err: &NetError) -> Failure {
    let hint = match err.kind() {
        _ if err.has_hint() => "",
        NetErrorKind::PeerClosed => {
            " (the peer process exited or closed its end: look for an error or crash there)"
        }
        NetErrorKind::Timeout => " (is the peer alive and inside the same communicator setup?)",
        _ => "",
    };
    format!("NET {what} with rank {} failed: {err}{hint}", conn.peer)
}

/// One look at a connect in progress to the listener `handle` names: the comm once it is
/// there, `None` while it is not (yet within `deadline`), a failure past it.
pub(super) fn poll_connect<N: Net>(
    net: &N,
    conn: ConnId,
    dev: usize,
    handle: &NetHandle,
    state: &mut Option<N::Connecting>,
    deadline: Instant,
    timeout: Duration,
) -> Result<Option<N::SendComm>, Failure> {
    match net.connect(dev, handle, state) {
        Ok(Some(comm)) => Ok(Some(comm)),
        Ok(None) if Instant::now() >= deadline => Err(format!(
            "NET connect to rank {} did not complete within {:.1} s (handle {handle:?}): \
             is rank {} alive and accepting on this channel?",
            conn.peer,
            timeout.as_secs_f64(),
            conn.peer
        )),
        Ok(None) => Ok(None),
        Err(e) => Err(describe(conn, "connect", &e)),
    }
}

/// One look at `listen` for the sender's connection: as [`poll_connect`].
pub(super) fn poll_accept<N: Net>(
    net: &N,
    conn: ConnId,
    listen: &mut N::ListenComm,
    deadline: Instant,
    timeout: Duration,
) -> Result<Option<N::RecvComm>, Failure> {
    match net.accept(listen) {
        Ok(Some(comm)) => Ok(Some(comm)),
        Ok(None) if Instant::now() >= deadline => Err(format!(
            "NET accept: rank {} did not connect within {:.1} s: is it alive and \
             connecting on this channel?",
            conn.peer,
            timeout.as_secs_f64()
        )),
        Ok(None) => Ok(None),
        Err(e) => Err(describe(conn, "accept", &e)),
    }
}

/// Lets go of a send connection: its registration while the comm is still open (NCCL's
/// order: a plugin's `deregMr` may use the comm), then the comm. Requests still in flight
/// (`inflight`) are dropped first.
pub(super) fn release_send<N: Net, R>(
    net: &N,
    conn: ConnId,
    comm: N::SendComm,
    mr: N::MemHandle,
    inflight: R,
) {
    drop(inflight);
    if let Err(e) = net.dereg_mr(mr) {
        log::warn!("{conn}: deregistering the FIFO: {e}");
    }
    if let Err(e) = net.close_send(comm) {
        log::warn!("{conn}: closing the NET send comm: {e}");
    }
}

/// As [`release_send`], for a receive connection.
pub(super) fn release_recv<N: Net, R>(
    net: &N,
    conn: ConnId,
    comm: N::RecvComm,
    mr: N::MemHandle,
    inflight: R,
) {
    drop(inflight);
    if let Err(e) = net.dereg_mr(mr) {
        log::warn!("{conn}: deregistering the FIFO: {e}");
    }
    if let Err(e) = net.close_recv(comm) {
        log::warn!("{conn}: closing the NET receive comm: {e}");
    }
}

/// Stops listening once the sender is accepted (or the link is shut before it was).
pub(super) fn close_listen<N: Net>(net: &N, conn: ConnId, listen: N::ListenComm) {
    if let Err(e) = net.close_listen(listen) {
        log::warn!("{conn}: closing the NET listen comm: {e}");
    }
}

enum SendState<N: Net> {
    Connecting {
        handle: NetHandle,
        state: Option<N::Connecting>,
        deadline: Instant,
    },
    Ready {
        comm: N::SendComm,
        mr: N::MemHandle,
        inflight: VecDeque<(Slice, N::Request)>,
        /// A slice taken from the FIFO that the backend refused to post yet.
        pending: Option<(Slice, *const u8, usize)>,
    },
    Closed,
}

/// A NET send connection: executor's FIFO -> network.
pub(crate) struct SendLink<N: Net> {
    conn: ConnId,
    dev: usize,
    timeout: Duration,
    // Declared before `drain`: the comm (and its requests) must go before the slot memory.
    state: SendState<N>,
    drain: FifoDrain,
}

// SAFETY: the raw pointer in `pending` points into the FIFO region that `drain` keeps alive
// and is only dereferenced by the backend on the proxy thread that owns this link; the other
// fields are Send by the `Net` trait's bounds.
unsafe impl<N: Net> Send for SendLink<N> {}

impl<N: Net> fmt::Debug for SendLink<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            SendState::Connecting { .. } => "connecting",
            SendState::Ready { .. } => "ready",
            SendState::Closed => "closed",
        };
        f.debug_struct("SendLink")
            .field("conn", &self.conn)
            .field("state", &state)
            .finish()
    }
}

impl<N: Net> SendLink<N> {
    pub(crate) fn new(
        conn: ConnId,
        dev: usize,
        handle: NetHandle,
        region: FifoRegion,
        timeout: Duration,
    ) -> Self {
        SendLink {
            conn,
            dev,
            timeout,
            state: SendState::Connecting {
                handle,
                state: None,
                deadline: Instant::now() + timeout,
            },
            drain: FifoDrain::new(region, conn),
        }
    }

    pub(crate) fn conn(&self) -> ConnId {
        self.conn
    }

    pub(crate) fn progress(&mut self, net: &N) -> Result<Progress, Failure> {
        if self.drain.executor_aborted() {
            self.shut(net);
            return Ok(Progress::Finished);
        }
        match &mut self.state {
            SendState::Connecting {
                handle,
                state,
                deadline,
            } => match poll_connect(
                net,
                self.conn,
                self.dev,
                handle,
                state,
                *deadline,
                self.timeout,
            )? {
                Some(comm) => {
                    let (base, len) = ring_span(self.drain.region());
                    // SAFETY: the ring lies inside the FIFO region, which `self.drain` keeps
                    // alive longer than the registration (deregistered in `shut`, before the
                    // region can go); it is host memory.
                    let mr = unsafe { net.reg_mr(CommRef::Send(&comm), base, len, PtrKind::Host) }
                        .map_err(|e| describe(self.conn, "memory registration", &e))?;
                    self.state = SendState::Ready {
                        comm,
                        mr,
                        inflight: VecDeque::new(),
                        pending: None,
                    };
                    Ok(Progress::Busy)
                }
                None => Ok(Progress::Idle),
            },
            SendState::Ready {
                comm,
                mr,
                inflight,
                pending,
            } => {
                let mut busy = false;
                // Complete in order: the FIFO frees slots oldest first.
                while let Some((slice, request)) = inflight.front_mut() {
                    match net.test(request) {
                        Ok(Some(_)) => {
                            let slice = *slice;
                            inflight.pop_front();
                            self.drain.release(slice).map_err(|e| e.to_string())?;
                            busy = true;
                        }
                        Ok(None) => break,
                        Err(e) => return Err(describe(self.conn, "send", &e)),
                    }
                }
                // Read the closed bit before the tail: a close seen here covers every post.
                let closed = self.drain.executor_closed();
                let slots = self.drain.region().layout().slots();
                while inflight.len() < slots {
                    let next = match pending.take() {
                        Some(p) => p,
                        None => match self.drain.next_posted().map_err(|e| fifo_failure(&e))? {
                            Some(p) => p,
                            None => break,
                        },
                    };
                    let (slice, data, bytes) = next;
                    // SAFETY: `data..data+bytes` is a posted slot inside the registered ring;
                    // the executor will not write it before `release` returns its credit,
                    // which happens only after `test` reported this send done (or never,
                    // once the comm is closed in `shut`).
                    match unsafe { net.isend(comm, data, bytes, NET_TAG, mr) } {
                        Ok(Some(request)) => {
                            inflight.push_back((slice, request));
                            busy = true;
                        }
                        Ok(None) => {
                            *pending = Some(next);
                            break;
                        }
                        Err(e) => return Err(describe(self.conn, "send", &e)),
                    }
                }
                if closed && inflight.is_empty() && pending.is_none() {
                    self.shut(net);
                    return Ok(Progress::Finished);
                }
                Ok(if busy { Progress::Busy } else { Progress::Idle })
            }
            SendState::Closed => Ok(Progress::Finished),
        }
    }

    /// Fails the connection for the executor and closes the network side.
    pub(crate) fn fail(&mut self, net: &N, cause: &str) {
        self.drain.fail(cause);
        self.shut(net);
    }

    /// Closes the comm (requests in flight end), then deregisters the ring.
    fn shut(&mut self, net: &N) {
        if let SendState::Ready {
            comm, mr, inflight, ..
        } = std::mem::replace(&mut self.state, SendState::Closed)
        {
            release_send(net, self.conn, comm, mr, inflight);
        }
        self.drain.close();
    }
}

impl<N: Net> Drop for SendLink<N> {
    fn drop(&mut self) {
        // A link dropped without `shut` (proxy gone): its comm closes by its own Drop, which
        // the field order runs before the region goes. Tell the executor.
        if !matches!(self.state, SendState::Closed) {
            self.drain.fail(&format!(
                "the NET proxy thread stopped while the connection to rank {} was open",
                self.conn.peer
            ));
        }
    }
}

enum RecvState<N: Net> {
    Accepting {
        listen: N::ListenComm,
        deadline: Instant,
    },
    Ready {
        comm: N::RecvComm,
        mr: N::MemHandle,
        inflight: VecDeque<(Slice, N::Request)>,
        pending: Option<(Slice, *mut u8, usize)>,
    },
    Closed,
}

/// A NET receive connection: network -> executor's FIFO.
pub(crate) struct RecvLink<N: Net> {
    conn: ConnId,
    timeout: Duration,
    // Declared before `fill`: the comm (and its requests) must go before the slot memory.
    state: RecvState<N>,
    fill: FifoFill,
}

// SAFETY: as for `SendLink`: the pointer in `pending` points into the region `fill` keeps
// alive, used only on the proxy thread that owns this link.
unsafe impl<N: Net> Send for RecvLink<N> {}

impl<N: Net> fmt::Debug for RecvLink<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            RecvState::Accepting { .. } => "accepting",
            RecvState::Ready { .. } => "ready",
            RecvState::Closed => "closed",
        };
        f.debug_struct("RecvLink")
            .field("conn", &self.conn)
            .field("state", &state)
            .finish()
    }
}

impl<N: Net> RecvLink<N> {
    pub(crate) fn new(
        conn: ConnId,
        listen: N::ListenComm,
        region: FifoRegion,
        timeout: Duration,
    ) -> Self {
        RecvLink {
            conn,
            timeout,
            state: RecvState::Accepting {
                listen,
                deadline: Instant::now() + timeout,
            },
            fill: FifoFill::new(region, conn),
        }
    }

    pub(crate) fn conn(&self) -> ConnId {
        self.conn
    }

    pub(crate) fn progress(&mut self, net: &N) -> Result<Progress, Failure> {
        if self.fill.executor_gone() {
            self.shut(net);
            return Ok(Progress::Finished);
        }
        match &mut self.state {
            RecvState::Accepting { listen, deadline } => {
                match poll_accept(net, self.conn, listen, *deadline, self.timeout)? {
                    Some(comm) => {
                        let (base, len) = ring_span(self.fill.region());
                        // SAFETY: as in `SendLink::progress`: the ring outlives the registration.
                        let mr =
                            unsafe { net.reg_mr(CommRef::Recv(&comm), base, len, PtrKind::Host) }
                                .map_err(|e| describe(self.conn, "memory registration", &e))?;
                        if let RecvState::Accepting { listen, .. } = std::mem::replace(
                            &mut self.state,
                            RecvState::Ready {
                                comm,
                                mr,
                                inflight: VecDeque::new(),
                                pending: None,
                            },
                        ) {
                            close_listen(net, self.conn, listen);
                        }
                        Ok(Progress::Busy)
                    }
                    None => Ok(Progress::Idle),
                }
            }
            RecvState::Ready {
                comm,
                mr,
                inflight,
                pending,
            } => {
                let mut busy = false;
                let mut remote_closed = false;
                let slots = self.fill.region().layout().slots();
                // Post receives into every free slot first: a send completes only once its
                // receive is announced, so the peer's slot is held until we post.
                while inflight.len() < slots {
                    let next = match pending.take() {
                        Some(p) => p,
                        None => match self.fill.next_free().map_err(|e| fifo_failure(&e))? {
                            Some(p) => p,
                            None => break,
                        },
                    };
                    let (slice, data, capacity) = next;
                    let bufs = [RecvBuffer {
                        data,
                        size: capacity,
                        tag: NET_TAG,
                        mr: &*mr,
                    }];
                    // SAFETY: the slot is inside the registered ring; the executor freed it
                    // (head) and will not read it before `publish` moves the tail past it,
                    // which happens only after `test` reported the receive done (or never,
                    // once the comm is closed in `shut`).
                    match unsafe { net.irecv(comm, &bufs) } {
                        Ok(Some(request)) => {
                            inflight.push_back((slice, request));
                            busy = true;
                        }
                        Ok(None) => {
                            *pending = Some(next);
                            break;
                        }
                        // The remote sender closed: receives already matched still complete
                        // below; the ones it never sent for end the connection normally.
                        Err(e) if e.kind() == NetErrorKind::PeerClosed => {
                            *pending = Some(next);
                            remote_closed = true;
                            break;
                        }
                        Err(e) => return Err(describe(self.conn, "receive", &e)),
                    }
                }
                while let Some((slice, request)) = inflight.front_mut() {
                    match net.test(request) {
                        Ok(Some(done)) => {
                            let slice = *slice;
                            inflight.pop_front();
                            let bytes = done.sizes().first().copied().unwrap_or(0);
                            self.fill.publish(slice, bytes).map_err(|e| e.to_string())?;
                            busy = true;
                        }
                        Ok(None) => break,
                        // The remote sender closed: normal at the end, an error only for an
                        // executor that waits for more (it gets `PeerClosed` naming the rank).
                        Err(e) if e.kind() == NetErrorKind::PeerClosed => {
                            log::debug!("{}: remote closed: {e}", self.conn);
                            self.shut(net);
                            return Ok(Progress::Finished);
                        }
                        Err(e) => return Err(describe(self.conn, "receive", &e)),
                    }
                }
                if remote_closed && inflight.is_empty() {
                    self.shut(net);
                    return Ok(Progress::Finished);
                }
                Ok(if busy { Progress::Busy } else { Progress::Idle })
            }
            RecvState::Closed => Ok(Progress::Finished),
        }
    }

    /// Fails the connection for the executor and closes the network side.
    pub(crate) fn fail(&mut self, net: &N, cause: &str) {
        self.fill.fail(cause);
        self.shut(net);
    }

    fn shut(&mut self, net: &N) {
        match std::mem::replace(&mut self.state, RecvState::Closed) {
            RecvState::Ready {
                comm, mr, inflight, ..
            } => {
                release_recv(net, self.conn, comm, mr, inflight);
            }
            RecvState::Accepting { listen, .. } => close_listen(net, self.conn, listen),
            RecvState::Closed => {}
        }
        self.fill.close();
    }
}

impl<N: Net> Drop for RecvLink<N> {
    fn drop(&mut self) {
        if !matches!(self.state, RecvState::Closed) {
            self.fill.fail(&format!(
                "the NET proxy thread stopped while the connection from rank {} was open",
                self.conn.peer
            ));
        }
    }
}

/// Either kind of link, as the proxy thread holds them.
#[derive(Debug)]
pub(crate) enum Link<N: Net> {
    Send(SendLink<N>),
    Recv(RecvLink<N>),
    /// A GPU kernel's FIFO in staging memory -> network.
    StagedSend(StagedSendLink<N>),
    /// Network -> a GPU kernel's FIFO in staging memory.
    StagedRecv(StagedRecvLink<N>),
}

impl<N: Net> Link<N> {
    /// Whether this link sends (a FIFO -> the network).
    pub(crate) fn is_send(&self) -> bool {
        matches!(self, Link::Send(_) | Link::StagedSend(_))
    }

    pub(crate) fn conn(&self) -> ConnId {
        match self {
            Link::Send(l) => l.conn(),
            Link::Recv(l) => l.conn(),
            Link::StagedSend(l) => l.conn(),
            Link::StagedRecv(l) => l.conn(),
        }
    }

    pub(crate) fn progress(&mut self, net: &N) -> Result<Progress, Failure> {
        match self {
            Link::Send(l) => l.progress(net),
            Link::Recv(l) => l.progress(net),
            Link::StagedSend(l) => l.progress(net),
            Link::StagedRecv(l) => l.progress(net),
        }
    }

    pub(crate) fn fail(&mut self, net: &N, cause: &str) {
        match self {
            Link::Send(l) => l.fail(net, cause),
            Link::Recv(l) => l.fail(net, cause),
            Link::StagedSend(l) => l.fail(net, cause),
            Link::StagedRecv(l) => l.fail(net, cause),
        }
    }
}
