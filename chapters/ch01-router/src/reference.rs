//! The chapter's CPU implementation: the router as tensor operations in f32, the way an engine
//! computes it, checked against the f64 literal router.
//!
//! Scores, rank keys, the gather of the selected scores, their sum and the division are candle
//! operations on `[T, E]` and `[T, k]` tensors. The selection itself runs over each row of rank
//! keys with the literal router's [`select_topk`] and [`group_mask`], so both routers apply one
//! tie rule; what differs is the arithmetic (f32 against f64).

use candle_core::{DType, Device, Tensor};

use crate::config::{RouterConfig, Scoring};
use crate::error::RouterError;
use crate::literal::{group_mask, select_topk};
use crate::routing::{check_inputs, Router, Routing};

/// The f32 tensor router.
#[derive(Clone, Debug, PartialEq)]
pub struct ReferenceRouter {
    pub config: RouterConfig,
}

/// `ln(1 + u)` for `u >= 0` with only `log`, add, sub, mul, div (candle has no `log1p`).
///
/// Kahan's trick: `w = 1 + u` is rounded, but `u * ln(w) / (w - 1)` cancels the rounding, so
/// the result is accurate to a few ulp even when `u` is tiny; where `w` rounds to exactly 1,
/// `ln(1 + u) = u` to f32 precision.
fn log1p(u: &Tensor) -> candle_core::Result<Tensor> {
    let w = (u + 1.0)?;
    let d = (&w - 1.0)?;
    let ratio = (u * w.log()?)?.div(&d)?;
    d.eq(0f32)?.where_cond(u, &ratio)
}

/// `[T, E]` scores in f32, with the non-finite rule of [`crate::literal::literal_scores`]:
/// `finite` is the `[T, E]` u8 mask of finite logits; other entries score 0 and take no part
/// in the softmax.
fn scores(scoring: Scoring, logits: &Tensor, finite: &Tensor) -> candle_core::Result<Tensor> {
    let zeros = logits.zeros_like()?;
    let s = match scoring {
        Scoring::Softmax => {
            let neg_inf = Tensor::full(f32::NEG_INFINITY, logits.dims(), logits.device())?;
            let x = finite.where_cond(logits, &neg_inf)?; // [T, E]
            let max = x.max_keepdim(1)?; // [T, 1]
                                         // A row with no finite logit has max −∞; subtract 0 there instead (−∞ − −∞ is NaN).
            let max = max
                .eq(f32::NEG_INFINITY)?
                .where_cond(&max.zeros_like()?, &max)?;
            let e = x.broadcast_sub(&max)?.exp()?; // exp(−∞) = 0
            let sum = e.sum_keepdim(1)?; // [T, 1]
            let sum = sum.eq(0f32)?.where_cond(&sum.ones_like()?, &sum)?;
            e.broadcast_div(&sum)?
        }
        Scoring::Sigmoid => {
            let x = finite.where_cond(logits, &zeros)?;
            // 1 / (1 + e^-x): for very negative x, e^-x = +∞ and the score is 0, never NaN.
            (x.neg()?.exp()? + 1.0)?.recip()?
        }
        Scoring::SqrtSoftplus => {
            let x = finite.where_cond(logits, &zeros)?;
            // ln(1 + eˣ) = max(x, 0) + ln(1 + e^-|x|)
            let tail = log1p(&x.abs()?.neg()?.exp()?)?;
            (x.relu()? + tail)?.sqrt()?
        }
    };
    finite.where_cond(&s, &zeros)
}

// ANCHOR: reference_route
impl ReferenceRouter {
    fn route_tensors(
        &self,
        logits: &Tensor,
        bias: Option<&[f32]>,
        rows: usize,
        experts: usize,
    ) -> candle_core::Result<Routing> {
        let cfg = &self.config;
        let dev = &Device::Cpu;
        let logits = logits.to_device(dev)?; // [T, E] f32
                                             // |x| < ∞ is false for ±∞ and for NaN (every comparison with NaN is false).
        let finite = logits.abs()?.lt(f32::INFINITY)?; // [T, E] u8
        let scores = scores(cfg.scoring, &logits, &finite)?; // [T, E] f32
        let keys = match bias {
            Some(b) => scores.broadcast_add(&Tensor::from_slice(b, (1, experts), dev)?)?,
            None => scores.clone(),
        };
        let neg_inf = Tensor::full(f32::NEG_INFINITY, (rows, experts), dev)?;
        let keys = finite.where_cond(&keys, &neg_inf)?; // [T, E] f32 rank keys

        // Selection over each row of keys: k rounds of argmax, lowest id on ties.
        let mut ids = Vec::with_capacity(rows * cfg.k); // [T, k] u32
        for row in keys.to_vec2::<f32>()? {
            let picked = match cfg.grouping {
                None => select_topk(&row, None, cfg.k),
                Some(g) => select_topk(&row, Some(&group_mask(&row, g)), cfg.k),
            };
            ids.extend_from_slice(&picked);
        }
        let ids_t = Tensor::from_slice(&ids, (rows, cfg.k), dev)?;

        // The weights come from the unbiased scores of the selected experts.
        let selected = scores.gather(&ids_t, 1)?; // [T, k] f32
        let weights = if cfg.renormalize {
            let sum = (selected.sum_keepdim(1)? + 1e-20)?; // [T, 1]; 1e-20: zero-sum guard
            selected.broadcast_div(&sum)?
        } else {
            selected
        };
        let weights = (weights * cfg.routed_scaling as f64)?;
        Ok(Routing {
            rows,
            k: cfg.k,
            ids,
            weights: weights.flatten_all()?.to_vec1::<f32>()?,
        })
    }
}

impl Router for ReferenceRouter {
    fn name(&self) -> &str {
        "reference-f32"
    }

    /// Routes `[T, E]` fp32 logits with an optional `[E]` fp32 bias (see the crate docs for the
    /// rules); `T = 0` returns an empty routing.
    fn route(&self, logits: &Tensor, bias: Option<&Tensor>) -> Result<Routing, RouterError> {
        let (rows, experts, bias) = check_inputs(&self.config, logits, bias)?;
        if rows == 0 {
            return Ok(Routing::empty(self.config.k));
        }
        debug_assert_eq!(logits.dtype(), DType::F32);
        Ok(self.route_tensors(logits, bias.as_deref(), rows, experts)?)
    }
}
// ANCHOR_END: reference_route
