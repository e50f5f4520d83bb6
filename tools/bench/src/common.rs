//! What every chapter's bench shares: the command line of a GPU chapter, the progress bar, the
//! bf16 rate that every floor's FLOP side comes from, writing a result file, and the host's name
//! for the CSVs. (The chapters' modules call these; main.rs only dispatches.)

use indicatif::{ProgressBar, ProgressStyle};
use moe_kernels::blas::{linear, Linear};
use moe_kernels::measure::Harness;
use moe_kernels::Device;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct GpuArgs {
    /// Where the CSVs go.
    #[arg(long, default_value = "bench/results/h200")]
    pub out_dir: PathBuf,
    /// The PyTorch peer's samples to merge (from `tools/peers/router5.py [--chapter ch05]
    /// --samples`).
    #[arg(long)]
    pub peers: Option<PathBuf>,
    /// Fewer samples: a smoke test of the pipeline, not numbers to publish (chapter 5 without a
    /// GPU: every case built and checked on the emulator at a few rows; also
    /// `MOE_BENCH_QUICK=1`).
    #[arg(long)]
    pub quick: bool,
}

pub fn bar(len: usize, prefix: &str) -> ProgressBar {
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
pub fn bf16_rate(h: &Harness, dev: &'static Device) -> Result<f64, String> {
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

pub fn write(path: &Path, text: &str) -> Result<(), String> {
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The first CPU model name (commas dropped, for the CSVs), or the architecture.
pub fn host() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().replace(',', " "))
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}
