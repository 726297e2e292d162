//! One connection's message protocol: the control socket, the request table and matching.
//!
//! The protocol is sender-eager, like NCCL's own socket transport: `isend` announces its
//! message at once with a *data* frame (tag, size) on the control socket and starts moving the
//! bytes, without waiting for the receiver. A message of at most [`INLINE_MAX`] bytes follows
//! its frame on the control socket; a larger one goes in pieces over the data sockets (see
//! [`super::data_threads`]), where the kernel's socket buffers hold it until the receiver has
//! a buffer for it. The receiver reads the data frames in order and matches each against the
//! oldest posted receive group by tag; only then does it move the bytes into that buffer. A
//! frame with no receive posted waits in the stream, so a late `irecv` costs no round trip:
//! the data is already on the receiving host.
//!
//! The receiver still announces each posted buffer (a *clear-to-send* frame: group size, index
//! in the group, tag, capacity) as `irecv` is called, off the data's path. The sender matches
//! its sends, in posting order, against these announcements and completes a send once its
//! bytes were handed to the kernel and it matched one. So each end checks every message on its
//! own (the sender against the announcement, the receiver against its buffer): a send larger
//! than its buffer, or whose tag is not in the group, fails both ends with both sizes or the
//! tags, and no error frame is needed.
//!
//! The frames are `weft_core::wire::socket_stream::ControlFrameRepr`.
//!
//! Everything here runs in the caller's thread (`isend`, `irecv`, `test`) under the comm's
//! lock and never blocks; the data threads run on their own. Once a comm failed or closed, its
//! data threads are stopped and joined before the error is returned, so no thread touches a
//! user buffer after the caller has been told the request ended.

use std::collections::VecDeque;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::super::{Completion, NET_MAX_RECVS, NET_MAX_REQUESTS, NetError, NetErrorKind};
use weft_core::wire::socket_stream::{ControlFrameRepr, FRAME_LEN, FrameKind};

use super::LocalSettings;
use super::data_threads::{DataThreads, Direction, Piece};
use super::sys;
use super::trace::{Call, Event, Trace};

/// Messages up to this size travel on the control socket, right behind their frame: no
/// thread hop, lowest latency. A protocol constant: both ends must agree.
pub(super) const INLINE_MAX: usize = 32 * 1024;
/// The smallest piece a large message is cut into (NCCL's MIN_CHUNKSIZE).
pub(super) const MIN_PIECE: usize = 64 * 1024;

#[derive(Debug, Clone, Copy, Default)]
struct RecvBuf {
    addr: usize,
    cap: usize,
    tag: u32,
}

// A receive carries its 8 buffers inline; the table has only 32 slots, so boxing would buy
// nothing but an allocation per irecv.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Op {
    Free,
    Send {
        size: usize,
        tag: u32,
        /// Checked against the receiver's announcement of its buffer.
        matched: bool,
        /// For inline sends: the control-stream offset once the payload has left.
        inline_end: Option<u64>,
    },
    Recv {
        bufs: [RecvBuf; NET_MAX_RECVS],
        n: usize,
        sizes: [Option<usize>; NET_MAX_RECVS],
    },
}

#[derive(Debug)]
struct Slot {
    generation: u32,
    op: Op,
    /// The message number, for tracing: sends in posting order, receives by the message
    /// they matched (the first of a group until then).
    seq: u64,
}

/// A group of receive buffers the peer announced (sender side).
#[derive(Debug, Clone, Copy, Default)]
struct CtsGroup {
    n: usize,
    got: usize,
    tags: [u32; NET_MAX_RECVS],
    caps: [u64; NET_MAX_RECVS],
    used: [bool; NET_MAX_RECVS],
}

#[derive(Debug)]
struct InlineRx {
    slot: usize,
    addr: usize,
    len: usize,
    got: usize,
}

/// Which end of the connection this comm is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    Send,
    Recv,
}

