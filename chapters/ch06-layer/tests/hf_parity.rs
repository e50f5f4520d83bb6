//! Chapter 2's Hugging Face fixtures through the whole assembled layer: every MoE layer of every
//! fixture of `tools/fixtures/ch02-hf/` (tiny random-weight Qwen3-MoE, DeepSeek-V3, GLM-4-MoE and
//! Qwen2-MoE models run by transformers in fp32), loaded by chapter 2's checkpoint loader, routed
//! by chapter 5's router (both logits GEMMs) and run by chapter 4's experts (every path), against
//! transformers' output and routing.
//!
//! The layer takes bf16 hidden states and holds a bf16 gate, as an engine does; transformers
//! routed in fp32. Where the two pick the same experts the output must be within chapter 2's
//! [`Tolerance::BF16_VS_HF`]; a token whose expert at the cut differs is allowed only where
//! transformers' own weights put the two experts within bf16's reach of each other.

use ch02_grouped::compare::{check_output, Tolerance};
use ch02_grouped::conformance::hf_layers;
use ch02_grouped::MoeLayer;
use ch04_fused_moe::Path;
use ch05_fused_router::LogitsFrom;
use ch06_layer::AssembledLayer;
use moe_kernels::Device;

// ANCHOR: hf_parity
fn assembled_layer_matches_transformers(dev: &'static Device) {
    let mut worst: Vec<(f64, String)> = Vec::new();
    for hf in hf_layers() {
        let (name, layer, w, hidden) = (hf.fixture, hf.layer, &hf.weights, &hf.hidden[..]);
        let h = w.config.hidden;
        for from in [LogitsFrom::TinyGemm, LogitsFrom::Blas] {
            for path in Path::ALL {
                let what = format!("{name} layer {layer} ({from:?} logits, {path} path)");
                let assembled = AssembledLayer::new(dev, w)
                    .unwrap()
                    .with_logits(from)
                    .map_experts(|e| Ok(e.with_path(path)))
                    .unwrap();
                let got = assembled
                    .forward(hidden)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                // The rows routed as transformers routed them.
                let mut same = Vec::new();
                for (t, hf_row) in hf.routing.iter().enumerate() {
                    let mut ids = got.routing.row_ids(t).to_vec();
                    ids.sort_unstable();
                    let hf_ids: Vec<u32> = hf_row.iter().map(|p| p.0).collect();
                    if ids == hf_ids {
                        same.push(t);
                    } else {
                        eprintln!("{what}: token {t} routed to {ids:?}, transformers {hf_ids:?}");
                    }
                }
                assert!(
                    same.len() * 10 >= hf.routing.len() * 9,
                    "{what}: only {} of {} tokens routed as transformers did",
                    same.len(),
                    hf.routing.len()
                );
                let pick = |v: &[f32]| -> Vec<f32> {
                    same.iter()
                        .flat_map(|&t| v[t * h..(t + 1) * h].iter().copied())
                        .collect()
                };
                let e = check_output(
                    &format!("{what}: assembled vs transformers"),
                    &pick(&hf.out),
                    &pick(&got.out),
                    Tolerance::BF16_VS_HF,
                )
                .unwrap_or_else(|e| panic!("{e}"));
                worst.push((e.relative, what));
            }
        }
    }
    worst.sort_by(|a, b| b.0.total_cmp(&a.0));
    for (e, what) in worst.iter().take(5) {
        eprintln!("{what}: {e:.2e}");
    }
}
// ANCHOR_END: hf_parity

moe_kernels::backend_tests!(assembled_layer_matches_transformers);
