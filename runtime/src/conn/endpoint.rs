//! The two ends of a host FIFO connection: `core::fifo`'s counters over shared atomics.
//!
//! Memory orderings, once for both ends (each use below points back here):
//!
//! - The sender writes a slot's bytes and its size entry with plain stores / `Relaxed`, then
//!   publishes `tail` with `Release`. The receiver loads `tail` with `Acquire`; the pair makes
//!   every byte of the slot and its size visible before the receiver reads them.
//! - The receiver reads the slot, resets the size entry to -1 (`Relaxed`), then publishes
//!   `head` with `Release`. The sender loads `head` with `Acquire`; the pair orders the
//!   receiver's reads of the slot before the sender's next writes into it (no overwrite of
//!   unread data) and makes the reset size entry visible (so a busy entry is a real error).
//! - Closed/aborted bits are set with `Release` after a side's last post and read with
//!   `Acquire` before polling, so a waiter that sees "peer closed" has also seen every post
//!   the peer made before closing, and reports closure only if nothing is left to read.
//!
//! These are the orderings NCCL gets from `volatile` plus `__threadfence_system()` on the GPU
//! and `__atomic` builtins in its proxy; on x86 they compile to plain moves.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};

use weft_core::fifo::ll::{LlReceiver, LlSender};
use weft_core::fifo::{FifoError, FifoGeometry, SIZE_UNUSED, Slice, StepReceiver, StepSender};

use super::error::{AbortSource, ConnError, ConnId, Direction, WaitFor};
use super::layout::flags;
use super::region::FifoRegion;
use super::wait::{AbortFlag, Backoff, Due, WaitPolicy, pid_namespace, process_alive, this_cpu};
use crate::status::{Board, WaitGuard};

/// How an end waits and when it gives up: the deadline policy, the communicator's abort
/// flag, and the peer's pid for dead-peer detection (`None`: take it from the connection
/// header once the peer has attached; a pid equal to ours is never checked).
#[derive(Debug, Clone, Default)]
pub struct Waiter {
    pub policy: WaitPolicy,
    pub abort: AbortFlag,
    pub peer_pid: Option<u32>,
    /// Where a wait that outlasts its spin phase shows for the health query (`None`: it
    /// shows nowhere).
    pub board: Option<Arc<Board>>,
}

/// What both ends share: the memory, who they are, how they wait.
#[derive(Debug)]
pub(super) struct Side {
    pub(super) region: FifoRegion,
    pub(super) conn: ConnId,
    pub(super) waiter: Waiter,
}

impl Side {
    pub(super) fn protocol(&self, err: FifoError) -> ConnError {
        ConnError::Protocol {
            conn: self.conn,
            err,
        }
    }

    fn my_bits(&self) -> (u64, u64) {
        match self.conn.dir {
            Direction::Send => (flags::SENDER_CLOSED, flags::SENDER_ABORTED),
            Direction::Recv => (flags::RECEIVER_CLOSED, flags::RECEIVER_ABORTED),
        }
    }

    fn peer_bits(&self) -> (u64, u64) {
        match self.conn.dir {
            Direction::Send => (flags::RECEIVER_CLOSED, flags::RECEIVER_ABORTED),
            Direction::Recv => (flags::SENDER_CLOSED, flags::SENDER_ABORTED),
        }
    }

    /// The peer's pid to watch: the waiter's, else the header's when the peer recorded one
    /// from our pid namespace (a pid from another namespace names some other process here).
    fn peer_pid(&self) -> Option<u32> {
        if self.waiter.peer_pid.is_some() {
            return self.waiter.peer_pid;
        }
        let state = &self.region.header().state.0;
        let (pid, pidns) = match self.conn.dir {
            Direction::Send => (&state.receiver_pid, &state.receiver_pidns),
            Direction::Recv => (&state.sender_pid, &state.sender_pidns),
        };
        let pid = pid.load(Ordering::Relaxed);
        (pid != 0 && pidns.load(Ordering::Relaxed) == pid_namespace()).then_some(pid)
    }

