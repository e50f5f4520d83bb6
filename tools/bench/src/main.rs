//! `tools/bench` — measures a chapter's cases on the GPU with the harness of
//! `moe_kernels::measure` and writes `bench/results/<gpu>/<chapter>.csv` (one typed row per
//! case, `moe_tools::bench_row`), the per-kernel breakdown (`<chapter>_steps.csv`), the
//! ceilings the floors come from (`ceilings.csv`), and what a writing L2 flush would have added
//! (`flush.csv`); the PyTorch peers' samples (`tools/peers/*.py --samples`) are summarised by the
//! same statistics and merged in. `bench emu` measures the emulator's GEMM rate on the CPU.
//!
//! ```text
//! tools/bench/run ch01 --out-dir bench/results/h200 [--peers RESULTS/ch01_torch.csv] [--quick]
//! tools/bench/run emu --build after [--out bench/results/cpu/emu_gemm.csv]
//! tools/bench/run ch02 [--routing R --peers S --out-dir D | --export-routing R | --cpu] [--quick]
//! tools/bench/run ch03 [--ids F --peers S --out-dir D | --export-ids F | --hashes [--peer-hashes H] | --padding] [--quick]
//! tools/bench/run ch04 [--routing R --peers S --peer-outputs O --out-dir D | --export-routing R [--tiny]] [--quick]
//! tools/bench/run ch04-tune [--shapes qwen3,glm] [--tokens 1,2,4,…] [--out-dir D] [--quick]
//! tools/bench/run ch05 [--peers S --out-dir D] [--quick]
//! tools/bench/run ch06 [--out-dir D] [--quick]
//! tools/bench/run ch07 [--out-dir D] [--quick] [--fixtures DIR]
//! tools/bench/run ch08 [--out-dir D] [--quick]
//! tools/bench/run ch09 [--out-dir D] [--quick]
//! tools/bench/run ch10 [--out-dir D] [--quick]
//! tools/bench/run ch11 [--out-dir D] [--quick] | --flips 1,16,1024 [--flips-out F]
//! tools/bench/run ch12 [--out-dir D] [--quick]   (two GPUs: one process per GPU, started by itself)
//! ```

mod cases;
mod ch01;
mod ch02;
mod ch03;
mod ch04;
mod ch04_inputs;
mod ch04_tune;
mod ch04_variants;
mod ch05;
mod ch06;
mod ch07;
mod ch08;
mod ch09;
mod ch10;
mod ch11;
mod ch12;
mod common;
mod emu;
mod emu_hopper;
mod peers;

use cases::{BenchError, Case, Session};
use clap::{Parser, Subcommand};
use common::{bar, write, GpuArgs};
use moe_kernels::Device;
use moe_tools::bench_row::{BenchRow, StepRow, STEP_COLUMNS};
use std::path::PathBuf;
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
    /// Chapter 2: the loop grouped by expert, cuBLAS per expert (GPU); `--cpu`: the CPU loops.
    Ch02(ch02::Ch02Args),
    /// Chapter 3: the pairs sorted by expert and padded to tiles (GPU); `--hashes`: determinism;
    /// `--padding`: the share of padded slots (CPU).
    Ch03(ch03::Ch03Args),
    /// Chapter 4: the fused MoE layer against chapter 2's loop and PyTorch's grouped GEMM (GPU).
    Ch04(ch04::Ch04Args),
    /// Chapter 4's configurations by shape: times every tile configuration and decode geometry
    /// per batch bucket (GPU) into `ch04_tuned.csv`; `--quick` without a GPU: a smoke test.
    #[command(name = "ch04-tune")]
    Ch04Tune(ch04_tune::TuneArgs),
    /// Chapter 5: the fused router pair along the row axis, beside cuBLAS + the fused kernel,
    /// chapter 1's chain and PyTorch's five lines (GPU); `--quick` without a GPU: a smoke test.
    Ch05(GpuArgs),
    /// Chapter 6: the assembled layer, its router and its experts at chapter 4's token counts
    /// (GPU); `--quick` without a GPU: a smoke test.
    Ch06(GpuArgs),
    /// Chapter 7: a full-size decode step (Qwen3-30B-A3B's shapes) and its parts at batch 1, 8
    /// and 64 (GPU), and what bf16 changes on the fixtures (any backend; `--quick` without a GPU).
    Ch07(ch07::Ch07Args),
    /// Chapter 8: the routing stage along the row axis beside chapter 5's router + chapter 3's
    /// align, and the layer with it beside chapter 6's (GPU); `--quick` without a GPU: a smoke
    /// test.
    Ch08(GpuArgs),
    /// Chapter 9: the one-launch router along the row axis beside the pair + align and the
    /// GEMM + stage, and the layer with it (GPU); `--quick` without a GPU: a smoke test.
    Ch09(GpuArgs),
    /// Chapter 10: the batch decides the kernel (64 probe tokens at batch sizes 1 to 8,192,
    /// chapter 6's layer and the deterministic mode), and the mode's cost along T (GPU);
    /// `--quick` without a GPU: a smoke test.
    Ch10(GpuArgs),
    /// Chapter 11: a Kimi K3 layer's front separate, merged and with bf16 output at 1, 16 and
    /// 1,024 rows, and radix select against the k-round argmax (GPU); `--quick` without a GPU:
    /// a smoke test; `--flips`: the bf16-output variant's flip count along the rows (any backend).
    Ch11(ch11::Ch11Args),
    /// Chapter 12: tensor against expert parallelism on two GPUs over NCCL, beside the one-GPU
    /// layer, at 1 to 4,096 tokens, with the collective's share (needs two GPUs: refused
    /// otherwise).
    Ch12(ch12::Ch12Args),
    /// The emulator's GEMM rate on this CPU (no GPU needed).
    Emu(EmuArgs),
    /// Chapter 4's Hopper versions on the emulator beside the portable path (no GPU needed).
    #[command(name = "emu-hopper")]
    EmuHopper(EmuHopperArgs),
}

