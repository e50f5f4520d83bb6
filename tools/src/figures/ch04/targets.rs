//! Chapter 4's targets table and the compiler's report (`ptxas -v`) of its kernels.

use super::*;

/// Step 4b's target at one token: the layer's cold time within this many times its floor.
pub(super) const WITHIN_FLOOR_1: f64 = 1.3;
/// Step 4b's target from 8 to 512 tokens: the layer's cold time within this many times its floor.
pub(super) const WITHIN_FLOOR_8_TO_512: f64 = 1.1;
/// Step 4b's target at 4096 tokens: at least this share of cuBLAS's measured bf16 rate.
pub(super) const SHARE_OF_BF16_4096: f64 = 0.65;

/// Step 4b's targets against the run, per shape (the targets are set at Qwen3-30B-A3B's shape;
/// the GLM-like one is reported too): at 1 token the cold time within 1.3× of the floor, from 8
/// to 512 tokens within 1.1×, at 4096 tokens at least 65% of the measured bf16 matrix rate on the
/// layer's FLOPs; and at every T faster than the `torch._grouped_mm` layer.
pub fn targets_table(rows: &[BenchRow], bf16_tflops: f64) -> String {
    // A ratio to two places, or to four where two would print the limit itself (1.1034 is 1.10):
    // the number beside a verdict must show which side of the line it is on.
    let ratio = |over: f64, limit: f64| -> String {
        if format!("{over:.2}") == format!("{limit:.2}") && over != limit {
            format!("{over:.4}")
        } else {
            format!("{over:.2}")
        }
    };
    let mut s =
        String::from("| shape | tokens | target | measured (cold) | |\n|---|---:|---|---|---|\n");
    let verdict = |ok: bool| if ok { "met" } else { "**missed**" };
    for shape in shapes(rows.iter().filter(|r| r.rows > 0)) {
        for n in token_counts(rows, &shape) {
            let Some(r) = find(rows, &shape, n, OURS) else {
                continue;
            };
            let over = r.cold_median_us / r.floor_us;
            let (target, measured, ok) = match n {
                1 => (
                    format!("≤ {WITHIN_FLOOR_1}× the floor"),
                    format!("{}× the floor", ratio(over, WITHIN_FLOOR_1)),
                    over <= WITHIN_FLOOR_1,
                ),
                8..=512 => (
                    format!("≤ {WITHIN_FLOOR_8_TO_512}× the floor"),
                    format!("{}× the floor", ratio(over, WITHIN_FLOOR_8_TO_512)),
                    over <= WITHIN_FLOOR_8_TO_512,
                ),
                _ => {
                    let share = r.cold_tflops / bf16_tflops;
                    (
                        format!(
                            "≥ {:.0}% of {bf16_tflops:.0} TFLOP/s",
                            100.0 * SHARE_OF_BF16_4096
                        ),
                        format!("{:.0} TFLOP/s, {:.0}%", r.cold_tflops, 100.0 * share),
                        share >= SHARE_OF_BF16_4096,
                    )
                }
            };
            s += &format!(
                "| {} | {n} | {target} | {measured} | {} |\n",
                short_title(&shape),
                verdict(ok)
            );
            if let Some((c, _)) = over_ours(rows, &shape, n, TORCH_GMM) {
                s += &format!(
                    "| {} | {n} | faster than `torch._grouped_mm` | it takes {c:.2}× our time | {} |\n",
                    short_title(&shape),
                    verdict(c > 1.0)
                );
            }
        }
    }
    s
}

/// One kernel of `ptxas -v`'s report: registers per thread, spill stores, static shared memory.
#[derive(Debug, PartialEq)]
pub struct PtxasKernel {
    pub name: String,
    pub registers: u32,
    pub spill_bytes: u32,
    pub smem_bytes: u32,
}

/// Reads `ptxas -v`'s report (tools/gpu/run's `ptxas_ch04.log`): for each `Compiling entry
/// function 'NAME'`, its `N bytes spill stores` and `Used N registers, …, N bytes smem` lines.
pub fn parse_ptxas(text: &str) -> Result<Vec<PtxasKernel>, String> {
    let num_before = |line: &str, unit: &str| -> Option<u32> {
        let at = line.find(unit)?;
        line[..at].split_whitespace().last()?.parse().ok()
    };
    let mut out: Vec<PtxasKernel> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let name = rest.split('\'').next().unwrap_or_default().to_string();
            out.push(PtxasKernel {
                name,
                registers: 0,
                spill_bytes: 0,
                smem_bytes: 0,
            });
        } else if let Some(k) = out.last_mut() {
            if let Some(n) = num_before(line, "bytes spill stores") {
                k.spill_bytes = n;
            }
            if line.contains("Used ") {
                k.registers = num_before(line, "registers")
                    .ok_or_else(|| format!("{PTXAS_LOG}: no register count in {line:?}"))?;
                k.smem_bytes = num_before(line, "bytes smem").unwrap_or(0);
            }
        }
    }
    if out.is_empty() || out.iter().any(|k| k.registers == 0) {
        return Err(format!("{PTXAS_LOG}: no complete kernel report"));
    }
    Ok(out)
}

/// The tiled path's GEMM kernels in every tile configuration: registers, spills and static shared
/// memory (version 2's stages are dynamic: `TileConfig::shared_bytes`).
pub fn ptxas_table(kernels: &[PtxasKernel]) -> String {
    let mut s = format!(
        "`ptxas -v` of CUDA 13.0 for sm_90, on the PTX that NVRTC 13.0 makes \
         ({PTXAS_LOG}; {RESULTS_README} says where it ran): \
         registers per thread, spill stores, static shared memory per block.\n\n\
         | tile configuration | GEMM 1 + SwiGLU | GEMM 2 |\n|---|---|---|\n"
    );
    let cell = |name: &str| {
        kernels
            .iter()
            .find(|k| k.name == name)
            .map(|k| {
                format!(
                    "{} regs · {} B spilled · {:.1} KB",
                    k.registers,
                    k.spill_bytes,
                    k.smem_bytes as f64 / 1024.0
                )
            })
            .unwrap_or_else(|| "–".into())
    };
    for k in kernels.iter().filter(|k| k.name.starts_with("fused_gemm2")) {
        let suffix = k.name.trim_start_matches("fused_gemm2");
        let config = suffix.trim_start_matches('_');
        s += &format!(
            "| {} | {} | {} |\n",
            if config.is_empty() {
                "w4_k32_n1"
            } else {
                config
            },
            cell(&format!("fused_gemm1_swiglu{suffix}")),
            cell(&k.name)
        );
    }
    s
}
