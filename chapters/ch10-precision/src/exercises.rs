//! Chapter 10's exercises, as stubs for you to fill in (the book's page states them). Each has a
//! test in `tests/exercises.rs` that fails until you do; run them with `tools/steps exercises 10`
//! (or `cargo test -p ch10-precision --test exercises -- --ignored`). The answers live apart, in
//! `chapters/ch10-precision/answers/`; `--features answers` builds them in place of these stubs.

// ANCHOR: exercise_1
/// Exercise 1: how many distinct values `bias` keeps once each value is rounded to bf16 (the
/// router article's Figure 4: GLM-5.3-Flash's 288 biases keep 7).
pub fn distinct_in_bf16(bias: &[f32]) -> usize {
    let _ = bias;
    todo!("exercise 1: round each value to bf16 and count the distinct results")
}
// ANCHOR_END: exercise_1

// ANCHOR: exercise_2
/// Exercise 2: the flip count. `want` and `got` are `[T, k]` expert ids, row-major, each row in
/// any order. Return how many rows select a different set of experts (the same experts in
/// another order is not a flip).
pub fn flips(want: &[u32], got: &[u32], k: usize) -> usize {
    let _ = (want, got, k);
    todo!("exercise 2: compare each row's ids as sets")
}
// ANCHOR_END: exercise_2

// ANCHOR: exercise_3
/// Exercise 3: a third summation order, the pairwise sum: the sum of `v` is the sum of its first
/// `v.len() / 2` values plus the sum of the rest, each summed the same way, in f32; one value is
/// itself, none is 0. (NumPy sums this way; its error grows with log n, not n.)
pub fn pairwise_sum(v: &[f32]) -> f32 {
    let _ = v;
    todo!("exercise 3: split in two, sum each half, add")
}
// ANCHOR_END: exercise_3
