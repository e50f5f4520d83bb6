//! The measuring harness (GPU only). Every figure in the book comes from here.
//!
//! Method, the same for a kernel and for the floor beside it:
//! - The work is captured once into a CUDA graph, as an inference server runs a decode step.
//! - **Cold**: before each sample, a kernel reads a buffer four times the size of the L2 cache
//!   (outside the timed region), so the weights and inputs come from device memory, as a layer's
//!   weights do when 40 other layers ran in between. The flush only reads: a flush that writes
//!   leaves dirty lines in the L2 whose write-back the timed work would pay
//!   ([`Harness::flush_cost_of_writing`] measures what that would add). One sample = the time
//!   between two events recorded on the stream around one graph launch: it includes the graph's
//!   launch on the device and the gap before its first kernel, and every kernel in it.
//! - **Warm**: a second graph holds N back-to-back copies of the work; a sample is its time / N.
//! - Many samples; [`Stats`] reports the median and the 10th and 90th percentiles.
//! - The floors are measured the same way: an empty kernel (one launch), and a kernel that reads
//!   a given number of bytes once (one launch plus one cold read).
//! - **Per kernel**: [`Harness::measure_steps`] times the first 1, 2, … launches of the work
//!   alone (the runtime skips the launches past a budget), so each kernel's share is a
//!   difference of medians taken by the same method; chapter code carries nothing for it.

mod stats;

pub use stats::Stats;

use crate::buffer::DeviceBuffer;
use crate::cuda::graph::Graph;
use crate::cuda::Gpu;
use crate::device::Device;
use crate::error::{KernelError, Result};
use crate::launch::{KernelArg, LaunchConfig};
use crate::module::{record_launches, with_launch_budget, Module};
use std::sync::Arc;

/// One measured piece of work: cold and warm timings and how many kernels one copy launches.
#[derive(Clone, Debug, PartialEq)]
pub struct Measurement {
    pub cold: Stats,
    pub warm: Stats,
    pub launches: u64,
}

/// The work stopped after its first `step` launches, timed alone; the last kernel it launched.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub step: usize,
    pub kernel: String,
    pub prefix: Measurement,
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

impl Plan {
    /// Few samples: a smoke test of the whole pipeline, not numbers to publish.
    pub fn quick() -> Plan {
        Plan {
            cold_samples: 20,
            warm_samples: 5,
            warm_copies: 5,
        }
    }
}

/// How the L2 is emptied before a cold sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flush {
    /// Read a buffer four times the L2 (what every published number uses).
    Read,
    /// Write it (leaves dirty lines: the timed work pays their write-back).
    Write,
}

/// The harness: owns the flush buffer and the floor kernels of one GPU.
pub struct Harness {
    device: &'static Device,
    floor: Arc<Module>,
    flush: DeviceBuffer<u8>,
    sink: DeviceBuffer<u32>,
    flush_round: std::cell::Cell<u32>,
    pub plan: Plan,
}

