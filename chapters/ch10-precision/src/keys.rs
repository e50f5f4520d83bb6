//! Rank keys and the selection, in fp64 (the reference) and in fp32 (the arithmetic an engine's
//! router kernel uses once it has the logits), with chapter 1's selection: the same `k` rounds of
//! argmax, ties to the lowest id, and DeepSeek-V3's groups, for both.
//!
//! Our logits are finite (synthetic hidden states and weights), so chapter 1's rule for
//! non-finite logits never applies here.

use ch01_router::cut::cut_of;
use ch01_router::literal::{group_mask, select_topk, Key};
use ch01_router::{RouterConfig, Scoring};

// ANCHOR: keys
/// The `[E]` rank keys of one row in fp64: the score (softmax over the row, or the sigmoid of
/// each logit) plus the bias, every step in f64.
pub fn keys_f64(config: &RouterConfig, logits: &[f64], bias: Option<&[f32]>) -> Vec<f64> {
    let mut keys = scores_f64(config.scoring, logits);
    if let Some(b) = bias {
        for (k, &b) in keys.iter_mut().zip(b) {
            *k += b as f64;
        }
    }
    keys
}

/// The same in fp32, as a router kernel computes once its fp32 logits and fp32 (or bf16) bias
/// are loaded: each step rounded to f32.
pub fn keys_f32(config: &RouterConfig, logits: &[f32], bias: Option<&[f32]>) -> Vec<f32> {
    let mut keys = scores_f32(config.scoring, logits);
    if let Some(b) = bias {
        for (k, &b) in keys.iter_mut().zip(b) {
            *k += b;
        }
    }
    keys
}
// ANCHOR_END: keys

fn scores_f64(scoring: Scoring, logits: &[f64]) -> Vec<f64> {
    match scoring {
        Scoring::Softmax => {
            let max = logits.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let mut s: Vec<f64> = logits.iter().map(|&x| (x - max).exp()).collect();
            let sum: f64 = s.iter().sum();
            for v in &mut s {
                *v /= sum;
            }
            s
        }
        Scoring::Sigmoid => logits.iter().map(|&x| 1.0 / (1.0 + (-x).exp())).collect(),
        Scoring::SqrtSoftplus => logits
            .iter()
            .map(|&x| (x.max(0.0) + (-x.abs()).exp().ln_1p()).sqrt())
            .collect(),
    }
}

fn scores_f32(scoring: Scoring, logits: &[f32]) -> Vec<f32> {
    match scoring {
        Scoring::Softmax => {
            let max = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let mut s: Vec<f32> = logits.iter().map(|&x| (x - max).exp()).collect();
            let mut sum = 0f32;
            for &v in &s {
                sum += v;
            }
            for v in &mut s {
                *v /= sum;
            }
            s
        }
        Scoring::Sigmoid => logits.iter().map(|&x| 1.0 / (1.0 + (-x).exp())).collect(),
        Scoring::SqrtSoftplus => logits
            .iter()
            .map(|&x| (x.max(0.0) + (-x.abs()).exp().ln_1p()).sqrt())
            .collect(),
    }
}

// ANCHOR: select
/// The `k` experts of one row of keys, best first: chapter 1's selection (its groups first when
/// the config has them).
pub fn select<K: Key>(config: &RouterConfig, keys: &[K]) -> Vec<u32> {
    match config.grouping {
        None => select_topk(keys, None, config.k),
        Some(g) => select_topk(keys, Some(&group_mask(keys, g)), config.k),
    }
}

/// The selection of the fp64 keys and its gap at the cut (chapter 1's [`cut_of`], among the
/// experts of the kept groups); the gap is 0 when k = E.
pub fn select_with_gap(config: &RouterConfig, keys: &[f64]) -> (Vec<u32>, f64) {
    let (ids, inside) = match config.grouping {
        None => (select_topk(keys, None, config.k), None),
        Some(g) => {
            let mask = group_mask(keys, g);
            let ids = select_topk(keys, Some(&mask), config.k);
            let inside: Vec<f64> = keys
                .iter()
                .zip(&mask)
                .map(|(&k, &m)| if m { k } else { f64::NEG_INFINITY })
                .collect();
            (ids, Some(inside))
        }
    };
    let gap = cut_of(inside.as_deref().unwrap_or(keys), &ids).map_or(0.0, |c| c.gap);
    (ids, gap)
}
// ANCHOR_END: select

/// Whether two selections hold the same experts, in any order (the order of a token's experts
/// does not change the layer's output).
pub fn same_set(a: &[u32], b: &[u32]) -> bool {
    let (mut a, mut b) = (a.to_vec(), b.to_vec());
    a.sort_unstable();
    b.sort_unstable();
    a == b
}
