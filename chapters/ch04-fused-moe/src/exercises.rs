//! Chapter 4's exercises, as stubs for you to fill in (the book's page states them). Each has a
//! test in `tests/exercises.rs` that fails until you do; run them with
//! `tools/steps exercises 4` (or `cargo test -p ch04-fused-moe --test exercises -- --ignored`).
//! The kernel of exercise 1 is in `kernels/ch04_exercises.cu`. The answers live apart, in
//! `chapters/ch04-fused-moe/answers/` and `kernels/answers/`; `--features answers` builds them in
//! place of these stubs.

use ch02_grouped::MoeError;
use moe_kernels::{Device, KernelSource};

/// `kernels/ch04_exercises.cu` (the answer's version with `--features answers`).
pub static KERNELS: KernelSource = moe_kernels::kernel_family!("ch04_exercises");

/// The launch-geometry constants of `ch04_exercises.cu`: `EX_COMBINE_THREADS`.
pub mod geometry {
    moe_kernels::kernel_constants!("ch04_exercises");
}

// ANCHOR: exercise_1
/// Exercise 1: the sum over k with float atomics, as a scatter-add does it. `y` is `[T·k, H]`
/// f32, the weighted rows `fused_gemm2` leaves (pair `p = t·k + j`); return `out [T, H]` with
/// `out[t] = Σⱼ y[t·k + j]`, summed by one launch of your kernel `ex_combine_atomic` into a
/// zeroed buffer. Check that `y` holds `rows · k · hidden` values ([`MoeError::Shape`]); an
/// empty batch launches nothing.
pub fn combine_atomic_on_device(
    device: &'static Device,
    y: &[f32],
    rows: usize,
    hidden: usize,
    k: usize,
) -> Result<Vec<f32>, MoeError> {
    let _ = (device, y, rows, hidden, k);
    todo!("exercise 1: check, upload y, zero out, one launch of ex_combine_atomic, download")
}
// ANCHOR_END: exercise_1

/// What the tensor cores and the shared memory of one GEMM launch work on for one routing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileWork {
    /// Tiles that hold at least one pair (`num_tokens_post_padded / BLOCK_M`): each reads its
    /// expert's weight slice once per column block.
    pub tiles: usize,
    /// Rows staged into shared memory: BLOCK_M per tile, placeholders included (staged as zeros).
    pub staged_rows: usize,
    /// Rows the tensor cores multiply: 16 per sub-tile that holds a pair (a sub-tile of 16
    /// placeholders is skipped).
    pub mma_rows: usize,
}

// ANCHOR: exercise_2
/// Exercise 2: the padding the fused kernels pay for. For `ids` (the routing's `T·k` ids, each in
/// `0..experts`) laid out by chapter 3 with tiles of `block_m` (16, 32, 64 or 128), count the
/// tiles, the rows staged and the rows multiplied ([`TileWork`]). Why does one of the three not
/// depend on `block_m`?
pub fn tile_work(ids: &[u32], experts: usize, block_m: usize) -> TileWork {
    let _ = (ids, experts, block_m);
    todo!("exercise 2: count each expert's pairs, then its tiles and its sub-tiles")
}
// ANCHOR_END: exercise_2

/// A layer's shape, as the fused kernels see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    pub tokens: usize,
    pub k: usize,
    pub hidden: usize,
    pub intermediate: usize,
    pub experts: usize,
}

/// An element offset that a 32-bit `int` cannot hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overflow {
    /// Which product: one of [`OFFSETS`].
    pub offset: &'static str,
    /// The smallest index (an expert, a token or a pair, as the product names it) whose offset
    /// passes `i32::MAX`.
    pub first: usize,
}

/// The offsets the fused kernels multiply out before they add them to a pointer, as
/// `name = index × stride`: an expert's slice of `w13` and of `w2`, a token's row of `x`, a pair's
/// row of `act` and of `y`.
pub const OFFSETS: [&str; 5] = [
    "w13 expert e: e·2I·H",
    "w2 expert e: e·H·I",
    "x token t: t·H",
    "act pair p: p·I",
    "y pair p: p·H",
];

// ANCHOR: exercise_3
/// Exercise 3: the 32-bit bug hunt. Each of [`OFFSETS`] is `index × stride`, for every index the
/// layer of `shape` reaches (experts `0..E`, tokens `0..T`, pairs `0..T·k`). Return, in the order
/// of [`OFFSETS`], each offset that a kernel computing it in `int` would get wrong, with the first
/// index where it goes wrong; an empty list when 32 bits are enough.
pub fn overflows(shape: &Shape) -> Vec<Overflow> {
    let _ = shape;
    todo!("exercise 3: for each offset, the largest index times its stride, against i32::MAX")
}
// ANCHOR_END: exercise_3
