//! Staged NET connections: FIFOs in memory a GPU kernel fills or drains, moved over the
//! network by the proxy thread (NCCL's NET transport without GPUDirect).
//!
//! Each end of a connection has a [`Staging`] area in pinned host memory that its GPU maps,
//! laid out as the kernels expect a connection end (`weft_core::abi::ConnInfo`): the tail
//! counter, the head counter, the point-to-point tags, the step sizes and the SIMPLE FIFO of
//! `steps` slots. The sending kernel writes a step's bytes into a slot, its size into
//! `sizes`, then releases the tail; the proxy sends the step and, once the network is done
//! with it, gives the slot back by moving the head. On the receiving host the proxy receives
//! into every slot the kernel has freed (its head), and publishes each completed step by
//! writing its tag and moving the tail. So each kernel polls and writes only memory of its
//! own host, as with NCCL's proxy.
//!
//! On the wire a step is two messages on one comm: a 16-byte header (the step's byte count
//! and its slot's tag, little-endian; NET tag [`HEADER_TAG`]) and the step's bytes
//! ([`DATA_TAG`]). The tag travels so that a send and a receive of different sizes end in
//! an error naming the peer on the receiving GPU, as between GPUs of one host. The sender
//! posts every step it finds in one batch (`Net::isend_batch`: one system call on sockets
//! for all of them); the receiver posts both of a step's buffers as one grouped receive
//! where the backend takes groups (`max_recvs` of 2 or more: one clear-to-send write on
//! sockets), else one after the other. Latency at small sizes is a few system calls per
//! step, so each saved one counts (measured with `WEFT_SOCKET_TRACE`: an `isend` or an
//! `irecv` on loopback costs 4 to 8 us on an H200 machine).
//!
//! Nothing here touches CUDA: the memory is any page the caller keeps alive (pinned and
//! device-mapped for a GPU, plain heap in tests, where a thread plays the kernel).

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::link::{
    Failure, NET_TAG, Progress, close_listen, describe, poll_accept, poll_connect, release_recv,
    release_send,
};
use crate::conn::ConnId;
use crate::net::{CommRef, Net, NetError, NetErrorKind, NetHandle, PtrKind, RecvBuffer};

/// Offsets in a staging area.
pub mod layout {
    /// The tail (`u64`): steps the sender posted.
    pub const TAIL: usize = 0;
    /// The head (`u64`): steps the receiver freed.
    pub const HEAD: usize = 128;
    /// The point-to-point tags, one `u64` per slot (`ConnInfo::tags`).
    pub const TAGS: usize = 256;
    /// The step sizes, one `u32` per slot (`ConnInfo::sizes_fifo`).
    pub const SIZES: usize = 512;
    /// The proxy's wire headers, 16 bytes per slot.
    pub const HEADERS: usize = 1024;
    /// The SIMPLE FIFO.
    pub const FIFO: usize = 4096;
    /// Bytes of a wire header.
    pub const HEADER_BYTES: usize = 16;
    /// The most slots the control words above have room for.
    pub const MAX_STEPS: usize = 32;
    const _: () = assert!(TAGS + MAX_STEPS * 8 <= SIZES);
    const _: () = assert!(SIZES + MAX_STEPS * 4 <= HEADERS);
    const _: () = assert!(HEADERS + MAX_STEPS * HEADER_BYTES <= FIFO);

    /// Bytes of a staging area of `steps` slots of `step_bytes`.
    pub fn bytes(steps: usize, step_bytes: usize) -> usize {
        FIFO + steps * step_bytes
    }
}

/// What a staging area's owner is told when its connection fails (the proxy's cause).
pub type FailureHook = Arc<dyn Fn(&str) + Send + Sync>;

/// Moves a received step from its slot in the staging area to where the receiving kernel
/// reads it: the copy engine into device memory (`WEFT_NET_RECV_COPY`, issue 24: NCCL's
/// kernel reads pinned host memory at about 6 GB/s per channel, measured in this project).
/// Without one the kernel reads the host slot itself. The proxy starts a step's move once
/// its bytes arrived and publishes the step (the tail) only once the move finished, in step
/// order; it lends the host slot again only after the kernel freed the step (the head), so
/// a move never reads a slot being received into, nor writes one the kernel still reads.
pub trait StepMover: Send + Sync {
    /// Starts moving the first `bytes` bytes of slot `slot` (as [`Staging::slot_ptr`]).
    fn start(&self, slot: usize, bytes: usize) -> Result<(), String>;
    /// Whether the last move started for `slot` has finished.
    fn finished(&self, slot: usize) -> Result<bool, String>;
}

