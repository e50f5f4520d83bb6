//! Chapter 12: tensor against expert parallelism on two GPUs, beside the one-GPU layer, for
//! chapter 6's two shapes (Qwen3-30B-A3B and the GLM-like shape) at T = 1, 8, 64, 512 and 4,096
//! tokens (the tokens the layer serves in all: tensor parallelism gives all T to both ranks,
//! expert parallelism T/2 to each, the first rank the odd one).
//!
//! | impl | what is timed on each rank | collective |
//! |---|---|---|
//! | `one_gpu` | chapter 6's [`AssembledLayer::enqueue`] on T tokens, then a device synchronisation | none |
//! | `tp` | [`TensorParallel::enqueue`]: chapter 6 on the rank's slice of I, then the all-reduce (NCCL all-gather + the rank-order sum) | the all-reduce |
//! | `ep` | [`ExpertParallel::run`] on the rank's tokens: route, plan on the host, the counts, the gather, four all-to-alls, chapter 4's experts, the combine | the counts' exchange and the four all-to-alls |
//!
//! The method: wall-clock time on the host around one call and a device synchronisation, median
//! and spread of the samples after warm-up calls, the weights warm in L2 as far as they fit (no
//! flush, no graph: expert parallelism takes the routing to the host, and this chapter's NCCL
//! calls wait on the host, so neither can be captured in a CUDA graph). The collective's share is
//! the wall time spent inside the communicator's calls (each waits for the work queued before it
//! and for its own end), so it includes the waiting for the slower rank. Not comparable with
//! chapter 6's graph-replay timings; `one_gpu` is measured here by the same method for that
//! reason.
//!
//! ```text
//! tools/bench/run ch12 [--out-dir D] [--quick]
//! ```
//!
//! It needs two GPUs (the `nvidia-h200-x2` machine) and NCCL: the command starts itself twice,
//! one process per GPU (`CUDA_VISIBLE_DEVICES`), and rank 0 writes `ch12.csv`. With fewer GPUs it
//! refuses with a message and a non-zero exit.

use crate::ch01::bias;
use crate::ch06::{Shape, SHAPES, TINY};
use ch01_router::inputs::patterned;
use ch06_layer::AssembledLayer;
use ch12_parallel::comm::{Communicator, Element};
use ch12_parallel::nccl::Nccl;
use ch12_parallel::{ExpertParallel, ParallelError, TensorParallel};
use half::bf16;
use moe_kernels::{Device, DeviceBuffer};
use std::cell::Cell;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Ch12Args {
    /// Where `ch12.csv` goes.
    #[arg(long, default_value = "bench/results/h200x2")]
    pub out_dir: PathBuf,
    /// Fewer samples and T = 1, 8 only (also `MOE_BENCH_QUICK=1`).
    #[arg(long)]
    pub quick: bool,
    /// Internal: run as this rank (set by the command itself for its two processes).
    #[arg(long, hide = true)]
    pub rank: Option<usize>,
}

const WORLD: usize = 2;
const TOKENS: [usize; 5] = crate::ch04::TOKENS;
const SEED: u64 = crate::ch04::WEIGHT_SEED;

/// A communicator that adds up the wall time spent inside its calls.
struct Timed<'a, C> {
    inner: &'a C,
    spent_us: Cell<f64>,
}

impl<C: Communicator> Timed<'_, C> {
    fn time<R>(&self, f: impl FnOnce() -> R) -> R {
        let t = Instant::now();
        let r = f();
        self.spent_us
            .set(self.spent_us.get() + t.elapsed().as_secs_f64() * 1e6);
        r
    }
}

impl<C: Communicator> Communicator for Timed<'_, C> {
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn world(&self) -> usize {
        self.inner.world()
    }
    fn device(&self) -> &'static Device {
        self.inner.device()
    }
    fn all_reduce_sum(&self, buf: &mut DeviceBuffer<f32>) -> Result<(), ParallelError> {
        self.time(|| self.inner.all_reduce_sum(buf))
    }
    fn exchange_counts(&self, send: &[usize]) -> Result<Vec<usize>, ParallelError> {
        self.time(|| self.inner.exchange_counts(send))
    }
    fn all_to_all<T: Element>(
        &self,
        send: &DeviceBuffer<T>,
        send_counts: &[usize],
        recv: &mut DeviceBuffer<T>,
        recv_counts: &[usize],
    ) -> Result<(), ParallelError> {
        self.time(|| self.inner.all_to_all(send, send_counts, recv, recv_counts))
    }
}

