//! Chapter 9's exercises, as stubs for you to fill in (the book's page states them). Each has a
//! test in `tests/exercises.rs` that fails until you do; run them with `tools/steps exercises 9`
//! (or `cargo test -p ch09-one-launch --test exercises -- --ignored`). The answers live apart, in
//! `chapters/ch09-one-launch/answers/`; `--features answers` builds them in place of these stubs.

// ANCHOR: exercise_1
/// Exercise 1: the last-block protocol, on the host. `finish_order` lists the blocks of a grid
/// of `blocks_per_group × groups` blocks in the order they finish their logits (block b belongs
/// to row group `b / blocks_per_group`). Each takes a ticket from its group's counter; the one
/// that draws `blocks_per_group − 1` routes the group, then takes a ticket from the grid's
/// counter, and the one that draws `groups − 1` sorts. Return, in order, the blocks that route
/// (one per group, in the order they finish), and the block that sorts.
pub fn last_blocks(
    finish_order: &[usize],
    blocks_per_group: usize,
    groups: usize,
) -> (Vec<usize>, usize) {
    let _ = (finish_order, blocks_per_group, groups);
    todo!("exercise 1: count tickets per group, then for the grid")
}
// ANCHOR_END: exercise_1

// ANCHOR: exercise_2
/// Exercise 2: the block scan. `one_block_scan` gives thread t four consecutive entries, sums
/// them, and turns the sums into an exclusive prefix over the threads. Write it on the host for
/// `threads` threads: replace each of `values` (at most 4 × threads of them) by the sum of those
/// before it, and return the total.
pub fn block_scan(values: &mut [i32], threads: usize) -> i32 {
    let _ = (values, threads);
    todo!("exercise 2: four per thread, the threads' sums scanned, then each thread's four")
}
// ANCHOR_END: exercise_2
