//! Chapter 12's exercises, as stubs for you to fill in (the book's page states them). Each has a
//! test in `tests/exercises.rs` that fails until you do; run them with `tools/steps exercises 12`
//! (or `cargo test -p ch12-parallel --test exercises -- --ignored`). The answers live apart, in
//! `chapters/ch12-parallel/answers/`; `--features answers` builds them in place of these stubs.

// ANCHOR: exercise_1
/// Exercise 1: tensor parallelism's cut of one expert's gate|up block. `w13` is `[2I, H]` (the
/// I gate rows, then the I up rows); return rank `rank` of `world`'s `[2·I/R, H]` share: the
/// gate rows of its columns, then the up rows of the same columns.
pub fn rank_w13(w13: &[f32], inter: usize, hidden: usize, rank: usize, world: usize) -> Vec<f32> {
    let _ = (w13, inter, hidden, rank, world);
    todo!("exercise 1: two runs of I/R rows, one from each half")
}
// ANCHOR_END: exercise_1

// ANCHOR: exercise_2
/// Exercise 2: expert parallelism's dispatch. `ids` is a routing `[T, k]` (row-major) over
/// `world` ranks of `per_rank` experts each. Return how many pairs go to each rank, and for each
/// pair (in `ids`' order) its position in the send buffer: the pairs grouped by destination rank
/// (rank 0's first), in `ids`' order within a rank.
pub fn dispatch(ids: &[u32], per_rank: usize, world: usize) -> (Vec<usize>, Vec<usize>) {
    let _ = (ids, per_rank, world);
    todo!("exercise 2: count per rank, scan the counts, then place each pair")
}
// ANCHOR_END: exercise_2

// ANCHOR: exercise_3
/// Exercise 3: the combine. `back` holds the returned weighted outputs `[P, H]` in send order,
/// `at[t·k + j]` the row of token t's slot j, `shared` the shared expert's `[T, H]` (or none).
/// Return `out [T, H]`, each value summed in f32 in the order that gives the one-GPU layer's
/// bits: from 0, slot 0 first, the shared expert last.
pub fn combine(
    back: &[f32],
    at: &[usize],
    shared: Option<&[f32]>,
    k: usize,
    hidden: usize,
) -> Vec<f32> {
    let _ = (back, at, shared, k, hidden);
    todo!("exercise 3: one accumulator per value, the slots in order, then the shared expert")
}
// ANCHOR_END: exercise_3