    /// This end's and the peer's CPU fields in the shared state.
    fn cpus(&self) -> (&AtomicU32, &AtomicU32) {
        let state = &self.region.header().state.0;
        match self.conn.dir {
            Direction::Send => (&state.sender_cpu, &state.receiver_cpu),
            Direction::Recv => (&state.receiver_cpu, &state.sender_cpu),
        }
    }

    /// Records the CPU this end waits on (only when it changed, to keep the line shared)
    /// and says whether the peer was last seen waiting on the same one.
    fn shares_cpu_with_peer(&self) -> bool {
        let (mine, peer) = self.cpus();
        let cpu = this_cpu();
        // Relaxed: a hint for the wait policy; a stale value costs one needless yield or
        // a few more spins, never correctness.
        if mine.load(Ordering::Relaxed) != cpu {
            mine.store(cpu, Ordering::Relaxed);
        }
        cpu != 0 && peer.load(Ordering::Relaxed) == cpu
    }

    /// Marks this end aborted in the shared word, so the peer's waits end too.
    fn raise_abort(&self) {
        let (_, aborted) = self.my_bits();
        // Release: see the module documentation (closed/aborted bits).
        self.region
            .header()
            .state
            .0
            .flags
            .fetch_or(aborted, Ordering::Release);
    }

    /// Polls until `poll` yields, an abort is seen, the peer closes or dies, or the deadline
    /// passes. `counters` gives (our step, peer's counter) for the timeout message. A failure
    /// of ours (timeout, local abort, dead peer, protocol error) also raises this end's abort
    /// bit, so the peer stops waiting on us promptly.
    pub(super) fn wait<T>(
        &self,
        waiting_for: WaitFor,
        mut poll: impl FnMut() -> Result<Option<T>, ConnError>,
        counters: impl Fn() -> (u64, u64),
    ) -> Result<T, ConnError> {
        let state = &self.region.header().state.0;
        let (peer_closed, peer_aborted) = self.peer_bits();
        let mut backoff = Backoff::new(self.waiter.policy);
        let conn = self.conn;
        // Shown on the board once the spin phase is over (slow waits only: the fast path
        // takes no lock), until the wait ends whichever way.
        let mut _shown: Option<WaitGuard> = None;
        let fail = |err: ConnError| {
            self.raise_abort();
            Err(err)
        };
        loop {
            // An abort wins over data: a communicator that aborted stops at its next wait.
            if self.waiter.abort.is_aborted() {
                return fail(ConnError::Aborted {
                    conn,
                    by: AbortSource::Local,
                });
            }
            // Acquire before polling: see the module documentation (closed/aborted bits).
            let seen = state.flags.load(Ordering::Acquire);
            if seen & peer_aborted != 0 {
                return Err(match self.region.failure() {
                    Some(cause) => ConnError::Failed { conn, cause },
                    None => ConnError::Aborted {
                        conn,
                        by: AbortSource::Peer,
                    },
                });
            }
            match poll() {
                Ok(Some(value)) => return Ok(value),
                Ok(None) => {}
                // The two ends disagree: nothing good comes from the peer waiting on us.
                Err(err) => return fail(err),
            }
            // Closing is normal after the last post: only an error when nothing is left.
            if seen & peer_closed != 0 {
                return Err(ConnError::PeerClosed { conn, waiting_for });
            }
            // Spinning while the peer waits for this very CPU only delays it: the scheduler
            // put both ends on one CPU (it does, after they slept). Checked at the first
            // miss and every 64 polls, a `sched_getcpu` each (vDSO, tens of nanoseconds).
            if backoff.spinning()
                && backoff.polls().is_multiple_of(64)
                && self.shares_cpu_with_peer()
            {
                backoff.stop_spinning();
            }
            if _shown.is_none() && !backoff.spinning() {
                _shown = self
                    .waiter
                    .board
                    .as_ref()
                    .map(|b| b.waiting(conn, waiting_for));
            }
            match backoff.pause() {
                Due::Nothing => {}
                Due::Deadline(waited) => {
                    let (step, peer_counter) = counters();
                    return fail(ConnError::Timeout {
                        conn,
                        waiting_for,
                        waited,
                        step,
                        peer_counter,
                    });
                }
                Due::Liveness => {
                    if let Some(pid) = self.peer_pid() {
                        if !process_alive(pid) {
                            return fail(ConnError::PeerDead { conn, pid });
                        }
                    }
                }
            }
        }
    }