/// The GPUs this process can see (0 without a driver).
fn gpu_count() -> usize {
    // SAFETY: only tries to load the driver library.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return 0;
    }
    if cudarc::driver::result::init().is_err() {
        return 0;
    }
    cudarc::driver::result::device::get_count().map_or(0, |n| n.max(0) as usize)
}

pub fn run(a: &Ch12Args) -> Result<(), String> {
    let quick = a.quick || std::env::var("MOE_BENCH_QUICK").is_ok_and(|v| v == "1");
    match a.rank {
        Some(rank) => run_rank(rank, quick, &a.out_dir),
        None => launch(&a.out_dir, quick),
    }
}

/// Starts one process per GPU and waits for both.
fn launch(out_dir: &std::path::Path, quick: bool) -> Result<(), String> {
    let n = gpu_count();
    if n < WORLD {
        return Err(format!(
            "bench ch12 needs two GPUs (the nvidia-h200-x2 machine) and NCCL; this machine has {n}"
        ));
    }
    if !ch12_parallel::nccl::nccl_present() {
        return Err("bench ch12 needs NCCL (libnccl.so.2), which could not be loaded".into());
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let id = std::env::temp_dir().join(format!("ch12-bench-nccl-{}", std::process::id()));
    let _ = std::fs::remove_file(&id);
    let mut children = Vec::new();
    for r in 0..WORLD {
        let mut c = std::process::Command::new(&exe);
        c.args(["ch12", "--rank", &r.to_string(), "--out-dir"])
            .arg(out_dir)
            .env("MOE_RANK", r.to_string())
            .env("MOE_WORLD", WORLD.to_string())
            .env("MOE_NCCL_ID_FILE", &id)
            .env("CUDA_VISIBLE_DEVICES", r.to_string())
            .env("MOE_BACKEND", "cuda");
        if quick {
            c.arg("--quick");
        }
        children.push(c.spawn().map_err(|e| format!("starting rank {r}: {e}"))?);
    }
    let mut failed = Vec::new();
    for (r, mut c) in children.into_iter().enumerate() {
        if !c.wait().map_err(|e| e.to_string())?.success() {
            failed.push(r);
        }
    }
    let _ = std::fs::remove_file(&id);
    match failed.is_empty() {
        true => Ok(()),
        false => Err(format!(
            "bench ch12: rank(s) {failed:?} failed (their errors are above)"
        )),
    }
}

/// Median, 10th and 90th percentile of `v` (µs).
fn stats(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.1), at(0.9))
}

/// Wall times and the collective's part of each, µs.
type Samples = (Vec<f64>, Vec<f64>);

/// Times `f` (which returns the µs it spent in collectives): `warm` calls, then `samples`.
fn time(
    dev: &'static Device,
    warm: usize,
    samples: usize,
    mut f: impl FnMut() -> Result<f64, String>,
) -> Result<Samples, String> {
    for _ in 0..warm {
        f()?;
    }
    let (mut total, mut comm) = (Vec::new(), Vec::new());
    for _ in 0..samples {
        dev.synchronize().map_err(|e| e.to_string())?;
        let t = Instant::now();
        let c = f()?;
        dev.synchronize().map_err(|e| e.to_string())?;
        total.push(t.elapsed().as_secs_f64() * 1e6);
        comm.push(c);
    }
    Ok((total, comm))
}

