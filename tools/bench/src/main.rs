//! `tools/bench` — measures a chapter's cases on the GPU with the harness of
//! `moe_kernels::measure` and writes `bench/results/<gpu>/<chapter>.csv` (one typed row per
//! case, `moe_tools::bench_row`), the per-kernel breakdown (`<chapter>_steps.csv`), the
//! ceilings the floors come from (`ceilings.csv`), and what a writing L2 flush would have added
//! (`flush.csv`); the PyTorch peers' samples (`tools/peers/*.py --samples`) are summarised by the
//! same statistics and merged in. `bench emu` measures the emulator's GEMM rate on the CPU.
//!
//!     tools/bench/run ch01 --out-dir bench/results/h200 [--peers RESULTS/ch01_torch.csv] [--quick]
//!     tools/bench/run emu --build after [--out bench/results/cpu/emu_gemm.csv]

mod cases;
mod ch01;
mod emu;
mod peers;

use cases::{row, run_case, BenchError, Case, Ceilings};
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use moe_kernels::blas::{linear, Linear};
use moe_kernels::measure::{Harness, Plan};
use moe_kernels::Device;
use moe_tools::bench_row::{header, BenchRow, StepRow, STEP_COLUMNS};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "bench",
    about = "Measures the book's kernels on the GPU (cold and warm, in CUDA graphs), or the emulator's speed on the CPU"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Chapter 1: the five-line router as a chain of plain kernels (GPU).
    Ch01(GpuArgs),
    /// The emulator's GEMM rate on this CPU (no GPU needed).
    Emu(EmuArgs),
}

#[derive(clap::Args)]
struct GpuArgs {
    /// Where the CSVs go.
    #[arg(long, default_value = "bench/results/h200")]
    out_dir: PathBuf,
    /// The PyTorch peer's samples to merge (from `tools/peers/router5.py --samples`).
    #[arg(long)]
    peers: Option<PathBuf>,
    /// Fewer samples: a smoke test of the pipeline, not numbers to publish.
    #[arg(long)]
    quick: bool,
}

#[derive(clap::Args)]
struct EmuArgs {
    /// The label of this build in the CSV (`before`, `after`).
    #[arg(long)]
    build: String,
    /// Append the rows here (the file gets a header when new).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Runs per kernel; the fastest counts.
    #[arg(long, default_value_t = 3)]
    repeats: usize,
}