#[derive(Debug)]
struct State {
    control: TcpStream,
    out: Vec<u8>,
    out_pos: usize,
    /// Control bytes handed to the kernel since the start (to complete inline sends).
    out_sent: u64,
    out_queued: u64,
    inbuf: Box<[u8]>,
    in_start: usize,
    in_end: usize,
    inline_rx: Option<InlineRx>,
    slots: Vec<Slot>,
    error: Option<NetError>,
    closed: bool,
    data: DataThreads,
    next_socket: usize,
    /// Sender: sends not yet checked against an announcement, in posting order.
    unmatched: VecDeque<usize>,
    /// Sender: announced receive groups, oldest first, and the one being announced.
    groups: VecDeque<CtsGroup>,
    partial: Option<CtsGroup>,
    /// Receiver: receives with buffers not yet matched, in posting order.
    posted: VecDeque<usize>,
    /// Messages posted (sender) or matched (receiver) so far: both ends number them alike.
    messages: u64,
    /// Receives posted so far.
    receives: u64,
    trace: Option<Trace>,
}

/// One end of an established connection, shared by its comm handle and its requests.
#[derive(Debug)]
pub(super) struct Conn {
    state: Mutex<State>,
    role: Role,
    peer: SocketAddr,
}

impl Conn {
    /// Builds one end from its established `sockets`: the control socket first, then the
    /// data sockets in index order.
    pub fn new(
        role: Role,
        sockets: impl IntoIterator<Item = TcpStream>,
        threads: usize,
        peer: SocketAddr,
        local: &LocalSettings,
        conn_id: u64,
    ) -> Result<Arc<Conn>, NetError> {
        let mut sockets = sockets.into_iter();
        let control = sockets.next().ok_or_else(|| {
            NetError::new(
                NetErrorKind::Protocol,
                "a connection without its control socket",
            )
            .peer(peer)
        })?;
        let data: Vec<TcpStream> = sockets.collect();
        let direction = match role {
            Role::Send => Direction::Send,
            Role::Recv => Direction::Recv,
        };
        let trace = local
            .trace
            .as_deref()
            .map(|dir| Trace::new(dir, conn_id, role == Role::Send));
        let data = DataThreads::start(data, threads, direction, peer, local, trace.is_some())?;
        Ok(Arc::new(Conn {
            state: Mutex::new(State {
                control,
                out: Vec::new(),
                out_pos: 0,
                out_sent: 0,
                out_queued: 0,
                inbuf: vec![0u8; 64 * 1024].into_boxed_slice(),
                in_start: 0,
                in_end: 0,
                inline_rx: None,
                slots: (0..NET_MAX_REQUESTS)
                    .map(|_| Slot {
                        generation: 0,
                        op: Op::Free,
                        seq: 0,
                    })
                    .collect(),
                error: None,
                closed: false,
                data,
                next_socket: 0,
                unmatched: VecDeque::new(),
                groups: VecDeque::new(),
                partial: None,
                posted: VecDeque::new(),
                messages: 0,
                receives: 0,
                trace,
            }),
            role,
            peer,
        }))
    }

    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Posts a send; `Ok(None)` when all request slots are taken.
    pub fn post_send(
        &self,
        addr: usize,
        size: usize,
        tag: u32,
    ) -> Result<Option<(usize, u32)>, NetError> {
        self.timed(Call::Isend, |st| {
            let posted = self.queue_send_locked(st, addr, size, tag)?;
            st.progress(self);
            Ok(posted)
        })
    }

    /// Posts sends `(addr, size, tag)` in order up to the first that finds no free request
    /// slot, and writes all their frames together: one system call for all.
    pub fn post_sends(&self, sends: &[(usize, usize, u32)]) -> Result<Vec<(usize, u32)>, NetError> {
        self.timed(Call::Isend, |st| {
            let mut posted = Vec::with_capacity(sends.len());
            for &(addr, size, tag) in sends {
                match self.queue_send_locked(st, addr, size, tag)? {
                    Some(request) => posted.push(request),
                    None => break,
                }
            }
            st.progress(self);
            Ok(posted)
        })
    }