    fn size_entry(&self, slice: &Slice) -> Result<&AtomicI64, ConnError> {
        self.region
            .header()
            .posted
            .0
            .sizes
            .get(slice.first_slot())
            .ok_or(self.protocol(FifoError::SizeMissing {
                slot: slice.first_slot(),
                step: slice.step(),
            }))
    }

    fn close(&self) {
        let (closed, _) = self.my_bits();
        // Release: see the module documentation (closed/aborted bits).
        self.region
            .header()
            .state
            .0
            .flags
            .fetch_or(closed, Ordering::Release);
    }
}

/// The sending end: wait for credit, fill a slice, post it.
#[derive(Debug)]
pub struct FifoSendEnd {
    pub(super) side: Side,
    steps: StepSender,
    pending: Option<Slice>,
    /// The receiver's head as last loaded: reloaded (a cache miss, since the receiver has
    /// just written it) only when it does not grant the next slice, as NCCL's
    /// `connStepCache`. A stale head grants less, never more: credits only grow.
    head_cache: u64,
    /// The LL protocol's state (`conn::ll`), when the connection has an LL buffer.
    pub(super) ll: Option<LlSender>,
    /// The same cache for the LL head (NCCL's `sendConnHeadCache`).
    pub(super) ll_head_cache: u64,
}

/// A slice granted to the sender: write into [`SendSlot::buf`], then [`SendSlot::post`] the
/// byte count. Dropping it without posting keeps the grant: the next acquire returns the same
/// slice, so nothing is lost or reordered.
#[derive(Debug)]
pub struct SendSlot<'a> {
    end: &'a mut FifoSendEnd,
    slice: Slice,
}

impl FifoSendEnd {
    pub(crate) fn new(region: FifoRegion, conn: ConnId, waiter: Waiter) -> Self {
        let geometry = region.default_geometry();
        region.record_owner(Direction::Send);
        let ll = region.ll_geometry().map(|g| LlSender::new(g, 0));
        FifoSendEnd {
            side: Side {
                region,
                conn,
                waiter,
            },
            steps: StepSender::load(geometry, 0),
            pending: None,
            head_cache: 0,
            ll,
            ll_head_cache: 0,
        }
    }

    pub fn conn(&self) -> ConnId {
        self.side.conn
    }

    pub fn geometry(&self) -> FifoGeometry {
        self.steps.geometry()
    }

    /// Bytes one slice holds (`step_per_slice * step_bytes`): the most one post can carry.
    pub fn slice_bytes(&self) -> usize {
        self.side.region.slice_bytes(&self.steps.geometry())
    }

    /// Steps posted so far (the tail last published).
    pub fn posted_step(&self) -> u64 {
        self.steps.posted_step()
    }

    /// Switches to another geometry (same slot count) between operations, rounding the step
    /// up to the new chunk boundary exactly as the receiver's `reload` does. Fails while a
    /// slice is granted and not posted.
    pub fn reload(&mut self, geometry: FifoGeometry) -> Result<(), ConnError> {
        self.side.region.check_geometry(self.side.conn, &geometry)?;
        if let Some(slice) = self.pending {
            return Err(self.side.protocol(FifoError::PostOutOfOrder {
                expected: self.steps.posted_step(),
                got: slice.step(),
            }));
        }
        self.steps = StepSender::load(geometry, self.steps.posted_step());
        Ok(())
    }

    fn poll_credit(
        side: &Side,
        steps: &mut StepSender,
        pending: &mut Option<Slice>,
        head_cache: &mut u64,
    ) -> Result<Option<Slice>, ConnError> {
        if let Some(slice) = *pending {
            return Ok(Some(slice));
        }
        let mut granted = steps.acquire(*head_cache).map_err(|e| side.protocol(e))?;
        if granted.is_none() {
            // Acquire: pairs with the receiver's Release store of head (module
            // documentation); the cached value was loaded the same way.
            *head_cache = side.region.header().head.0.load(Ordering::Acquire);
            granted = steps.acquire(*head_cache).map_err(|e| side.protocol(e))?;
        }
        *pending = granted;
        Ok(granted)
    }

