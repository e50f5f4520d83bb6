//! Parity with Hugging Face transformers: every MoE layer of every fixture of
//! `tools/fixtures/ch02-hf/` (tiny random-weight Qwen3-MoE, DeepSeek-V3, GLM-4-MoE and Qwen2-MoE
//! models built and run by transformers 5.17 in fp32, `tools/fixtures/ch02_make_hf_fixtures.py`),
//! loaded by [`ch02_grouped::checkpoint`] and run by the literal layer, the CPU grouped loop and
//! the device grouped loop, against transformers' own output and routing.

use ch02_grouped::compare::{check_output, Tolerance};
use ch02_grouped::conformance::{hf_layers, sorted_by_id, HfLayer};
use ch02_grouped::{Dtype, GroupedCpu, GroupedDevice, LiteralLayer, MoeLayer};
use moe_kernels::Device;

// ANCHOR: hf_parity
/// The one test body: for every fixture, every MoE layer, both compute types and the three
/// implementations, the layer's output against transformers' within the stated tolerance, and
/// its routing: the same experts, with weights equal to f32 rounding.
fn every_layer_matches_transformers(dev: &'static Device) {
    let mut worst: Vec<(f64, String)> = Vec::new();
    for HfLayer {
        fixture: name,
        layer,
        weights: w,
        hidden,
        out: want,
        routing: hf_routing,
    } in hf_layers()
    {
        for dtype in [Dtype::F32, Dtype::Bf16] {
            let layers: [Box<dyn MoeLayer>; 3] = [
                Box::new(LiteralLayer::new(&w, dtype).unwrap()),
                Box::new(GroupedCpu::new(&w, dtype).unwrap()),
                Box::new(GroupedDevice::new(dev, &w, dtype).unwrap()),
            ];
            for l in &layers {
                let what = format!("{name} layer {layer} {} {dtype}", l.name());
                let got = l.forward(&hidden).unwrap_or_else(|e| panic!("{what}: {e}"));
                let tol = match dtype {
                    Dtype::F32 => Tolerance::F32_VS_HF,
                    Dtype::Bf16 => Tolerance::BF16_VS_HF,
                };
                let e = check_output(&what, &want, &got.out, tol).unwrap_or_else(|e| panic!("{e}"));
                worst.push((e.relative, what.clone()));
                let r = &got.routing;
                for (t, hf_row) in hf_routing.iter().enumerate() {
                    let row = sorted_by_id(
                        r.row_ids(t)
                            .iter()
                            .copied()
                            .zip(r.row_weights(t).iter().copied()),
                    );
                    let ids: Vec<u32> = row.iter().map(|p| p.0).collect();
                    let hf_ids: Vec<u32> = hf_row.iter().map(|p| p.0).collect();
                    assert_eq!(ids, hf_ids, "{what}: token {t} routed to other experts");
                    for (a, b) in row.iter().zip(hf_row) {
                        let d = (a.1 - b.1).abs();
                        assert!(
                            d <= 1e-6 * b.1.abs().max(1.0),
                            "{what}: token {t}, expert {}: weight {} vs {}",
                            a.0,
                            a.1,
                            b.1
                        );
                    }
                }
            }
        }
    }
    worst.sort_by(|a, b| b.0.total_cmp(&a.0));
    for dtype in ["f32", "bf16"] {
        for imp in ["literal", "grouped-cpu", "grouped-device"] {
            let suffix = format!(" {imp} {dtype}");
            if let Some(w) = worst.iter().find(|w| w.1.ends_with(&suffix)) {
                eprintln!(
                    "largest relative error against transformers: {:.2e} ({})",
                    w.0, w.1
                );
            }
        }
    }
}
// ANCHOR_END: hf_parity

moe_kernels::backend_tests!(every_layer_matches_transformers);