/// One connection end's staging area (see the module documentation): its memory, kept
/// alive by `memory`, and its geometry.
pub struct Staging {
    base: *mut u8,
    len: usize,
    steps: usize,
    step_bytes: usize,
    /// Set by the owner once no kernel will use the connection again: the link finishes
    /// when nothing is in flight.
    closed: AtomicBool,
    on_failure: FailureHook,
    /// Receiving ends only: where received steps go before the kernel reads them.
    mover: Option<Arc<dyn StepMover>>,
    _memory: Box<dyn Send + Sync>,
}

// SAFETY: the area is shared memory by design: every word two parties touch is accessed
// atomically (`word64`, `word32`), and the FIFO bytes are handed over through the tail
// and head counters' Release/Acquire pairs (see the module documentation).
unsafe impl Send for Staging {}
// SAFETY: as above.
unsafe impl Sync for Staging {}

impl fmt::Debug for Staging {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Staging")
            .field("steps", &self.steps)
            .field("step_bytes", &self.step_bytes)
            .field("tail", &self.tail().load(Ordering::Relaxed))
            .field("head", &self.head().load(Ordering::Relaxed))
            .finish()
    }
}

impl Staging {
    /// A staging area over `len` bytes at `base`, which `memory` keeps alive, zeroed and
    /// 4096-byte aligned (checked), for `steps` slots of `step_bytes`.
    ///
    /// # Safety
    /// `base..base + len` must stay valid for reads and writes for as long as `memory`
    /// lives, and nothing but the kernel of this connection end and this area may use it.
    pub unsafe fn new(
        base: *mut u8,
        len: usize,
        memory: Box<dyn Send + Sync>,
        steps: usize,
        step_bytes: usize,
        on_failure: FailureHook,
    ) -> Result<Staging, String> {
        if steps == 0 || steps > layout::MAX_STEPS {
            return Err(format!(
                "a staged FIFO of {steps} slots: 1 to {} supported",
                layout::MAX_STEPS
            ));
        }
        if !(base as usize).is_multiple_of(layout::FIFO) || len < layout::bytes(steps, step_bytes) {
            return Err(format!(
                "a staging area of {len} bytes at {base:p}: need {} bytes, 4096-byte aligned",
                layout::bytes(steps, step_bytes)
            ));
        }
        if u32::try_from(step_bytes).is_err() {
            return Err(format!("FIFO steps of {step_bytes} bytes: at most 4 GiB"));
        }
        Ok(Staging {
            base,
            len,
            steps,
            step_bytes,
            closed: AtomicBool::new(false),
            on_failure,
            mover: None,
            _memory: memory,
        })
    }

    /// The same area, its received steps moved by `mover` before the kernel may read them
    /// (a receiving end; a sending end ignores it).
    pub fn with_mover(mut self, mover: Arc<dyn StepMover>) -> Staging {
        self.mover = Some(mover);
        self
    }

    /// A zeroed area on the heap, for tests and for ranks whose peer kernels run on the
    /// CPU: its device address is its host address.
    pub fn on_heap(
        steps: usize,
        step_bytes: usize,
        on_failure: FailureHook,
    ) -> Result<Staging, String> {
        let words = layout::bytes(steps, step_bytes).div_ceil(8) + layout::FIFO / 8;
        let memory = HeapArea::zeroed(words);
        let raw = memory.0.cast::<u8>();
        let base = raw.wrapping_add(raw.align_offset(layout::FIFO));
        let len = words * 8 - (base as usize - raw as usize);
        // SAFETY: `base..base + len` lies inside `memory`'s allocation, which the area keeps
        // and which is only ever reached through raw pointers.
        unsafe { Staging::new(base, len, Box::new(memory), steps, step_bytes, on_failure) }
    }

    /// The area's first byte in this process.
    pub fn base(&self) -> *mut u8 {
        self.base
    }

    /// Slots in the FIFO.
    pub fn steps(&self) -> usize {
        self.steps
    }

    /// Bytes per slot.
    pub fn step_bytes(&self) -> usize {
        self.step_bytes
    }

