//! `cargo run -p ch10-precision --bin ch10-flips -- --out-dir bench/results/cpu`: the chapter's
//! numbers. Sums 100,000 rows of each shape three ways (fp64, fp32 in order, fp32 in the tiny
//! GEMM's order), counts how often each arithmetic selects another expert set than fp64, and
//! runs one flip through chapter 2's layer; writes `ch10_flips.csv`, `ch10_cases.csv`,
//! `ch10_gaps.csv` and `ch10_flip_output.csv`. Deterministic: the same files on every machine
//! and with any `--threads`. A minute or two on 2 cores (a progress bar on a terminal).

use ch10_precision::flips::{cases_csv, flips_csv, gaps_csv, run_shape, Options};
use ch10_precision::output::{one_flip, output_csv, TOKENS};
use ch10_precision::SHAPES;
use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Parser)]
#[command(about = "Chapter 10's flip rates against the fp64 router, written as CSVs.")]
struct Args {
    /// Where the CSVs go.
    #[arg(long, default_value = "bench/results/cpu")]
    out_dir: PathBuf,
    /// Rows per shape.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    rows: u64,
    /// Threads to sum on (the counts do not depend on it).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=256))]
    threads: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), String> {
    if !args.out_dir.is_dir() {
        return Err(format!(
            "--out-dir {} is not a folder (create it first)",
            args.out_dir.display()
        ));
    }
    let start = Instant::now();
    let opts = Options {
        rows: args.rows as usize,
        threads: args.threads as usize,
    };
    let bar = ProgressBar::new(args.rows * SHAPES.len() as u64);
    bar.set_style(
        ProgressStyle::with_template("{msg:24} [{bar:30}] {pos}/{len} rows, {elapsed} (eta {eta})")
            .map_err(|e| e.to_string())?
            .progress_chars("=> "),
    );
    let mut tallies = Vec::new();
    for shape in &SHAPES {
        bar.set_message(shape.title);
        tallies.push(run_shape(shape, opts, &|n| bar.inc(n as u64)));
    }
    bar.finish_and_clear();
    let tokens = one_flip(TOKENS).map_err(|e| e.to_string())?;
    let files = [
        ("ch10_flips.csv", flips_csv(&tallies)),
        ("ch10_cases.csv", cases_csv(&tallies)),
        ("ch10_gaps.csv", gaps_csv(&tallies)),
        ("ch10_flip_output.csv", output_csv(&tokens)),
    ];
    for (name, text) in &files {
        let p = args.out_dir.join(name);
        std::fs::write(&p, text).map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    }
    let flips: u64 = tallies
        .iter()
        .flat_map(|t| &t.cases)
        .flat_map(|c| &c.arith)
        .map(|a| a.flips)
        .sum();
    eprintln!(
        "ch10-flips: {} rows × {} shapes, {flips} flips over every arithmetic, {} tokens through \
         the layer; wrote {} CSVs to {} in {:.0?}",
        args.rows,
        SHAPES.len(),
        TOKENS,
        files.len(),
        args.out_dir.display(),
        start.elapsed()
    );
    Ok(())
}
