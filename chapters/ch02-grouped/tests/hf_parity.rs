//! Parity with Hugging Face transformers: every MoE layer of every fixture of
//! `tools/fixtures/ch02-hf/` (tiny random-weight Qwen3-MoE, DeepSeek-V3, GLM-4-MoE and Qwen2-MoE
//! models built and run by transformers 5.17 in fp32, `tools/fixtures/ch02_make_hf_fixtures.py`),
//! loaded by [`ch02_grouped::checkpoint`] and run by the literal layer, the CPU grouped loop and
//! the device grouped loop, against transformers' own output and routing.

use ch02_grouped::checkpoint::{load, LoadOptions};
use ch02_grouped::compare::{check_output, Tolerance};
use ch02_grouped::{Dtype, GroupedCpu, GroupedDevice, LiteralLayer, MoeLayer};
use moe_kernels::Device;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

const FIXTURES: [&str; 4] = ["qwen3_moe", "deepseek_v3", "glm4_moe", "qwen2_moe"];

// ANCHOR: hf_tolerance
/// An f32 layer against transformers' fp32 output (max |difference| / rms of the output). Both
/// compute in f32 in different orders; the literal layer computes in f64, so its difference is
/// transformers' own rounding. Measured worst: 2.4e-6 (qwen2_moe layer 1, grouped-cpu); the
/// device loop's 1.2e-6 on the emulator and 1.8e-6 with cuBLAS on the H200; the literal layer's
/// 1.4e-6. The tolerance is four times the worst.
const F32_VS_HF: Tolerance = Tolerance(1e-5);
/// A bf16 layer against transformers' fp32 output: the hidden states and weights rounded to
/// bf16 on entry, `gate | up` and the SwiGLU on the way (8 significant bits: 2⁻⁹ ≈ 2e-3 per
/// value). Measured worst: 2.4e-2 (qwen2_moe layer 1, grouped-cpu, and grouped-device on the
/// emulator and on the H200 alike); the literal bf16 layer's worst 2.0e-2. The tolerance is 2.5
/// times the worst.
const BF16_VS_HF: Tolerance = Tolerance(6e-2);
// ANCHOR_END: hf_tolerance

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/fixtures/ch02-hf")
}

/// What transformers computed for one fixture: `hidden` [T, H], and per MoE layer its output
/// `out.L` [T, H], its router's ids `ids.L` [T, k] and weights `weights.L` [T, k].
struct Reference {
    tensors: HashMap<String, candle_core::Tensor>,
}

impl Reference {
    fn read(dir: &Path) -> Reference {
        let path = dir.join("inputs.safetensors");
        let tensors = candle_core::safetensors::load(&path, &candle_core::Device::Cpu)
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Reference { tensors }
    }
    fn get(&self, name: &str) -> &candle_core::Tensor {
        self.tensors
            .get(name)
            .unwrap_or_else(|| panic!("no tensor {name}"))
    }
    fn f32(&self, name: &str) -> Vec<f32> {
        self.get(name)
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
    }
    fn layers(&self) -> Vec<usize> {
        let mut l: Vec<usize> = self
            .tensors
            .keys()
            .filter_map(|k| k.strip_prefix("out.")?.parse().ok())
            .collect();
        l.sort();
        l
    }
    /// Row `t` of transformers' routing as (id, weight) pairs sorted by id (DeepSeek-V3's and
    /// GLM-4-MoE's routers return their top-k unsorted).
    fn routing(&self, layer: usize) -> Vec<Vec<(u32, f32)>> {
        let ids = self.get(&format!("ids.{layer}"));
        let k = ids.dims()[1];
        let ids = ids.flatten_all().unwrap().to_vec1::<i64>().unwrap();
        let w = self.f32(&format!("weights.{layer}"));
        ids.chunks(k)
            .zip(w.chunks(k))
            .map(|(i, w)| sorted(i.iter().map(|&i| i as u32).zip(w.iter().copied())))
            .collect()
    }
}

fn sorted(pairs: impl Iterator<Item = (u32, f32)>) -> Vec<(u32, f32)> {
    let mut v: Vec<(u32, f32)> = pairs.collect();
    v.sort_by_key(|p| p.0);
    v
}

// ANCHOR: hf_parity
/// The one test body: for every fixture, every MoE layer, both compute types and the three
/// implementations, the layer's output against transformers' within the stated tolerance, and
/// its routing: the same experts, with weights equal to f32 rounding.
fn every_layer_matches_transformers(dev: &'static Device) {
    let mut worst: Vec<(f64, String)> = Vec::new();
    for name in FIXTURES {
        let dir = fixtures().join(name);
        let hf = Reference::read(&dir);
        let hidden = hf.f32("hidden");
        for layer in hf.layers() {
            let opts = LoadOptions {
                layer: Some(layer),
                progress: false,
            };
            let w = load(&dir.join("per_expert"), &opts).unwrap().weights;
            let want = hf.f32(&format!("out.{layer}"));
            let hf_routing = hf.routing(layer);
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
                        Dtype::F32 => F32_VS_HF,
                        Dtype::Bf16 => BF16_VS_HF,
                    };
                    let e =
                        check_output(&what, &want, &got.out, tol).unwrap_or_else(|e| panic!("{e}"));
                    worst.push((e.relative, what.clone()));
                    let r = &got.routing;
                    for (t, hf_row) in hf_routing.iter().enumerate() {
                        let row = sorted(
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