fn stats(us: Vec<f64>) -> Result<Stats> {
    Stats::of(us).ok_or(KernelError::CudaOnly("a measurement with no samples"))
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
        let sink = device.zeros::<u32>(1)?;
        Ok(Harness {
            device,
            floor,
            flush,
            sink,
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

    fn flush_l2(&self, how: Flush) -> Result<()> {
        let cfg = LaunchConfig::blocks(self.gpu().sms * 8, 512);
        match how {
            Flush::Read => launch_read(&self.floor, cfg, &self.flush, &self.sink),
            Flush::Write => {
                let round = self.flush_round.get().wrapping_add(1);
                self.flush_round.set(round);
                self.floor.launch(
                    "floor_flush_write",
                    cfg,
                    &[
                        KernelArg::from(&self.flush),
                        ((self.flush.len() / 16) as u64).into(),
                        round.into(),
                    ],
                )
            }
        }
    }

    /// Captures `copies` copies of the work into one graph; returns it with the launches of one
    /// copy.
    fn capture<E: From<KernelError>>(
        &self,
        copies: usize,
        enqueue: &mut dyn FnMut() -> std::result::Result<(), E>,
    ) -> std::result::Result<(Graph, u64), E> {
        let mut launches = 0;
        let graph = self.gpu().capture::<E>(&mut || {
            for i in 0..copies {
                let (r, names) = record_launches(&mut *enqueue);
                r?;
                if i == 0 {
                    launches = names.len() as u64;
                }
            }
            Ok(())
        })?;
        Ok((graph, launches))
    }

    fn time_graph(
        &self,
        graph: &Graph,
        samples: usize,
        cold: Option<Flush>,
        divide: usize,
    ) -> Result<Stats> {
        let gpu = self.gpu();
        let events = (0..samples)
            .map(|_| Ok((gpu.event()?, gpu.event()?)))
            .collect::<Result<Vec<_>>>()?;
        // One untimed replay first, so the graph's first upload is not a sample.
        gpu.replay(graph)?;
        for (start, end) in &events {
            if let Some(how) = cold {
                self.flush_l2(how)?;
            }
            gpu.bind()?;
            gpu.record(start)?;
            gpu.replay(graph)?;
            gpu.record(end)?;
        }
        gpu.sync("after timed graph replays")?;
        let us = events
            .iter()
            .map(|(s, e)| {
                gpu.elapsed_ms(s, e)
                    .map(|ms| ms as f64 * 1000.0 / divide as f64)
            })
            .collect::<Result<Vec<f64>>>()?;
        stats(us)
    }

    fn measure_with<E: From<KernelError>>(
        &self,
        flush: Flush,
        enqueue: &mut dyn FnMut() -> std::result::Result<(), E>,
    ) -> std::result::Result<Measurement, E> {
        // Warm-up outside any graph: module loading and first-launch costs stay out.
        for _ in 0..3 {
            enqueue()?;
        }
        self.gpu().sync("after warm-up").map_err(E::from)?;
        let (one, launches) = self.capture::<E>(1, enqueue)?;
        let (many, _) = self.capture::<E>(self.plan.warm_copies, enqueue)?;
        let cold = self
            .time_graph(&one, self.plan.cold_samples, Some(flush), 1)
            .map_err(E::from)?;
        let warm = self
            .time_graph(&many, self.plan.warm_samples, None, self.plan.warm_copies)
            .map_err(E::from)?;
        Ok(Measurement {
            cold,
            warm,
            launches,
        })
    }

    /// Measures the work that `enqueue` queues (it must only launch kernels or library GEMMs on
    /// this device: no allocation, copy or synchronisation, since it runs under graph capture).
    pub fn measure<E: From<KernelError>>(
        &self,
        mut enqueue: impl FnMut() -> std::result::Result<(), E>,
    ) -> std::result::Result<Measurement, E> {
        self.measure_with(Flush::Read, &mut enqueue)
    }

    /// The whole work, then its first 1, 2, … launches alone: one [`Step`] per kernel, the last
    /// being the whole work (its `prefix` is the same measurement as the first result).
    pub fn measure_steps<E: From<KernelError>>(
        &self,
        mut enqueue: impl FnMut() -> std::result::Result<(), E>,
    ) -> std::result::Result<(Measurement, Vec<Step>), E> {
        let (r, names) = record_launches(&mut enqueue);
        r?;
        let whole = self.measure_with(Flush::Read, &mut enqueue)?;
        let mut steps = Vec::with_capacity(names.len());
        for (i, name) in names.iter().enumerate() {
            let prefix = if i + 1 == names.len() {
                whole.clone()
            } else {
                let mut first = || with_launch_budget(i + 1, &mut enqueue);
                self.measure_with(Flush::Read, &mut first)?
            };
            steps.push(Step {
                step: i + 1,
                kernel: name.rsplit("::").next().unwrap_or(name).to_string(),
                prefix,
            });
        }
        Ok((whole, steps))
    }

    /// The same work's cold median with the L2 flushed by writing and by reading: the first
    /// minus the second is what a writing flush would have added to every cold figure.
    pub fn flush_cost_of_writing<E: From<KernelError>>(
        &self,
        mut enqueue: impl FnMut() -> std::result::Result<(), E>,
    ) -> std::result::Result<(Stats, Stats), E> {
        let write = self.measure_with(Flush::Write, &mut enqueue)?.cold;
        let read = self.measure_with(Flush::Read, &mut enqueue)?.cold;
        Ok((write, read))
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
        self.measure(move || launch_read(&floor, LaunchConfig::blocks(blocks, 512), &data, &sink))
    }

    /// Device-to-device copy bandwidth in GB/s (bytes read plus bytes written), median of 10.
    pub fn copy_bandwidth(&self, bytes: usize) -> Result<f64> {
        let src = self.device.alloc::<u8>(bytes)?;
        let dst = self.device.alloc::<u8>(bytes)?;
        let gpu = self.gpu();
        let mut us = Vec::new();
        for _ in 0..11 {
            let (s, e) = (gpu.event()?, gpu.event()?);
            gpu.bind()?;
            gpu.record(&s)?;
            gpu.copy_dtod(dst.device_ptr(), src.device_ptr(), bytes)?;
            gpu.record(&e)?;
            gpu.sync("after a copy")?;
            us.push(gpu.elapsed_ms(&s, &e)? as f64 * 1000.0);
        }
        us.remove(0); // the first copy warms the path
        let t = stats(us)?.median_us;
        Ok(2.0 * bytes as f64 / (t * 1e-6) / 1e9)
    }
}

/// One `floor_read` of all of `data` (a multiple of 16 bytes, poisoned with 0xFF: its words xor
/// to 0, so the `never` value 1 never matches and `sink` is never written).
fn launch_read(
    floor: &Module,
    cfg: LaunchConfig,
    data: &DeviceBuffer<u8>,
    sink: &DeviceBuffer<u32>,
) -> Result<()> {
    floor.launch(
        "floor_read",
        cfg,
        &[
            KernelArg::from(data),
            ((data.len() / 16) as u64).into(),
            1u32.into(),
            KernelArg::from(sink),
        ],
    )
}
