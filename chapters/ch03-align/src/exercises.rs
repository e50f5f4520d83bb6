//! Chapter 3's exercises, as stubs for you to fill in (the book's page states them). Each has a
//! test in `tests/exercises.rs` that fails until you do; run them with
//! `tools/steps exercises 3` (or `cargo test -p ch03-align --test exercises -- --ignored`).
//! The kernel of exercise 2 is in `kernels/ch03_exercises.cu`. The answers live apart, in
//! `chapters/ch03-align/answers/` and `kernels/answers/`; `--features answers` builds them in
//! place of these stubs.

use crate::error::AlignError;
use crate::layout::Aligned;
use moe_kernels::{Device, KernelSource};

/// `kernels/ch03_exercises.cu` (the answer's version with `--features answers`).
pub static KERNELS: KernelSource = moe_kernels::kernel_family!("ch03_exercises");

/// The launch-geometry constants of `ch03_exercises.cu`: `EX_THREADS`, `EX_MAX_EXPERTS`.
pub mod geometry {
    moe_kernels::kernel_constants!("ch03_exercises");
}

// ANCHOR: exercise_1
/// Exercise 1: the tight bound. The largest `num_tokens_post_padded` that any routing of `pairs`
/// pairs over `experts` experts can reach with tiles of `block_m` (every id in `0..experts`; a
/// pair's expert is free, as the kernel sees it). [`crate::capacity`] is an upper bound; is it
/// this one? `experts ≥ 1`, `block_m ≥ 1`.
pub fn tight_capacity(pairs: usize, experts: usize, block_m: usize) -> usize {
    let _ = (pairs, experts, block_m);
    todo!("exercise 1: how many experts can hold a partly filled tile, and how many tiles in all?")
}
// ANCHOR_END: exercise_1

// ANCHOR: exercise_2
/// Exercise 2: the bookkeeping with an atomic cursor per expert, as the engines scatter, on the
/// device: one launch of your kernel `ex_align_atomic_cursor` (one block of
/// `geometry::EX_THREADS` threads). `ids [T·k]` are taken as they are: ids outside `0..experts`
/// are the kernel's to skip. Check `experts` and `block_m` ([`crate::layout::check`] with no ids)
/// and `experts ≤ geometry::EX_MAX_EXPERTS` (an [`AlignError::Limit`]); buffers sized by
/// [`crate::capacity`] and [`crate::max_tiles`]; an empty batch launches nothing.
pub fn align_atomic_on_device(
    device: &'static Device,
    ids: &[i32],
    experts: usize,
    block_m: usize,
) -> Result<Aligned, AlignError> {
    let _ = (device, ids, experts, block_m);
    todo!("exercise 2: check, upload, allocate, one launch of ex_align_atomic_cursor, download")
}
// ANCHOR_END: exercise_2

// ANCHOR: exercise_3
/// Exercise 3: choose BLOCK_M from a cost model. Among 16, 32, 64 and 128, return the tile that
/// minimises `padded slots + tile_cost × tiles` when `pairs` pairs are spread as evenly as
/// possible over `experts` experts (each gets ⌊pairs / E⌋ or one more, as
/// [`crate::padding_share`] assumes); on a tie, the smaller tile. A padded slot costs a row of
/// the expert GEMM; `tile_cost`, in the same unit, is what every tile costs besides its rows (its
/// share of the expert's weights read, its start-up). `experts ≥ 1`.
pub fn best_block_m(pairs: usize, experts: usize, tile_cost: usize) -> usize {
    let _ = (pairs, experts, tile_cost);
    todo!("exercise 3: the tiles and padded slots of each BLOCK_M, then the cheapest")
}
// ANCHOR_END: exercise_3
