//! The CPU reference, shaped like the kernel: counts, padded offsets (a prefix sum), and a
//! stable scatter (each pair to the next free slot of its expert, pairs in order).

use crate::layout::{capacity, max_tiles, Aligned};

// ANCHOR: reference
/// The same output as [`crate::literal::align_literal`], in three passes over the pairs and the
/// experts, without a sort. Like the kernel, it skips ids outside `0..experts` (the host refuses
/// them before; the kernel must stay in bounds whatever it is given).
pub fn align_reference(ids: &[i64], experts: usize, block_m: usize) -> Aligned {
    let p = ids.len();
    let valid = |e: i64| e >= 0 && (e as usize) < experts;
    // 1. Count each expert's pairs.
    let mut count = vec![0usize; experts];
    for &e in ids.iter().filter(|&&e| valid(e)) {
        count[e as usize] += 1;
    }
    // 2. Each expert's first slot: the prefix sum of the padded counts.
    let mut first = vec![0usize; experts + 1];
    for e in 0..experts {
        first[e + 1] = first[e] + count[e].div_ceil(block_m) * block_m;
    }
    let total = first[experts];
    let mut sorted_ids = vec![p as i32; capacity(p, experts, block_m)];
    let mut expert_ids = vec![-1i32; max_tiles(p, experts, block_m)];
    for (e, run) in first.windows(2).enumerate() {
        expert_ids[run[0] / block_m..run[1] / block_m].fill(e as i32);
    }
    // 3. Stable scatter: pairs in order, each to its expert's next free slot.
    let mut next = first;
    for (pair, &e) in ids.iter().enumerate().filter(|(_, &e)| valid(e)) {
        sorted_ids[next[e as usize]] = pair as i32;
        next[e as usize] += 1;
    }
    Aligned {
        sorted_ids,
        expert_ids,
        num_tokens_post_padded: total as i32,
    }
}
// ANCHOR_END: reference
