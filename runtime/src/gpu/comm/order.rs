//! Call order across streams: a communicator's launches run on the GPU in the order they
//! were made, whatever streams the caller gives them, as NCCL's do.
//!
//! Matching calls meet by their order on each rank: the one-/two-shot lanes' epochs, the
//! FIFO steps and the point-to-point rounds all advance once per call. Two calls of one
//! communicator on two streams could otherwise run in either order, or at once, and take
//! each other's partners. PyTorch does exactly that: since 2.6 it runs a synchronous
//! collective on the caller's current stream and an `async_op=True` one on its NCCL stream,
//! and DDP's join mode mixes both (two H100, 2026-11-27: an int64 all-reduce MAX took the
//! bytes of the float all-reduce before it). NCCL orders every launch of a communicator
//! after the previous one (its "strong stream"); weft does the same with one event:
//!
//! - While every launch comes on one stream, nothing is added (the stream orders them).
//! - At the first launch on another stream, the event is recorded on the previous stream
//!   (at its end: everything enqueued there so far, the last launch included) and the new
//!   stream waits for it. From then on the event is recorded after every launch, so a
//!   later switch waits for exactly the last launch.
//! - No event crosses a graph capture's edge (CUDA forbids waiting, in a capture, for an
//!   event recorded outside it, and the reverse): a switch between a capturing stream and
//!   one that is not is left unordered, as the two cannot be ordered anyway (a captured
//!   call runs when its graph is launched). Between two capturing streams the event orders
//!   the captured launches.
//!
//! A previous stream the caller has destroyed meanwhile (its handle no longer valid) is
//! skipped: the work left on it is not waited for.

use std::sync::Arc;

use weft_cuda::{CUstream, Context, Event, Stream};

use crate::gpu::GpuError;

/// Where the last launch went, and whether the event marks its end.
#[derive(Debug, Clone, Copy)]
struct Last {
    stream: CUstream,
    /// The event was recorded right after the launch on `stream`.
    recorded: bool,
    /// Whether `stream` was capturing then.
    capturing: bool,
}

/// One communicator's launch order ([module docs](self)).
#[derive(Debug)]
pub(super) struct StreamOrder {
    ctx: Arc<Context>,
    /// Created at the first switch of streams.
    event: Option<Event>,
    last: Option<Last>,
}

// SAFETY: the raw stream handle is only passed back to the driver, from any thread
// (CUstream handles are not tied to a thread).
unsafe impl Send for StreamOrder {}
// SAFETY: as above; `&self` methods touch no handle.
unsafe impl Sync for StreamOrder {}

impl StreamOrder {
    pub(super) fn new(ctx: Arc<Context>) -> StreamOrder {
        StreamOrder {
            ctx,
            event: None,
            last: None,
        }
    }

    /// Before a launch on `stream`: makes it wait for the previous launch where that went
    /// to another stream.
    pub(super) fn before_launch(&mut self, stream: &Stream) -> Result<(), GpuError> {
        let Some(last) = self.last else {
            return Ok(());
        };
        if last.stream == stream.raw() {
            return Ok(());
        }
        let capturing = stream.is_capturing()?;
        if self.event.is_none() {
            self.event = Some(Event::new(&self.ctx, false)?);
        }
        let event = self.event.as_ref().expect("just created");
        if !last.recorded {
            // The first switch: mark the previous stream's end now, unless it is gone or
            // on the other side of a capture's edge.
            // SAFETY: a handle this communicator was given for its GPU; if the caller has
            // destroyed it since, the driver refuses it and nothing is recorded.
            let prev = unsafe { Stream::from_raw(&self.ctx, last.stream) };
            match prev.is_capturing() {
                Ok(c) if c == capturing => event.record(&prev)?,
                _ => return Ok(()),
            }
        } else if last.capturing != capturing {
            return Ok(());
        }
        stream.wait_event(event)?;
        Ok(())
    }

    /// After a launch on `stream`: remembers it, and, once launches have come on more than
    /// one stream, marks its end with the event.
    pub(super) fn after_launch(&mut self, stream: &Stream) -> Result<(), GpuError> {
        let switched = self.last.is_some_and(|l| l.stream != stream.raw());
        let multi = switched || self.last.is_some_and(|l| l.recorded);
        let mut last = Last {
            stream: stream.raw(),
            recorded: false,
            capturing: false,
        };
        if multi && let Some(event) = &self.event {
            last.capturing = stream.is_capturing()?;
            event.record(stream)?;
            last.recorded = true;
        }
        self.last = Some(last);
        Ok(())
    }
}
