//! The oracle: the router written as the obvious loops, in f64.
//!
//! No tensor library and nothing clever, so that a reader can check every line against the
//! definition. Every other router of the book is tested against this one. The selection
//! helpers ([`select_topk`], [`group_mask`]) are generic over the key type so that the f32
//! reference router applies exactly the same tie rule to its own keys.

use std::ops::Add;

use candle_core::Tensor;

use crate::config::{Grouping, RouterConfig, Scoring};
use crate::cut::{cut_of, Cut};
use crate::error::RouterError;
use crate::routing::{check_inputs, Router, Routing};

/// The literal router. Computes in f64 and converts the weights to f32 at the very end.
#[derive(Clone, Debug, PartialEq)]
pub struct LiteralRouter {
    pub config: RouterConfig,
}

/// Everything the literal router knows about one row, for tests and for the book's tables.
#[derive(Clone, Debug, PartialEq)]
pub struct RowDetail {
    /// `[k]` selected experts, best rank key first.
    pub ids: Vec<u32>,
    /// `[k]` weights, aligned with `ids`.
    pub weights: Vec<f64>,
    /// `[E]` scores (0 for a non-finite logit).
    pub scores: Vec<f64>,
    /// `[E]` rank keys (−∞ for a non-finite logit).
    pub keys: Vec<f64>,
    /// The cut of this row; `None` when k = E. With grouped selection it is taken among the
    /// experts of the kept groups.
    pub cut: Option<Cut>,
}

/// What selection needs of a rank key: an order, and addition for group values.
/// f64 in the literal router, f32 in the reference router.
pub trait Key: Copy + PartialOrd + Add<Output = Self> {}
impl Key for f32 {}
impl Key for f64 {}

// ANCHOR: non_finite_rule
/// Scores of one `[E]` row of logits.
///
/// The rule for non-finite logits (NaN, +∞, −∞): such an expert gets score 0 (and rank key −∞,
/// see [`rank_key`]), and the softmax is taken over the finite logits only. A NaN must not
/// poison the row (one NaN in a softmax makes every score NaN), and a +∞ is more likely an
/// overflow than a confident gate, so no non-finite logit is ever preferred to a finite one and
/// no weight is ever NaN. A row without any finite logit scores 0 everywhere.
pub fn literal_scores(scoring: Scoring, logits: &[f32]) -> Vec<f64> {
    let mut scores = vec![0.0f64; logits.len()];
    match scoring {
        Scoring::Softmax => {
            // Subtract the row's largest finite logit so that no exp overflows.
            let mut max = f64::NEG_INFINITY;
            for &x in logits {
                if x.is_finite() && (x as f64) > max {
                    max = x as f64;
                }
            }
            let mut sum = 0.0f64;
            for (e, &x) in logits.iter().enumerate() {
                if x.is_finite() {
                    scores[e] = (x as f64 - max).exp();
                    sum += scores[e];
                }
            }
            if sum > 0.0 {
                for s in scores.iter_mut() {
                    *s /= sum;
                }
            }
        }
        Scoring::Sigmoid => {
            for (e, &x) in logits.iter().enumerate() {
                if x.is_finite() {
                    // exp(-x) may overflow to +∞ for very negative x; 1/(1+∞) = 0 is right.
                    scores[e] = 1.0 / (1.0 + (-(x as f64)).exp());
                }
            }
        }
        Scoring::SqrtSoftplus => {
            for (e, &x) in logits.iter().enumerate() {
                if x.is_finite() {
                    let x = x as f64;
                    // ln(1 + eˣ) = max(x, 0) + ln(1 + e^-|x|): no overflow, no cancellation.
                    let softplus = x.max(0.0) + (-x.abs()).exp().ln_1p();
                    scores[e] = softplus.sqrt();
                }
            }
        }
    }
    scores
}
// ANCHOR_END: non_finite_rule

// ANCHOR: rank_key
/// The rank key of one expert: its score plus its selection bias (0 without a bias).
///
/// The key only selects; the weight comes from the unbiased score. DeepSeek-V3's paper: the
/// bias term is only used for routing. A non-finite logit has key −∞ whatever its bias, so it
/// loses to every finite one.
pub fn rank_key(logit: f32, score: f64, bias: f64) -> f64 {
    if logit.is_finite() {
        score + bias
    } else {
        f64::NEG_INFINITY
    }
}
// ANCHOR_END: rank_key

// ANCHOR: select_topk
/// `k` rounds of argmax over `keys`, skipping experts already taken and, when `eligible` is
/// given, experts outside it. Returns the ids in selection order.
///
/// Tie rule: among equal keys the lowest id wins (the strict `>` below keeps the first one
/// seen). Every engine needs some rule to be deterministic; this one is what a warp argmax
/// that prefers the lower lane gives, and it makes −∞ keys resolve to the lowest ids.
pub fn select_topk<K: Key>(keys: &[K], eligible: Option<&[bool]>, k: usize) -> Vec<u32> {
    let mut taken = vec![false; keys.len()];
    let mut ids = Vec::with_capacity(k);
    for _round in 0..k {
        let mut best: Option<usize> = None;
        for e in 0..keys.len() {
            if taken[e] || eligible.is_some_and(|m| !m[e]) {
                continue;
            }
            match best {
                None => best = Some(e),
                Some(b) => {
                    if keys[e] > keys[b] {
                        best = Some(e);
                    }
                }
            }
        }
        let Some(b) = best else { break };
        taken[b] = true;
        ids.push(b as u32);
    }
    ids
}
// ANCHOR_END: select_topk

