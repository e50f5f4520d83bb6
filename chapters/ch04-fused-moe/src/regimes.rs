//! The regimes this chapter adds to chapter 2's list ([`ch02_grouped::regimes::REGIMES`], which
//! the tests run too): the shape of mini-sglang's fused-MoE test, sizes that are no multiple of
//! the kernels' tiles (K and column tails in both GEMMs) with 60 experts, batches that make
//! chapter 3 choose BLOCK_M 64 and 128 and take its multi-block path, a real model's hidden
//! size with few tokens, and the two batches on either side of the path rule's crossover
//! ([`crate::choose::choose_path`]).
//!
//! A real layer of 60 experts at H 2880 and I 1408 holds 730 M weights (2.9 GB in f32 on the
//! host, again in bf16 for each device layer): too big for a test, so the 60 experts are tested
//! at H 200, I 88, and the real sizes with 4 experts.

use ch01_router::inputs::patterned;
use ch01_router::RouterConfig;
use ch02_grouped::regimes::MoeRegime;
use ch02_grouped::{MoeConfig, MoeWeights};

// ANCHOR: regimes
/// Every added regime's name, in the order tests list them.
pub const FUSED_REGIMES: &[&str] = &[
    "mini_sglang",
    "odd_sizes_60_experts",
    "k1_spread",
    "block_m_64",
    "block_m_128_multi_block_align",
    "gpt_oss_sizes_few_tokens",
    "crossover_last_decode",
    "crossover_first_tiled",
];
// ANCHOR_END: regimes

/// The regime called `name`, or `None` for a name not in [`FUSED_REGIMES`].
pub fn fused_regime(name: &str) -> Option<MoeRegime> {
    let name: &'static str = FUSED_REGIMES.iter().find(|n| **n == name)?;
    // (what it exercises, T, H, I, E, router)
    let (about, rows, hidden, intermediate, experts, router) = match name {
        "mini_sglang" => (
            "mini-sglang's fused MoE test: 37 tokens, H 64, I 48, softmax top-2 of 8",
            37,
            64,
            48,
            8,
            RouterConfig::qwen3(2),
        ),
        "odd_sizes_60_experts" => (
            "H 200, I 88, 60 experts: no size a multiple of a tile, K and N tails in both GEMMs",
            5,
            200,
            88,
            60,
            RouterConfig::qwen3(4),
        ),
        "k1_spread" => (
            "k = 1, 100 tokens over 8 experts: tiles of 16 with padding in most",
            100,
            64,
            40,
            8,
            RouterConfig::qwen3(1),
        ),
        "block_m_64" => (
            "512 pairs over 8 experts: chapter 3 picks BLOCK_M 64",
            256,
            64,
            32,
            8,
            RouterConfig::qwen3(2),
        ),
        "block_m_128_multi_block_align" => (
            "2400 pairs over 16 experts: BLOCK_M 128, and chapter 3's multi-block path",
            600,
            48,
            32,
            16,
            RouterConfig::qwen3(4),
        ),
        "gpt_oss_sizes_few_tokens" => (
            "H 2880 (gpt-oss), I 1408: 90 and 44 K slices, 45 and 44 column blocks; two tokens, top-2 of 4",
            2,
            2880,
            1408,
            4,
            RouterConfig::qwen3(2),
        ),
        "crossover_last_decode" => (
            "T·k = 4E: 16 tokens, top-4 of 16, the largest batch the rule sends down the decode path",
            16,
            96,
            72,
            16,
            RouterConfig::qwen3(4),
        ),
        "crossover_first_tiled" => (
            "T·k = 4E + 4: 17 tokens, top-4 of 16, the smallest batch the rule tiles",
            17,
            96,
            72,
            16,
            RouterConfig::qwen3(4),
        ),
        _ => unreachable!("every listed regime is built above"),
    };
    let config = MoeConfig {
        hidden,
        intermediate,
        experts,
        router,
        shared: None,
    };
    let seed = 400 + FUSED_REGIMES.iter().position(|n| *n == name).unwrap() as u64;
    let weights = MoeWeights::patterned(&config, seed, 2.0 / (hidden as f32).sqrt(), false);
    Some(MoeRegime {
        name,
        about,
        weights,
        hidden: patterned(rows * hidden, seed * 100 + 50, 1.0),
        rows,
    })
}
