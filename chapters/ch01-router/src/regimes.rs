//! The one list of named input regimes that every backend of every chapter runs.
//!
//! A regime is a router's whole input, hidden states and gate weight included, so that chapters
//! that compute the logits themselves (the tiny GEMM of chapter 5) run the same cases. Each
//! regime is built so that its logits really do what its name says; the tests check that.

use crate::config::RouterConfig;
use crate::inputs::patterned;

/// One regime: the inputs of a router layer, row-major.
#[derive(Clone, Debug, PartialEq)]
pub struct RegimeInput {
    pub name: &'static str,
    pub rows: usize,
    pub hidden: usize,
    pub experts: usize,
    pub k: usize,
    pub config: RouterConfig,
    /// `[rows, hidden]` f32
    pub hidden_states: Vec<f32>,
    /// `[experts, hidden]` f32, one row per expert
    pub gate_weight: Vec<f32>,
    /// `[experts]` f32 selection bias
    pub bias: Option<Vec<f32>>,
}

impl RegimeInput {
    /// `[rows, experts]` logits = hidden · Wᵀ, every product and sum in f64: the exact value a
    /// GEMM approximates. (Where f32 would overflow, as in `nan_logits`, these stay finite.)
    pub fn logits_f64(&self) -> Vec<f64> {
        let (h, w) = (&self.hidden_states, &self.gate_weight);
        let mut out = vec![0.0f64; self.rows * self.experts];
        for t in 0..self.rows {
            for e in 0..self.experts {
                let mut acc = 0.0f64;
                for j in 0..self.hidden {
                    acc += h[t * self.hidden + j] as f64 * w[e * self.hidden + j] as f64;
                }
                out[t * self.experts + e] = acc;
            }
        }
        out
    }

    /// `[rows, experts]` fp32 logits: [`RegimeInput::logits_f64`] rounded once, the best an
    /// fp32 GEMM can do. This is what the routers of this chapter receive.
    pub fn logits_f32(&self) -> Vec<f32> {
        self.logits_f64().iter().map(|&x| x as f32).collect()
    }
}

// ANCHOR: regimes
/// Every regime's name, in the order tests and tables list them.
pub const REGIMES: &[&str] = &[
    "decode_1tok",
    "spec_decode_6rows",
    "tiny_batch_many_empty_experts",
    "imbalanced_routing",
    "all_to_one_expert",
    "block_boundary_exact",
    "ties",
    "nan_logits",
    "large_prefill",
];

/// The regime called `name`, or `None` for a name not in [`REGIMES`].
///
/// Sizes stay small enough for the CPU emulator (≤ 512 rows, hidden ≤ 256, 8–128 experts),
/// and the configs cover every family: softmax (Qwen3, Mixtral), sigmoid + bias (GLM-5),
/// grouped (DeepSeek-V3) and √softplus (DeepSeek-V4).
pub fn regime(name: &str) -> Option<RegimeInput> {
    let name: &'static str = REGIMES.iter().find(|n| **n == name)?;
    let r = match name {
        // One token, Qwen3-30B-A3B's router shape cut to hidden 256: 8 of 128, softmax.
        "decode_1tok" => plain(name, 1, 256, RouterConfig::qwen3(8), 128, 0.2, 1, None),
        // Six rows, as the speculative decoding recipe of the router article verifies per step;
        // GLM-like biases about 8, a thousandth apart on average (±0.05 over 96 experts).
        "spec_decode_6rows" => plain(
            name,
            6,
            128,
            RouterConfig::glm5(8),
            96,
            0.3,
            2,
            Some(glm_bias(96, 2)),
        ),
        // 3 tokens × 6 picks reach at most 18 of 128 experts: most experts get no pairs.
        "tiny_batch_many_empty_experts" => {
            plain(name, 3, 64, RouterConfig::deepseek_v4(6), 128, 0.4, 3, None)
        }
        // Five hot experts win most pairs (a load-balancing failure the later chapters' padding
        // and sorting must survive).
        "imbalanced_routing" => {
            let mut r = plain(name, 64, 128, RouterConfig::qwen3(4), 64, 0.2, 4, None);
            boost(&mut r, &[3, 17, 29, 42, 58], 2.5);
            r
        }
        // Mixtral: expert 5 is every token's first choice.
        "all_to_one_expert" => {
            let mut r = plain(name, 32, 64, RouterConfig::mixtral(), 8, 0.3, 5, None);
            boost(&mut r, &[5], 6.0);
            r
        }
        // DeepSeek-V3's grouped router with 8 rows × k = 8 = 64 pairs, exactly one block of 64.
        "block_boundary_exact" => {
            let bias = patterned(64, 0x6b1a5, 0.1);
            plain(
                name,
                8,
                128,
                RouterConfig::deepseek_v3(),
                64,
                0.25,
                6,
                Some(bias),
            )
        }
        "ties" => ties(),
        "nan_logits" => nan_logits(),
        // The largest case: 512 prompt rows through a GLM-like router, 8 of 128 experts.
        "large_prefill" => plain(
            name,
            512,
            128,
            RouterConfig::glm5(8),
            128,
            0.3,
            9,
            Some(glm_bias(128, 9)),
        ),
        _ => return None,
    };
    Some(r)
}
// ANCHOR_END: regimes

