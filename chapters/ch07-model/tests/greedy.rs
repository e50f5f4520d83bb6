//! The check of the chapter: every fixture model of `tools/fixtures/ch07-hf/` (tiny random
//! Qwen3-MoE and GLM-4-MoE models run by transformers in fp32) generates transformers' greedy
//! tokens, token for token, from each of its three prompts, with every MoE layer on the device
//! in f32. Every greedy choice in the fixtures has a logit gap above 1e-3 (the fixture script
//! asserts it), far above what another summation order moves a logit, so any difference is a
//! bug, not noise.

use ch02_grouped::checkpoint::files;
use ch02_grouped::Dtype;
use ch07_model::cpu::top2_gap;
use ch07_model::fixtures::{fixture_dir, Greedy, FIXTURES};
use ch07_model::{load, Model, ModelError};
use moe_kernels::Device;

fn model(dev: &'static Device, name: &str, dtype: Dtype) -> (Greedy, Model) {
    let fx = Greedy::read(&fixture_dir(name)).unwrap();
    let w = load(&fx.model, false).unwrap_or_else(|e| panic!("{name}: {e}"));
    (fx, Model::new(dev, w, dtype).unwrap())
}

// ANCHOR: greedy
fn greedy_tokens_are_transformers(dev: &'static Device) {
    for name in FIXTURES {
        let (fx, model) = model(dev, name, Dtype::F32);
        assert_eq!(model.moe_name(), Some("grouped-device"));
        for (i, (prompt, want)) in fx.prompts.iter().zip(&fx.tokens).enumerate() {
            let got = model
                .generate(prompt, want.len(), |_| Ok::<(), ModelError>(()))
                .unwrap_or_else(|e| panic!("{name} prompt {i}: {e}"));
            assert_eq!(&got, want, "{name} prompt {i} {prompt:?}");
        }
    }
}
// ANCHOR_END: greedy

/// The first prompt's logits at each of the 32 steps against transformers' (`logits.0`):
/// within 1e-4 of the logits' spread, a far tighter check than the argmax.
fn logits_are_transformers(dev: &'static Device) {
    for name in FIXTURES {
        let (fx, model) = model(dev, name, Dtype::F32);
        let path = fixture_dir(name).join("logits.safetensors");
        let st = files::map(&path).unwrap();
        let want = files::raw(&st, "logits.0", &path).unwrap().to_f32();
        let v = model.config().vocab;
        let mut cache = model.cache();
        let mut input = fx.prompts[0].clone();
        for (step, want) in want.chunks_exact(v).enumerate() {
            let got = model.forward(&input, &mut cache).unwrap();
            let spread = want.iter().fold(0f32, |m, x| m.max(x.abs()));
            let worst = got
                .iter()
                .zip(want)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(
                worst <= 1e-4 * spread,
                "{name} step {step}: max diff {worst:e} (logits up to {spread})"
            );
            assert!(top2_gap(want) > 1e-3, "{name} step {step}");
            input = vec![fx.tokens[0][step]];
        }
    }
}

/// The KV cache changes nothing: a prompt and 8 tokens in one pass give the logits of the 8th
/// single-token pass (to float noise: the same sums, grouped into other rows).
fn cache_equals_one_pass(dev: &'static Device) {
    for name in FIXTURES {
        let (fx, model) = model(dev, name, Dtype::F32);
        let (prompt, tokens) = (&fx.prompts[1], &fx.tokens[1][..8]);
        let mut cache = model.cache();
        let mut step = model.forward(prompt, &mut cache).unwrap();
        for &t in &tokens[..7] {
            step = model.forward(&[t], &mut cache).unwrap();
        }
        assert_eq!(cache.len(), prompt.len() + 7);
        let all: Vec<u32> = prompt.iter().chain(&tokens[..7]).copied().collect();
        let mut fresh = model.cache();
        let once = model.forward(&all, &mut fresh).unwrap();
        let worst = step
            .iter()
            .zip(&once)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        assert!(worst < 1e-4, "{name}: max diff {worst:e}");
    }
}

moe_kernels::backend_tests!(
    greedy_tokens_are_transformers,
    logits_are_transformers,
    cache_equals_one_pass
);
