//! The oracle: the MoE layer as the obvious loops, in f64.
//!
//! For each token, for each expert it selected: run that expert's MLP on the token and add the
//! result, times its weight. No grouping, no library, nothing clever; every other
//! implementation of the book is checked against this one. It computes exactly, in f64, on the
//! values the layer holds: for a bf16 layer, the hidden states and weights rounded to bf16, and
//! no rounding after that (the rounding a bf16 layer adds on the way is what the tolerance of
//! [`crate::compare`] measures).

use crate::config::{Dtype, MoeConfig};
use crate::error::MoeError;
use crate::layer::{experts_rows, rows_of, LayerOutput, MoeLayer};
use crate::weights::MoeWeights;
use candle_core::{Device, Tensor};
use ch01_router::{LiteralRouter, Router, Routing};

/// The literal layer.
pub struct LiteralLayer {
    /// The weights rounded to `dtype` (one host copy: a real layer is gigabytes).
    held: MoeWeights,
    dtype: Dtype,
}

impl LiteralLayer {
    pub fn new(weights: &MoeWeights, dtype: Dtype) -> Result<Self, MoeError> {
        weights.validate()?;
        Ok(LiteralLayer {
            held: weights.rounded(dtype),
            dtype,
        })
    }
}

/// `w [rows, cols] · x [cols]` in f64.
fn matvec(w: &[f32], x: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    (0..rows)
        .map(|r| {
            let row = &w[r * cols..(r + 1) * cols];
            row.iter().zip(x).map(|(&a, &b)| a as f64 * b).sum()
        })
        .collect()
}

// ANCHOR: swiglu_mlp
/// One SwiGLU MLP on one token: `down · (silu(gate · x) ⊙ (up · x))`, with `w13` [2I, H] the
/// gate rows then the up rows, and `w2` [H, I]. silu(g) = g · σ(g) = g / (1 + e⁻ᵍ).
pub fn swiglu_mlp(w13: &[f32], w2: &[f32], x: &[f64], hidden: usize, inter: usize) -> Vec<f64> {
    let gate_up = matvec(w13, x, 2 * inter, hidden);
    let act: Vec<f64> = (0..inter)
        .map(|i| {
            let (g, u) = (gate_up[i], gate_up[inter + i]);
            g / (1.0 + (-g).exp()) * u
        })
        .collect();
    matvec(w2, &act, hidden, inter)
}
// ANCHOR_END: swiglu_mlp

/// The router's f32 logits: `hidden · gateᵀ` in f64, rounded once (the best an f32 GEMM can
/// do), as chapter 1's oracle takes them.
pub fn literal_logits(weights: &MoeWeights, hidden: &[f32], rows: usize) -> Vec<f32> {
    let (h, e) = (weights.config.hidden, weights.config.experts);
    let mut logits = Vec::with_capacity(rows * e);
    for t in 0..rows {
        let x: Vec<f64> = hidden[t * h..(t + 1) * h]
            .iter()
            .map(|&v| v as f64)
            .collect();
        logits.extend(matvec(&weights.gate, &x, e, h).iter().map(|&v| v as f32));
    }
    logits
}

impl MoeLayer for LiteralLayer {
    fn name(&self) -> &'static str {
        "literal"
    }
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn config(&self) -> &MoeConfig {
        &self.held.config
    }

    // ANCHOR: literal_experts
    fn experts(&self, hidden: &[f32], routing: &Routing) -> Result<Vec<f32>, MoeError> {
        let w = &self.held;
        let c = &w.config;
        let rows = experts_rows(&w.config, hidden, routing)?;
        let (h, i) = (c.hidden, c.intermediate);
        let mut out = vec![0f32; rows * h];
        for t in 0..rows {
            // The token as the layer holds it (rounded to bf16 for a bf16 layer).
            let x: Vec<f64> = hidden[t * h..(t + 1) * h]
                .iter()
                .map(|&v| self.dtype.round(v) as f64)
                .collect();
            let mut acc = vec![0f64; h];
            for (j, (&id, &weight)) in routing
                .row_ids(t)
                .iter()
                .zip(routing.row_weights(t))
                .enumerate()
            {
                let e = id as usize;
                if e >= c.experts {
                    return Err(MoeError::IdOutOfRange {
                        row: t,
                        slot: j,
                        id,
                        experts: c.experts,
                    });
                }
                let y = swiglu_mlp(w.w13_of(e), w.w2_of(e), &x, h, i);
                for (a, y) in acc.iter_mut().zip(&y) {
                    *a += weight as f64 * y;
                }
            }
            if let (Some(s), Some(sw)) = (c.shared, &w.shared) {
                let y = swiglu_mlp(&sw.w13, &sw.w2, &x, h, s.intermediate);
                let scale = match &sw.gate {
                    Some(g) => {
                        let logit: f64 = g.iter().zip(&x).map(|(&a, &b)| a as f64 * b).sum();
                        1.0 / (1.0 + (-logit).exp())
                    }
                    None => 1.0,
                };
                for (a, y) in acc.iter_mut().zip(&y) {
                    *a += scale * y;
                }
            }
            for (o, a) in out[t * h..(t + 1) * h].iter_mut().zip(&acc) {
                *o = *a as f32;
            }
        }
        Ok(out)
    }
    // ANCHOR_END: literal_experts

    fn forward(&self, hidden: &[f32]) -> Result<LayerOutput, MoeError> {
        let w = &self.held;
        let rows = rows_of(&w.config, hidden)?;
        let e = w.config.experts;
        let logits = Tensor::from_vec(literal_logits(w, hidden, rows), (rows, e), &Device::Cpu)?;
        let bias = match &w.bias {
            Some(b) => Some(Tensor::from_slice(b, e, &Device::Cpu)?),
            None => None,
        };
        let routing = LiteralRouter {
            config: w.config.router.clone(),
        }
        .route(&logits, bias.as_ref())?;
        let out = self.experts(hidden, &routing)?;
        Ok(LayerOutput { routing, out })
    }
}
