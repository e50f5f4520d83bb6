//! What one flip does to the layer's output: chapter 2's layer, on a small synthetic layer with a
//! GLM-like router, each token run twice through the exact (f64) experts, once on the fp64
//! router's selection and once with its last selected expert swapped for the first rejected
//! one, the weights renormalised over the new set as the router would; beside it, the same
//! token through chapter 2's bf16 CPU layer on the fp64 selection, which is the error a bf16
//! layer makes anyway.

use crate::keys::{keys_f64, select_with_gap};
use crate::logits::{bf16, logits_f64, Gate};
use crate::shapes::{gate_scale, GLM53};
use ch01_router::cut::cut_of;
use ch01_router::literal::renormalize;
use ch01_router::{RouterConfig, Routing};
use ch02_grouped::{Dtype, GroupedCpu, LiteralLayer, MoeConfig, MoeError, MoeLayer, MoeWeights};
use std::fmt::Write as _;

/// The layer: small enough for the f64 loop, with the GLM-like router (sigmoid + bias, k = 8).
pub fn layer_config() -> MoeConfig {
    MoeConfig {
        hidden: 256,
        intermediate: 128,
        experts: 64,
        router: RouterConfig::glm5(8),
        shared: None,
    }
}

/// Tokens of the committed run.
pub const TOKENS: usize = 256;

/// The layer's weights as a bf16 checkpoint holds them: chapter 2's patterned weights, every
/// matrix and the gate rounded to bf16, the bias spread over GLM-5.3-Flash's range (fp32).
pub fn layer_weights() -> MoeWeights {
    let c = layer_config();
    let mut w = MoeWeights::patterned(&c, 1010, gate_scale(c.hidden), true).rounded(Dtype::Bf16);
    w.gate = w.gate.iter().map(|&v| bf16(v)).collect();
    w.bias = Some(GLM53.biases(c.experts, 1011));
    w
}

/// One token's result.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenResult {
    /// The fp64 router's gap at the cut.
    pub gap: f64,
    /// The weight the swapped-out expert had.
    pub swapped_weight: f64,
    /// `‖y_flip − y‖ / ‖y‖`, with `y` the exact output on the fp64 selection.
    pub flip_rel_err: f64,
    /// `‖y_bf16 − y‖ / ‖y‖`: chapter 2's bf16 CPU layer on the same selection.
    pub bf16_rel_err: f64,
}

fn rel_err(got: &[f32], want: &[f32]) -> f64 {
    let (mut d, mut n) = (0f64, 0f64);
    for (&g, &w) in got.iter().zip(want) {
        d += (g as f64 - w as f64).powi(2);
        n += (w as f64).powi(2);
    }
    (d / n).sqrt()
}

// ANCHOR: one_flip
/// `tokens` patterned bf16 tokens through the layer: the fp64 selection, the same with its
/// last selected expert swapped for the first rejected one, and chapter 2's bf16 layer.
pub fn one_flip(tokens: usize) -> Result<Vec<TokenResult>, MoeError> {
    let w = layer_weights();
    let c = &w.config;
    let (h, e) = (c.hidden, c.experts);
    let bias = w.bias.as_deref();
    let hidden: Vec<f32> = ch01_router::inputs::patterned(tokens * h, 1012, 1.0)
        .iter()
        .map(|&v| bf16(v))
        .collect();
    let logits = logits_f64(&Gate::new(&w.gate, h, e), &hidden); // [T, E] f64
    let (mut exact, mut flipped) = (Vec::new(), Vec::new());
    let (mut gaps, mut swapped) = (Vec::new(), Vec::new());
    for t in 0..tokens {
        let keys = keys_f64(&c.router, &logits[t * e..(t + 1) * e], bias);
        let (ids, gap) = select_with_gap(&c.router, &keys);
        let scores = keys_f64(&c.router, &logits[t * e..(t + 1) * e], None);
        // ANCHOR: swap
        let weights = |ids: &[u32]| {
            let s: Vec<f64> = ids.iter().map(|&i| scores[i as usize]).collect();
            renormalize(&s, &c.router)
        };
        // The swap: the cut's last selected expert out, its first rejected one in.
        let cut = cut_of(&keys, &ids).expect("k < E");
        let slot = ids.iter().position(|&i| i == cut.last_selected.0).unwrap();
        let mut other = ids.clone();
        other[slot] = cut.first_rejected.0;
        let (wa, wb) = (weights(&ids), weights(&other));
        // ANCHOR_END: swap
        gaps.push(gap);
        swapped.push(wa[slot]);
        exact.push((ids, wa));
        flipped.push((other, wb));
    }
    let routing = |sel: &[(Vec<u32>, Vec<f64>)]| Routing {
        rows: tokens,
        k: c.router.k,
        ids: sel.iter().flat_map(|s| s.0.clone()).collect(),
        weights: sel
            .iter()
            .flat_map(|s| s.1.iter().map(|&v| v as f32))
            .collect(),
    };
    let (r_exact, r_flip) = (routing(&exact), routing(&flipped));
    let literal = LiteralLayer::new(&w, Dtype::F32)?; // f64 arithmetic on the bf16 values
    let y = literal.experts(&hidden, &r_exact)?;
    let y_flip = literal.experts(&hidden, &r_flip)?;
    let y_bf16 = GroupedCpu::new(&w, Dtype::Bf16)?.experts(&hidden, &r_exact)?;
    Ok((0..tokens)
        .map(|t| {
            let row = t * h..(t + 1) * h;
            TokenResult {
                gap: gaps[t],
                swapped_weight: swapped[t],
                flip_rel_err: rel_err(&y_flip[row.clone()], &y[row.clone()]),
                bf16_rel_err: rel_err(&y_bf16[row.clone()], &y[row]),
            }
        })
        .collect())
}
// ANCHOR_END: one_flip

/// `ch10_flip_output.csv`: the layer's sizes and one line per token.
pub fn output_csv(results: &[TokenResult]) -> String {
    let c = layer_config();
    let mut s = String::from(
        "hidden,intermediate,experts,k,token,gap,swapped_weight,flip_rel_err,bf16_rel_err\n",
    );
    for (t, r) in results.iter().enumerate() {
        let _ = writeln!(
            s,
            "{},{},{},{},{t},{:.4e},{:.4e},{:.4e},{:.4e}",
            c.hidden,
            c.intermediate,
            c.experts,
            c.router.k,
            r.gap,
            r.swapped_weight,
            r.flip_rel_err,
            r.bf16_rel_err
        );
    }
    s
}

/// The median of `v` (the upper middle value for an even count); `NaN` when empty.
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
