//! The proxy's end of a process-local FIFO, with several slices in flight at once.
//!
//! [`FifoSendEnd`](crate::conn::FifoSendEnd) and [`FifoRecvEnd`](crate::conn::FifoRecvEnd)
//! grant one slice at a time, which is right for an executor that copies a slice and moves
//! on. The proxy instead keeps up to a ring of slices on the network at once (NCCL's proxy
//! posts up to NCCL_STEPS sends or receives per connection), so it holds the counters
//! itself: [`FifoDrain`] consumes what the executor posted on a NET send connection,
//! [`FifoFill`] produces what the executor reads on a NET receive connection. Both use the
//! memory orderings documented in `conn::endpoint` (tail/head Release-Acquire pairs around
//! the slot bytes and their size entries).
//!
//! The proxy carries one step per slice: the executor must use the connection's default
//! geometry (`slots` slots, one step per slice and per chunk). A slice of several steps or
//! a rounded-up step shows as a step with no size entry, reported as a protocol error that
//! says so.

use std::sync::atomic::{AtomicI64, Ordering};

use weft_core::fifo::{FifoError, FifoGeometry, SIZE_UNUSED, Slice, StepReceiver, StepSender};

use crate::conn::layout::flags;
use crate::conn::{ConnError, ConnId, FifoRegion};

fn one_step_geometry(region: &FifoRegion) -> FifoGeometry {
    FifoGeometry::new(region.layout().slots(), 1, 1).unwrap_or(FifoGeometry::P2P)
}

fn size_entry<'a>(
    region: &'a FifoRegion,
    conn: ConnId,
    slice: &Slice,
) -> Result<&'a AtomicI64, ConnError> {
    region
        .header()
        .posted
        .0
        .sizes
        .get(slice.first_slot())
        .ok_or(ConnError::Protocol {
            conn,
            err: FifoError::SizeMissing {
                slot: slice.first_slot(),
                step: slice.step(),
            },
        })
}

fn flags_of(region: &FifoRegion) -> u64 {
    // Acquire: pairs with the Release `fetch_or` of a closing or aborting end, so every post
    // it made before is visible (conn::endpoint's module documentation).
    region.header().state.0.flags.load(Ordering::Acquire)
}

fn raise(region: &FifoRegion, bit: u64) {
    // Release: as in conn::endpoint (closed/aborted bits follow a side's last post).
    region
        .header()
        .state
        .0
        .flags
        .fetch_or(bit, Ordering::Release);
}

/// The consumer of a NET send connection: takes the slices the executor posted, in order,
/// and frees them once the network is done with them.
#[derive(Debug)]
pub(crate) struct FifoDrain {
    region: FifoRegion,
    conn: ConnId,
    steps: StepReceiver,
}

impl FifoDrain {
    pub(crate) fn new(region: FifoRegion, conn: ConnId) -> Self {
        region
            .header()
            .state
            .0
            .receiver_pid
            .store(std::process::id(), Ordering::Relaxed);
        let steps = StepReceiver::load(one_step_geometry(&region), 0);
        FifoDrain {
            region,
            conn,
            steps,
        }
    }

    pub(crate) fn region(&self) -> &FifoRegion {
        &self.region
    }

    /// The next posted slice, its first byte and its length; `None` if the executor has not
    /// posted it yet. Slices come out in step order, each once.
    pub(crate) fn next_posted(&mut self) -> Result<Option<(Slice, *const u8, usize)>, ConnError> {
        let conn = self.conn;
        let protocol = |err| ConnError::Protocol { conn, err };
        // Acquire: pairs with the executor's tail Release (conn::endpoint).
        let tail = self.region.tail().load(Ordering::Acquire);
        let Some(slice) = self.steps.acquire(tail).map_err(protocol)? else {
            return Ok(None);
        };
        // Relaxed: ordered by the tail Acquire above.
        let raw = size_entry(&self.region, conn, &slice)?.load(Ordering::Relaxed);
        let geometry = self.steps.geometry();
        let (ptr, capacity) = self.region.slice_span(&slice, &geometry);
        if raw == SIZE_UNUSED {
            return Err(protocol(FifoError::SizeMissing {
                slot: slice.first_slot(),
                step: slice.step(),
            }));
        }
        match usize::try_from(raw).ok().filter(|b| *b <= capacity) {
            Some(bytes) => Ok(Some((slice, ptr.cast_const(), bytes))),
            None => Err(ConnError::Oversize {
                conn,
                bytes: raw.unsigned_abs(),
                capacity,
            }),
        }
    }

