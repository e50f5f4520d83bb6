//! The deterministic mode on every backend: the same token gives the same output bits and the
//! same experts in batches of 1, 7, 64 and 4,096 (the other tokens patterned, the token at a
//! different position in each), for a Qwen3-like layer, a DeepSeek-V3-like one with groups and a
//! shared expert, and a GLM-4-MoE-like one with a gated shared expert. Chapter 6's own layer,
//! whose kernels change with the batch, is run beside it and its differences printed.

use ch01_router::inputs::patterned;
use ch02_grouped::regimes::{regime, MoeRegime};
use ch02_grouped::MoeLayer;
use ch06_layer::AssembledLayer;
use ch10_precision::deterministic::deterministic;
use half::bf16;
use moe_kernels::Device;

const BATCHES: [usize; 4] = [1, 7, 64, 4096];

/// A batch of `b` tokens: patterned tokens, and the regime's first token at position (b − 1) / 2.
fn batch(r: &MoeRegime, b: usize) -> (Vec<f32>, usize) {
    let h = r.weights.config.hidden;
    let round =
        |v: Vec<f32>| -> Vec<f32> { v.into_iter().map(|x| bf16::from_f32(x).to_f32()).collect() };
    let mut x = round(patterned(b * h, 0x10d + b as u64, 1.0));
    let at = (b - 1) / 2;
    x[at * h..(at + 1) * h].copy_from_slice(&round(r.hidden[..h].to_vec()));
    (x, at)
}

/// The token's output row and its experts (sorted) in each batch size.
fn probe(layer: &dyn MoeLayer, r: &MoeRegime) -> Vec<(Vec<u32>, Vec<u32>)> {
    let (h, k) = (r.weights.config.hidden, r.weights.config.router.k);
    BATCHES
        .iter()
        .map(|&b| {
            let (x, at) = batch(r, b);
            let out = layer
                .forward(&x)
                .unwrap_or_else(|e| panic!("{} × {b}: {e}", r.name));
            let bits = out.out[at * h..(at + 1) * h]
                .iter()
                .map(|v| v.to_bits())
                .collect();
            let mut ids = out.routing.ids[at * k..(at + 1) * k].to_vec();
            ids.sort_unstable();
            (bits, ids)
        })
        .collect()
}

// ANCHOR: same_bits_in_every_batch
fn same_token_same_bits_in_every_batch(dev: &'static Device) {
    for name in ["decode_1tok", "large_prefill", "gated_shared_expert"] {
        let r = regime(name).unwrap();
        let det = deterministic(AssembledLayer::new(dev, &r.weights).unwrap()).unwrap();
        let got = probe(&det, &r);
        for (b, g) in BATCHES.iter().zip(&got).skip(1) {
            assert_eq!(
                g.1, got[0].1,
                "{name}: the token's experts in a batch of {b}"
            );
            let differ = g.0.iter().zip(&got[0].0).filter(|(x, y)| x != y).count();
            assert_eq!(
                differ, 0,
                "{name}: {differ} output values differ in a batch of {b}"
            );
        }
        // Chapter 6's layer, for comparison: its kernels follow the batch size. At 7 tokens they
        // are those of one token (the tiny GEMM's CUDA cores, the decode path); at 64 and 4,096
        // they are others, and at least half of the token's output values move.
        let plain = probe(&AssembledLayer::new(dev, &r.weights).unwrap(), &r);
        let h = r.weights.config.hidden;
        for (b, g) in BATCHES.iter().zip(&plain).skip(1) {
            let differ = g.0.iter().zip(&plain[0].0).filter(|(x, y)| x != y).count();
            eprintln!("{name}: chapter 6's layer, batch {b} against 1: {differ} of {h} differ");
            if *b == 7 {
                assert_eq!(differ, 0, "{name}: chapter 6's layer at 7 tokens");
            } else {
                assert!(
                    2 * differ >= h,
                    "{name}: chapter 6's layer at {b}: {differ} of {h}"
                );
            }
        }
    }
}
// ANCHOR_END: same_bits_in_every_batch

moe_kernels::backend_tests!(same_token_same_bits_in_every_batch);
