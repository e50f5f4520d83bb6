//! `tools/bench` — measures a chapter's kernels on the GPU with the harness of
//! `moe_kernels::measure` and writes `bench/results/<gpu>/<chapter>.csv`, one row per
//! (shape, implementation, rows), with the floor of that shape and rows beside every time and
//! the PyTorch peer rows (measured in the same GPU session by `tools/peers/*.py`) merged in.
//!
//!     tools/bench ch01 --out bench/results/h200/ch01.csv \
//!         [--peers RESULTS/ch01_torch.csv] [--ceilings RESULTS/ceilings.csv] [--quick]

use ch01_router::chain::{FiveLineChain, GateShape};
use ch01_router::config::RouterConfig;
use ch01_router::inputs::patterned;
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use moe_kernels::measure::{Harness, Measurement, Plan};
use moe_kernels::{Device, KernelError};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "bench",
    about = "Measures the book's kernels on the GPU (cold and warm, in CUDA graphs)"
)]
struct Cli {
    #[command(subcommand)]
    chapter: Chapter,
}

#[derive(Subcommand)]
enum Chapter {
    /// Chapter 1: the five-line router as a chain of plain kernels.
    Ch01(Ch01Args),
}

#[derive(clap::Args)]
struct Ch01Args {
    /// Where to write the CSV.
    #[arg(long, default_value = "bench/results/h200/ch01.csv")]
    out: PathBuf,
    /// PyTorch peer rows to merge (same columns), from tools/peers/router5.py.
    #[arg(long)]
    peers: Option<PathBuf>,
    /// Ceilings measured by the peer script (`bf16_tflops,copy_gbs`); without it the floor uses
    /// our own copy bandwidth and DESIGN.md's 680 TFLOP/s.
    #[arg(long)]
    ceilings: Option<PathBuf>,
    /// Fewer samples (a smoke test).
    #[arg(long)]
    quick: bool,
}

/// The CSV columns, shared with tools/peers/router5.py and tools/plot.
/// The per-kernel breakdown: the chain's first `step` launches timed alone (prefix), and the
/// difference to the previous prefix (the kernel's share).
const STEPS_HEADER: &str =
    "chapter,shape,rows,step,kernel,prefix_cold_us,prefix_warm_us,cold_us,warm_us";

const HEADER: &str = "chapter,shape,impl,rows,launches,cold_median_us,cold_p10_us,cold_p90_us,warm_median_us,warm_p10_us,warm_p90_us,floor_us,samples,device";

/// One benchmarked router shape.
struct Shape {
    name: &'static str,
    hidden: usize,
    experts: usize,
    config: RouterConfig,
    bias: bool,
}

fn shapes() -> Vec<Shape> {
    vec![
        // GLM-5.3-Flash's router (the router article): sigmoid + selection bias, 288 experts, k = 8.
        Shape {
            name: "glm_h4096_e288_k8",
            hidden: 4096,
            experts: 288,
            config: RouterConfig::glm5(8),
            bias: true,
        },
        // Qwen3-30B-A3B's router: softmax over 128 experts, k = 8, renormalised.
        Shape {
            name: "qwen3_h2048_e128_k8",
            hidden: 2048,
            experts: 128,
            config: RouterConfig::qwen3(8),
            bias: false,
        },
    ]
}

const ROWS: [usize; 5] = [1, 6, 16, 96, 8192];

/// The floor of one router call: one launch plus the larger of moving its bytes at the copy
/// bandwidth and doing its FLOPs at the bf16 matrix rate.
fn floor_us(launch_us: f64, bytes: f64, flops: f64, copy_gbs: f64, bf16_tflops: f64) -> f64 {
    launch_us + (bytes / (copy_gbs * 1e3)).max(flops / (bf16_tflops * 1e6))
}