    /// The network has sent `slice` (the oldest taken one): hand its slot back to the
    /// executor.
    pub(crate) fn release(&mut self, slice: Slice) -> Result<(), ConnError> {
        let conn = self.conn;
        // Relaxed: published by the head Release below.
        size_entry(&self.region, conn, &slice)?.store(SIZE_UNUSED, Ordering::Relaxed);
        let head = self
            .steps
            .post(slice)
            .map_err(|err| ConnError::Protocol { conn, err })?;
        // Release: pairs with the executor's head Acquire (conn::endpoint).
        self.region.header().head.0.store(head, Ordering::Release);
        Ok(())
    }

    /// The executor closed its end (after its last post: everything it posted is visible).
    pub(crate) fn executor_closed(&self) -> bool {
        flags_of(&self.region) & flags::SENDER_CLOSED != 0
    }

    /// The executor aborted its end.
    pub(crate) fn executor_aborted(&self) -> bool {
        flags_of(&self.region) & flags::SENDER_ABORTED != 0
    }

    /// Fails the connection for the executor: its waits end with
    /// [`ConnError::Failed`] carrying `cause`.
    pub(crate) fn fail(&self, cause: &str) {
        self.region.record_failure(cause);
        raise(&self.region, flags::RECEIVER_ABORTED);
    }

    /// The proxy is done with the connection.
    pub(crate) fn close(&self) {
        raise(&self.region, flags::RECEIVER_CLOSED);
    }
}

/// The producer of a NET receive connection: lends free slots to the network and publishes
/// each one once its receive completed, in order.
#[derive(Debug)]
pub(crate) struct FifoFill {
    region: FifoRegion,
    conn: ConnId,
    steps: StepSender,
}

impl FifoFill {
    pub(crate) fn new(region: FifoRegion, conn: ConnId) -> Self {
        region
            .header()
            .state
            .0
            .sender_pid
            .store(std::process::id(), Ordering::Relaxed);
        let steps = StepSender::load(one_step_geometry(&region), 0);
        FifoFill {
            region,
            conn,
            steps,
        }
    }

    pub(crate) fn region(&self) -> &FifoRegion {
        &self.region
    }

    /// The next slot the executor has freed, its first byte and capacity; `None` while the
    /// executor still holds it.
    pub(crate) fn next_free(&mut self) -> Result<Option<(Slice, *mut u8, usize)>, ConnError> {
        let conn = self.conn;
        // Acquire: pairs with the executor's head Release (conn::endpoint).
        let head = self.region.header().head.0.load(Ordering::Acquire);
        let Some(slice) = self
            .steps
            .acquire(head)
            .map_err(|err| ConnError::Protocol { conn, err })?
        else {
            return Ok(None);
        };
        let (ptr, capacity) = self.region.slice_span(&slice, &self.steps.geometry());
        Ok(Some((slice, ptr, capacity)))
    }

    /// `slice` (the oldest lent one) now holds `bytes` received bytes: publish it.
    pub(crate) fn publish(&mut self, slice: Slice, bytes: usize) -> Result<(), ConnError> {
        let conn = self.conn;
        let size = i64::try_from(bytes).unwrap_or(i64::MAX);
        let entry = size_entry(&self.region, conn, &slice)?;
        // Relaxed: ordered by the head Acquire that granted the slot.
        let previous = entry.load(Ordering::Relaxed);
        if previous != SIZE_UNUSED {
            return Err(ConnError::Protocol {
                conn,
                err: FifoError::SizeSlotBusy {
                    slot: slice.first_slot(),
                    bytes: u32::try_from(previous).unwrap_or(u32::MAX),
                },
            });
        }
        // Relaxed: published by the tail Release below.
        entry.store(size, Ordering::Relaxed);
        let tail = self
            .steps
            .post(slice)
            .map_err(|err| ConnError::Protocol { conn, err })?;
        // Release: pairs with the executor's tail Acquire (conn::endpoint).
        self.region.tail().store(tail, Ordering::Release);
        Ok(())
    }

    /// The executor closed or aborted its end: nothing more will be read.
    pub(crate) fn executor_gone(&self) -> bool {
        flags_of(&self.region) & (flags::RECEIVER_CLOSED | flags::RECEIVER_ABORTED) != 0
    }

    /// Fails the connection for the executor (see [`FifoDrain::fail`]).
    pub(crate) fn fail(&self, cause: &str) {
        self.region.record_failure(cause);
        raise(&self.region, flags::SENDER_ABORTED);
    }

    /// No more data will come (the remote sender closed): the executor reads what was
    /// published, then a wait for more ends with `PeerClosed`.
    pub(crate) fn close(&self) {
        raise(&self.region, flags::SENDER_CLOSED);
    }
}