    /// The control word at `at`: every caller passes an offset below [`layout::FIFO`]
    /// (the constants above, a slot taken modulo `steps`), inside the area by `new`'s check.
    fn word64(&self, at: usize) -> &AtomicU64 {
        debug_assert!(at.is_multiple_of(8) && at + 8 <= layout::FIFO);
        let word = self.base.wrapping_add(at).cast::<u64>();
        // SAFETY: in bounds and aligned (base is 4096-aligned, `at` a multiple of 8); shared
        // with the kernel, hence atomic.
        unsafe { AtomicU64::from_ptr(word) }
    }

    /// As [`Staging::word64`], 32 bits.
    fn word32(&self, at: usize) -> &AtomicU32 {
        debug_assert!(at.is_multiple_of(4) && at + 4 <= layout::FIFO);
        let word = self.base.wrapping_add(at).cast::<u32>();
        // SAFETY: as in `word64`.
        unsafe { AtomicU32::from_ptr(word) }
    }

    /// Steps the sender posted.
    pub fn tail(&self) -> &AtomicU64 {
        self.word64(layout::TAIL)
    }

    /// Steps the receiver freed.
    pub fn head(&self) -> &AtomicU64 {
        self.word64(layout::HEAD)
    }

    /// The tag word of `slot`.
    pub fn tag(&self, slot: usize) -> &AtomicU64 {
        self.word64(layout::TAGS + 8 * (slot % self.steps))
    }

    /// The size word of `slot`.
    pub fn size(&self, slot: usize) -> &AtomicU32 {
        self.word32(layout::SIZES + 4 * (slot % self.steps))
    }

    /// The first byte of FIFO slot `slot`.
    pub fn slot_ptr(&self, slot: usize) -> *mut u8 {
        self.base
            .wrapping_add(layout::FIFO + (slot % self.steps) * self.step_bytes)
    }

    fn header_ptr(&self, slot: usize) -> *mut u8 {
        self.base
            .wrapping_add(layout::HEADERS + (slot % self.steps) * layout::HEADER_BYTES)
    }

    /// No kernel will use the connection again: its link may finish.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    fn fail(&self, cause: &str) {
        (self.on_failure)(cause);
    }
}

/// Zeroed words on the heap, owned through a raw pointer (not a `Box`, whose moves would
/// assert unique access while the area's pointers into it are in use).
struct HeapArea(*mut [AtomicU64]);

// SAFETY: the words are atomics; the area is freed once, by `Drop`.
unsafe impl Send for HeapArea {}
// SAFETY: as above.
unsafe impl Sync for HeapArea {}

impl HeapArea {
    fn zeroed(words: usize) -> HeapArea {
        let memory: Box<[AtomicU64]> = (0..words).map(|_| AtomicU64::new(0)).collect();
        HeapArea(Box::into_raw(memory))
    }
}

impl Drop for HeapArea {
    fn drop(&mut self) {
        // SAFETY: made by `Box::into_raw` in `zeroed`, freed only here.
        drop(unsafe { Box::from_raw(self.0) });
    }
}

/// The NET tag of a step's header.
pub const HEADER_TAG: u32 = NET_TAG;
/// The NET tag of a step's bytes (distinct, so that both can go in one grouped receive).
pub const DATA_TAG: u32 = NET_TAG + 1;

/// A network request and whether it completed.
enum Piece<R> {
    Unposted,
    Posted(R),
    /// Posted with the step's header in one grouped receive: completes with it.
    InGroup,
    Done(usize),
}

impl<R> Piece<R> {
    fn done(&self) -> Option<usize> {
        match self {
            Piece::Done(bytes) => Some(*bytes),
            _ => None,
        }
    }
}

/// One step on the network: its header and its bytes.
struct StepInFlight<R> {
    step: u64,
    header: Piece<R>,
    data: Piece<R>,
    /// Received and checked; its move (where there is a mover) started.
    arrived: bool,
}

