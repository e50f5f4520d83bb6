//! The decoder on the device (`DeviceModel`: `kernels/ch07_decoder.cu`, chapter 5's tiny GEMM
//! for every linear layer, chapter 6's layer for every MoE layer), checked against independent
//! paths: transformers' fp32 logits (the fixtures) and the CPU decoder of `model.rs`.
//!
//! The device decoder is bf16 where an engine is: every weight, and every GEMM's input. So its
//! logits are held to bf16's reach of transformers', not to fp32's; a kernel that indexed a head,
//! a position or a rotary pair wrongly moves them by the logits' own size instead.

use ch02_grouped::Dtype;
use ch07_model::cpu::{argmax, top2_gap};
use ch07_model::device::{qwen3_30b_a3b, weight_bytes, DeviceModel};
use ch07_model::fixtures::{fixture_dir, Greedy, FIXTURES};
use ch07_model::{load, Model, ModelError};
use moe_kernels::Device;

/// The worst absolute difference of two logit rows.
fn worst(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
}

fn median(mut v: Vec<f32>) -> f32 {
    v.sort_by(f32::total_cmp);
    v[v.len() / 2]
}

/// The CPU decoder's logits at each step of the first prompt, fed transformers' tokens.
fn cpu_forced(model: &Model, fx: &Greedy) -> Vec<Vec<f32>> {
    let mut cache = model.cache();
    let mut input = fx.prompts[0].clone();
    let mut out = Vec::new();
    for &t in &fx.tokens[0] {
        out.push(model.forward(&input, &mut cache).unwrap());
        input = vec![t];
    }
    out
}

// ANCHOR: device_check
/// Fed transformers' tokens (the first prompt and its 32 greedy tokens), the device decoder's
/// logits at every step stay within bf16's reach of transformers' fp32 ones: the median step's
/// worst logit within 5e-2 (the CPU decoder with bf16 MoE layers: 2e-2), and the greedy choice
/// transformers' at every step whose gap between the best two logits is wider than twice that
/// step's error. The first token of every prompt is transformers'.
fn device_decoder_follows_transformers(dev: &'static Device) {
    for name in FIXTURES {
        let fx = Greedy::read(&fixture_dir(name)).unwrap();
        let w = load(&fx.model, false).unwrap();
        let v = w.config.vocab;
        let device = DeviceModel::new(dev, &w, 64).unwrap();
        let cpu16 = Model::new(dev, w, Dtype::Bf16).unwrap();
        let (_, logits) = device
            .teacher_forced(&fx.prompts[0], &fx.tokens[0], fx.tokens[0].len())
            .unwrap();
        let mut errors = Vec::new();
        for (step, (got, want)) in logits.iter().zip(fx.logits.chunks_exact(v)).enumerate() {
            let e = worst(got, want);
            assert!(e.is_finite(), "{name} step {step}");
            if top2_gap(want) > 2.0 * e {
                assert_eq!(argmax(got), argmax(want), "{name} step {step}: error {e:e}");
            }
            errors.push(e);
        }
        let cpu: Vec<f32> = cpu_forced(&cpu16, &fx)
            .iter()
            .zip(fx.logits.chunks_exact(v))
            .map(|(a, b)| worst(a, b))
            .collect();
        let (dm, cm) = (median(errors.clone()), median(cpu));
        eprintln!(
            "{name}: device decoder median step {dm:.3e}, worst {:.3e}; CPU decoder with bf16 MoE layers median {cm:.3e}",
            errors.iter().fold(0f32, |a, &b| a.max(b))
        );
        assert!(
            dm <= 5e-2,
            "{name}: device decoder median step error {dm:e}"
        );
        for (i, (prompt, want)) in fx.prompts.iter().zip(&fx.tokens).enumerate() {
            let (got, _) = device.generate(prompt, 1).unwrap();
            assert_eq!(got[0], want[0], "{name} prompt {i}");
        }
    }
}
// ANCHOR_END: device_check

/// Rows of a batch are independent: two sequences decoded together give each the logits it gets
/// alone (within rounding: the MoE layer's and the GEMMs' paths may change with the batch).
fn batch_rows_are_independent(dev: &'static Device) {
    for name in FIXTURES {
        let fx = Greedy::read(&fixture_dir(name)).unwrap();
        let w = load(&fx.model, false).unwrap();
        let device = DeviceModel::new(dev, &w, 16).unwrap();
        let v = w.config.vocab;
        let seqs: Vec<Vec<u32>> = (1..3)
            .map(|p| {
                let mut s = fx.prompts[p].clone();
                s.extend(&fx.tokens[p]);
                s.truncate(8);
                s
            })
            .collect();
        let mut st = device.state(2).unwrap();
        for (pos, (&a, &b)) in seqs[0].iter().zip(&seqs[1]).enumerate() {
            st.set_tokens(&[a, b], v).unwrap();
            device.step(&st, pos).unwrap();
        }
        let both = st.logits().unwrap();
        for (r, s) in seqs.iter().enumerate() {
            let (_, alone) = device.teacher_forced(&s[..1], &s[1..], 8).unwrap();
            let alone = alone.last().unwrap();
            let spread = alone.iter().fold(0f32, |m, x| m.max(x.abs()));
            let e = worst(&both[r * v..(r + 1) * v], alone);
            assert!(e <= 1e-2 * spread, "{name} row {r}: {e:e} of {spread}");
        }
    }
}

/// What the device decoder refuses, typed: a token past the vocabulary, a position past the
/// cache, a cache larger than attention holds.
fn device_decoder_refusals(dev: &'static Device) {
    let fx = Greedy::read(&fixture_dir(FIXTURES[0])).unwrap();
    let w = load(&fx.model, false).unwrap();
    let device = DeviceModel::new(dev, &w, 8).unwrap();
    let mut st = device.state(1).unwrap();
    assert_eq!(
        st.set_tokens(&[w.config.vocab as u32], w.config.vocab),
        Err(ModelError::Token {
            token: w.config.vocab as u32,
            vocab: w.config.vocab
        })
    );
    let e = device.step(&st, 8).unwrap_err().to_string();
    assert!(e.contains("capacity (8)"), "{e}");
    let e = device.generate(&[1; 8], 2).unwrap_err().to_string();
    assert!(e.contains("at least 9 positions"), "{e}");
    let e = DeviceModel::new(dev, &w, 1 << 20)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("capacity"), "{e}");
}

moe_kernels::backend_tests!(
    device_decoder_follows_transformers,
    batch_rows_are_independent,
    device_decoder_refusals
);

/// The full-size model the bench times: Qwen3-30B-A3B's shapes hold about 61 GB of bf16
/// weights, which fit in an H200's 141 GB.
#[test]
fn full_size_model_is_61_gb() {
    let c = qwen3_30b_a3b();
    assert_eq!((c.layers, c.hidden, c.heads, c.kv_heads), (48, 2048, 32, 4));
    assert_eq!(
        (c.moe.config.experts, c.moe.config.router.k, c.vocab),
        (128, 8, 151936)
    );
    let gb = weight_bytes(&c) as f64 / 1e9;
    assert!((60.0..62.0).contains(&gb), "{gb}");
}
