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
//! - after every launch the event is recorded on the launch's stream, while the call is
//!   being made (so no stream is ever touched after the call that was given it: the caller
//!   may destroy it);
//! - a launch on another stream than the previous one first makes its stream wait for the
//!   event, that is for exactly the previous launch.
//!
//! Launches into a graph capture are left out: CUDA forbids waiting, in a capture, for an
//! event recorded outside it and the reverse, and a captured call runs when its graph is
//! launched, ordered by that launch's stream. So a call captured on one stream and a call
//! run eagerly on another are not ordered against each other, and an eager launch after a
//! capture is ordered after the last eager launch.
//!
//! Streams are told apart by their handle: the per-thread default stream
//! (`CU_STREAM_PER_THREAD`) has one handle for every thread, so calls of one communicator on
//! two threads' per-thread default streams are not ordered (nor may a communicator be used
//! from two threads at once anyway).

use std::sync::{Arc, Mutex, PoisonError};

use weft_cuda::{Context, Event, Stream};

use crate::gpu::GpuError;

/// The last eager launch: its stream's handle, and whether the event marks its end.
#[derive(Debug, Clone, Copy)]
struct Last {
    stream: usize,
    recorded: bool,
}

/// One communicator's launch order ([module docs](self)).
#[derive(Debug)]
pub(super) struct StreamOrder {
    ctx: Arc<Context>,
    /// Created at the first launch.
    event: Option<Arc<Event>>,
    last: Option<Last>,
    /// What another thread may read of the last eager launch (the health query's probe):
    /// its event once it is recorded, `None` before any launch or after one whose end could
    /// not be marked.
    shared: Arc<Mutex<Shared>>,
    /// Whether a launch ever went into a graph capture.
    captured_any: bool,
}

#[derive(Debug, Default)]
struct Shared {
    launched: bool,
    marked: Option<Arc<Event>>,
}

/// Whether a launch goes into a graph capture (`before_launch`'s answer, for
/// `after_launch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Captured(bool);

impl StreamOrder {
    pub(super) fn new(ctx: Arc<Context>) -> StreamOrder {
        StreamOrder {
            ctx,
            event: None,
            last: None,
            shared: Arc::new(Mutex::new(Shared::default())),
            captured_any: false,
        }
    }

    /// Whether everything this communicator launched has finished, where that can be
    /// told: `None` once a launch went into a graph capture (no event marks its replays),
    /// after a launch whose end could not be marked, or on a driver error.
    pub(super) fn own_work_done(&self) -> Option<bool> {
        if self.captured_any {
            return None;
        }
        self.last_launch_done()?.ok()
    }

    /// Whether the last eager launch has finished (true before any), `None` where its end
    /// could not be marked.
    fn last_launch_done(&self) -> Option<Result<bool, GpuError>> {
        match (&self.event, self.last) {
            (_, None) => Some(Ok(true)),
            (Some(event), Some(last)) if last.recorded => Some(event.is_done().map_err(Into::into)),
            _ => None,
        }
    }

    /// Before a launch on `stream`: makes it wait for the previous eager launch when that
    /// went to another stream.
    pub(super) fn before_launch(&mut self, stream: &Stream) -> Result<Captured, GpuError> {
        if stream.is_capturing()? {
            self.captured_any = true;
            return Ok(Captured(true));
        }
        let Some(last) = self.last else {
            return Ok(Captured(false));
        };
        if last.stream == stream.raw() as usize {
            return Ok(Captured(false));
        }
        match (&self.event, last.recorded) {
            (Some(event), true) => stream.wait_event(event)?,
            _ => {
                return Err(GpuError::InvalidArgument(
                    "this communicator's previous launch could not be marked (cuEventRecord \
                     failed then), so a launch on another stream cannot be ordered after it: \
                     synchronize the previous stream first, or use one stream"
                        .to_string(),
                ));
            }
        }
        Ok(Captured(false))
    }

    /// After a launch on `stream` (also after one that failed part way: something may be
    /// queued): marks its end for the next launch on another stream.
    pub(super) fn after_launch(
        &mut self,
        stream: &Stream,
        captured: Captured,
    ) -> Result<(), GpuError> {
        if captured.0 {
            return Ok(());
        }
        // Remembered before the record, which can fail: the next switch of streams must
        // not take an older mark for this launch's.
        self.last = Some(Last {
            stream: stream.raw() as usize,
            recorded: false,
        });
        self.publish(None);
        if self.event.is_none() {
            self.event = Some(Arc::new(Event::new(&self.ctx, false)?));
        }
        if let Some(event) = &self.event {
            event.record(stream)?;
            self.last = Some(Last {
                stream: stream.raw() as usize,
                recorded: true,
            });
            self.publish(Some(Arc::clone(event)));
        }
        Ok(())
    }

    fn publish(&self, marked: Option<Arc<Event>>) {
        let mut shared = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        shared.launched = true;
        shared.marked = marked;
    }

    /// For another thread (the health query): whether everything launched has finished
    /// (`Some(true)` before any launch), `None` where it cannot be told (a launch whose end
    /// could not be marked, a driver error). Captured launches are not counted.
    pub(super) fn probe(&self) -> impl Fn() -> Option<bool> + Send + Sync + 'static {
        let shared = Arc::clone(&self.shared);
        move || {
            let (launched, marked) = {
                let s = shared.lock().unwrap_or_else(PoisonError::into_inner);
                (s.launched, s.marked.clone())
            };
            match (launched, marked) {
                (false, _) => Some(true),
                (true, Some(event)) => event.is_done().ok(),
                (true, None) => None,
            }
        }
    }

    /// Whether the last eager launch has finished (true when there was none). A launch
    /// whose end could not be marked counts as running.
    pub(super) fn idle(&self) -> Result<bool, GpuError> {
        self.last_launch_done().unwrap_or(Ok(false))
    }
}
