//! The GPU primer's example: `cargo run --example primer`. One short run per section of
//! book/src/gpu-primer.md, each launching a kernel of `kernels/primer.cu`. The results are the
//! same on both backends; on the GPU it also times them with the book's harness
//! (`moe_kernels::measure`), and prints each measured number inside `⟨ ⟩` (the emulator measures
//! nothing and prints `⟨-⟩`), so the output has one shape everywhere and its snapshot
//! (tests/primer_example.rs) masks the numbers.

#[path = "shared/mod.rs"]
pub mod shared; // pub: tests/primer_example.rs calls its `device_error`

use moe_kernels::families::{primer as geo, PRIMER};
use moe_kernels::measure::{Harness, Measurement, Plan, Stats};
use moe_kernels::{args, BackendKind, Device, DeviceBuffer, KernelError, LaunchConfig, Module};
use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

type Error = Box<dyn std::error::Error>;

/// The GPU primer: one short run of a tiny kernel per section of the book's page "A GPU in one
/// page" (threads, warps and lanes; blocks and SMs; occupancy; shared memory and banks; caches;
/// coalescing; launches, graphs and dependent launch), on the GPU when there is one, else on the
/// CPU emulator. It takes no options.
#[derive(clap::Parser, Debug)]
#[command(name = "primer", about)]
pub struct Args {}

fn main() -> ExitCode {
    use clap::Parser;
    let _ = Args::parse(); // --help, or a usage error (any argument) with status 2
    shared::main_with(run)
}

/// `⟨value⟩` with `digits` decimals, or `⟨-⟩` where nothing was measured (the emulator).
fn m(v: Option<f64>, digits: usize) -> String {
    match v {
        Some(v) => format!("⟨{v:.digits$}⟩"),
        None => "⟨-⟩".to_string(),
    }
}

fn yes(ok: bool) -> &'static str {
    if ok {
        "yes"
    } else {
        "NO"
    }
}

/// Cold and warm medians in µs, and the cold rate in GB/s for `bytes` moved.
fn cold_warm(t: Option<&Measurement>, bytes: Option<f64>) -> String {
    let cold = t.map(|t| t.cold.median_us);
    let mut s = format!(
        "cold {} µs, warm {} µs",
        m(cold, 2),
        m(t.map(|t| t.warm.median_us), 2)
    );
    if let Some(b) = bytes {
        s += &format!(" ({} GB/s cold)", m(cold.map(|c| b / c / 1e3), 0));
    }
    s
}

/// Runs every section on `device` and writes what the book shows.
pub fn run(device: &'static Device, out: &mut dyn Write) -> Result<(), Error> {
    let module = device.load(&PRIMER)?;
    // The harness exists on the GPU only: it times CUDA graphs with CUDA events.
    let harness = match device.kind() {
        BackendKind::Cuda => Some(Harness::new(device, Plan::default())?),
        BackendKind::Emu => None,
    };
    let h = harness.as_ref();
    writeln!(
        out,
        "A GPU in one page: the primer's kernels on this backend."
    )?;
    writeln!(
        out,
        "Numbers in ⟨…⟩ are measured on this machine; the emulator times nothing (a dash)."
    )?;
    threads(device, &module, out)?;
    blocks(device, &module, h, out)?;
    banks(device, &module, h, out)?;
    let (copy, cold) = copies(device, &module, h, out)?;
    launches(device, &module, h, out)?;
    measurements(&copy, cold, h, out)?;
    Ok(())
}

// ANCHOR: launch_whoami
fn threads(device: &Device, module: &Module, out: &mut dyn Write) -> Result<(), Error> {
    writeln!(out, "\n== Threads, warps and lanes")?;
    let (blocks, threads) = (2u32, 64u32);
    let who = device.alloc::<i32>(4 * (blocks * threads) as usize)?;
    module.launch(
        "primer_whoami",
        LaunchConfig::blocks(blocks, threads),
        &args![&who],
    )?;
    let who = who.to_vec()?; // waits for the kernel, then copies to the host
                             // ANCHOR_END: launch_whoami
    writeln!(out, "primer_whoami, {blocks} blocks of {threads} threads:")?;
    writeln!(out, "  global  block  warp  lane")?;
    for g in [0, 1, 31, 32, 63, 64, 65, 127] {
        let w = &who[4 * g..4 * g + 4];
        writeln!(out, "  {:>6}  {:>5}  {:>4}  {:>4}", w[3], w[0], w[1], w[2])?;
    }
    let x: Vec<i32> = (1..=64).collect();
    let xs = device.upload(&x)?;
    let sums = device.alloc::<i32>(64)?;
    module.launch(
        "primer_warp_sum",
        LaunchConfig::blocks(1, 64),
        &args![&xs, &sums],
    )?;
    let sums = sums.to_vec()?;
    for warp in 0..2 {
        let lanes = &sums[32 * warp..32 * warp + 32];
        let host: i32 = x[32 * warp..32 * warp + 32].iter().sum();
        writeln!(
            out,
            "primer_warp_sum, warp {warp} (values {}..{}): every lane holds {}, the host's sum {host}: {}",
            x[32 * warp],
            x[32 * warp + 31],
            lanes[0],
            yes(lanes.iter().all(|&v| v == host))
        )?;
    }
    Ok(())
}

