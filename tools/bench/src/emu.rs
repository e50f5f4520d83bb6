//! The emulator's speed on the GEMMs of chapter 1's chain (CPU only): each of the three GEMM
//! kernels at a GLM-like shape, timed on the emulator, in GFLOP/s. The same work, before and
//! after a change to the emulator, says what the change bought.

use ch01_router::chain::{
    DeviceMatrix, DeviceRouter, FiveLineChain, GateInputs, GateShape, RouterOutputs,
};
use ch01_router::config::RouterConfig;
use ch01_router::inputs::patterned;
use moe_kernels::{record_launches, with_launch_budget, Device};
use std::time::Instant;

/// `(kernel, rows)`: one shape per GEMM kernel of the chain (few rows, x4, tiled).
const CASES: [(&str, usize); 3] = [
    ("router_gemm_f32", 8),
    ("router_gemm_f32_x4", 96),
    ("router_gemm_f32_tiled", 1024),
];
const HIDDEN: usize = 4096;
const EXPERTS: usize = 288;

/// One row of `bench/results/cpu/emu_gemm.csv`.
pub struct EmuRate {
    pub kernel: &'static str,
    pub rows: usize,
    pub gflop: f64,
    pub seconds: f64,
    pub gflops: f64,
}

pub const HEADER: &str = "build,kernel,rows,hidden,experts,gflop,seconds,gflops,threads,host";

/// Times each GEMM kernel (the chain stopped after its first launch) `repeats` times on the
/// emulator and keeps the fastest.
pub fn measure(repeats: usize) -> Result<Vec<EmuRate>, String> {
    let dev = Device::emu();
    let mut out = Vec::new();
    for (kernel, rows) in CASES {
        let shape = GateShape {
            rows,
            hidden: HIDDEN,
            experts: EXPERTS,
        };
        let chain = FiveLineChain::new(dev, &RouterConfig::qwen3(8), shape, None)
            .map_err(|e| e.to_string())?;
        let e = |e: moe_kernels::KernelError| e.to_string();
        let h = dev.upload(&patterned(rows * HIDDEN, 1, 1.0)).map_err(e)?;
        let w = dev
            .upload(&patterned(EXPERTS * HIDDEN, 2, 0.02))
            .map_err(e)?;
        let ids = dev.alloc::<i32>(rows * 8).map_err(e)?;
        let ws = dev.alloc::<f32>(rows * 8).map_err(e)?;
        let inputs = GateInputs {
            hidden: DeviceMatrix::F32(&h),
            weight: DeviceMatrix::F32(&w),
            bias: None,
        };
        let outputs = RouterOutputs {
            ids: &ids,
            weights: &ws,
        };
        let mut best = f64::INFINITY;
        for _ in 0..repeats {
            // The chain stopped after its first launch: the GEMM alone.
            let t = Instant::now();
            let (r, names) =
                record_launches(|| with_launch_budget(1, || chain.enqueue(&inputs, &outputs)));
            r.map_err(|e| e.to_string())?;
            best = best.min(t.elapsed().as_secs_f64());
            if names != [format!("ch01_router::{kernel}")] {
                return Err(format!("expected {kernel} alone, launched {names:?}"));
            }
        }
        let gflop = 2.0 * (rows * HIDDEN * EXPERTS) as f64 / 1e9;
        out.push(EmuRate {
            kernel,
            rows,
            gflop,
            seconds: best,
            gflops: gflop / best,
        });
    }
    Ok(out)
}

/// CSV lines for `rates`, labelled `build` (`before` / `after` a change).
pub fn csv_lines(build: &str, rates: &[EmuRate]) -> Vec<String> {
    let host = crate::common::host();
    let threads = Device::emu().worker_threads().unwrap_or(1);
    rates
        .iter()
        .map(|r| {
            format!(
                "{build},{},{},{HIDDEN},{EXPERTS},{:.3},{:.3},{:.2},{threads},{host}",
                r.kernel, r.rows, r.gflop, r.seconds, r.gflops
            )
        })
        .collect()
}