// ANCHOR: grouped_selection
/// DeepSeek-V3's grouped selection, first half: which experts may be selected at all.
///
/// The `[E]` keys are split into `n_group` contiguous groups; a group's value is the sum of its
/// two best keys (its one key if groups have one expert); the `topk_group` best groups are kept
/// (ties: lowest group id). Returns the `[E]` mask of experts in kept groups; the `k` experts
/// are then selected inside it with [`select_topk`], so no dropped group is ever picked from.
pub fn group_mask<K: Key>(keys: &[K], grouping: Grouping) -> Vec<bool> {
    let per_group = keys.len() / grouping.n_group;
    // [n_group] group values
    let mut values = Vec::with_capacity(grouping.n_group);
    for group in keys.chunks(per_group) {
        let best = select_topk(group, None, per_group.min(2));
        let mut value = group[best[0] as usize];
        for &i in &best[1..] {
            value = value + group[i as usize];
        }
        values.push(value);
    }
    let kept = select_topk(&values, None, grouping.topk_group);
    let mut eligible = vec![false; keys.len()];
    for g in kept {
        let g = g as usize;
        for flag in &mut eligible[g * per_group..(g + 1) * per_group] {
            *flag = true;
        }
    }
    eligible
}
// ANCHOR_END: grouped_selection

// ANCHOR: renormalize
/// The weights of the `[k]` selected scores.
///
/// With `renormalize` they are divided by their sum, so a token's weights add up to 1; the
/// `1e-20` keeps a row whose selected scores are all 0 (all-NaN logits) at weight 0 instead of
/// 0/0. Then every weight is multiplied by `routed_scaling` (2.5 in DeepSeek-V3).
pub fn renormalize(selected_scores: &[f64], config: &RouterConfig) -> Vec<f64> {
    let scale = config.routed_scaling as f64;
    if !config.renormalize {
        return selected_scores.iter().map(|s| s * scale).collect();
    }
    let mut sum = 0.0f64;
    for s in selected_scores {
        sum += s;
    }
    selected_scores
        .iter()
        .map(|s| s / (sum + 1e-20) * scale)
        .collect()
}
// ANCHOR_END: renormalize

// ANCHOR: literal_route_row
/// Routes one `[E]` row of fp32 logits: scores, rank keys, selection, weights, and the cut.
/// Assumes `config` was validated for this `E` and bias.
pub fn literal_route_row(config: &RouterConfig, logits: &[f32], bias: Option<&[f32]>) -> RowDetail {
    let experts = logits.len();
    // [E] scores and [E] rank keys, in f64
    let scores = literal_scores(config.scoring, logits);
    let mut keys = vec![0.0f64; experts];
    for e in 0..experts {
        let b = bias.map_or(0.0, |b| b[e] as f64);
        keys[e] = rank_key(logits[e], scores[e], b);
    }
    // [k] ids, best key first; the cut is measured among the experts that could be selected.
    let (ids, cut_keys) = match config.grouping {
        None => (select_topk(&keys, None, config.k), keys.clone()),
        Some(g) => {
            let eligible = group_mask(&keys, g);
            let ids = select_topk(&keys, Some(&eligible), config.k);
            let mut inside = keys.clone();
            for e in 0..experts {
                if !eligible[e] {
                    inside[e] = f64::NEG_INFINITY;
                }
            }
            (ids, inside)
        }
    };
    // [k] weights from the unbiased scores
    let mut selected = Vec::with_capacity(ids.len());
    for &e in &ids {
        selected.push(scores[e as usize]);
    }
    let weights = renormalize(&selected, config);
    let cut = cut_of(&cut_keys, &ids);
    RowDetail {
        ids,
        weights,
        scores,
        keys,
        cut,
    }
}
// ANCHOR_END: literal_route_row

impl LiteralRouter {
    /// Routes `rows` rows of `[rows, experts]` row-major fp32 logits, keeping every detail.
    ///
    /// `logits.len()` must be `rows * experts` (otherwise [`RouterError::LogitsNot2d`] with the
    /// flat length); then the config is validated against `experts` and the bias.
    pub fn route_rows(
        &self,
        logits: &[f32],
        rows: usize,
        experts: usize,
        bias: Option<&[f32]>,
    ) -> Result<Vec<RowDetail>, RouterError> {
        if logits.len() != rows * experts {
            return Err(RouterError::LogitsNot2d {
                dims: vec![logits.len()],
            });
        }
        self.config.validate(experts, bias)?;
        let mut out = Vec::with_capacity(rows);
        for r in 0..rows {
            let row = &logits[r * experts..(r + 1) * experts];
            out.push(literal_route_row(&self.config, row, bias));
        }
        Ok(out)
    }
}

impl Router for LiteralRouter {
    fn name(&self) -> &str {
        "literal-f64"
    }

    fn route(&self, logits: &Tensor, bias: Option<&Tensor>) -> Result<Routing, RouterError> {
        let (rows, experts, bias) = check_inputs(&self.config, logits, bias)?;
        if rows == 0 {
            return Ok(Routing::empty(self.config.k));
        }
        // [T, E] f32 logits, flattened row-major
        let flat = logits.flatten_all()?.to_vec1::<f32>()?;
        let details = self.route_rows(&flat, rows, experts, bias.as_deref())?;
        let mut routing = Routing {
            rows,
            k: self.config.k,
            ids: Vec::with_capacity(rows * self.config.k),
            weights: Vec::with_capacity(rows * self.config.k),
        };
        for d in details {
            routing.ids.extend_from_slice(&d.ids);
            routing.weights.extend(d.weights.iter().map(|&w| w as f32));
        }
        Ok(routing)
    }
}
