//! Chapter 8's exercises, answered (built with `--features answers` in place of
//! `src/exercises.rs`).

// ANCHOR: exercise_1
/// Exercise 1: the scan (see the stub).
pub fn first_slots(counts: &[i32], block_m: usize) -> Vec<i32> {
    let mut first = Vec::with_capacity(counts.len() + 1);
    let mut next = 0i32;
    for &c in counts {
        first.push(next);
        next += (c as usize).div_ceil(block_m) as i32 * block_m as i32;
    }
    first.push(next);
    first
}
// ANCHOR_END: exercise_1

// ANCHOR: exercise_2
/// Exercise 2: the scatter (see the stub).
pub fn scatter(ids: &[u32], first: &[i32], capacity: usize) -> Vec<i32> {
    let mut sorted = vec![ids.len() as i32; capacity];
    let mut next = first.to_vec();
    for (p, &e) in ids.iter().enumerate() {
        sorted[next[e as usize] as usize] = p as i32;
        next[e as usize] += 1;
    }
    sorted
}
// ANCHOR_END: exercise_2
