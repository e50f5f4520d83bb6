//! Chapter 11's exercises, as stubs for you to fill in (the book's page states them). Each has a
//! test in `tests/exercises.rs` that fails until you do; run them with
//! `tools/steps exercises 11` (or `cargo test -p ch11-merged-gate --test exercises -- --ignored`).
//! The answers live apart, in `chapters/ch11-merged-gate/answers/`; `--features answers` builds
//! them in place of these stubs.

// ANCHOR: exercise_1
/// Exercise 1: how many passes radix select needs. For one row of ordered keys (0: not a
/// candidate) and k, the number of 8-bit passes over the 42-bit packed numbers (key, then the id
/// reversed) until the bin holding the cut holds exactly the numbers still missing; 0 when k
/// takes every candidate. [`crate::radix::radix_select_row`] returns the same count: write your
/// own from the description, without calling it.
pub fn passes_needed(ordered: &[u32], k: usize) -> usize {
    let _ = (ordered, k);
    todo!("exercise 1: the passes of radix select")
}
// ANCHOR_END: exercise_1

// ANCHOR: exercise_2
/// Exercise 2: the top-k by a sort. The ids of the k largest keys of `keys` (finite or −∞), in
/// chapter 5's order (the larger key first, equal keys to the lower id), by sorting (key, id)
/// pairs: the literal loop radix select must agree with.
pub fn topk_by_sort(keys: &[f32], k: usize) -> Vec<usize> {
    let _ = (keys, k);
    todo!("exercise 2: sort (key, id) pairs and keep k")
}
// ANCHOR_END: exercise_2

// ANCHOR: exercise_3
/// Exercise 3: the bytes the merged form saves. At `rows` rows of a front with hidden size `h`,
/// `e` experts and a projection of `p` rows, the separate form reads the hidden states twice (bf16)
/// and writes the projection once in bf16 and the logits once in fp32, and the chapter-5 router
/// reads the logits back; the merged form reads the hidden states once, writes all E + P columns
/// in fp32, and the merged kernel reads them back and writes the projection in bf16. Return (separate, merged) bytes of everything
/// but the weights (which both read once).
pub fn activation_bytes(rows: usize, h: usize, e: usize, p: usize) -> (usize, usize) {
    let _ = (rows, h, e, p);
    todo!("exercise 3: count the bytes each form moves besides the weights")
}
// ANCHOR_END: exercise_3