/// Tests a step's requests once, the header's first (a grouped receive completes both);
/// whether both are done now.
fn test_step<N: Net>(net: &N, step: &mut StepInFlight<N::Request>) -> Result<bool, NetError> {
    if let Piece::Posted(request) = &mut step.header {
        if let Some(done) = net.test(request)? {
            let sizes = done.sizes();
            step.header = Piece::Done(sizes.first().copied().unwrap_or(0));
            if matches!(step.data, Piece::InGroup) {
                step.data = Piece::Done(sizes.get(1).copied().unwrap_or(0));
            }
        }
    }
    if step.header.done().is_none() {
        return Ok(false);
    }
    if let Piece::Posted(request) = &mut step.data {
        if let Some(done) = net.test(request)? {
            step.data = Piece::Done(done.sizes().first().copied().unwrap_or(0));
        }
    }
    Ok(step.data.done().is_some())
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
        inflight: VecDeque<StepInFlight<N::Request>>,
        /// Steps taken from the FIFO (posted or about to be).
        taken: u64,
        /// Steps the network is done with (the head the kernel sees).
        freed: u64,
    },
    Closed,
}

/// A staged send connection: the kernel's FIFO -> network.
pub(crate) struct StagedSendLink<N: Net> {
    conn: ConnId,
    dev: usize,
    timeout: Duration,
    // Declared before `staging`: the comm (and its requests) go before the memory.
    state: SendState<N>,
    staging: Arc<Staging>,
}

impl<N: Net> fmt::Debug for StagedSendLink<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StagedSendLink")
            .field("conn", &self.conn)
            .field("staging", &self.staging)
            .finish()
    }
}

impl<N: Net> StagedSendLink<N> {
    pub(crate) fn new(
        conn: ConnId,
        dev: usize,
        handle: NetHandle,
        staging: Arc<Staging>,
        timeout: Duration,
    ) -> Self {
        StagedSendLink {
            conn,
            dev,
            timeout,
            state: SendState::Connecting {
                handle,
                state: None,
                deadline: Instant::now() + timeout,
            },
            staging,
        }
    }

    pub(crate) fn conn(&self) -> ConnId {
        self.conn
    }

