//! The shapes and inputs of the layer's front: a hidden state that two matrices read, the gate
//! (one row per expert) and a projection (Kimi K3's: the experts work on its output).
//!
//! Kimi K3's numbers are the router article's (section 7): hidden 7,168, a projection of 3,584
//! rows, 896 experts of which 16 are selected; its router is DeepSeek-V3's kind (section 1.3:
//! the sigmoid of each expert's own logit, a per-expert bias added for ranking only), and its
//! biases lie between −0.76 and 0.15 (section 2.2). The weights here are random, from the
//! repository's deterministic generator ([`patterned`]).

use ch01_router::config::RouterConfig;
use ch01_router::inputs::patterned;

// ANCHOR: front_shape
/// The front of one MoE layer: `hidden` in, `experts` logits and `proj` projection columns out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrontShape {
    pub hidden: usize,
    pub experts: usize,
    /// Rows of the projection that reads the same hidden state as the gate.
    pub proj: usize,
    pub k: usize,
}

/// Kimi K3's front, as the router article gives it.
pub const KIMI_K3: FrontShape = FrontShape {
    hidden: 7168,
    experts: 896,
    proj: 3584,
    k: 16,
};

/// Kimi K3's biases, as the router article reports them: between −0.76 and 0.15.
pub const KIMI_BIAS_RANGE: (f32, f32) = (-0.76, 0.15);

/// Kimi K3's router: sigmoid scores, the bias for ranking only, the k scores renormalised.
/// (The article names no routed scaling factor; a scale multiplies every weight after the
/// selection, so it moves no expert and is left at 1.)
pub fn kimi_config(k: usize) -> RouterConfig {
    RouterConfig::glm5(k)
}
// ANCHOR_END: front_shape

/// Hidden states `[rows, H]`, the gate `[E, H]`, the projection `[P, H]` and the bias `[E]`, as
/// f32 (the devices get them rounded to bf16, the bias stays f32).
#[derive(Clone, Debug)]
pub struct FrontInputs {
    pub rows: usize,
    pub hidden: Vec<f32>,
    pub gate: Vec<f32>,
    pub proj: Vec<f32>,
    pub bias: Vec<f32>,
}

/// The scale of the random weights: with hidden values in [−1, 1) a logit's spread is about
/// √H / 3 × this, some 0.56 at H = 7,168, so that the sigmoids spread over their steep middle.
pub const WEIGHT_SCALE: f32 = 0.02;

/// Biases uniform in `range`, from `salt`.
pub fn bias_in(experts: usize, range: (f32, f32), salt: u64) -> Vec<f32> {
    let (lo, hi) = range;
    let (mid, half) = ((lo + hi) / 2.0, (hi - lo) / 2.0);
    patterned(experts, salt, 1.0)
        .iter()
        .map(|x| mid + half * x)
        .collect()
}

impl FrontInputs {
    /// `rows` random hidden states and random weights of `shape`; the biases in Kimi K3's range.
    /// Weights depend on `salt` only, hidden states on `salt` and `rows`' index only, so that a
    /// row is the same row whatever the batch it comes in.
    pub fn random(shape: FrontShape, rows: usize, salt: u64) -> Self {
        let h = shape.hidden;
        FrontInputs {
            rows,
            hidden: patterned(rows * h, salt * 1000 + 1, 1.0),
            gate: patterned(shape.experts * h, salt * 1000 + 2, WEIGHT_SCALE),
            proj: patterned(shape.proj * h, salt * 1000 + 3, WEIGHT_SCALE),
            bias: bias_in(shape.experts, KIMI_BIAS_RANGE, salt * 1000 + 4),
        }
    }

    // ANCHOR: stack
    /// The stacked weight `[E + P, H]`: the gate's rows, then the projection's, so that the first
    /// E columns of the merged GEMM's output are the logits (as the article describes SGLang's).
    pub fn stacked(&self) -> Vec<f32> {
        let mut w = Vec::with_capacity(self.gate.len() + self.proj.len());
        w.extend_from_slice(&self.gate);
        w.extend_from_slice(&self.proj);
        w
    }
    // ANCHOR_END: stack
}

/// f32 values rounded to bf16 (nearest, ties to even), as the devices receive them.
pub fn to_bf16(v: &[f32]) -> Vec<half::bf16> {
    v.iter().map(|&x| half::bf16::from_f32(x)).collect()
}