/// Hidden states in [-1, 1) and gate weights in [-w_scale, w_scale), from `salt`.
#[allow(clippy::too_many_arguments)]
fn plain(
    name: &'static str,
    rows: usize,
    hidden: usize,
    config: RouterConfig,
    experts: usize,
    w_scale: f32,
    salt: u64,
    bias: Option<Vec<f32>>,
) -> RegimeInput {
    RegimeInput {
        name,
        rows,
        hidden,
        experts,
        k: config.k,
        config,
        hidden_states: patterned(rows * hidden, salt * 1000 + 1, 1.0),
        gate_weight: patterned(experts * hidden, salt * 1000 + 2, w_scale),
        bias,
    }
}

/// GLM-like biases: 8 ± 0.05, so neighbours are a few thousandths apart.
fn glm_bias(experts: usize, salt: u64) -> Vec<f32> {
    patterned(experts, salt * 1000 + 3, 0.05)
        .iter()
        .map(|b| 8.0 + b)
        .collect()
}

/// Gives the `hot` experts `amount` more logit on every token: hidden column 0 becomes 1 for
/// every row, and only the hot experts' gate rows weigh it (`amount`, the others 0).
fn boost(r: &mut RegimeInput, hot: &[usize], amount: f32) {
    for t in 0..r.rows {
        r.hidden_states[t * r.hidden] = 1.0;
    }
    for e in 0..r.experts {
        r.gate_weight[e * r.hidden] = if hot.contains(&e) { amount } else { 0.0 };
    }
}

/// Exact ties: values are multiples of 1/4 (so every product is a multiple of 1/16 and every
/// sum is exact in f32, in any order), experts 9 and 12 copy expert 3's gate row and expert 6
/// copies expert 5's, and the last token's hidden state is all zeros (every logit 0).
fn ties() -> RegimeInput {
    let (rows, hidden, experts) = (8, 32, 16);
    let quarter = |v: Vec<f32>| {
        v.iter()
            .map(|x| (x * 4.0).round() / 4.0)
            .collect::<Vec<_>>()
    };
    let mut r = RegimeInput {
        name: "ties",
        rows,
        hidden,
        experts,
        k: 4,
        config: RouterConfig::qwen3(4),
        hidden_states: quarter(patterned(rows * hidden, 7001, 1.0)),
        gate_weight: quarter(patterned(experts * hidden, 7002, 0.5)),
        bias: None,
    };
    // The duplicated experts lead (+3 and +2 on every token), so they meet at the cut.
    boost(&mut r, &[3, 9, 12], 3.0);
    for e in [5, 6] {
        r.gate_weight[e * hidden] = 2.0;
    }
    for (dst, src) in [(9, 3), (12, 3), (6, 5)] {
        let row: Vec<f32> = r.gate_weight[src * hidden..(src + 1) * hidden].to_vec();
        r.gate_weight[dst * hidden..(dst + 1) * hidden].copy_from_slice(&row);
    }
    let last = rows - 1;
    r.hidden_states[last * hidden..].fill(0.0);
    r
}

/// Non-finite logits of every kind, GLM-like router (sigmoid + bias, k = 4, 32 experts):
/// - expert 7's gate row is NaN: expert 7 is NaN on every token;
/// - token 2 × expert 3 is +∞ and token 4 × expert 11 is −∞: a hidden value of 10 meets a gate
///   value of ±3e38 in a column that is 0 for every other token, so the fp32 product overflows
///   (the f64 logit stays finite at ±3e39);
/// - token 5's hidden state is NaN: its whole row of logits is NaN.
fn nan_logits() -> RegimeInput {
    let (rows, hidden, experts) = (8, 64, 32);
    let mut r = plain(
        "nan_logits",
        rows,
        hidden,
        RouterConfig::glm5(4),
        experts,
        0.4,
        8,
        Some(glm_bias(experts, 8)),
    );
    let h = hidden;
    for t in 0..rows {
        r.hidden_states[t * h] = 0.0;
        r.hidden_states[t * h + 1] = 0.0;
    }
    for e in 0..experts {
        r.gate_weight[e * h] = 0.0;
        r.gate_weight[e * h + 1] = 0.0;
    }
    r.hidden_states[2 * h] = 10.0;
    r.gate_weight[3 * h] = 3e38;
    r.hidden_states[4 * h + 1] = 10.0;
    r.gate_weight[11 * h + 1] = -3e38;
    r.gate_weight[7 * h..8 * h].fill(f32::NAN);
    r.hidden_states[5 * h..6 * h].fill(f32::NAN);
    r
}