    pub(crate) fn progress(&mut self, net: &N) -> Result<Progress, Failure> {
        let staging = Arc::clone(&self.staging);
        let conn = self.conn;
        match &mut self.state {
            SendState::Connecting {
                handle,
                state,
                deadline,
            } => {
                if staging.is_closed() {
                    self.shut(net);
                    return Ok(Progress::Finished);
                }
                match poll_connect(net, conn, self.dev, handle, state, *deadline, self.timeout)? {
                    Some(comm) => {
                        // SAFETY: the area outlives the registration: `self.staging` keeps
                        // it, and `shut` deregisters before the link (and its Arc) goes.
                        let mr = unsafe {
                            net.reg_mr(
                                CommRef::Send(&comm),
                                staging.base(),
                                staging.len,
                                PtrKind::Host,
                            )
                        }
                        .map_err(|e| describe(conn, "memory registration", &e))?;
                        self.state = SendState::Ready {
                            comm,
                            mr,
                            inflight: VecDeque::new(),
                            taken: 0,
                            freed: 0,
                        };
                        Ok(Progress::Busy)
                    }
                    None => Ok(Progress::Idle),
                }
            }
            SendState::Ready {
                comm,
                mr,
                inflight,
                taken,
                freed,
            } => {
                let mut busy = false;
                // Complete in order: slots go back to the kernel oldest first.
                while let Some(front) = inflight.front_mut() {
                    if !test_step(net, front).map_err(|e| describe(conn, "send", &e))? {
                        break;
                    }
                    *freed = front.step + 1;
                    inflight.pop_front();
                    // Release: the kernel that sees the head may overwrite the slot.
                    staging.head().store(*freed, Ordering::Release);
                    busy = true;
                }
                // Read before the tail: a close seen here comes after the kernel's last
                // post, which the tail below then shows (the owner closes once its kernels
                // are done).
                let closing = staging.is_closed();
                // Take what the kernel posted, up to a ring ahead.
                // Acquire: pairs with the kernel's release of the tail (sizes, tags, bytes).
                let tail = staging.tail().load(Ordering::Acquire);
                if tail < *taken || tail > *freed + staging.steps() as u64 {
                    return Err(format!(
                        "{conn}: the sending kernel posted step {tail} with {} taken and {} \
                         freed: the connection's counters are corrupt",
                        *taken, *freed
                    ));
                }
                while *taken < tail {
                    let slot = (*taken % staging.steps() as u64) as usize;
                    let bytes = staging.size(slot).load(Ordering::Relaxed) as usize;
                    if bytes > staging.step_bytes() {
                        return Err(format!(
                            "{conn}: the sending kernel posted {bytes} bytes in a {}-byte step",
                            staging.step_bytes()
                        ));
                    }
                    let tag = staging.tag(slot).load(Ordering::Relaxed);
                    let header = staging.header_ptr(slot);
                    let mut words = [0u8; layout::HEADER_BYTES];
                    words[..8].copy_from_slice(&(bytes as u64).to_le_bytes());
                    words[8..].copy_from_slice(&tag.to_le_bytes());
                    // SAFETY: the header slot lies inside the area and is the proxy's alone
                    // (the kernel never touches HEADERS); this slot's previous step is done.
                    unsafe { std::ptr::copy_nonoverlapping(words.as_ptr(), header, words.len()) };
                    inflight.push_back(StepInFlight {
                        step: *taken,
                        header: Piece::Unposted,
                        data: Piece::Unposted,
                        arrived: false,
                    });
                    *taken += 1;
                    busy = true;
                }
                // Post, in order and in one batch, what the backend has not taken yet.
                let mut sends: Vec<(*const u8, usize, u32)> = Vec::new();
                for step in inflight.iter() {
                    let slot = (step.step % staging.steps() as u64) as usize;
                    if matches!(step.header, Piece::Unposted) {
                        let header = staging.header_ptr(slot).cast_const();
                        sends.push((header, layout::HEADER_BYTES, HEADER_TAG));
                    }
                    if matches!(step.data, Piece::Unposted) {
                        let bytes = staging.size(slot).load(Ordering::Relaxed) as usize;
                        sends.push((staging.slot_ptr(slot).cast_const(), bytes, DATA_TAG));
                    }
                }
                if !sends.is_empty() {
                    // SAFETY: the headers lie in the registered area and stay untouched until
                    // their sends complete (`test`) or the comm closes; the kernel posted the
                    // slots (tail) and will not write them before the head passes them,
                    // which waits for these sends' completion.
                    let posted = unsafe { net.isend_batch(comm, &sends, mr) }
                        .map_err(|e| describe(conn, "send", &e))?;
                    let mut posted = posted.into_iter();
                    'assign: for step in inflight.iter_mut() {
                        for piece in [&mut step.header, &mut step.data] {
                            if matches!(piece, Piece::Unposted) {
                                match posted.next() {
                                    Some(r) => *piece = Piece::Posted(r),
                                    None => break 'assign,
                                }
                            }
                        }
                    }
                }
                if inflight.is_empty() && closing {
                    self.shut(net);
                    return Ok(Progress::Finished);
                }
                Ok(if busy { Progress::Busy } else { Progress::Idle })
            }
            SendState::Closed => Ok(Progress::Finished),
        }
    }

    /// Tells the area's owner and closes the network side.
    pub(crate) fn fail(&mut self, net: &N, cause: &str) {
        self.staging.fail(cause);
        self.shut(net);
    }

    fn shut(&mut self, net: &N) {
        if let SendState::Ready {
            comm, mr, inflight, ..
        } = std::mem::replace(&mut self.state, SendState::Closed)
        {
            release_send(net, self.conn, comm, mr, inflight);
        }
    }
}

impl<N: Net> Drop for StagedSendLink<N> {
    fn drop(&mut self) {
        if !matches!(self.state, SendState::Closed) && !self.staging.is_closed() {
            self.staging.fail(&format!(
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
        inflight: VecDeque<StepInFlight<N::Request>>,
        /// Steps whose receives were posted (or are about to be).
        lent: u64,
        /// The sender closed its end: nothing more comes (and its failed requests must not
        /// be tested again); what arrived before is still published.
        sender_closed: bool,
    },
    Closed,
}

/// A staged receive connection: network -> the kernel's FIFO.
pub(crate) struct StagedRecvLink<N: Net> {
    conn: ConnId,
    timeout: Duration,
    /// A step's header and bytes in one grouped receive (the backend's `max_recvs` >= 2).
    grouped: bool,
    state: RecvState<N>,
    staging: Arc<Staging>,
}

impl<N: Net> fmt::Debug for StagedRecvLink<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StagedRecvLink")
            .field("conn", &self.conn)
            .field("staging", &self.staging)
            .finish()
    }
}

impl<N: Net> StagedRecvLink<N> {
    pub(crate) fn new(
        conn: ConnId,
        listen: N::ListenComm,
        staging: Arc<Staging>,
        timeout: Duration,
        grouped: bool,
    ) -> Self {
        StagedRecvLink {
            conn,
            timeout,
            grouped,
            state: RecvState::Accepting {
                listen,
                deadline: Instant::now() + timeout,
            },
            staging,
        }
    }

