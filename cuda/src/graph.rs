//! CUDA graphs: a stream's work captured once and replayed with one launch (what
//! nccl-tests' `-G` and PyTorch's CUDA graphs do).

use weft_sys::cuda::types::{CU_STREAM_CAPTURE_MODE_THREAD_LOCAL, CUgraph, CUgraphExec};

use crate::device::driver;
use crate::error::{CudaError, Result, check};
use crate::stream::Stream;

/// An instantiated graph; `Drop` destroys it.
#[derive(Debug)]
pub struct Graph {
    graph: CUgraph,
    exec: CUgraphExec,
    ordinal: usize,
}

// SAFETY: graph handles are driver objects usable from any thread.
unsafe impl Send for Graph {}

impl Graph {
    /// Captures what `enqueue` puts on `stream` (nothing runs) and instantiates it. The
    /// capture is thread-local: other threads' CUDA calls go on normally.
    pub fn capture<E>(
        stream: &Stream,
        enqueue: impl FnOnce(&Stream) -> std::result::Result<(), E>,
    ) -> std::result::Result<Graph, E>
    where
        E: From<CudaError>,
    {
        Graph::begin_capture(stream)?;
        let enqueued = enqueue(stream);
        // Always ended, even when `enqueue` failed, so the stream is usable again.
        let graph = Graph::end_capture(stream);
        enqueued?;
        Ok(graph?)
    }

    /// Starts capturing `stream` (thread-local mode): work enqueued on it from now on is
    /// recorded, not run, until [`Graph::end_capture`].
    pub fn begin_capture(stream: &Stream) -> Result<()> {
        let ordinal = stream.context().device().ordinal();
        stream.context().bind()?;
        let d = driver()?;
        let begin = d.cuStreamBeginCapture().map_err(CudaError::from)?;
        // SAFETY: a live stream; thread-local capture mode.
        let r = unsafe { begin(stream.raw(), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL) };
        check(r, "cuStreamBeginCapture", Some(ordinal))
    }

    /// Ends the capture begun on `stream` and instantiates what it recorded.
    pub fn end_capture(stream: &Stream) -> Result<Graph> {
        let ordinal = stream.context().device().ordinal();
        stream.context().bind()?;
        let d = driver()?;
        let end = d.cuStreamEndCapture().map_err(CudaError::from)?;
        let mut graph: CUgraph = std::ptr::null_mut();
        // SAFETY: the stream is capturing; `graph` is a valid out-pointer.
        let r = unsafe { end(stream.raw(), &mut graph) };
        let mut out = Graph {
            graph,
            exec: std::ptr::null_mut(),
            ordinal,
        };
        check(r, "cuStreamEndCapture", Some(ordinal))?;
        let instantiate = d.cuGraphInstantiate().map_err(CudaError::from)?;
        // SAFETY: a captured graph; `exec` is a valid out-pointer; flags 0.
        let r = unsafe { instantiate(&mut out.exec, out.graph, 0) };
        check(r, "cuGraphInstantiate", Some(ordinal))?;
        Ok(out)
    }

    /// Launches the whole graph on `stream`.
    pub fn launch(&self, stream: &Stream) -> Result<()> {
        stream.context().bind()?;
        let d = driver()?;
        let launch = d.cuGraphLaunch()?;
        check(
            // SAFETY: an instantiated graph and a live stream.
            unsafe { launch(self.exec, stream.raw()) },
            "cuGraphLaunch",
            Some(self.ordinal),
        )
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        let Ok(d) = driver() else { return };
        if !self.exec.is_null() {
            if let Ok(destroy) = d.cuGraphExecDestroy() {
                // SAFETY: instantiated in `capture`, destroyed once here.
                let r = unsafe { destroy(self.exec) };
                if let Err(e) = check(r, "cuGraphExecDestroy", Some(self.ordinal)) {
                    log::warn!("weft-cuda: {e}");
                }
            }
        }
        if !self.graph.is_null() {
            if let Ok(destroy) = d.cuGraphDestroy() {
                // SAFETY: captured in `capture`, destroyed once here.
                let r = unsafe { destroy(self.graph) };
                if let Err(e) = check(r, "cuGraphDestroy", Some(self.ordinal)) {
                    log::warn!("weft-cuda: {e}");
                }
            }
        }
    }
}