    /// Posts a grouped receive; `Ok(None)` when all request slots are taken.
    pub fn post_recv(
        &self,
        bufs: &[(usize, usize, u32)],
    ) -> Result<Option<(usize, u32)>, NetError> {
        self.timed(Call::Irecv, |st| self.post_recv_locked(st, bufs))
    }

    /// Progresses the connection and reports whether request (`idx`, `generation`) is done.
    pub fn test(&self, idx: usize, generation: u32) -> Result<Option<Completion>, NetError> {
        self.timed(Call::Test, |st| self.test_locked(st, idx, generation))
    }

    /// Runs `f` under the lock, timing it when tracing.
    fn timed<T>(&self, call: Call, f: impl FnOnce(&mut State) -> T) -> T {
        let mut st = self.lock();
        let start = st.trace.as_ref().map(|_| sys::monotonic_ns());
        let out = f(&mut st);
        if let (Some(start), Some(trace)) = (start, st.trace.as_mut()) {
            trace.count(call, sys::monotonic_ns().saturating_sub(start));
        }
        out
    }

    /// Queues a send's frame (and an inline payload) without writing it: the caller's
    /// `progress` then flushes it with anything queued before, in one system call.
    fn queue_send_locked(
        &self,
        st: &mut State,
        addr: usize,
        size: usize,
        tag: u32,
    ) -> Result<Option<(usize, u32)>, NetError> {
        st.usable(self)?;
        let Some(idx) = st.free_slot() else {
            return Ok(None);
        };
        let seq = st.messages;
        st.messages += 1;
        st.slots[idx].seq = seq;
        st.stamp(seq, Event::Posted, size);
        st.queue_frame(ControlFrameRepr {
            kind: FrameKind::Data,
            index: 0,
            count: 0,
            tag,
            size: size as u64,
        });
        let mut inline_end = None;
        if size <= INLINE_MAX {
            if size > 0 {
                // SAFETY: `isend`'s contract keeps `addr..addr+size` valid and unmodified until
                // the request completes, and it has not even been handed out yet.
                let payload = unsafe { std::slice::from_raw_parts(addr as *const u8, size) };
                st.out.extend_from_slice(payload);
                st.out_queued += size as u64;
            }
            inline_end = Some(st.out_queued);
        } else {
            st.queue_pieces(idx, addr, size);
        }
        st.slots[idx].op = Op::Send {
            size,
            tag,
            matched: false,
            inline_end,
        };
        st.unmatched.push_back(idx);
        Ok(Some((idx, st.slots[idx].generation)))
    }

    fn post_recv_locked(
        &self,
        st: &mut State,
        bufs: &[(usize, usize, u32)],
    ) -> Result<Option<(usize, u32)>, NetError> {
        if bufs.is_empty() || bufs.len() > NET_MAX_RECVS {
            return Err(NetError::new(
                NetErrorKind::InvalidArgument,
                format!(
                    "irecv with {} buffers: a grouped receive takes 1 to {NET_MAX_RECVS}",
                    bufs.len()
                ),
            )
            .peer(self.peer));
        }
        // No progress before posting: the one after it flushes this frame together with
        // anything already queued, in one system call.
        st.usable(self)?;
        let Some(idx) = st.free_slot() else {
            return Ok(None);
        };
        let seq = st.receives;
        st.receives += 1;
        st.slots[idx].seq = seq;
        st.stamp(seq, Event::Posted, 0);
        let mut rb = [RecvBuf::default(); NET_MAX_RECVS];
        for (dst, &(addr, cap, tag)) in rb.iter_mut().zip(bufs) {
            *dst = RecvBuf { addr, cap, tag };
        }
        let n = bufs.len();
        for (i, b) in rb[..n].iter().enumerate() {
            st.queue_frame(ControlFrameRepr {
                kind: FrameKind::ClearToSend,
                index: i as u8,
                count: n as u8,
                tag: b.tag,
                size: b.cap as u64,
            });
        }
        st.slots[idx].op = Op::Recv {
            bufs: rb,
            n,
            sizes: [None; NET_MAX_RECVS],
        };
        st.posted.push_back(idx);
        st.progress(self);
        Ok(Some((idx, st.slots[idx].generation)))
    }

