//! Chapter 2's Hugging Face fixtures through the fused layer: every MoE layer of every fixture of
//! `tools/fixtures/ch02-hf/` (tiny random-weight Qwen3-MoE, DeepSeek-V3, GLM-4-MoE and
//! Qwen2-MoE models run by transformers in fp32), loaded by chapter 2's checkpoint loader and
//! run by the fused layer in bf16 on both paths (tiled and decode), against transformers' output
//! and routing, and against chapter 2's grouped device layer in bf16.

use ch02_grouped::compare::{check_output, Tolerance};
use ch02_grouped::conformance::hf_layers;
use ch02_grouped::{Dtype, GroupedDevice, MoeLayer};
use ch04_fused_moe::FusedDevice;
use moe_kernels::Device;

// ANCHOR: hf_parity
/// The one test body: every fixture and MoE layer, on both paths, the fused layer's forward pass
/// against transformers' output and experts, and against chapter 2's grouped device layer (same
/// roundings, other summation order).
fn fused_layer_matches_transformers(dev: &'static Device) {
    let mut worst: Vec<(f64, String)> = Vec::new();
    for hf in hf_layers() {
        let (name, layer, w, hidden) = (hf.fixture, hf.layer, &hf.weights, &hf.hidden[..]);
        let grouped = GroupedDevice::new(dev, w, Dtype::Bf16).unwrap();
        let base = FusedDevice::new(dev, w, Dtype::Bf16).unwrap();
        for path in ch04_fused_moe::Path::ALL {
            let what = format!("{name} layer {layer} ({path} path)");
            let fused = base.clone().with_path(path);
            let got = fused
                .forward(hidden)
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let e = check_output(
                &format!("{what}: fused vs transformers"),
                &hf.out,
                &got.out,
                // chapter 2's, for its bf16 layers: the fused layer rounds at the same places
                Tolerance::BF16_VS_HF,
            )
            .unwrap_or_else(|e| panic!("{e}"));
            worst.push((e.relative, format!("{what} vs transformers")));
            for (t, hf_row) in hf.routing.iter().enumerate() {
                let mut ids = got.routing.row_ids(t).to_vec();
                ids.sort_unstable();
                let hf_ids: Vec<u32> = hf_row.iter().map(|p| p.0).collect();
                assert_eq!(ids, hf_ids, "{what}: token {t} routed to other experts");
            }
            let theirs = grouped.experts(hidden, &got.routing).unwrap();
            let mine = fused.experts(hidden, &got.routing).unwrap();
            let e = check_output(
                &format!("{what}: fused vs grouped device"),
                &theirs,
                &mine,
                Tolerance::BF16_VS_BF16,
            )
            .unwrap_or_else(|e| panic!("{e}"));
            worst.push((e.relative, format!("{what} vs grouped device")));
        }
    }
    for (e, what) in &worst {
        eprintln!("{what}: {e:.2e}");
    }
}
// ANCHOR_END: hf_parity

moe_kernels::backend_tests!(fused_layer_matches_transformers);