fn run_rank(rank: usize, quick: bool, out_dir: &std::path::Path) -> Result<(), String> {
    let e = |e: ParallelError| e.to_string();
    let dev = Device::cuda().map_err(|e| e.to_string())?;
    let comm = Nccl::from_env(dev).map_err(e)?;
    let (shapes, tokens): (&[Shape], &[usize]) = match quick {
        true => (&TINY, &[1, 8]),
        false => (&SHAPES, &TOKENS),
    };
    let (warm, samples) = if quick { (1, 3) } else { (5, 30) };
    let mut csv = String::from(
        "shape,tokens,impl,world,rank_tokens,median_us,p10_us,p90_us,collective_median_us,samples,device\n",
    );
    let device = dev.name().replace(' ', "_");
    for shape in shapes {
        let config = shape.config();
        let b = shape.bias.then(|| bias(shape.experts));
        let one = AssembledLayer::patterned_with_bias(dev, &config, SEED, b.as_deref())
            .map_err(|e| e.to_string())?;
        let tp = TensorParallel::patterned_on_device(dev, &config, SEED, b.as_deref(), rank, WORLD)
            .map_err(e)?;
        let ep = ExpertParallel::patterned_on_device(dev, &config, SEED, b.as_deref(), rank, WORLD)
            .map_err(e)?;
        for &t in tokens {
            let h = shape.hidden;
            let x_all: Vec<bf16> = patterned(t * h, crate::ch04::HIDDEN_SALT + t as u64, 1.0)
                .into_iter()
                .map(bf16::from_f32)
                .collect();
            let x = dev.upload(&x_all).map_err(|e| e.to_string())?;
            // Expert parallelism: rank 0 the first ⌈T/2⌉ tokens, rank 1 the rest.
            let first = t.div_ceil(WORLD);
            let mine = match rank {
                0 => 0..first,
                _ => first..t,
            };
            let x_ep = dev
                .upload(&x_all[mine.start * h..mine.end * h])
                .map_err(|e| e.to_string())?;
            let ws_one = one.workspace(t).map_err(|e| e.to_string())?;
            let ws_tp = tp.layer().workspace(t).map_err(|e| e.to_string())?;
            let out = dev.alloc::<f32>(t * h).map_err(|e| e.to_string())?;
            let mut out_tp = dev.alloc::<f32>(t * h).map_err(|e| e.to_string())?;
            let out_ep = dev
                .alloc::<f32>(mine.len() * h)
                .map_err(|e| e.to_string())?;
            let timed = Timed {
                inner: &comm,
                spent_us: Cell::new(0.0),
            };
            let spent = |f: &dyn Fn() -> Result<(), ParallelError>| -> Result<f64, String> {
                timed.spent_us.set(0.0);
                f().map_err(e)?;
                Ok(timed.spent_us.get())
            };
            let runs: [(&str, usize, Samples); 3] = [
                (
                    "one_gpu",
                    t,
                    time(dev, warm, samples, || {
                        one.enqueue(&ws_one, &x, &out).map_err(|e| e.to_string())?;
                        Ok(0.0)
                    })?,
                ),
                (
                    "tp",
                    t,
                    time(dev, warm, samples, || {
                        timed.spent_us.set(0.0);
                        tp.enqueue(&timed, &ws_tp, &x, &mut out_tp).map_err(e)?;
                        Ok(timed.spent_us.get())
                    })?,
                ),
                (
                    "ep",
                    mine.len(),
                    time(dev, warm, samples, || {
                        spent(&|| ep.run(&timed, mine.len(), &x_ep, &out_ep).map(|_| ()))
                    })?,
                ),
            ];
            for (name, rank_tokens, (mut total, mut c)) in runs {
                let (m, p10, p90) = stats(&mut total);
                let (cm, _, _) = stats(&mut c);
                csv.push_str(&format!(
                    "{},{t},{name},{WORLD},{rank_tokens},{m:.2},{p10:.2},{p90:.2},{cm:.2},{samples},{device}\n",
                    shape.name
                ));
                if rank == 0 {
                    eprintln!(
                        "ch12 {} T={t} {name}: {m:.1} µs (collective {cm:.1} µs)",
                        shape.name
                    );
                }
            }
        }
    }
    if rank == 0 {
        crate::common::write(&out_dir.join("ch12.csv"), &csv)?;
        eprintln!("ch12: wrote {}", out_dir.join("ch12.csv").display());
    }
    Ok(())
}
