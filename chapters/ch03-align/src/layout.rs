//! What the bookkeeping produces, and how big its buffers are.

use crate::error::AlignError;

/// The sorted, padded pairs of one routing, exactly as the kernel writes its buffers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Aligned {
    /// `[capacity]`: pair indices sorted by expert (stable), each expert's run padded with the
    /// placeholder `P = T·k` to a multiple of BLOCK_M; the slots past the padded total hold `P`.
    pub sorted_ids: Vec<i32>,
    /// `[capacity / BLOCK_M]`: the expert of each tile; `-1` past the last tile.
    pub expert_ids: Vec<i32>,
    /// The padded total: a multiple of BLOCK_M, at most `capacity`.
    pub num_tokens_post_padded: i32,
}

impl Aligned {
    /// Tiles in use: `num_tokens_post_padded / BLOCK_M`.
    pub fn tiles(&self, block_m: usize) -> usize {
        self.num_tokens_post_padded as usize / block_m
    }
}

// ANCHOR: capacity
/// The slots the output needs at most, for `pairs = T·k` pairs over `experts` experts: every
/// active expert wastes at most BLOCK_M − 1 slots, and at most `min(pairs, experts)` experts are
/// active. So `pairs + min(pairs, experts) · (BLOCK_M − 1)`: at most `T·k + E·(BLOCK_M − 1)`, and
/// at most `T·k · BLOCK_M` when `T·k < E`.
pub fn capacity(pairs: usize, experts: usize, block_m: usize) -> usize {
    pairs + pairs.min(experts) * (block_m - 1)
}
// ANCHOR_END: capacity

/// Tiles the output needs at most: `capacity / BLOCK_M` (the padded total is a multiple of it).
pub fn max_tiles(pairs: usize, experts: usize, block_m: usize) -> usize {
    capacity(pairs, experts, block_m) / block_m
}

/// The most experts an id can name: ids and `expert_ids` are i32 on the device.
pub const MAX_EXPERTS_I32: usize = i32::MAX as usize;

/// Checks BLOCK_M, E and every id; `ids` are the routing's ids flattened, as i64 so that
/// negative ids from a file can be named. E past [`MAX_EXPERTS_I32`] is a
/// [`AlignError::Limit`]: no i32 id could name its last experts (and `E as i64` would wrap).
pub fn check(ids: &[i64], experts: usize, block_m: usize) -> Result<(), AlignError> {
    if !(block_m.is_power_of_two() && block_m <= 1024) {
        return Err(AlignError::BlockM { value: block_m });
    }
    if experts == 0 {
        return Err(AlignError::NoExperts);
    }
    if experts > MAX_EXPERTS_I32 {
        return Err(AlignError::Limit {
            what: "experts",
            limit: MAX_EXPERTS_I32,
            got: experts,
        });
    }
    let e = experts as i64; // fits: at most i32::MAX
    if let Some((pair, &id)) = ids.iter().enumerate().find(|(_, &x)| x < 0 || x >= e) {
        return Err(AlignError::IdOutOfRange { pair, id, experts });
    }
    Ok(())
}

// ANCHOR: block_m_rule
/// The chapter's rule for BLOCK_M: the largest tile whose padding stays small. With `pairs`
/// spread over `experts`, an active expert holds about `pairs / experts` pairs and pads up to
/// BLOCK_M − 1 more; so keep tiles of 16 while experts average fewer than 32 pairs, and take the
/// tile of 32, 64 or 128 once the average reaches that tile twice over (32 → 32 at an average of
/// 32 to 63, 64 from 64, 128 from 128): a full tile or more per expert, at most half a tile of
/// padding on average.
pub fn choose_block_m(pairs: usize, experts: usize) -> usize {
    let per_expert = pairs / experts.max(1);
    match per_expert {
        0..=31 => 16,
        32..=63 => 32,
        64..=127 => 64,
        _ => 128,
    }
}
// ANCHOR_END: block_m_rule

/// The share of padded slots for `pairs` pairs spread as evenly as possible over `experts`
/// experts (each expert gets ⌊pairs / E⌋ or one more), computed exactly.
pub fn padding_share(pairs: usize, experts: usize, block_m: usize) -> f64 {
    if pairs == 0 {
        return 0.0;
    }
    let (q, r) = (pairs / experts, pairs % experts);
    let pad = |c: usize| c.div_ceil(block_m) * block_m;
    let padded = r * pad(q + 1) + (experts - r) * pad(q);
    1.0 - pairs as f64 / padded as f64
}
