//! Answers to chapter 3's exercises (the stubs are `src/exercises.rs`). Built in their place with
//! `--features answers`; `tools/steps check` runs the exercise tests on these.

use crate::error::AlignError;
use crate::layout::{capacity, check, max_tiles, Aligned};
use moe_kernels::{args, Device, KernelSource, LaunchConfig};

/// `kernels/answers/ch03_exercises.cu`.
pub static KERNELS: KernelSource = moe_kernels::kernel_family!("ch03_exercises");

/// The launch-geometry constants of `ch03_exercises.cu`: `EX_THREADS`, `EX_MAX_EXPERTS`.
pub mod geometry {
    moe_kernels::kernel_constants!("ch03_exercises");
}

// ANCHOR: exercise_1
/// Exercise 1: an expert with `c` pairs fills ⌈c / BLOCK_M⌉ tiles, at most `(c + BLOCK_M − 1) /
/// BLOCK_M`. Summed over the `a` active experts that is at most `(pairs + a·(BLOCK_M − 1)) /
/// BLOCK_M`, rounded down since tiles are whole; `a = min(pairs, experts)` is the most, and it is
/// reached: one pair on each of `a` experts, the rest on one of them. So the bound is
/// [`crate::capacity`] rounded down to a multiple of BLOCK_M: `max_tiles × BLOCK_M`.
pub fn tight_capacity(pairs: usize, experts: usize, block_m: usize) -> usize {
    let active = pairs.min(experts);
    (pairs + active * (block_m - 1)) / block_m * block_m
}
// ANCHOR_END: exercise_1

// ANCHOR: exercise_2
/// Exercise 2: one block, one launch; the ids are not checked here, so that the tests can give
/// the kernel garbage.
pub fn align_atomic_on_device(
    device: &'static Device,
    ids: &[i32],
    experts: usize,
    block_m: usize,
) -> Result<Aligned, AlignError> {
    check(&[], experts, block_m)?;
    if experts > geometry::EX_MAX_EXPERTS {
        return Err(AlignError::Limit {
            what: "experts",
            limit: geometry::EX_MAX_EXPERTS,
            got: experts,
        });
    }
    let p = ids.len();
    let (cap, tiles) = (
        capacity(p, experts, block_m),
        max_tiles(p, experts, block_m),
    );
    if p == 0 {
        return Ok(Aligned {
            sorted_ids: Vec::new(),
            expert_ids: Vec::new(),
            num_tokens_post_padded: 0,
        });
    }
    let m = device.load(&KERNELS)?;
    let ids = device.upload(ids)?;
    let sorted_ids = device.alloc::<i32>(cap)?;
    let expert_ids = device.alloc::<i32>(tiles)?;
    let num_post = device.alloc::<i32>(1)?;
    m.launch(
        "ex_align_atomic_cursor",
        LaunchConfig::blocks(1, geometry::EX_THREADS as u32),
        &args![
            &ids,
            p as i32,
            experts as i32,
            block_m as i32,
            cap as i32,
            tiles as i32,
            &sorted_ids,
            &expert_ids,
            &num_post
        ],
    )?;
    Ok(Aligned {
        sorted_ids: sorted_ids.to_vec()?,
        expert_ids: expert_ids.to_vec()?,
        num_tokens_post_padded: num_post.to_vec()?[0],
    })
}
// ANCHOR_END: exercise_2

// ANCHOR: exercise_3
/// Exercise 3: with the pairs spread evenly, `r = pairs mod E` experts hold `q + 1` pairs and the
/// others `q = ⌊pairs / E⌋`; each BLOCK_M's tiles follow, and its padded slots are tiles × BLOCK_M.
/// `min_by_key` keeps the first of equal costs, so a tie goes to the smaller tile.
pub fn best_block_m(pairs: usize, experts: usize, tile_cost: usize) -> usize {
    let (q, r) = (pairs / experts, pairs % experts);
    [16, 32, 64, 128]
        .into_iter()
        .min_by_key(|&bm| {
            let tiles = r * (q + 1).div_ceil(bm) + (experts - r) * q.div_ceil(bm);
            tiles * bm + tile_cost * tiles
        })
        .expect("four candidates")
}
// ANCHOR_END: exercise_3
