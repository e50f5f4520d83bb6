//! Chapter 11's exercises, answered (built with `--features answers` in place of
//! `src/exercises.rs`).

// ANCHOR: exercise_1
/// Exercise 1, answered: the passes of radix select, counted.
pub fn passes_needed(ordered: &[u32], k: usize) -> usize {
    let packed: Vec<u64> = ordered
        .iter()
        .enumerate()
        .filter(|(_, &o)| o != 0)
        .map(|(e, &o)| ((o as u64) << 10) | (1023 - e as u64))
        .collect();
    let mut remaining = k.min(packed.len());
    if remaining == packed.len() {
        return 0;
    }
    let (mut prefix, mut shift, mut passes) = (0u64, 42u32, 0);
    loop {
        let width = shift.min(8);
        let next = shift - width;
        let mut hist = vec![0usize; 1 << width];
        for &p in packed.iter().filter(|&&p| p >> shift == prefix) {
            hist[((p >> next) & ((1 << width) - 1)) as usize] += 1;
        }
        passes += 1;
        let mut above = 0;
        for b in (0..hist.len()).rev() {
            if above + hist[b] >= remaining {
                remaining -= above;
                prefix = (prefix << width) | b as u64;
                break;
            }
            above += hist[b];
        }
        let bin = (prefix & ((1 << width) - 1)) as usize;
        shift = next;
        if hist[bin] == remaining {
            return passes;
        }
    }
}
// ANCHOR_END: exercise_1

// ANCHOR: exercise_2
/// Exercise 2, answered: sort (key, id) by the larger key, then the lower id.
pub fn topk_by_sort(keys: &[f32], k: usize) -> Vec<usize> {
    let mut ids: Vec<usize> = (0..keys.len()).collect();
    ids.sort_by(|&a, &b| keys[b].total_cmp(&keys[a]).then(a.cmp(&b)));
    ids.truncate(k);
    ids
}
// ANCHOR_END: exercise_2

// ANCHOR: exercise_3
/// Exercise 3, answered.
pub fn activation_bytes(rows: usize, h: usize, e: usize, p: usize) -> (usize, usize) {
    let separate = 2 * rows * h * 2 + rows * p * 2 + rows * e * 4 + rows * e * 4;
    let merged = rows * h * 2 + rows * (e + p) * 4 + rows * (e + p) * 4 + rows * p * 2;
    (separate, merged)
}
// ANCHOR_END: exercise_3