fn blocks(
    device: &Device,
    module: &Module,
    h: Option<&Harness>,
    out: &mut dyn Write,
) -> Result<(), Error> {
    writeln!(out, "\n== Blocks and SMs")?;
    let sms = device.multiprocessors().map(|n| n as f64);
    writeln!(out, "SMs on this device: {}", m(sms, 0))?;
    let blocks = 4;
    let n = blocks * geo::BLOCK_SUM_THREADS;
    let x: Vec<i32> = (0..n as i32).collect();
    let xs = device.upload(&x)?;
    let sums = device.alloc::<i32>(blocks)?;
    module.launch(
        "primer_block_sum",
        LaunchConfig::blocks(blocks as u32, geo::BLOCK_SUM_THREADS as u32),
        &args![&xs, &sums],
    )?;
    let sums = sums.to_vec()?;
    let host: Vec<i32> = x
        .chunks(geo::BLOCK_SUM_THREADS)
        .map(|c| c.iter().sum())
        .collect();
    let show = |v: &[i32]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    writeln!(
        out,
        "primer_block_sum, {blocks} blocks of {} over 0..{}: {}, as the host: {}",
        geo::BLOCK_SUM_THREADS,
        n - 1,
        show(&sums).join(" "),
        yes(sums == host)
    )?;

    writeln!(out, "\n== Occupancy")?;
    let copy = CopyRun::new(device, h, 16 << 20);
    for (what, warps_per_sm) in [("1 warp per SM", 1u32), ("64 warps per SM", 64)] {
        let t = copy.time(module, "primer_copy_coalesced", warps_per_sm)?;
        writeln!(
            out,
            "coalesced copy of {}, {what}: {}",
            copy.size(),
            cold_warm(t.as_ref(), Some(copy.moved()))
        )?;
    }
    Ok(())
}

fn banks(
    device: &Device,
    module: &Module,
    h: Option<&Harness>,
    out: &mut dyn Write,
) -> Result<(), Error> {
    writeln!(out, "\n== Registers, shared memory and banks")?;
    let (blocks, threads) = (2u32, 256u32);
    // Timed on 16 warps per SM: enough to keep each SM's shared memory busy.
    const PER_SM: u32 = 2;
    let sums = device.alloc::<i32>((blocks * threads) as usize)?;
    let mut times = Vec::new();
    for stride in [1i32, 32] {
        module.launch(
            "primer_banks",
            LaunchConfig::blocks(blocks, threads),
            &args![stride, &sums],
        )?;
        let ok = sums.to_vec()?.iter().all(|&s| s == geo::BANK_ROUNDS as i32);
        writeln!(
            out,
            "primer_banks, stride {stride:>2}: every thread read {} words and summed {}: {}",
            geo::BANK_ROUNDS,
            geo::BANK_ROUNDS,
            yes(ok)
        )?;
        let t = match (h, device.multiprocessors()) {
            (Some(h), Some(sms)) => {
                let grid = LaunchConfig::blocks(sms as u32 * PER_SM, threads);
                let big = device.alloc::<i32>(grid.grid.0 as usize * threads as usize)?;
                Some(h.measure(|| module.launch("primer_banks", grid, &args![stride, &big]))?)
            }
            _ => None,
        };
        times.push(t.map(|t| t.cold.median_us));
        writeln!(
            out,
            "  timed over {PER_SM} blocks of {threads} per SM: cold {} µs",
            m(*times.last().unwrap(), 2)
        )?;
    }
    let ratio = times[0].zip(times[1]).map(|(a, b)| b / a);
    writeln!(
        out,
        "stride 32 over stride 1 (32 lanes in one bank): {}×",
        m(ratio, 1)
    )?;

    writeln!(out, "\n== Caches and HBM")?;
    let l2 = h.map(|h| h.l2_and_flush_bytes().0 as f64 / (1 << 20) as f64);
    writeln!(out, "L2 cache on this device: {} MiB", m(l2, 0))?;
    let copy = CopyRun::new(device, h, 4 << 20);
    let t = copy.time(module, "primer_copy_coalesced", 64)?;
    writeln!(
        out,
        "coalesced copy of {} (fits in the L2): {}",
        copy.size(),
        cold_warm(t.as_ref(), Some(copy.moved()))
    )?;
    Ok(())
}

