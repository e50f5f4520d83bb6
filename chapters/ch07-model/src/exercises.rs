//! Chapter 7's exercises, as stubs for you to fill in (the book's page states them). Each has a
//! test in `tests/exercises.rs` that fails until you do; run them with `tools/steps exercises 7`
//! (or `cargo test -p ch07-model --test exercises -- --ignored`). The answers live apart, in
//! `chapters/ch07-model/answers/`; `--features answers` builds them in place of these stubs.

// ANCHOR: exercise_1
/// Exercise 1: the rotary embedding, the other convention. transformers pairs dimension `i` with
/// `i + R/2` ("rotate half", [`crate::cpu::rope`]); the original paper, and checkpoints converted
/// from it (GPT-J, the first Llama weights), pair `2i` with `2i + 1`. Rotate one head `x [D]`
/// in place that way, on its first `2 · cos.len()` dimensions, pair `i` by angle
/// `(cos[i], sin[i])`.
pub fn rope_interleaved(x: &mut [f32], cos: &[f32], sin: &[f32]) {
    let _ = (x, cos, sin);
    todo!("exercise 1: rotate the pairs (2i, 2i + 1)")
}
// ANCHOR_END: exercise_1

// ANCHOR: exercise_2
/// Exercise 2: how many tokens two greedy runs share before they part: the length of the common
/// prefix of `a` and `b` (what the example prints for the bf16 path against transformers).
pub fn agreeing_prefix(a: &[u32], b: &[u32]) -> usize {
    let _ = (a, b);
    todo!("exercise 2: the first position where they differ")
}
// ANCHOR_END: exercise_2