    pub(crate) fn conn(&self) -> ConnId {
        self.conn
    }

    pub(crate) fn progress(&mut self, net: &N) -> Result<Progress, Failure> {
        let staging = Arc::clone(&self.staging);
        let conn = self.conn;
        match &mut self.state {
            RecvState::Accepting { listen, deadline } => {
                if staging.is_closed() {
                    self.shut(net);
                    return Ok(Progress::Finished);
                }
                match poll_accept(net, conn, listen, *deadline, self.timeout)? {
                    Some(comm) => {
                        // SAFETY: as in `StagedSendLink::progress`.
                        let mr = unsafe {
                            net.reg_mr(
                                CommRef::Recv(&comm),
                                staging.base(),
                                staging.len,
                                PtrKind::Host,
                            )
                        }
                        .map_err(|e| describe(conn, "memory registration", &e))?;
                        if let RecvState::Accepting { listen, .. } = std::mem::replace(
                            &mut self.state,
                            RecvState::Ready {
                                comm,
                                mr,
                                inflight: VecDeque::new(),
                                lent: 0,
                                sender_closed: false,
                            },
                        ) {
                            close_listen(net, conn, listen);
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
                lent,
                sender_closed,
            } => {
                // No kernel will read again: what is still to come does not matter.
                if staging.is_closed() {
                    self.shut(net);
                    return Ok(Progress::Finished);
                }
                let mut busy = false;
                // Lend every slot the kernel has freed.
                // Acquire: pairs with the kernel's release of the head (it is done reading).
                let head = staging.head().load(Ordering::Acquire);
                while !*sender_closed && *lent < head + staging.steps() as u64 {
                    inflight.push_back(StepInFlight {
                        step: *lent,
                        header: Piece::Unposted,
                        data: Piece::Unposted,
                        arrived: false,
                    });
                    *lent += 1;
                }
                let mut remote_closed = false;
                let grouped = self.grouped;
                // In step order, the header before the bytes: without groups the backend
                // matches receives in the order they were posted.
                'post: for step in inflight.iter_mut().filter(|_| !*sender_closed) {
                    let slot = (step.step % staging.steps() as u64) as usize;
                    loop {
                        let header = RecvBuffer {
                            data: staging.header_ptr(slot),
                            size: layout::HEADER_BYTES,
                            tag: HEADER_TAG,
                            mr: &*mr,
                        };
                        let data = RecvBuffer {
                            data: staging.slot_ptr(slot),
                            size: staging.step_bytes(),
                            tag: DATA_TAG,
                            mr: &*mr,
                        };
                        let both = [header, data];
                        let posts = match (&step.header, &step.data) {
                            (Piece::Unposted, _) if grouped => &both[..],
                            (Piece::Unposted, _) => &both[..1],
                            (_, Piece::Unposted) => &both[1..],
                            _ => break,
                        };
                        // SAFETY: the buffers lie in the registered area; the kernel freed
                        // the slot (head) and reads it only after the tail passes it, which
                        // waits for this receive's completion.
                        match unsafe { net.irecv(comm, posts) } {
                            Ok(Some(r)) => {
                                busy = true;
                                if matches!(step.header, Piece::Unposted) {
                                    step.header = Piece::Posted(r);
                                    if posts.len() == 2 {
                                        step.data = Piece::InGroup;
                                    }
                                } else {
                                    step.data = Piece::Posted(r);
                                }
                            }
                            Ok(None) => break 'post,
                            Err(e) if e.kind() == NetErrorKind::PeerClosed => {
                                remote_closed = true;
                                break 'post;
                            }
                            Err(e) => return Err(describe(conn, "receive", &e)),
                        }
                    }
                }
                // Completed steps, in step order: checked against their headers, their
                // tags stored, their moves started (where a mover moves them to the kernel).
                let mover = staging.mover.clone();
                let tested = if *sender_closed { 0 } else { inflight.len() };
                for front in inflight.iter_mut().take(tested).filter(|s| !s.arrived) {
                    let data = match test_step(net, front) {
                        Ok(data) => data,
                        // The sender closed its end: the normal end of a communicator whose
                        // other side was destroyed first (the receives lent ahead will never
                        // fill). A kernel that still waits for a step gives up at its
                        // deadline, naming the peer.
                        Err(e) if e.kind() == NetErrorKind::PeerClosed => {
                            log::debug!("{conn}: the sender closed its end: {e}");
                            *sender_closed = true;
                            break;
                        }
                        Err(e) => return Err(describe(conn, "receive", &e)),
                    };
                    if !data {
                        break;
                    }
                    let slot = (front.step % staging.steps() as u64) as usize;
                    let mut words = [0u8; layout::HEADER_BYTES];
                    // SAFETY: the header's receive completed; the proxy alone uses it.
                    unsafe {
                        std::ptr::copy_nonoverlapping(
                            staging.header_ptr(slot),
                            words.as_mut_ptr(),
                            words.len(),
                        )
                    };
                    let (bytes, tag) = words.split_at(8);
                    let bytes = u64::from_le_bytes(bytes.try_into().unwrap_or_default());
                    let tag = u64::from_le_bytes(tag.try_into().unwrap_or_default());
                    let got = front.data.done().unwrap_or(0) as u64;
                    if front.header.done() != Some(layout::HEADER_BYTES) || got != bytes {
                        return Err(format!(
                            "{conn}: step {} from rank {} came as {:?} header bytes and {got} \
                             data bytes where the header says {bytes}: do both ranks run the \
                             same weft build?",
                            front.step,
                            conn.peer,
                            front.header.done()
                        ));
                    }
                    staging.tag(slot).store(tag, Ordering::Relaxed);
                    if let Some(mover) = &mover {
                        mover.start(slot, got as usize).map_err(|e| {
                            format!("{conn}: moving step {} to the GPU: {e}", front.step)
                        })?;
                    }
                    front.arrived = true;
                    busy = true;
                }
                // Published in order, each once its move finished (those that arrived before
                // the sender closed too: the kernel still reads them).
                while let Some(front) = inflight.front().filter(|s| s.arrived) {
                    let slot = (front.step % staging.steps() as u64) as usize;
                    if let Some(mover) = &mover {
                        let moved = mover.finished(slot).map_err(|e| {
                            format!("{conn}: moving step {} to the GPU: {e}", front.step)
                        })?;
                        if !moved {
                            break;
                        }
                    }
                    // Release: the kernel that sees the tail sees the bytes and the tag.
                    staging.tail().store(front.step + 1, Ordering::Release);
                    inflight.pop_front();
                    busy = true;
                }
                // Once everything that arrived is published: a move still running is
                // published at the next call, which sees the close again.
                if *sender_closed && !inflight.iter().any(|s| s.arrived) {
                    self.shut(net);
                    return Ok(Progress::Finished);
                }
                if remote_closed && !busy {
                    self.shut(net);
                    return Ok(Progress::Finished);
                }
                Ok(if busy { Progress::Busy } else { Progress::Idle })
            }
            RecvState::Closed => Ok(Progress::Finished),
        }
    }

    /// Tells the area's owner and closes the network side.
    pub(crate) fn fail(&mut self, net: &N, cause: &str) {
        self.staging.fail(cause);
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
    }
}

impl<N: Net> Drop for StagedRecvLink<N> {
    fn drop(&mut self) {
        if !matches!(self.state, RecvState::Closed) && !self.staging.is_closed() {
            self.staging.fail(&format!(
                "the NET proxy thread stopped while the connection from rank {} was open",
                self.conn.peer
            ));
        }
    }
}

/// A [`FailureHook`] that keeps the first cause, for the owner to read.
#[derive(Debug, Clone, Default)]
pub struct FirstFailure(Arc<Mutex<Option<String>>>);

impl FirstFailure {
    /// A hook that records into this and then runs `also` (e.g. raising a GPU abort flag).
    pub fn hook(&self, also: impl Fn() + Send + Sync + 'static) -> FailureHook {
        let slot = Arc::clone(&self.0);
        Arc::new(move |cause: &str| {
            slot.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get_or_insert_with(|| cause.to_string());
            also();
        })
    }

    /// The first cause recorded, if any.
    pub fn get(&self) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}
