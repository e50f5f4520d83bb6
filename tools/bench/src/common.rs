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

///
/// The book's H200 numbers live in `bench/results/h200/`, every chapter's default `--out-dir`. A
/// run on another GPU must not land there (the next `tools/plot` would print its numbers as the
/// H200's), so on a GPU whose name lacks `H200` a path inside that folder is written to
/// `bench/results/<this GPU>/` instead ([`other_gpu_folder`]), and stderr says so.
pub fn write(path: &Path, text: &str) -> Result<(), String> {
    let redirected = Device::cuda()
        .ok()
        .and_then(|d| other_gpu_folder(path, &d.name()));
    if let Some(to) = &redirected {
        eprintln!(
            "bench: {} holds the book's H200 numbers and this GPU is not an H200: writing {} \
             instead (give --out-dir to choose)",
            path.display(),
            to.display()
        );
    }
    let path = redirected.as_deref().unwrap_or(path);
    if let Some(d) = path.parent() {
        std::fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Where a file meant for the book's H200 folder goes on the GPU `gpu` (its device name): `None`
/// when the path is not inside a `bench/results/h200` folder or the GPU is an H200; else the same
/// path with `h200` replaced by the GPU's name, lower case, `NVIDIA` dropped, every run of other
/// characters one `_` (`NVIDIA A100-SXM4-80GB` → `a100_sxm4_80gb`).
pub fn other_gpu_folder(path: &Path, gpu: &str) -> Option<PathBuf> {
    if gpu.contains("H200") {
        return None;
    }
    let parts: Vec<_> = path.components().collect();
    let at = parts.windows(3).position(|w| {
        w[0].as_os_str() == "bench" && w[1].as_os_str() == "results" && w[2].as_os_str() == "h200"
    })? + 2;
    let mut slug = String::new();
    for c in gpu.trim_start_matches("NVIDIA").trim().chars() {
        if c.is_ascii_alphanumeric() {
            slug.push(c.to_ascii_lowercase());
        } else if !slug.is_empty() && !slug.ends_with('_') {
            slug.push('_');
        }
    }
    let slug = slug.trim_end_matches('_');
    let slug = if slug.is_empty() { "other_gpu" } else { slug };
    let mut out = PathBuf::new();
    for (i, c) in parts.iter().enumerate() {
        if i == at {
            out.push(slug);
        } else {
            out.push(c.as_os_str());
        }
    }
    Some(out)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_gpu_never_writes_into_the_books_h200_folder() {
        let p = Path::new("bench/results/h200/ch04.csv");
        // The H200 (whatever its full name) writes where it was told.
        assert_eq!(other_gpu_folder(p, "NVIDIA H200"), None);
        assert_eq!(other_gpu_folder(p, "NVIDIA H200 NVL"), None);
        // Another GPU writes beside it, in a folder of its own name.
        assert_eq!(
            other_gpu_folder(p, "NVIDIA A100-SXM4-80GB"),
            Some(PathBuf::from("bench/results/a100_sxm4_80gb/ch04.csv"))
        );
        assert_eq!(
            other_gpu_folder(
                Path::new("/home/me/moe/bench/results/h200/ch01.csv"),
                "NVIDIA H100 80GB HBM3"
            ),
            Some(PathBuf::from(
                "/home/me/moe/bench/results/h100_80gb_hbm3/ch01.csv"
            ))
        );
        assert_eq!(
            other_gpu_folder(p, "NVIDIA GeForce RTX 4090"),
            Some(PathBuf::from("bench/results/geforce_rtx_4090/ch04.csv"))
        );
        assert_eq!(
            other_gpu_folder(p, "???"),
            Some(PathBuf::from("bench/results/other_gpu/ch04.csv"))
        );
        // Any other folder is left alone, on any GPU.
        for q in [
            "/tmp/r/ch04.csv",
            "bench/results/cpu/ch02.csv",
            "bench/results/h200x2/ch12.csv",
            "h200/ch04.csv",
        ] {
            assert_eq!(
                other_gpu_folder(Path::new(q), "NVIDIA A100-SXM4-80GB"),
                None,
                "{q}"
            );
        }
    }
}
