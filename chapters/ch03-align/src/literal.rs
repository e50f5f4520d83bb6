//! The most literal version: list the pairs, sort them by expert (a stable sort), then walk
//! the sorted list and pad each expert's run with placeholders.

use crate::layout::{capacity, max_tiles, Aligned};

// ANCHOR: literal
/// Sorts and pads `ids` (the routing's ids flattened; in range, checked by the caller).
pub fn align_literal(ids: &[i64], experts: usize, block_m: usize) -> Aligned {
    let p = ids.len();
    let mut pairs: Vec<(i64, usize)> = ids.iter().copied().zip(0..p).collect();
    pairs.sort_by_key(|&(e, _)| e); // stable: equal experts keep pair order
    let mut sorted = Vec::new();
    let mut tiles = Vec::new();
    let mut i = 0;
    while i < pairs.len() {
        let e = pairs[i].0;
        while i < pairs.len() && pairs[i].0 == e {
            sorted.push(pairs[i].1 as i32);
            i += 1;
        }
        while sorted.len() % block_m != 0 {
            sorted.push(p as i32); // the placeholder: one past the last pair
        }
        while tiles.len() < sorted.len() / block_m {
            tiles.push(e as i32);
        }
    }
    let total = sorted.len() as i32;
    sorted.resize(capacity(p, experts, block_m), p as i32);
    tiles.resize(max_tiles(p, experts, block_m), -1);
    Aligned {
        sorted_ids: sorted,
        expert_ids: tiles,
        num_tokens_post_padded: total,
    }
}
// ANCHOR_END: literal