    /// The next slice if the receiver has freed it, without waiting (for a proxy thread that
    /// polls many connections).
    pub fn try_acquire(&mut self) -> Result<Option<SendSlot<'_>>, ConnError> {
        match Self::poll_credit(
            &self.side,
            &mut self.steps,
            &mut self.pending,
            &mut self.head_cache,
        )? {
            Some(slice) => Ok(Some(SendSlot { end: self, slice })),
            None => Ok(None),
        }
    }

    /// Waits for the next slice (see [`Waiter`] for how the wait ends).
    pub fn acquire(&mut self) -> Result<SendSlot<'_>, ConnError> {
        let (side, steps, pending, cache) = (
            &self.side,
            &mut self.steps,
            &mut self.pending,
            &mut self.head_cache,
        );
        let next = steps.next_step();
        let slice = side.wait(
            WaitFor::Credit,
            || Self::poll_credit(side, steps, pending, cache),
            || (next, side.region.header().head.0.load(Ordering::Relaxed)),
        )?;
        Ok(SendSlot { end: self, slice })
    }

    /// Sends `data` as one slice (at most [`FifoSendEnd::slice_bytes`]).
    pub fn send(&mut self, data: &[u8]) -> Result<(), ConnError> {
        let capacity = self.slice_bytes();
        if data.len() > capacity {
            return Err(ConnError::Oversize {
                conn: self.side.conn,
                bytes: u64::try_from(data.len()).unwrap_or(u64::MAX),
                capacity,
            });
        }
        let mut slot = self.acquire()?;
        if let Some(dst) = slot.buf().get_mut(..data.len()) {
            crate::copy::copy_bytes(dst, data);
        }
        slot.post(data.len())
    }

    /// Waits for a slice, lets `fill` write into it and return how many bytes it wrote, posts.
    pub fn send_with(&mut self, fill: impl FnOnce(&mut [u8]) -> usize) -> Result<usize, ConnError> {
        let mut slot = self.acquire()?;
        let bytes = fill(slot.buf());
        slot.post(bytes)?;
        Ok(bytes)
    }

    /// Marks the connection aborted for the peer (its waits end with `Aborted { by: Peer }`).
    pub fn abort(&self) {
        self.side.raise_abort();
    }
}

impl Drop for FifoSendEnd {
    fn drop(&mut self) {
        self.side.close();
    }
}

impl SendSlot<'_> {
    /// The slice's first step.
    pub fn step(&self) -> u64 {
        self.slice.step()
    }

    pub fn capacity(&self) -> usize {
        self.end.slice_bytes()
    }

    /// The slice's memory, [`SendSlot::capacity`] bytes; it may hold older data.
    pub fn buf(&mut self) -> &mut [u8] {
        let (ptr, len) = self
            .end
            .side
            .region
            .slice_span(&self.slice, &self.end.steps.geometry());
        // SAFETY: `slice_span` returns a span inside the region (checked against the
        // validated layout), which the region's memory keeps alive while `self.end` lives.
        // Exclusive access: the receiver released these slots (head, read with Acquire, is a
        // full ring past them) and will not read them before we publish a tail covering them;
        // within this process only this end, borrowed mutably here, touches them. (A peer
        // that breaks the protocol can change the bytes under us, as with any shared memory;
        // it cannot make us read or write outside the region.)
        unsafe { std::slice::from_raw_parts_mut(ptr, len) }
    }

    /// Publishes the slice with `bytes` of data (at most [`SendSlot::capacity`]).
    pub fn post(self, bytes: usize) -> Result<(), ConnError> {
        let end = self.end;
        let side = &end.side;
        let capacity = side.region.slice_bytes(&end.steps.geometry());
        let size = i64::try_from(bytes)
            .ok()
            .filter(|_| bytes <= capacity)
            .ok_or(ConnError::Oversize {
                conn: side.conn,
                bytes: u64::try_from(bytes).unwrap_or(u64::MAX),
                capacity,
            })?;
        let entry = side.size_entry(&self.slice)?;
        // Relaxed: ordered by the head Acquire in `poll_credit` (module documentation).
        let previous = entry.load(Ordering::Relaxed);
        if previous != SIZE_UNUSED {
            return Err(side.protocol(FifoError::SizeSlotBusy {
                slot: self.slice.first_slot(),
                bytes: u32::try_from(previous).unwrap_or(u32::MAX),
            }));
        }
        // Relaxed: published by the tail Release below.
        entry.store(size, Ordering::Relaxed);
        let tail = end.steps.post(self.slice).map_err(|e| side.protocol(e))?;
        // Release: pairs with the receiver's tail Acquire (module documentation).
        side.region.tail().store(tail, Ordering::Release);
        end.pending = None;
        Ok(())
    }
}

