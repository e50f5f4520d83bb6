//! Chapter 8's exercises, as stubs for you to fill in (the book's page states them). Each has a
//! test in `tests/exercises.rs` that fails until you do; run them with `tools/steps exercises 8`
//! (or `cargo test -p ch08-routing-stage --test exercises -- --ignored`). The answers live apart,
//! in `chapters/ch08-routing-stage/answers/`; `--features answers` builds them in place of these
//! stubs.

// ANCHOR: exercise_1
/// Exercise 1: the scan. `counts[e]` is expert e's number of pairs. Return each expert's first
/// slot in the layout (its run padded to a multiple of `block_m`, the runs in expert order), then
/// the padded total: `E + 1` values, as the stage's `offsets`.
pub fn first_slots(counts: &[i32], block_m: usize) -> Vec<i32> {
    let _ = (counts, block_m);
    todo!("exercise 1: the prefix sum of the padded counts, then the total")
}
// ANCHOR_END: exercise_1

// ANCHOR: exercise_2
/// Exercise 2: the scatter. `ids` are the routing's experts, pair by pair (pair p = t·k + j);
/// `first` is exercise 1's answer for them; `capacity` the layout's length. Return the layout's
/// `sorted_ids`: each expert's pairs in ascending order from its first slot, every other slot the
/// placeholder `ids.len()`.
pub fn scatter(ids: &[u32], first: &[i32], capacity: usize) -> Vec<i32> {
    let _ = (ids, first, capacity);
    todo!("exercise 2: each pair to its expert's next free slot, in pair order")
}
// ANCHOR_END: exercise_2