fn bar(len: usize, prefix: &str) -> ProgressBar {
    let b = ProgressBar::new(len as u64).with_style(
        ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    b.set_prefix(prefix.to_string());
    b
}

/// The bf16 matrix rate of cuBLAS on this GPU (an 8192³ GEMM, median of 10 after warm-up), in
/// TFLOP/s: the FLOP side of every floor.
fn bf16_rate(h: &Harness, dev: &'static Device) -> Result<f64, String> {
    let n = 8192;
    let e = |e: moe_kernels::KernelError| e.to_string();
    let v = |salt: u64| -> Vec<half::bf16> {
        ch01_router::inputs::patterned(n * n, salt, 1.0)
            .into_iter()
            .map(half::bf16::from_f32)
            .collect()
    };
    let (a, b) = (
        dev.upload(&v(11)).map_err(e)?,
        dev.upload(&v(12)).map_err(e)?,
    );
    let c = dev.alloc::<half::bf16>(n * n).map_err(e)?;
    let shape = Linear {
        rows: n,
        in_features: n,
        out_features: n,
    };
    let m = h
        .measure(|| linear(dev, shape, &a.as_view(), &b.as_view(), &c.as_view(), false))
        .map_err(e)?;
    Ok(2.0 * (n as f64).powi(3) / (m.warm.median_us * 1e6))
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

fn gpu_chapter(chapter: &str, cases: Vec<Case>, args: &GpuArgs) -> Result<(), String> {
    let dev = Device::cuda().map_err(|e| format!("bench needs the GPU: {e}"))?;
    let plan = if args.quick {
        Plan::quick()
    } else {
        Plan::default()
    };
    let h = Harness::new(dev, plan).map_err(|e| e.to_string())?;
    let device = dev.name().replace(' ', "_");
    let empty = h.empty_kernel().map_err(|e| e.to_string())?;
    let ceilings = Ceilings {
        launch_us: empty.cold.median_us,
        copy_gbs: h.copy_bandwidth(1 << 30).map_err(|e| e.to_string())?,
        bf16_tflops: bf16_rate(&h, dev)?,
    };
    let (l2, flush) = h.l2_and_flush_bytes();
    eprintln!(
        "{}: L2 {} MiB, flush {} MiB (read); copy {:.0} GB/s, bf16 cuBLAS {:.0} TFLOP/s; empty kernel cold {:.2} µs, warm {:.2} µs",
        dev.describe(),
        l2 >> 20,
        flush >> 20,
        ceilings.copy_gbs,
        ceilings.bf16_tflops,
        empty.cold.median_us,
        empty.warm.median_us
    );

    let mut rows: Vec<BenchRow> = vec![row(
        chapter,
        "none",
        "empty_kernel",
        0,
        &empty,
        empty.cold.median_us,
        0.0,
        0.0,
        &device,
    )];
    // Settle first: the 8192³ cuBLAS GEMM above leaves the GPU busy-hot, and the first case
    // measured right after it came out 17% slow in one run (31.8 µs cold against 27.2 µs for the
    // same work measured later in that run). One discarded measurement of the first case.
    if let Some(first) = cases.first() {
        let work = (first.build)(dev)?;
        h.measure(|| work.enqueue().map_err(BenchError))
            .map_err(|e| e.0)?;
    }
    let mut steps: Vec<StepRow> = Vec::new();
    let b = bar(cases.len(), chapter);
    for case in &cases {
        b.set_message(format!("{} {} rows {}", case.shape, case.imp, case.rows));
        let (r, s) = run_case(&h, dev, case, &ceilings, &device)
            .map_err(|e| format!("{} {} rows {}: {e}", case.shape, case.imp, case.rows))?;
        rows.extend(r);
        steps.extend(s);
        b.inc(1);
    }
    b.finish_and_clear();

    // What flushing the L2 by writing would have added, at the smallest and largest case.
    let mut flush_csv =
        String::from("shape,rows,cold_read_flush_us,cold_write_flush_us,write_minus_read_us\n");
    for case in cases
        .iter()
        .filter(|c| c.rows == 1 || c.rows == 8192)
        .take(2)
    {
        let work = (case.build)(dev)?;
        let (write, read) = h
            .flush_cost_of_writing(|| work.enqueue().map_err(BenchError))
            .map_err(|e| e.0)?;
        // The same work was measured in the main loop: two measurements of one thing in one
        // run must agree, or the run was disturbed.
        if let Some(main) = rows
            .iter()
            .find(|r| r.shape == case.shape && r.rows == case.rows as u64 && r.imp == case.imp)
        {
            let drift = (read.median_us / main.cold_median_us - 1.0) * 100.0;
            if drift.abs() > 5.0 {
                eprintln!(
                    "bench: WARNING {} {} rows {}: cold {:.3} µs in the main loop but {:.3} µs when measured again ({drift:+.1}%): the run was disturbed",
                    case.shape, case.imp, case.rows, main.cold_median_us, read.median_us
                );
            }
        }
        flush_csv += &format!(
            "{},{},{:.3},{:.3},{:.3}\n",
            case.shape,
            case.rows,
            read.median_us,
            write.median_us,
            write.median_us - read.median_us
        );
    }

    if let Some(p) = &args.peers {
        let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
        for peer in peers::parse(&text, &p.display().to_string())? {
            // The peer shares the floor (and its bytes and FLOPs) of our case at its shape and rows.
            let mine = cases
                .iter()
                .find(|c| c.shape == peer.shape && c.rows == peer.rows)
                .ok_or(format!(
                    "peer row {} {} has no matching case",
                    peer.shape, peer.rows
                ))?;
            rows.push(row(
                &peer.chapter,
                &peer.shape,
                &peer.imp,
                peer.rows,
                &peer.m,
                ceilings.floor_us(mine.bytes, mine.flops),
                mine.bytes,
                mine.flops,
                &peer.device,
            ));
        }
    }

    let csv: String = std::iter::once(header())
        .chain(rows.iter().map(BenchRow::to_csv))
        .map(|l| l + "\n")
        .collect();
    let steps_csv: String = std::iter::once(STEP_COLUMNS.to_string())
        .chain(steps.iter().map(StepRow::to_csv))
        .map(|l| l + "\n")
        .collect();
    let out = &args.out_dir;
    write(&out.join(format!("{chapter}.csv")), &csv)?;
    write(&out.join(format!("{chapter}_steps.csv")), &steps_csv)?;
    write(
        &out.join("ceilings.csv"),
        &format!(
            "bf16_tflops,copy_gbs,empty_cold_us,empty_warm_us,device\n{:.1},{:.1},{:.3},{:.3},{device}\n",
            ceilings.bf16_tflops, ceilings.copy_gbs, empty.cold.median_us, empty.warm.median_us
        ),
    )?;
    write(&out.join("flush.csv"), &flush_csv)?;

    // The summary a reader reads first: each time beside its floor and its rate.
    println!(
        "{:<22} {:>5} {:<13} {:>9} {:>9} {:>9} {:>8} {:>9} {:>8}",
        "shape", "rows", "impl", "cold µs", "warm µs", "floor µs", "launches", "GB/s", "TFLOP/s"
    );
    for r in &rows {
        println!(
            "{:<22} {:>5} {:<13} {:>9.2} {:>9.2} {:>9.2} {:>8} {:>9.1} {:>8.3}",
            r.shape,
            r.rows,
            r.imp,
            r.cold_median_us,
            r.warm_median_us,
            r.floor_us,
            r.launches,
            r.cold_gbs,
            r.cold_tflops
        );
    }
    println!("flush by writing vs by reading:\n{flush_csv}");
    println!(
        "wrote {chapter}.csv, {chapter}_steps.csv, ceilings.csv and flush.csv in {}",
        out.display()
    );
    Ok(())
}

fn emu(args: &EmuArgs) -> Result<(), String> {
    eprintln!(
        "bench emu: the GEMMs of chapter 1's chain on the emulator ({})",
        Device::emu().describe()
    );
    let rates = emu::measure(args.repeats.max(1))?;
    let lines = emu::csv_lines(&args.build, &rates);
    println!("{}", emu::HEADER);
    for l in &lines {
        println!("{l}");
    }
    if let Some(p) = &args.out {
        let mut text = std::fs::read_to_string(p).unwrap_or_default();
        if text.trim().is_empty() {
            text = format!("{}\n", emu::HEADER);
        }
        for l in &lines {
            text += l;
            text.push('\n');
        }
        write(p, &text)?;
        println!("appended to {}", p.display());
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.cmd {
        Cmd::Ch01(a) => gpu_chapter("ch01", ch01::cases(), a),
        Cmd::Emu(a) => emu(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e}");
            ExitCode::FAILURE
        }
    }
}
