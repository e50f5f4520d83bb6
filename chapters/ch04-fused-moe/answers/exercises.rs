//! Answers to chapter 4's exercises (the stubs are `src/exercises.rs`). Built in their place with
//! `--features answers`; `tools/steps check` runs the exercise tests on these.

use ch02_grouped::error::expect_len;
use ch02_grouped::MoeError;
use moe_kernels::{args, Device, KernelSource, LaunchConfig};

/// `kernels/answers/ch04_exercises.cu`.
pub static KERNELS: KernelSource = moe_kernels::kernel_family!("ch04_exercises");

/// The launch-geometry constants of `ch04_exercises.cu`: `EX_COMBINE_THREADS`.
pub mod geometry {
    moe_kernels::kernel_constants!("ch04_exercises");
}

// ANCHOR: exercise_1
/// Exercise 1: a zeroed output, one launch, one thread per element of `y`.
pub fn combine_atomic_on_device(
    device: &'static Device,
    y: &[f32],
    rows: usize,
    hidden: usize,
    k: usize,
) -> Result<Vec<f32>, MoeError> {
    expect_len("y [T·k, H]", y.len(), rows * k * hidden)?;
    if y.is_empty() {
        return Ok(vec![0.0; rows * hidden]);
    }
    let m = device.load(&KERNELS)?;
    let yd = device.upload(y)?;
    let out = device.zeros::<f32>(rows * hidden)?;
    m.launch(
        "ex_combine_atomic",
        LaunchConfig::for_elements(y.len(), geometry::EX_COMBINE_THREADS as u32),
        &args![&yd, &out, rows as i32, hidden as i32, k as i32],
    )?;
    Ok(out.to_vec()?)
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
/// Exercise 2: an expert with `c` pairs owns the first `c` slots of its run, which starts on a
/// tile edge: ⌈c / BLOCK_M⌉ tiles, and ⌈c / 16⌉ sub-tiles that hold a pair, since every tile edge
/// is also a sub-tile edge. So the rows multiplied are Σ 16·⌈c / 16⌉ whatever BLOCK_M is: a
/// larger tile stages more placeholder rows, but the kernel skips them before the tensor cores.
pub fn tile_work(ids: &[u32], experts: usize, block_m: usize) -> TileWork {
    let mut count = vec![0usize; experts];
    for &e in ids {
        count[e as usize] += 1;
    }
    let tiles: usize = count.iter().map(|c| c.div_ceil(block_m)).sum();
    TileWork {
        tiles,
        staged_rows: tiles * block_m,
        mma_rows: count.iter().map(|c| c.div_ceil(16) * 16).sum(),
    }
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
/// Exercise 3: index × stride passes `i32::MAX` from index ⌊i32::MAX / stride⌋ + 1 on; it goes
/// wrong in the layer when that index is one the layer reaches.
pub fn overflows(shape: &Shape) -> Vec<Overflow> {
    let s = shape;
    let pairs = s.tokens * s.k;
    // (stride, how many indices the layer reaches), in the order of OFFSETS.
    let products = [
        (2 * s.intermediate * s.hidden, s.experts),
        (s.hidden * s.intermediate, s.experts),
        (s.hidden, s.tokens),
        (s.intermediate, pairs),
        (s.hidden, pairs),
    ];
    OFFSETS
        .iter()
        .zip(products)
        .filter(|(_, (stride, _))| *stride > 0)
        .map(|(&offset, (stride, count))| (offset, i32::MAX as usize / stride + 1, count))
        .filter(|&(_, first, count)| first < count)
        .map(|(offset, first, _)| Overflow { offset, first })
        .collect()
}
// ANCHOR_END: exercise_3
