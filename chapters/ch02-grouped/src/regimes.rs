//! The chapter's input regimes: the book's shared list of names, as a MoE layer sees them.
//!
//! Each regime is a whole layer (config and weights) and a batch of hidden states, small enough
//! for the emulator in seconds. The regimes of chapter 1 that are about the router's arithmetic
//! (`ties`, `nan_logits`) stay in chapter 1; `block_boundary_exact` belongs to chapter 3's
//! padding. Added here: the empty batch, the shared expert, and Qwen2-MoE's gated shared expert.

use crate::config::{MoeConfig, SharedExpert};
use crate::weights::MoeWeights;
use ch01_router::inputs::patterned;
use ch01_router::{Grouping, RouterConfig, Scoring};

/// One regime: a layer and its input.
#[derive(Clone, Debug, PartialEq)]
pub struct MoeRegime {
    pub name: &'static str,
    /// What it exercises, in a few words (printed in the snapshot's title).
    pub about: &'static str,
    pub weights: MoeWeights,
    /// `[rows, hidden]` f32
    pub hidden: Vec<f32>,
    pub rows: usize,
}

// ANCHOR: regimes
/// Every regime's name, in the order tests and tables list them.
pub const REGIMES: &[&str] = &[
    "decode_1tok",
    "spec_decode_6rows",
    "tiny_batch_many_empty_experts",
    "imbalanced_routing",
    "all_to_one_expert",
    "large_prefill",
    "shared_expert",
    "gated_shared_expert",
    "unaligned_sizes",
    "empty_batch",
];
// ANCHOR_END: regimes

fn config(
    hidden: usize,
    intermediate: usize,
    experts: usize,
    router: RouterConfig,
    shared: Option<SharedExpert>,
) -> MoeConfig {
    MoeConfig {
        hidden,
        intermediate,
        experts,
        router,
        shared,
    }
}

/// The regime called `name`, or `None` for a name not in [`REGIMES`].
pub fn regime(name: &str) -> Option<MoeRegime> {
    let name: &'static str = REGIMES.iter().find(|n| **n == name)?;
    // What the regime exercises, its rows, its layer, and its bias as a function of the expert
    // id (added to the patterned bias; `None`: no bias).
    type Spec = (&'static str, usize, MoeConfig, Option<fn(usize) -> f32>);
    let (about, rows, cfg, bias): Spec = match name {
        "decode_1tok" => (
            "one token, Qwen3-like softmax top-8 of 32",
            1,
            config(128, 64, 32, RouterConfig::qwen3(8), None),
            None,
        ),
        "spec_decode_6rows" => (
            "six rows, GLM-like sigmoid + bias, top-8 of 64",
            6,
            config(128, 96, 64, RouterConfig::glm5(8), None),
            Some(|_| 0.0),
        ),
        "tiny_batch_many_empty_experts" => (
            "three tokens, top-4 of 64: at most 12 experts active",
            3,
            config(64, 32, 64, RouterConfig::qwen3(4), None),
            None,
        ),
        "imbalanced_routing" => (
            "a bias that favours low ids: a few experts take most pairs",
            64,
            config(64, 48, 16, RouterConfig::glm5(2), None),
            Some(|e| -0.1 * e as f32),
        ),
        "all_to_one_expert" => (
            "k = 1 and one expert's bias far above the rest: every pair on expert 5",
            40,
            config(
                64,
                32,
                8,
                RouterConfig {
                    renormalize: false,
                    ..RouterConfig::glm5(1)
                },
                None,
            ),
            Some(|e| if e == 5 { 10.0 } else { 0.0 }),
        ),
        "large_prefill" => (
            "256 tokens, DeepSeek-V3-like: groups, bias, scaling 2.5, a shared expert",
            256,
            config(
                128,
                64,
                64,
                RouterConfig {
                    grouping: Some(Grouping {
                        n_group: 8,
                        topk_group: 4,
                    }),
                    ..RouterConfig::deepseek_v3()
                },
                Some(SharedExpert {
                    intermediate: 64,
                    gated: false,
                }),
            ),
            Some(|_| 0.0),
        ),
        "shared_expert" => (
            "GLM-4-MoE-like: sigmoid + bias, scaling 1.8, two shared experts fused",
            9,
            config(
                96,
                40,
                24,
                RouterConfig {
                    routed_scaling: 1.8,
                    ..RouterConfig::glm5(6)
                },
                Some(SharedExpert {
                    intermediate: 80,
                    gated: false,
                }),
            ),
            Some(|_| 0.0),
        ),
        "gated_shared_expert" => (
            "Qwen2-MoE-like: softmax top-4 of 16 without renormalising, gated shared expert",
            17,
            config(
                64,
                32,
                16,
                RouterConfig {
                    renormalize: false,
                    ..RouterConfig::qwen3(4)
                },
                Some(SharedExpert {
                    intermediate: 96,
                    gated: true,
                }),
            ),
            None,
        ),
        "unaligned_sizes" => (
            "H 70 and I 37: no size a multiple of 8, so GEMM operands start at odd addresses",
            13,
            config(70, 37, 12, RouterConfig::qwen3(3), None),
            None,
        ),
        "empty_batch" => (
            "no tokens: empty outputs, no launches",
            0,
            config(64, 32, 16, RouterConfig::qwen3(4), None),
            None,
        ),
        _ => unreachable!("every listed regime is built above"),
    };
    debug_assert!(cfg.router.scoring != Scoring::SqrtSoftplus || bias.is_none());
    let seed = REGIMES.iter().position(|n| *n == name).unwrap() as u64 + 1;
    let mut weights =
        MoeWeights::patterned(&cfg, seed, 2.0 / (cfg.hidden as f32).sqrt(), bias.is_some());
    if let (Some(b), Some(f)) = (weights.bias.as_mut(), bias) {
        for (e, v) in b.iter_mut().enumerate() {
            *v += f(e);
        }
    }
    let hidden = patterned(rows * cfg.hidden, seed * 100 + 50, 1.0);
    Some(MoeRegime {
        name,
        about,
        weights,
        hidden,
        rows,
    })
}