/// The receiving end: wait for a posted slice, read it, free it.
#[derive(Debug)]
pub struct FifoRecvEnd {
    pub(super) side: Side,
    steps: StepReceiver,
    pending: Option<Slice>,
    /// The LL protocol's state (`conn::ll`), when the connection has an LL buffer.
    pub(super) ll: Option<LlReceiver>,
}

/// A posted slice granted to the receiver: read [`RecvSlot::data`], then
/// [`RecvSlot::release`] it. Dropping it without releasing keeps the grant.
#[derive(Debug)]
pub struct RecvSlot<'a> {
    end: &'a mut FifoRecvEnd,
    slice: Slice,
    bytes: usize,
}

impl FifoRecvEnd {
    pub(crate) fn new(region: FifoRegion, conn: ConnId, waiter: Waiter) -> Self {
        let geometry = region.default_geometry();
        region.record_owner(Direction::Recv);
        let ll = region.ll_geometry().map(|g| LlReceiver::new(g, 0));
        FifoRecvEnd {
            side: Side {
                region,
                conn,
                waiter,
            },
            steps: StepReceiver::load(geometry, 0),
            pending: None,
            ll,
        }
    }

    pub fn conn(&self) -> ConnId {
        self.side.conn
    }

    pub fn geometry(&self) -> FifoGeometry {
        self.steps.geometry()
    }

    /// Bytes one slice holds: the most one receive can return.
    pub fn slice_bytes(&self) -> usize {
        self.side.region.slice_bytes(&self.steps.geometry())
    }

    /// Steps consumed and freed so far (the head last published).
    pub fn posted_step(&self) -> u64 {
        self.steps.posted_step()
    }

    /// Switches to another geometry (same slot count) between operations: rounds the step up
    /// to the new chunk boundary and republishes the head, returning the credits of the
    /// skipped steps (as NCCL does when a kernel loads a connection).
    pub fn reload(&mut self, geometry: FifoGeometry) -> Result<(), ConnError> {
        self.side.region.check_geometry(self.side.conn, &geometry)?;
        if let Some(slice) = self.pending {
            return Err(self.side.protocol(FifoError::PostOutOfOrder {
                expected: self.steps.posted_step(),
                got: slice.step(),
            }));
        }
        self.steps = StepReceiver::load(geometry, self.steps.posted_step());
        // Release: as a head post (module documentation); nothing was read from the skipped
        // steps, so this only hands back their credit.
        self.side
            .region
            .header()
            .head
            .0
            .store(self.steps.posted_step(), Ordering::Release);
        Ok(())
    }

    fn poll_data(
        side: &Side,
        steps: &mut StepReceiver,
        pending: &mut Option<Slice>,
    ) -> Result<Option<(Slice, usize)>, ConnError> {
        let slice = match *pending {
            Some(slice) => slice,
            None => {
                // Acquire: pairs with the sender's tail Release (module documentation).
                let tail = side.region.tail().load(Ordering::Acquire);
                match steps.acquire(tail).map_err(|e| side.protocol(e))? {
                    Some(slice) => slice,
                    None => return Ok(None),
                }
            }
        };
        *pending = Some(slice);
        // Relaxed: ordered by the tail Acquire above (or of an earlier poll).
        let raw = side.size_entry(&slice)?.load(Ordering::Relaxed);
        let capacity = side.region.slice_bytes(&steps.geometry());
        if raw == SIZE_UNUSED {
            return Err(side.protocol(FifoError::SizeMissing {
                slot: slice.first_slot(),
                step: slice.step(),
            }));
        }
        match usize::try_from(raw).ok().filter(|b| *b <= capacity) {
            Some(bytes) => Ok(Some((slice, bytes))),
            None => Err(ConnError::Oversize {
                conn: side.conn,
                bytes: raw.unsigned_abs(),
                capacity,
            }),
        }
    }