#[derive(clap::Args)]
struct EmuHopperArgs {
    /// Write the rows here (replacing the file).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Runs per configuration; the fastest counts.
    #[arg(long, default_value_t = 2)]
    repeats: usize,
}

/// `bench emu-hopper`: chapter 4's Hopper configurations timed on the emulator beside the
/// portable path (tools/bench/src/emu_hopper.rs), printed and written to `--out`.
fn emu_hopper(args: &EmuHopperArgs) -> Result<(), String> {
    eprintln!(
        "bench emu-hopper: chapter 4's Hopper versions on the emulator ({})",
        Device::emu().describe()
    );
    let rows = emu_hopper::measure(args.repeats)?;
    let text: String = std::iter::once(emu_hopper::HEADER.to_string())
        .chain(emu_hopper::csv_lines(&rows))
        .map(|l| l + "\n")
        .collect();
    print!("{text}");
    if let Some(p) = &args.out {
        write(p, &text)?;
        println!("wrote {}", p.display());
    }
    Ok(())
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

fn gpu_chapter(chapter: &str, cases: Vec<Case>, args: &GpuArgs) -> Result<(), String> {
    let dev = Device::cuda().map_err(|e| format!("bench needs the GPU: {e}"))?;
    let session = Session::start(dev, args.quick)?;
    let Session {
        h, empty, ceilings, ..
    } = &session;
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

    let mut rows: Vec<BenchRow> = vec![session.empty_row(chapter)];
    session.settle(&cases)?;
    let mut steps: Vec<StepRow> = Vec::new();
    let b = bar(cases.len(), chapter);
    for case in &cases {
        b.set_message(format!("{} {} rows {}", case.shape, case.imp, case.rows));
        let (r, s) = session
            .run(case)
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
        // The peer shares the floor (and its bytes and FLOPs) of our case at its shape and rows.
        rows.extend(cases::peers_file(p, &cases, ceilings)?);
    }

    let steps_csv: String = std::iter::once(STEP_COLUMNS.to_string())
        .chain(steps.iter().map(StepRow::to_csv))
        .map(|l| l + "\n")
        .collect();
    let out = &args.out_dir;
    write(&out.join(format!("{chapter}.csv")), &cases::csv(&rows))?;
    write(&out.join(format!("{chapter}_steps.csv")), &steps_csv)?;
    write(&out.join("ceilings.csv"), &session.ceilings_csv())?;
    write(&out.join("flush.csv"), &flush_csv)?;

    print!(
        "{}",
        cases::summary(
            &rows,
            &cases::SummaryLayout {
                shape_w: 22,
                rows_name: "rows",
                rows_w: 5,
                imp_w: 13,
                tflops_digits: 3,
            }
        )
    );
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
        Cmd::Ch02(a) => ch02::run(a),
        Cmd::Ch03(a) => ch03::run(a),
        Cmd::Ch04(a) => ch04::run(a),
        Cmd::Ch04Tune(a) => ch04_tune::run(a),
        Cmd::Ch05(a) => ch05::run(a),
        Cmd::Ch06(a) => ch06::run(a),
        Cmd::Ch07(a) => ch07::run(a),
        Cmd::Ch08(a) => ch08::run(a),
        Cmd::Ch09(a) => ch09::run(a),
        Cmd::Ch10(a) => ch10::run(a),
        Cmd::Ch11(a) => ch11::run(a),
        Cmd::Ch12(a) => ch12::run(a),
        Cmd::Emu(a) => emu(a),
        Cmd::EmuHopper(a) => emu_hopper(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e}");
            ExitCode::FAILURE
        }
    }
}
