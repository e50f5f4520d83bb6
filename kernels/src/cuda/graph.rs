//! CUDA graphs and events on the GPU's stream: what the measuring harness ([`crate::measure`])
//! times with. The harness decides what to capture and how often to replay; this module only
//! wraps the driver calls.

use super::{check, Gpu};
use crate::error::Result;
use cudarc::driver::{result as cu, sys};

/// An instantiated CUDA graph (destroyed on drop).
pub(crate) struct Graph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
}

impl Drop for Graph {
    fn drop(&mut self) {
        unsafe {
            let _ = cu::graph::exec_destroy(self.exec);
            let _ = cu::graph::destroy(self.graph);
        }
    }
}

/// A CUDA event (destroyed on drop).
pub(crate) struct Event(sys::CUevent);

impl Drop for Event {
    fn drop(&mut self) {
        unsafe {
            let _ = cu::event::destroy(self.0);
        }
    }
}

impl Gpu {
    /// Captures what `enqueue` queues on the stream into a graph. `enqueue` must only launch
    /// (no allocation, copy or synchronisation: they are not allowed during capture). If it
    /// fails, the capture is ended and its error returned.
    pub(crate) fn capture<E: From<crate::KernelError>>(
        &self,
        enqueue: &mut dyn FnMut() -> std::result::Result<(), E>,
    ) -> std::result::Result<Graph, E> {
        self.bind()?;
        check(
            unsafe {
                cu::stream::begin_capture(
                    self.stream,
                    sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                )
            },
            || "cuStreamBeginCapture".into(),
        )?;
        let status = enqueue();
        let graph = check(unsafe { cu::stream::end_capture(self.stream) }, || {
            "cuStreamEndCapture".into()
        })?;
        if let Err(e) = status {
            unsafe {
                let _ = cu::graph::destroy(graph);
            }
            return Err(e);
        }
        let exec = check(
            unsafe { cu::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) },
            || "cuGraphInstantiate".into(),
        )?;
        Ok(Graph { graph, exec })
    }

    pub(crate) fn event(&self) -> Result<Event> {
        self.bind()?;
        check(
            cu::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT),
            || "cuEventCreate".into(),
        )
        .map(Event)
    }

    pub(crate) fn record(&self, e: &Event) -> Result<()> {
        check(unsafe { cu::event::record(e.0, self.stream) }, || {
            "cuEventRecord".into()
        })
    }

    pub(crate) fn replay(&self, g: &Graph) -> Result<()> {
        check(unsafe { cu::graph::launch(g.exec, self.stream) }, || {
            "cuGraphLaunch".into()
        })
    }

    /// Milliseconds between two recorded (and completed) events.
    pub(crate) fn elapsed_ms(&self, start: &Event, end: &Event) -> Result<f32> {
        check(unsafe { cu::event::elapsed(start.0, end.0) }, || {
            "cuEventElapsedTime".into()
        })
    }

    /// A device-to-device copy on the stream (for the copy-bandwidth ceiling).
    pub(crate) fn copy_dtod(&self, dst: u64, src: u64, bytes: usize) -> Result<()> {
        check(
            unsafe { cu::memcpy_dtod_async(dst, src, bytes, self.stream) },
            || "cuMemcpyDtoDAsync".into(),
        )
    }
}
