//! The measuring harness (GPU only). Every figure in the book comes from here.
//!
//! Method, the same for a kernel and for the floor beside it:
//! - The work is captured once into a CUDA graph, as an inference server runs a decode step.
//! - **Cold**: before each sample, a kernel writes a buffer four times the size of the L2 cache
//!   (outside the timed region), so the weights and inputs come from device memory, as a layer's
//!   weights do when 40 other layers ran in between. One sample = the time between two events
//!   recorded on the stream around one graph launch: it includes the graph's launch on the
//!   device and the gap before its first kernel, and every kernel in it.
//! - **Warm**: a second graph holds N back-to-back copies of the work; a sample is its time / N.
//! - Many samples; we report the median and the 10th and 90th percentiles.
//! - The floors are measured the same way: an empty kernel (one launch), and a kernel that reads
//!   a given number of bytes once (one launch plus one cold read).

use crate::buffer::DeviceBuffer;
use crate::cuda::{check, Gpu};
use crate::device::{Device, Module};
use crate::error::{KernelError, Result};
use crate::launch::{KernelArg, LaunchConfig};
use cudarc::driver::{result as cu, sys};
use std::sync::Arc;

/// Median and spread of one set of samples, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stats {
    pub median_us: f64,
    pub p10_us: f64,
    pub p90_us: f64,
    pub samples: usize,
}

impl Stats {
    /// Median, 10th and 90th percentile (nearest rank) of `us`.
    pub fn of(mut us: Vec<f64>) -> Stats {
        assert!(!us.is_empty(), "no samples");
        us.sort_by(|a, b| a.total_cmp(b));
        let at = |q: f64| us[((us.len() - 1) as f64 * q).round() as usize];
        Stats {
            median_us: at(0.5),
            p10_us: at(0.1),
            p90_us: at(0.9),
            samples: us.len(),
        }
    }
}

/// One measured piece of work: cold and warm timings and how many kernels one copy launches.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measurement {
    pub cold: Stats,
    pub warm: Stats,
    pub launches: u64,
}

/// How many samples to take.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub cold_samples: usize,
    pub warm_samples: usize,
    /// Copies of the work in the warm graph.
    pub warm_copies: usize,
}

impl Default for Plan {
    fn default() -> Self {
        Plan {
            cold_samples: 200,
            warm_samples: 50,
            warm_copies: 20,
        }
    }
}

struct Graph {
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

struct Event(sys::CUevent);
impl Drop for Event {
    fn drop(&mut self) {
        unsafe {
            let _ = cu::event::destroy(self.0);
        }
    }
}

/// The harness: owns the flush buffer and the floor kernels of one GPU.
pub struct Harness {
    device: &'static Device,
    floor: Arc<Module>,
    flush: DeviceBuffer<u8>,
    flush_round: std::cell::Cell<u32>,
    pub plan: Plan,
}

impl Harness {
    /// A harness on `device`, which must be the GPU.
    pub fn new(device: &'static Device, plan: Plan) -> Result<Harness> {
        let gpu = device
            .gpu()
            .ok_or(KernelError::CudaOnly("timing with CUDA graphs"))?;
        let floor = device.load(&crate::families::FLOOR)?;
        let flush_bytes = (gpu.l2_bytes * 4).max(64 << 20).next_multiple_of(16);
        let flush = device.alloc::<u8>(flush_bytes)?;
        Ok(Harness {
            device,
            floor,
            flush,
            flush_round: std::cell::Cell::new(0),
            plan,
        })
    }

    fn gpu(&self) -> &Gpu {
        self.device.gpu().expect("checked in new")
    }

    /// The GPU's L2 size in bytes, and the flush buffer's.
    pub fn l2_and_flush_bytes(&self) -> (usize, usize) {
        (self.gpu().l2_bytes, self.flush.len())
    }

    fn flush_l2(&self) -> Result<()> {
        let round = self.flush_round.get().wrapping_add(1);
        self.flush_round.set(round);
        let n16 = (self.flush.len() / 16) as u64;
        let blocks = self.gpu().sms * 8;
        self.floor.launch(
            "floor_flush",
            LaunchConfig::blocks(blocks, 512),
            &[KernelArg::from(&self.flush), n16.into(), round.into()],
        )
    }