    fn test_locked(
        &self,
        st: &mut State,
        idx: usize,
        generation: u32,
    ) -> Result<Option<Completion>, NetError> {
        // A request already done needs no system call (the proxy tests every request in a
        // loop; each progress costs a recv on the control socket).
        let live = st
            .slots
            .get(idx)
            .is_some_and(|s| s.generation == generation && !matches!(s.op, Op::Free));
        if live && st.error.is_none() && !st.closed {
            if let Some(done) = st.completion(idx) {
                st.finish(idx);
                return Ok(Some(done));
            }
            if st.waits_only_for_data_threads() {
                return Ok(None);
            }
        }
        st.progress(self);
        let stale = match st.slots.get(idx) {
            Some(s) => s.generation != generation || matches!(s.op, Op::Free),
            None => true,
        };
        if stale {
            return Err(NetError::new(
                NetErrorKind::InvalidArgument,
                "test: this request already completed (or failed) and was released",
            )
            .peer(self.peer)
            .hint("test each request until it reports done once, then drop it"));
        }
        if let Some(done) = st.completion(idx) {
            st.finish(idx);
            return Ok(Some(done));
        }
        if st.error.is_some() || st.closed {
            let err = st.usable(self).err().unwrap_or_else(|| {
                NetError::new(NetErrorKind::Closed, "test on a failed comm").peer(self.peer)
            });
            st.release(idx);
            return Err(err);
        }
        Ok(None)
    }

    /// Stops the data threads and closes the sockets. In-flight requests fail afterwards.
    pub fn close(&self) {
        let mut st = self.lock();
        if st.closed {
            return;
        }
        st.closed = true;
        st.data.stop();
        if let Some(trace) = &mut st.trace {
            trace.write();
        }
        // Flush what the peer may still need (the last inline sends), briefly.
        st.flush_until(Instant::now() + Duration::from_millis(200));
        // Unread input would make close() send a reset that can destroy data the peer has
        // not read yet; drain it first.
        let fd = st.control.as_raw_fd();
        let mut sink = [0u8; 4096];
        for _ in 0..64 {
            match sys::recv(fd, &mut sink) {
                Ok(n) if n > 0 => continue,
                _ => break,
            }
        }
        let _ = st.control.shutdown(Shutdown::Both);
    }
}