/// A copy of `n` floats: checked on both backends at a small size, timed on the GPU.
struct CopyRun<'h> {
    device: &'h Device,
    h: Option<&'h Harness>,
    n: usize,
}

impl<'h> CopyRun<'h> {
    fn new(device: &'h Device, h: Option<&'h Harness>, n: usize) -> Self {
        // `%` rather than `is_multiple_of`, which needs Rust 1.87 (the workspace's MSRV is 1.85).
        #[allow(clippy::manual_is_multiple_of)]
        let whole_warps = n % 32 == 0;
        assert!(whole_warps, "the strided copy takes a multiple of 32");
        CopyRun { device, h, n }
    }

    /// Bytes read plus bytes written.
    fn moved(&self) -> f64 {
        8.0 * self.n as f64
    }

    /// The size of one of the two buffers, `64 MiB`.
    fn size(&self) -> String {
        format!("{} MiB", (self.n * 4) >> 20)
    }

    /// Copies 2,048 floats with `kernel` (2 blocks of 64 threads, so the grid-stride loop runs
    /// 16 times) and says whether the output is the input.
    fn check(device: &Device, module: &Module, kernel: &str) -> Result<bool, Error> {
        let x: Vec<f32> = (0..2048).map(|i| i as f32).collect();
        let xs = device.upload(&x)?;
        let ys = device.alloc::<f32>(x.len())?;
        module.launch(
            kernel,
            LaunchConfig::blocks(2, 64),
            &args![&xs, &ys, x.len() as i64],
        )?;
        Ok(ys.to_vec()? == x)
    }

    // ANCHOR: measure_copy
    /// Times `kernel` over `n` floats with `warps_per_sm` warps on each SM; `None` on the
    /// emulator.
    fn time(
        &self,
        module: &Module,
        kernel: &str,
        warps_per_sm: u32,
    ) -> Result<Option<Measurement>, Error> {
        let (Some(h), Some(sms)) = (self.h, self.device.multiprocessors()) else {
            return Ok(None);
        };
        let (from, to) = (
            self.device.zeros::<f32>(self.n)?,
            self.device.alloc::<f32>(self.n)?,
        );
        let threads = 32 * warps_per_sm.min(8); // at most 256 threads a block
        let grid = LaunchConfig::blocks(sms as u32 * warps_per_sm.div_ceil(8), threads);
        let n = self.n as i64;
        // Captured once into a CUDA graph; medians of 200 cold and 50 warm replays.
        Ok(Some(h.measure(|| {
            module.launch(kernel, grid, &args![&from, &to, n])
        })?))
    }
    // ANCHOR_END: measure_copy
}

/// Checks both copies, times them over 64 MiB; returns the coalesced copy and its cold median.
fn copies<'h>(
    device: &'h Device,
    module: &Module,
    h: Option<&'h Harness>,
    out: &mut dyn Write,
) -> Result<(CopyRun<'h>, Option<f64>), Error> {
    writeln!(out, "\n== Coalescing")?;
    for kernel in ["primer_copy_coalesced", "primer_copy_strided"] {
        writeln!(
            out,
            "{kernel}, 2,048 floats by 2 blocks of 64 threads: the output is the input: {}",
            yes(CopyRun::check(device, module, kernel)?)
        )?;
    }
    let copy = CopyRun::new(device, h, 16 << 20);
    let mut cold = Vec::new();
    for kernel in ["primer_copy_coalesced", "primer_copy_strided"] {
        let t = copy.time(module, kernel, 64)?;
        cold.push(t.as_ref().map(|t| t.cold.median_us));
        writeln!(
            out,
            "{kernel}, {}: {}",
            copy.size(),
            cold_warm(t.as_ref(), Some(copy.moved()))
        )?;
    }
    let ratio = cold[0].zip(cold[1]).map(|(a, b)| b / a);
    writeln!(out, "strided over coalesced, cold: {}×", m(ratio, 1))?;

    Ok((copy, cold[0]))
}