    fn capture<E: From<KernelError>>(
        &self,
        copies: usize,
        enqueue: &mut dyn FnMut() -> std::result::Result<(), E>,
    ) -> std::result::Result<(Graph, u64), E> {
        let gpu = self.gpu();
        gpu.bind()?;
        let stream = gpu.stream;
        check(
            unsafe {
                cu::stream::begin_capture(
                    stream,
                    sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
                )
            },
            || "cuStreamBeginCapture".into(),
        )?;
        let before = self.device.launches();
        let mut status = Ok(());
        for _ in 0..copies {
            status = enqueue();
            if status.is_err() {
                break;
            }
        }
        let launches = (self.device.launches() - before) / copies.max(1) as u64;
        let graph = check(unsafe { cu::stream::end_capture(stream) }, || {
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
        Ok((Graph { graph, exec }, launches))
    }

    fn event(&self) -> Result<Event> {
        check(
            cu::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT),
            || "cuEventCreate".into(),
        )
        .map(Event)
    }

    fn time_graph(
        &self,
        graph: &Graph,
        samples: usize,
        cold: bool,
        divide: usize,
    ) -> Result<Stats> {
        let gpu = self.gpu();
        let events: Vec<(Event, Event)> = (0..samples)
            .map(|_| Ok((self.event()?, self.event()?)))
            .collect::<Result<_>>()?;
        // One untimed replay first, so the graph's first upload is not a sample.
        check(unsafe { cu::graph::launch(graph.exec, gpu.stream) }, || {
            "cuGraphLaunch".into()
        })?;
        for (start, end) in &events {
            if cold {
                self.flush_l2()?;
            }
            gpu.bind()?;
            unsafe {
                check(cu::event::record(start.0, gpu.stream), || {
                    "cuEventRecord".into()
                })?;
                check(cu::graph::launch(graph.exec, gpu.stream), || {
                    "cuGraphLaunch".into()
                })?;
                check(cu::event::record(end.0, gpu.stream), || {
                    "cuEventRecord".into()
                })?;
            }
        }
        gpu.sync("after timed graph replays")?;
        let us = events
            .iter()
            .map(|(s, e)| {
                check(unsafe { cu::event::elapsed(s.0, e.0) }, || {
                    "cuEventElapsedTime".into()
                })
                .map(|ms| ms as f64 * 1000.0 / divide as f64)
            })
            .collect::<Result<Vec<f64>>>()?;
        Ok(Stats::of(us))
    }

    /// Measures the work that `enqueue` queues (it must only launch kernels on this device:
    /// no allocation, no copy, no synchronisation, since it runs under graph capture).
    pub fn measure<E: From<KernelError>>(
        &self,
        mut enqueue: impl FnMut() -> std::result::Result<(), E>,
    ) -> std::result::Result<Measurement, E> {
        // Warm-up outside any graph: module loading and first-launch costs stay out.
        for _ in 0..3 {
            enqueue()?;
        }
        self.gpu().sync("after warm-up").map_err(E::from)?;
        let (one, launches) = self.capture::<E>(1, &mut enqueue)?;
        let (many, _) = self.capture::<E>(self.plan.warm_copies, &mut enqueue)?;
        let cold = self
            .time_graph(&one, self.plan.cold_samples, true, 1)
            .map_err(E::from)?;
        let warm = self
            .time_graph(&many, self.plan.warm_samples, false, self.plan.warm_copies)
            .map_err(E::from)?;
        Ok(Measurement {
            cold,
            warm,
            launches,
        })
    }

    /// The cost of one launch: an empty kernel, one block of 32 threads.
    pub fn empty_kernel(&self) -> Result<Measurement> {
        let floor = self.floor.clone();
        self.measure(move || floor.launch("floor_empty", LaunchConfig::blocks(1, 32), &[]))
    }

    /// One launch plus one read of `bytes` (rounded up to 16) of memory: the floor of a kernel
    /// that must read that much, e.g. a gate weight.
    pub fn read_probe(&self, bytes: usize) -> Result<Measurement> {
        let n16 = bytes.div_ceil(16).max(1);
        let data = self.device.alloc::<u8>(n16 * 16)?; // poisoned with 0xFF: xor of 4 words is 0
        let sink = self.device.zeros::<u32>(1)?;
        let blocks = (n16.div_ceil(512) as u32).clamp(1, self.gpu().sms * 16);
        let floor = self.floor.clone();
        self.measure(move || {
            floor.launch(
                "floor_read",
                LaunchConfig::blocks(blocks, 512),
                // 0xFFFFFFFF words xor to 0 in fours; `never` = 1 is never the result.
                &[
                    KernelArg::from(&data),
                    (n16 as u64).into(),
                    1u32.into(),
                    KernelArg::from(&sink),
                ],
            )
        })
    }

    /// Device-to-device copy bandwidth in GB/s (bytes read plus bytes written), median of 10.
    pub fn copy_bandwidth(&self, bytes: usize) -> Result<f64> {
        let src = self.device.alloc::<u8>(bytes)?;
        let dst = self.device.alloc::<u8>(bytes)?;
        let gpu = self.gpu();
        let mut us = Vec::new();
        for _ in 0..11 {
            let (s, e) = (self.event()?, self.event()?);
            gpu.bind()?;
            unsafe {
                check(cu::event::record(s.0, gpu.stream), || {
                    "cuEventRecord".into()
                })?;
                check(
                    cu::memcpy_dtod_async(dst.device_ptr(), src.device_ptr(), bytes, gpu.stream),
                    || "cuMemcpyDtoDAsync".into(),
                )?;
                check(cu::event::record(e.0, gpu.stream), || {
                    "cuEventRecord".into()
                })?;
            }
            gpu.sync("after a copy")?;
            us.push(
                check(unsafe { cu::event::elapsed(s.0, e.0) }, || {
                    "cuEventElapsedTime".into()
                })? as f64
                    * 1000.0,
            );
        }
        us.remove(0); // the first copy warms the path
        let t = Stats::of(us).median_us;
        Ok(2.0 * bytes as f64 / (t * 1e-6) / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_take_nearest_rank_percentiles() {
        let s = Stats::of((1..=11).rev().map(|v| v as f64).collect());
        assert_eq!(
            (s.median_us, s.p10_us, s.p90_us, s.samples),
            (6.0, 2.0, 10.0, 11)
        );
    }
}