impl State {
    fn usable(&self, conn: &Conn) -> Result<(), NetError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        if self.closed {
            return Err(
                NetError::new(NetErrorKind::Closed, "use of a closed socket comm").peer(conn.peer),
            );
        }
        Ok(())
    }

    /// Whether a progress call could change nothing but what the data threads do: nothing
    /// to flush, nothing the control stream could match (every send checked, no receive
    /// buffer waiting for a message), no inline payload arriving, no thread failed. Then
    /// `test` skips the system calls (a proxy tests its requests in a tight loop); a peer that
    /// goes away still shows, through the data threads or the next progress.
    fn waits_only_for_data_threads(&self) -> bool {
        self.out_pos == self.out.len()
            && self.unmatched.is_empty()
            && self.posted.is_empty()
            && self.inline_rx.is_none()
            && !self.data.shared().failed.load(Ordering::Acquire)
    }

    /// Whether the data threads still carry pieces of some matched message.
    fn data_in_flight(&self) -> bool {
        self.data
            .shared()
            .pending
            .iter()
            .any(|p| p.load(Ordering::Acquire) != 0)
    }

    fn free_slot(&self) -> Option<usize> {
        self.slots.iter().position(|s| matches!(s.op, Op::Free))
    }

    /// Releases a request that completed, tracing when its bytes were handed over and now.
    fn finish(&mut self, idx: usize) {
        if let Some(trace) = &mut self.trace {
            let seq = self.slots[idx].seq;
            let handed = self
                .data
                .shared()
                .handed_ns
                .as_ref()
                .map_or(0, |s| s[idx].swap(0, Ordering::Relaxed));
            if handed != 0 {
                trace.record(seq, Event::Handed, handed, 0);
            }
            trace.now(seq, Event::Done, 0);
        }
        self.release(idx);
    }

    fn stamp(&mut self, seq: u64, event: Event, bytes: usize) {
        if let Some(trace) = &mut self.trace {
            trace.now(seq, event, bytes as u64);
        }
    }

    fn release(&mut self, idx: usize) {
        if let Some(s) = self.slots.get_mut(idx) {
            s.op = Op::Free;
            s.generation = s.generation.wrapping_add(1);
        }
    }

    fn completion(&self, idx: usize) -> Option<Completion> {
        let slot = self.slots.get(idx)?;
        if self.data.shared().pending[idx].load(Ordering::Acquire) != 0 {
            return None;
        }
        match &slot.op {
            Op::Free => None,
            Op::Send {
                size,
                matched,
                inline_end,
                ..
            } => {
                let flushed = inline_end.is_none_or(|end| self.out_sent >= end);
                (flushed && *matched).then(|| Completion::new(&[*size]))
            }
            Op::Recv { n, sizes, .. } => {
                if self.inline_rx.as_ref().is_some_and(|rx| rx.slot == idx) {
                    return None;
                }
                let mut out = [0usize; NET_MAX_RECVS];
                for (o, s) in out.iter_mut().zip(&sizes[..*n]) {
                    *o = (*s)?;
                }
                Some(Completion::new(&out[..*n]))
            }
        }
    }

    fn queue_frame(&mut self, f: ControlFrameRepr) {
        match f.to_bytes() {
            Ok(bytes) => {
                self.out.extend_from_slice(&bytes);
                self.out_queued += FRAME_LEN as u64;
            }
            // Frames are built from checked group sizes; reaching this is a bug in this file.
            Err(e) => log::error!("NET/Socket: internal error: unencodable frame {f:?}: {e}"),
        }
    }

    /// Does everything possible without blocking; a failure poisons the comm.
    fn progress(&mut self, conn: &Conn) {
        if self.error.is_some() || self.closed {
            return;
        }
        let result = (|| {
            self.flush(conn)?;
            let read = self.read_control(conn);
            // Announcements read before a failure still count: a receiver that got every
            // message and closed leaves the sender's last sends complete, not failed.
            if conn.role == Role::Send {
                self.match_sends(conn)?;
            }
            read?;
            self.flush(conn)?;
            if self.data.shared().failed.load(Ordering::Acquire) {
                let err = self
                    .data
                    .shared()
                    .error
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone();
                return Err(err.unwrap_or_else(|| {
                    NetError::new(
                        NetErrorKind::Io(std::io::ErrorKind::Other),
                        "a data socket failed",
                    )
                    .peer(conn.peer)
                }));
            }
            Ok(())
        })();
        if let Err(e) = result {
            self.fail(e);
        }
    }

    fn fail(&mut self, err: NetError) {
        log::warn!("NET/Socket: {err}");
        // Join the data threads before anyone learns of the failure: after that, no thread
        // touches a user buffer.
        self.data.stop();
        // Let the peer learn of errors we found (too large / no such tag frames), briefly.
        self.flush_until(Instant::now() + Duration::from_millis(200));
        if self.error.is_none() {
            self.error = Some(err);
        }
    }

    fn flush(&mut self, conn: &Conn) -> Result<(), NetError> {
        let fd = self.control.as_raw_fd();
        while self.out_pos < self.out.len() {
            match sys::send(fd, &self.out[self.out_pos..]) {
                Ok(n) => {
                    self.out_pos += n;
                    self.out_sent += n as u64;
                }
                Err(e) if sys::would_block(&e) => break,
                Err(e) => {
                    return Err(NetError::io("send on the control socket", &e)
                        .peer(conn.peer)
                        .hint("the peer process exited or closed its comm; look at its log"));
                }
            }
        }
        if self.out_pos == self.out.len() {
            self.out.clear();
            self.out_pos = 0;
        }
        Ok(())
    }

    fn flush_until(&mut self, deadline: Instant) {
        let fd = self.control.as_raw_fd();
        while self.out_pos < self.out.len() && Instant::now() < deadline {
            match sys::send(fd, &self.out[self.out_pos..]) {
                Ok(n) => {
                    self.out_pos += n;
                    self.out_sent += n as u64;
                }
                Err(e) if sys::would_block(&e) => {
                    let _ = sys::poll_one(fd, libc::POLLOUT, 10);
                }
                Err(_) => break,
            }
        }
    }

    fn read_control(&mut self, conn: &Conn) -> Result<(), NetError> {
        let fd = self.control.as_raw_fd();
        loop {
            // Use what is buffered first.
            loop {
                let avail = self.in_end - self.in_start;
                if let Some(rx) = &mut self.inline_rx {
                    if avail == 0 {
                        break;
                    }
                    let take = avail.min(rx.len - rx.got);
                    // SAFETY: `rx.addr..rx.addr+rx.len` is the matched receive buffer, which
                    // `irecv`'s contract keeps valid and exclusively ours until the request
                    // completes; it cannot complete while `inline_rx` points at it.
                    let dst = unsafe {
                        std::slice::from_raw_parts_mut((rx.addr + rx.got) as *mut u8, take)
                    };
                    dst.copy_from_slice(&self.inbuf[self.in_start..self.in_start + take]);
                    self.in_start += take;
                    rx.got += take;
                    if rx.got == rx.len {
                        self.inline_rx = None;
                    }
                } else if avail >= FRAME_LEN {
                    let mut b = [0u8; FRAME_LEN];
                    b.copy_from_slice(&self.inbuf[self.in_start..self.in_start + FRAME_LEN]);
                    let frame = ControlFrameRepr::parse(&b).map_err(|e| {
                        NetError::new(NetErrorKind::Protocol, "bad control frame from the peer")
                            .peer(conn.peer)
                            .cause(e)
                            .hint("both ends must run the same weft build")
                    })?;
                    if !self.handle_frame(conn, frame)? {
                        // A message with no receive posted yet: it waits in the stream (and
                        // its bytes in the kernel's buffers) until `irecv` is called.
                        return Ok(());
                    }
                    self.in_start += FRAME_LEN;
                } else {
                    break;
                }
            }
            if self.in_start == self.in_end {
                self.in_start = 0;
                self.in_end = 0;
            }
            // Large inline remainders go straight into the user's buffer.
            let result = match &mut self.inline_rx {
                Some(rx) if self.in_start == self.in_end && rx.len - rx.got >= 4096 => {
                    // SAFETY: as above: the matched, exclusively ours receive buffer.
                    let dst = unsafe {
                        std::slice::from_raw_parts_mut(
                            (rx.addr + rx.got) as *mut u8,
                            rx.len - rx.got,
                        )
                    };
                    match sys::recv(fd, dst) {
                        Ok(n) if n > 0 => {
                            rx.got += n;
                            if rx.got == rx.len {
                                self.inline_rx = None;
                            }
                            continue;
                        }
                        other => other,
                    }
                }
                _ => {
                    if self.in_start > 0 {
                        self.inbuf.copy_within(self.in_start..self.in_end, 0);
                        self.in_end -= self.in_start;
                        self.in_start = 0;
                    }
                    let end = self.in_end;
                    match sys::recv(fd, &mut self.inbuf[end..]) {
                        Ok(n) if n > 0 => {
                            self.in_end += n;
                            continue;
                        }
                        other => other,
                    }
                }
            };
            return match result {
                // A sender that closed after its last message: what it sent is matched, and
                // the pieces still on the data sockets stay readable after its FIN, so the
                // data threads finish them. Only a receive that can no longer be matched is
                // an error, once nothing is in flight (failing the comm stops the data
                // threads, which must not cut short a message that did arrive).
                Ok(_)
                    if conn.role == Role::Recv
                        && self.inline_rx.is_none()
                        && (self.posted.is_empty() || self.data_in_flight()) =>
                {
                    Ok(())
                }
                Ok(_) => Err(NetError::new(
                    NetErrorKind::PeerClosed,
                    "the peer closed the control connection",
                )
                .peer(conn.peer)
                .hint("the peer process exited or closed its comm; look at its log")),
                Err(e) if sys::would_block(&e) => Ok(()),
                Err(e) => Err(NetError::io("receive on the control socket", &e)
                    .peer(conn.peer)
                    .hint("the peer process exited or closed its comm; look at its log")),
            };
        }
    }

    /// Acts on one frame; `Ok(false)` leaves it in the stream for later (a data frame with
    /// no receive posted).
    fn handle_frame(&mut self, conn: &Conn, f: ControlFrameRepr) -> Result<bool, NetError> {
        let protocol = |what: String| {
            NetError::new(NetErrorKind::Protocol, what)
                .peer(conn.peer)
                .hint("both ends must run the same weft build")
        };
        match (conn.role, f.kind) {
            (Role::Recv, FrameKind::Data) => self.match_data(conn, f.tag, f.size),
            (Role::Send, FrameKind::ClearToSend) => {
                let n = usize::from(f.count);
                let i = usize::from(f.index);
                let mut g = match self.partial.take() {
                    Some(g) if g.n == n && g.got == i => g,
                    None if i == 0 => CtsGroup {
                        n,
                        ..CtsGroup::default()
                    },
                    _ => {
                        return Err(protocol(format!(
                            "receive announcement {i}/{n} out of order"
                        )));
                    }
                };
                // `parse` checked 1 <= count <= 8 and index < count.
                let (Some(tag), Some(cap)) = (g.tags.get_mut(i), g.caps.get_mut(i)) else {
                    return Err(protocol(format!("bad receive announcement {i}/{n}")));
                };
                *tag = f.tag;
                *cap = f.size;
                g.got += 1;
                if g.got == g.n {
                    self.groups.push_back(g);
                } else {
                    self.partial = Some(g);
                }
                Ok(true)
            }
            (_, kind) => Err(protocol(format!("unexpected control frame {kind:?}"))),
        }
    }

    /// Receiver: matches the next message (`tag`, `size`) against the oldest posted group.
    fn match_data(&mut self, conn: &Conn, tag: u32, size: u64) -> Result<bool, NetError> {
        let Some(&idx) = self.posted.front() else {
            return Ok(false);
        };
        let Op::Recv { bufs, n, sizes } = &mut self.slots[idx].op else {
            return Err(NetError::new(NetErrorKind::Protocol, "receive slot lost").peer(conn.peer));
        };
        let n = *n;
        let size = usize::try_from(size).unwrap_or(usize::MAX);
        let Some(k) = (0..n).find(|&k| sizes[k].is_none() && bufs[k].tag == tag) else {
            // The sender finds the same mismatch against our announcement.
            let tags: Vec<u32> = bufs[..n].iter().map(|b| b.tag).collect();
            return Err(NetError::new(
                NetErrorKind::TagMismatch { tag },
                format!(
                    "the peer sent {size} bytes with tag {tag} but the receive it must match \
                     expects tags {tags:?}"
                ),
            )
            .peer(conn.peer)
            .hint("post the sends of one grouped receive together, with the receive's tags"));
        };
        let buf = bufs[k];
        if size > buf.cap {
            return Err(NetError::new(
                NetErrorKind::Truncated {
                    send_size: size,
                    recv_size: buf.cap,
                },
                format!(
                    "message truncated: the peer sends {size} bytes with tag {tag} but the \
                     receive buffer holds {} bytes",
                    buf.cap
                ),
            )
            .peer(conn.peer)
            .hint("post receive buffers at least as large as the matching sends"));
        }
        sizes[k] = Some(size);
        let all = sizes[..n].iter().all(Option::is_some);
        let seq = self.messages;
        self.messages += 1;
        self.slots[idx].seq = seq;
        self.stamp(seq, Event::Matched, size);
        if size <= INLINE_MAX {
            if size > 0 {
                self.inline_rx = Some(InlineRx {
                    slot: idx,
                    addr: buf.addr,
                    len: size,
                    got: 0,
                });
            }
        } else {
            self.queue_pieces(idx, buf.addr, size);
        }
        if all {
            self.posted.pop_front();
        }
        Ok(true)
    }

    /// Cuts `size` bytes at `addr` into pieces on consecutive data sockets. Both ends call
    /// this in the same message order, so they cut and place identically.
    fn queue_pieces(&mut self, slot: usize, addr: usize, size: usize) {
        let sockets = self.data.sockets().max(1);
        let piece = size.div_ceil(sockets).max(MIN_PIECE);
        let count = size.div_ceil(piece);
        self.data.shared().pending[slot].fetch_add(count, Ordering::AcqRel);
        for i in 0..count {
            let off = i * piece;
            let len = piece.min(size - off);
            let socket = (self.next_socket + i) % sockets;
            self.data.enqueue(
                socket,
                Piece {
                    slot,
                    addr: addr + off,
                    len,
                },
            );
        }
        self.next_socket = (self.next_socket + count) % sockets;
    }

    /// Sender: checks sends, in posting order, against the receiver's announced buffers (the
    /// bytes already left; this decides whether the send completes or fails).
    fn match_sends(&mut self, conn: &Conn) -> Result<(), NetError> {
        while let Some(&idx) = self.unmatched.front() {
            let Some(group) = self.groups.front_mut() else {
                break;
            };
            let Op::Send { size, tag, .. } = self.slots[idx].op else {
                self.unmatched.pop_front();
                continue;
            };
            let n = group.n;
            let Some(k) = (0..n).find(|&k| !group.used[k] && group.tags[k] == tag) else {
                let tags = group.tags[..n].to_vec();
                return Err(NetError::new(
                    NetErrorKind::TagMismatch { tag },
                    format!(
                        "send of {size} bytes with tag {tag}: the receive it must match expects \
                         tags {tags:?}"
                    ),
                )
                .peer(conn.peer)
                .hint("post the sends of one grouped receive together, with the receive's tags"));
            };
            let cap = group.caps[k];
            if size as u64 > cap {
                return Err(NetError::new(
                    NetErrorKind::Truncated {
                        send_size: size,
                        recv_size: usize::try_from(cap).unwrap_or(usize::MAX),
                    },
                    format!(
                        "message truncated: send of {size} bytes with tag {tag} matched a \
                         receive buffer of {cap} bytes"
                    ),
                )
                .peer(conn.peer)
                .hint("post receive buffers at least as large as the matching sends"));
            }
            group.used[k] = true;
            if group.used[..n].iter().all(|&u| u) {
                self.groups.pop_front();
            }
            if let Op::Send { matched, .. } = &mut self.slots[idx].op {
                *matched = true;
            }
            self.unmatched.pop_front();
        }
        Ok(())
    }
}
