//! The chapter's regimes: routings whose ids exercise every case of the layout. The ids come
//! from chapter 1's generator (each token's k best of E patterned scores), or are built so the
//! regime does what its name says; the tests check that they do.

use ch01_router::inputs::patterned;

/// One regime: `T·k` ids over `experts`, and the BLOCK_M to align them to.
#[derive(Clone, Debug, PartialEq)]
pub struct AlignRegime {
    pub name: &'static str,
    pub about: &'static str,
    pub tokens: usize,
    pub k: usize,
    pub experts: usize,
    pub block_m: usize,
    /// `[T·k]`, token-major.
    pub ids: Vec<i64>,
}

// ANCHOR: regimes
pub const REGIMES: &[&str] = &[
    "decode_1tok",
    "spec_decode_6rows",
    "tiny_batch_many_empty_experts",
    "imbalanced_routing",
    "all_to_one_expert",
    "block_boundary_exact",
    "k1_experts_not_a_power_of_two",
    "empty_batch",
    "five_warps_last_one_short",
    "one_block_limit",
    "one_past_one_block",
    "one_pair_past_one_block",
    "block_m_1",
    "e512_block_m_1024",
    "large_prefill",
    "long_prefill_uneven_blocks",
];
// ANCHOR_END: regimes

/// Each token's `k` experts with the highest patterned scores (plus `bias(e)`), best first.
pub fn routed_ids(
    tokens: usize,
    experts: usize,
    k: usize,
    seed: u64,
    bias: fn(usize) -> f32,
) -> Vec<i64> {
    let scores = patterned(tokens * experts, seed, 1.0);
    let mut ids = Vec::with_capacity(tokens * k);
    for t in 0..tokens {
        let row = &scores[t * experts..(t + 1) * experts];
        let mut order: Vec<usize> = (0..experts).collect();
        // Stable, so equal scores keep the lower id first (chapter 1's tie rule).
        order.sort_by(|&a, &b| (row[b] + bias(b)).total_cmp(&(row[a] + bias(a))));
        ids.extend(order[..k].iter().map(|&e| e as i64));
    }
    ids
}

fn flat(_: usize) -> f32 {
    0.0
}

/// The regime called `name`, or `None`.
pub fn regime(name: &str) -> Option<AlignRegime> {
    let name: &'static str = REGIMES.iter().find(|n| **n == name)?;
    let r = |about, tokens, k, experts, block_m, ids| AlignRegime {
        name,
        about,
        tokens,
        k,
        experts,
        block_m,
        ids,
    };
    Some(match name {
        "decode_1tok" => r(
            "one token, 8 of 128 experts",
            1,
            8,
            128,
            16,
            routed_ids(1, 128, 8, 31, flat),
        ),
        "spec_decode_6rows" => r(
            "six tokens, 8 of 288 experts",
            6,
            8,
            288,
            16,
            routed_ids(6, 288, 8, 32, flat),
        ),
        "tiny_batch_many_empty_experts" => r(
            "three tokens, 4 of 64: most experts get no pair and no tile",
            3,
            4,
            64,
            16,
            routed_ids(3, 64, 4, 33, flat),
        ),
        "imbalanced_routing" => r(
            "a bias towards low ids: a few experts take most pairs, several tiles each",
            64,
            2,
            16,
            16,
            routed_ids(64, 16, 2, 34, |e| -0.15 * e as f32),
        ),
        "all_to_one_expert" => r("k = 1, every pair on expert 5", 40, 1, 8, 16, vec![5; 40]),
        "block_boundary_exact" => r(
            "every active expert gets exactly 16 pairs: runs end on a block edge, no padding",
            64,
            2,
            8,
            16,
            (0..64 * 2)
                .map(|p| ((p / 2 % 4) * 2 + p % 2) as i64)
                .collect(),
        ),
        "k1_experts_not_a_power_of_two" => r(
            "k = 1 over 60 experts, BLOCK_M 32",
            37,
            1,
            60,
            32,
            routed_ids(37, 60, 1, 35, flat),
        ),
        "empty_batch" => r("no tokens: empty outputs", 0, 8, 128, 16, Vec::new()),
        "five_warps_last_one_short" => r(
            "129 pairs (k = 3) over 96 experts: one block of 5 warps, the last holding one pair",
            43,
            3,
            96,
            16,
            routed_ids(43, 96, 3, 43, flat),
        ),
        "one_block_limit" => r(
            "512 pairs: the most one launch takes",
            64,
            8,
            128,
            32,
            routed_ids(64, 128, 8, 36, flat),
        ),
        "one_past_one_block" => r(
            "520 pairs: the two-launch path, its last block 8 pairs",
            65,
            8,
            128,
            32,
            routed_ids(65, 128, 8, 37, flat),
        ),
        "one_pair_past_one_block" => r(
            "513 pairs (k = 1): the two-launch path, its last block one pair",
            513,
            1,
            128,
            32,
            routed_ids(513, 128, 1, 39, flat),
        ),
        "block_m_1" => r(
            "BLOCK_M 1 over 7 experts: no padding, one tile per pair",
            20,
            2,
            7,
            1,
            routed_ids(20, 7, 2, 40, flat),
        ),
        "e512_block_m_1024" => r(
            "the limits: 512 experts, BLOCK_M 1024, 2400 pairs (two launches)",
            300,
            8,
            512,
            1024,
            routed_ids(300, 512, 8, 41, flat),
        ),
        "large_prefill" => r(
            "4096 tokens, 8 of 288 experts, BLOCK_M 64: 64 blocks of 512 pairs",
            4096,
            8,
            288,
            64,
            routed_ids(4096, 288, 8, 38, flat),
        ),
        "long_prefill_uneven_blocks" => r(
            "8200 tokens, 8 of 288 experts, BLOCK_M 128: 43 blocks of 1536 pairs, the last one short",
            8200,
            8,
            288,
            128,
            routed_ids(8200, 288, 8, 42, flat),
        ),
        _ => unreachable!("every listed regime is built above"),
    })
}