fn row(shape: &str, imp: &str, rows: usize, m: &Measurement, floor: f64, device: &str) -> String {
    format!(
        "ch01,{shape},{imp},{rows},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{},{device}",
        m.launches,
        m.cold.median_us,
        m.cold.p10_us,
        m.cold.p90_us,
        m.warm.median_us,
        m.warm.p10_us,
        m.warm.p90_us,
        floor,
        m.cold.samples
    )
}

fn read_ceilings(path: &Path) -> Result<(f64, f64), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    let vals: Vec<&str> = lines
        .next()
        .ok_or(format!("{}: no data row", path.display()))?
        .split(',')
        .collect();
    let get = |name: &str| -> Result<f64, String> {
        let i = head
            .iter()
            .position(|h| h.trim() == name)
            .ok_or(format!("{}: no column {name}", path.display()))?;
        vals.get(i)
            .and_then(|v| v.trim().parse().ok())
            .ok_or(format!("{}: bad {name}", path.display()))
    };
    Ok((get("bf16_tflops")?, get("copy_gbs")?))
}

fn ch01(args: &Ch01Args) -> Result<(), String> {
    let dev = Device::cuda().map_err(|e| format!("bench needs the GPU: {e}"))?;
    let plan = if args.quick {
        Plan {
            cold_samples: 20,
            warm_samples: 5,
            warm_copies: 5,
        }
    } else {
        Plan::default()
    };
    let h = Harness::new(dev, plan).map_err(|e| e.to_string())?;
    let device = dev
        .describe()
        .split(',')
        .next()
        .unwrap_or("gpu")
        .trim()
        .replace(' ', "_");
    let ke = |e: KernelError| e.to_string();

    let own_copy = h.copy_bandwidth(1 << 30).map_err(ke)?;
    let (bf16_tflops, copy_gbs) = match &args.ceilings {
        Some(p) => read_ceilings(p)?,
        None => (680.0, own_copy),
    };
    let empty = h.empty_kernel().map_err(ke)?;
    let (l2, flush) = h.l2_and_flush_bytes();
    eprintln!(
        "{}: L2 {} MiB, flush {} MiB; copy {own_copy:.0} GB/s (ours), ceilings used: copy {copy_gbs:.0} GB/s, bf16 {bf16_tflops:.0} TFLOP/s; empty kernel cold {:.2} µs, warm {:.2} µs",
        dev.describe(),
        l2 >> 20,
        flush >> 20,
        empty.cold.median_us,
        empty.warm.median_us
    );

    let mut csv = String::from(HEADER);
    csv.push('\n');
    let mut steps = String::from(STEPS_HEADER);
    steps.push('\n');
    writeln!(
        csv,
        "{}",
        row(
            "none",
            "empty_kernel",
            0,
            &empty,
            empty.cold.median_us,
            &device
        )
    )
    .unwrap();

    let total = (shapes().len() * ROWS.len()) as u64;
    let bar = ProgressBar::new(total).with_style(
        ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg}")
            .unwrap()
            .progress_chars("=> "),
    );
    bar.set_prefix("ch01");
    for s in shapes() {
        let weight = patterned(s.experts * s.hidden, 1, 0.02);
        let bias: Vec<f32> = patterned(s.experts, 2, 0.05)
            .iter()
            .map(|b| 8.0 + b)
            .collect();
        let weight_d = dev.upload(&weight).map_err(ke)?;
        let bias_d = if s.bias {
            Some(dev.upload(&bias).map_err(ke)?)
        } else {
            None
        };
        for rows in ROWS {
            bar.set_message(format!("{} rows {rows}", s.name));
            let shape = GateShape {
                rows,
                hidden: s.hidden,
                experts: s.experts,
            };
            let hidden = dev
                .upload(&patterned(rows * s.hidden, 3 + rows as u64, 1.0))
                .map_err(ke)?;
            let chain = FiveLineChain::new(dev, &s.config, shape, s.bias.then_some(&bias[..]))
                .map_err(|e| e.to_string())?;
            let ids = dev.alloc::<i32>(rows * s.config.k).map_err(ke)?;
            let ws = dev.alloc::<f32>(rows * s.config.k).map_err(ke)?;
            let m = h
                .measure(|| chain.enqueue(&hidden, &weight_d, bias_d.as_ref(), &ids, &ws))
                .map_err(|e| e.to_string())?;
            // What the five-line fp32 router must move: hidden and gate weight in, bias in,
            // ids and weights out.
            let read = 4.0 * (rows * s.hidden + s.experts * s.hidden + s.experts) as f64;
            let bytes = read + 8.0 * (rows * s.config.k) as f64;
            let flops = 2.0 * (rows * s.hidden * s.experts) as f64;
            let floor = floor_us(empty.cold.median_us, bytes, flops, copy_gbs, bf16_tflops);
            writeln!(csv, "{}", row(s.name, "chain", rows, &m, floor, &device)).unwrap();
            // Where the time goes: time each prefix of the chain (its first 1, 2, ... launches)
            // and take differences of the medians.
            let names = chain.launch_names();
            let (mut prev_cold, mut prev_warm) = (0.0, 0.0);
            for (i, name) in names.iter().enumerate() {
                let p = if i + 1 == names.len() {
                    m
                } else {
                    h.measure(|| {
                        chain.enqueue_first(i + 1, &hidden, &weight_d, bias_d.as_ref(), &ids, &ws)
                    })
                    .map_err(|e| e.to_string())?
                };
                writeln!(
                    steps,
                    "ch01,{},{rows},{},{name},{:.3},{:.3},{:.3},{:.3}",
                    s.name,
                    i + 1,
                    p.cold.median_us,
                    p.warm.median_us,
                    p.cold.median_us - prev_cold,
                    p.warm.median_us - prev_warm
                )
                .unwrap();
                (prev_cold, prev_warm) = (p.cold.median_us, p.warm.median_us);
            }
            let probe = h.read_probe(read as usize).map_err(ke)?;
            writeln!(
                csv,
                "{}",
                row(s.name, "floor_probe", rows, &probe, floor, &device)
            )
            .unwrap();
            bar.inc(1);
        }
    }
    bar.finish_and_clear();

    if let Some(p) = &args.peers {
        let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
        for line in text.lines().skip(1).filter(|l| !l.trim().is_empty()) {
            // The peer script leaves floor_us empty: fill it from this run's floor of the same
            // shape and rows, so the two share one floor.
            let cols: Vec<&str> = line.split(',').collect();
            let floor = csv
                .lines()
                .find(|l| {
                    let c: Vec<&str> = l.split(',').collect();
                    c.len() > 11 && c[1] == cols[1] && c[2] == "chain" && c[3] == cols[3]
                })
                .map(|l| l.split(',').nth(11).unwrap().to_string())
                .unwrap_or_default();
            let mut cols: Vec<String> = cols.iter().map(|c| c.to_string()).collect();
            if cols.len() == 14 {
                cols[11] = floor;
            }
            writeln!(csv, "{}", cols.join(",")).unwrap();
        }
    }
    if let Some(dir) = args.out.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::write(&args.out, &csv).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let steps_path = args.out.with_file_name("ch01_steps.csv");
    std::fs::write(&steps_path, &steps).map_err(|e| format!("{}: {e}", steps_path.display()))?;

    // The summary a reader reads first: cold medians beside the floor.
    println!(
        "{:<22} {:>5} {:<12} {:>9} {:>9} {:>9} {:>8}",
        "shape", "rows", "impl", "cold µs", "warm µs", "floor µs", "launches"
    );
    for l in csv.lines().skip(1) {
        let c: Vec<&str> = l.split(',').collect();
        println!(
            "{:<22} {:>5} {:<12} {:>9} {:>9} {:>9} {:>8}",
            c[1], c[3], c[2], c[5], c[8], c[11], c[4]
        );
    }
    println!("wrote {} and {}", args.out.display(), steps_path.display());
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.chapter {
        Chapter::Ch01(a) => ch01(a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e}");
            ExitCode::FAILURE
        }
    }
}