fn launches(
    device: &Device,
    module: &Module,
    h: Option<&Harness>,
    out: &mut dyn Write,
) -> Result<(), Error> {
    writeln!(out, "\n== Launches and streams")?;
    let n = 1024;
    let w: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let host: Vec<f32> = (0..n).map(|i| w[i] * (i + 1) as f32).collect();
    let (ws, x, y) = (
        device.upload(&w)?,
        device.alloc::<f32>(n)?,
        device.alloc(n)?,
    );
    // ANCHOR: stream_pair
    let pair = |dependent: bool, y: &DeviceBuffer<f32>| -> Result<(), KernelError> {
        let cfg = LaunchConfig::for_elements(n, 256);
        module.launch("primer_produce", cfg, &args![&x, n as i32])?;
        let cfg = if dependent { cfg.dependent() } else { cfg };
        module.launch("primer_consume", cfg, &args![&ws, &x, y, n as i32])
    };
    // ANCHOR_END: stream_pair
    pair(false, &y)?;
    let same = |y: &DeviceBuffer<f32>| -> Result<bool, Error> { Ok(y.to_vec()? == host) };
    writeln!(
        out,
        "primer_produce then primer_consume on one stream, no wait between: y = w * x: {}",
        yes(same(&y)?)
    )?;
    let per_launch = match h {
        Some(_) => {
            let start = Instant::now();
            for _ in 0..1000 {
                module.launch("primer_empty", LaunchConfig::blocks(1, 32), &[])?;
            }
            device.synchronize()?;
            Some(start.elapsed().as_secs_f64() * 1e6 / 1000.0)
        }
        None => None,
    };
    writeln!(
        out,
        "1,000 empty launches from the host, then one wait: {} µs each",
        m(per_launch, 2)
    )?;
    let empty = h.map(|h| h.empty_kernel()).transpose()?;
    writeln!(
        out,
        "one empty launch in a graph, as the harness times it: {}",
        cold_warm(empty.as_ref(), None)
    )?;

    writeln!(out, "\n== CUDA graphs")?;
    let eight = || -> Result<(), KernelError> {
        for _ in 0..8 {
            module.launch("primer_empty", LaunchConfig::blocks(1, 32), &[])?;
        }
        Ok(())
    };
    let direct = match h {
        Some(_) => {
            let mut us = Vec::new();
            for _ in 0..51 {
                let start = Instant::now();
                eight()?;
                device.synchronize()?;
                us.push(start.elapsed().as_secs_f64() * 1e6);
            }
            Stats::of(us).map(|s| s.median_us)
        }
        None => None,
    };
    writeln!(
        out,
        "8 empty launches from the host, then a wait (median of 51): {} µs",
        m(direct, 2)
    )?;
    let graph = h.map(|h| h.measure(eight)).transpose()?;
    writeln!(
        out,
        "the same 8 captured in one graph and replayed: {}",
        cold_warm(graph.as_ref(), None)
    )?;

    writeln!(out, "\n== Programmatic dependent launch")?;
    let y2 = device.alloc::<f32>(n)?;
    pair(true, &y2)?;
    writeln!(
        out,
        "primer_consume as a dependent launch: the same y: {}",
        yes(same(&y2)?)
    )?;
    for dependent in [false, true] {
        let t = h.map(|h| h.measure(|| pair(dependent, &y))).transpose()?;
        let what = if dependent { "dependent" } else { "plain" };
        writeln!(
            out,
            "produce + consume, {what:>9}: {}",
            cold_warm(t.as_ref(), None)
        )?;
    }
    Ok(())
}

/// The floor of the coalesced copy, from the same run: one empty launch (cold median) plus the
/// bytes it must move at the device's copy rate, measured as the book's benches measure it (one
/// 1 GiB device-to-device copy: a 64 MiB copy runs below the rate the GPU sustains).
fn measurements(
    copy: &CopyRun,
    cold: Option<f64>,
    h: Option<&Harness>,
    out: &mut dyn Write,
) -> Result<(), Error> {
    writeln!(out, "\n== Reading this book's measurements")?;
    let (empty, rate) = match h {
        Some(h) => (
            Some(h.empty_kernel()?.cold.median_us),
            Some(h.copy_bandwidth(1 << 30)?),
        ),
        None => (None, None),
    };
    let floor = empty.zip(rate).map(|(e, r)| e + copy.moved() / (r * 1e3));
    writeln!(
        out,
        "floor of the {} copy = one launch {} µs + 2 × {} at the copy rate of 1 GiB, {} GB/s = {} µs",
        copy.size(),
        m(empty, 2),
        copy.size(),
        m(rate, 0),
        m(floor, 2)
    )?;
    writeln!(
        out,
        "primer_copy_coalesced, cold median: {} µs, {}× its floor",
        m(cold, 2),
        m(cold.zip(floor).map(|(c, f)| c / f), 2)
    )?;
    Ok(())
}
