//! Chapter 12's exercises, answered (built in place of `src/exercises.rs` with
//! `--features answers`).

// ANCHOR: answer_1
/// Exercise 1, answered: the same rows cut from both halves, so that SwiGLU still pairs gate
/// column c with up column c on the rank.
pub fn rank_w13(w13: &[f32], inter: usize, hidden: usize, rank: usize, world: usize) -> Vec<f32> {
    let n = inter / world;
    let mut v = Vec::with_capacity(2 * n * hidden);
    for half in [0, inter] {
        let first = half + rank * n;
        v.extend_from_slice(&w13[first * hidden..(first + n) * hidden]);
    }
    v
}
// ANCHOR_END: answer_1

// ANCHOR: answer_2
/// Exercise 2, answered: a count per rank, an exclusive scan of the counts (each rank's first
/// position), then each pair takes the next position of its rank.
pub fn dispatch(ids: &[u32], per_rank: usize, world: usize) -> (Vec<usize>, Vec<usize>) {
    let mut counts = vec![0; world];
    for &e in ids {
        counts[e as usize / per_rank] += 1;
    }
    let mut next = vec![0; world];
    for r in 1..world {
        next[r] = next[r - 1] + counts[r - 1];
    }
    let at = ids
        .iter()
        .map(|&e| {
            let r = e as usize / per_rank;
            next[r] += 1;
            next[r] - 1
        })
        .collect();
    (counts, at)
}
// ANCHOR_END: answer_2

// ANCHOR: answer_3
/// Exercise 3, answered: chapter 4's `fused_combine` order, whichever rank sent each row.
pub fn combine(
    back: &[f32],
    at: &[usize],
    shared: Option<&[f32]>,
    k: usize,
    hidden: usize,
) -> Vec<f32> {
    let rows = at.len() / k.max(1);
    let mut out = vec![0.0f32; rows * hidden];
    for t in 0..rows {
        for c in 0..hidden {
            let mut acc = 0.0f32;
            for j in 0..k {
                acc += back[at[t * k + j] * hidden + c];
            }
            if let Some(s) = shared {
                acc += s[t * hidden + c];
            }
            out[t * hidden + c] = acc;
        }
    }
    out
}
// ANCHOR_END: answer_3