    /// The next posted slice, without waiting.
    pub fn try_acquire(&mut self) -> Result<Option<RecvSlot<'_>>, ConnError> {
        match Self::poll_data(&self.side, &mut self.steps, &mut self.pending)? {
            Some((slice, bytes)) => Ok(Some(RecvSlot {
                end: self,
                slice,
                bytes,
            })),
            None => Ok(None),
        }
    }

    /// Waits for the next posted slice (see [`Waiter`] for how the wait ends).
    pub fn acquire(&mut self) -> Result<RecvSlot<'_>, ConnError> {
        let (side, steps, pending) = (&self.side, &mut self.steps, &mut self.pending);
        let next = steps.next_step();
        let (slice, bytes) = side.wait(
            WaitFor::Data,
            || Self::poll_data(side, steps, pending),
            || (next, side.region.tail().load(Ordering::Relaxed)),
        )?;
        Ok(RecvSlot {
            end: self,
            slice,
            bytes,
        })
    }

    /// Receives one slice into the front of `out`; returns its length. If `out` is too small
    /// the slice stays granted (and the error says how big it is).
    pub fn recv_into(&mut self, out: &mut [u8]) -> Result<usize, ConnError> {
        let slot = self.acquire()?;
        let data = slot.data();
        let Some(dst) = out.get_mut(..data.len()) else {
            return Err(ConnError::Oversize {
                conn: slot.end.side.conn,
                bytes: u64::try_from(data.len()).unwrap_or(u64::MAX),
                capacity: out.len(),
            });
        };
        crate::copy::copy_bytes(dst, data);
        let bytes = data.len();
        slot.release()?;
        Ok(bytes)
    }

    /// Waits for a slice, hands its data to `read`, frees it.
    pub fn recv_with<R>(&mut self, read: impl FnOnce(&[u8]) -> R) -> Result<R, ConnError> {
        let slot = self.acquire()?;
        let result = read(slot.data());
        slot.release()?;
        Ok(result)
    }

    /// Marks the connection aborted for the peer.
    pub fn abort(&self) {
        self.side.raise_abort();
    }
}

impl Drop for FifoRecvEnd {
    fn drop(&mut self) {
        self.side.close();
    }
}

impl RecvSlot<'_> {
    pub fn step(&self) -> u64 {
        self.slice.step()
    }

    /// The bytes the sender posted.
    pub fn data(&self) -> &[u8] {
        let (ptr, len) = self
            .end
            .side
            .region
            .slice_span(&self.slice, &self.end.steps.geometry());
        // SAFETY: `slice_span` returns a span inside the region, alive while `self.end`
        // lives, and `bytes <= len` was checked when the slice was granted. The sender wrote
        // these bytes before publishing the tail we read with Acquire, and will not write
        // them again before we publish a head past them; only this end, borrowed here, reads
        // them in this process.
        unsafe { std::slice::from_raw_parts(ptr, self.bytes.min(len)) }
    }

    pub fn len(&self) -> usize {
        self.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// Frees the slice: the sender may refill its slots.
    pub fn release(self) -> Result<(), ConnError> {
        let end = self.end;
        let side = &end.side;
        // Relaxed: published by the head Release below.
        side.size_entry(&self.slice)?
            .store(SIZE_UNUSED, Ordering::Relaxed);
        let head = end.steps.post(self.slice).map_err(|e| side.protocol(e))?;
        // Release: pairs with the sender's head Acquire (module documentation).
        side.region.header().head.0.store(head, Ordering::Release);
        end.pending = None;
        Ok(())
    }
}
