//! Answers to chapter 5's exercises (the stubs are `src/exercises.rs`). Built in their place with
//! `--features answers`; `tools/steps check` runs the exercise tests on these.

use crate::fused::route_logits_fused;
use ch01_router::chain::{download, expect_len, DeviceRouterError};
use ch01_router::config::RouterConfig;
use ch01_router::error::RouterError;
use ch01_router::routing::Routing;
use half::bf16;
use moe_kernels::{args, Device, KernelSource, LaunchConfig};

/// `kernels/answers/ch05_exercises.cu`.
pub static KERNELS: KernelSource = moe_kernels::kernel_family!("ch05_exercises");

/// The launch-geometry constants of `ch05_exercises.cu`: `EX_ROWS_PER_BLOCK`.
pub mod geometry {
    moe_kernels::kernel_constants!("ch05_exercises");
}

// ANCHOR: exercise_1
/// Exercise 1: two passes of the fused kernel, the second on logits rounded to bf16; a row
/// counts when its sorted ids differ (the same experts in another order do not count).
pub fn rows_changed_by_bf16_logits(
    device: &'static Device,
    config: &RouterConfig,
    logits: &[f32],
    rows: usize,
    experts: usize,
    bias: Option<&[f32]>,
) -> Result<usize, DeviceRouterError> {
    let rounded: Vec<f32> = logits.iter().map(|&x| bf16::from_f32(x).to_f32()).collect();
    let exact = route_logits_fused(device, config, rows, experts, logits, bias)?;
    let coarse = route_logits_fused(device, config, rows, experts, &rounded, bias)?;
    let set = |ids: &[u32]| {
        let mut v = ids.to_vec();
        v.sort_unstable();
        v
    };
    Ok((0..rows)
        .filter(|&r| set(exact.row_ids(r)) != set(coarse.row_ids(r)))
        .count())
}
// ANCHOR_END: exercise_1

// ANCHOR: exercise_2
/// Exercise 2: one warp per row, `EX_ROWS_PER_BLOCK` rows per block.
pub fn row_argmax_on_device(
    device: &'static Device,
    keys: &[f32],
    rows: usize,
    experts: usize,
) -> Result<Vec<i32>, DeviceRouterError> {
    if experts == 0 {
        return Err(RouterError::NoExperts.into());
    }
    expect_len("keys [T, E]", keys.len(), rows * experts)?;
    if rows == 0 {
        return Ok(Vec::new());
    }
    let m = device.load(&KERNELS)?;
    let keys = device.upload(keys)?;
    let ids = device.alloc::<i32>(rows)?;
    let per = geometry::EX_ROWS_PER_BLOCK;
    m.launch(
        "ex_row_argmax",
        LaunchConfig::blocks(rows.div_ceil(per) as u32, 32 * per as u32),
        &args![&keys, &ids, rows as i32, experts as i32],
    )?;
    Ok(ids.to_vec()?)
}
// ANCHOR_END: exercise_2

// ANCHOR: exercise_3
/// Exercise 3: one warp per row, `EX_ROWS_PER_BLOCK` rows per block; a lane per pick, so k ≤ 32.
pub fn sort_by_id_on_device(
    device: &'static Device,
    routing: &Routing,
) -> Result<Routing, DeviceRouterError> {
    let Routing { rows, k, .. } = *routing;
    if k > 32 {
        return Err(DeviceRouterError::Limit {
            what: "k (ex_sort_by_id keeps one pick per lane)",
            limit: 32,
            got: k,
        });
    }
    if rows == 0 {
        return Ok(routing.clone());
    }
    let m = device.load(&KERNELS)?;
    let ids: Vec<i32> = routing.ids.iter().map(|&e| e as i32).collect();
    let ids = device.upload(&ids)?;
    let weights = device.upload(&routing.weights)?;
    let sorted_ids = device.alloc::<i32>(rows * k)?;
    let sorted_weights = device.alloc::<f32>(rows * k)?;
    let per = geometry::EX_ROWS_PER_BLOCK;
    m.launch(
        "ex_sort_by_id",
        LaunchConfig::blocks(rows.div_ceil(per) as u32, 32 * per as u32),
        &args![
            &ids,
            &weights,
            &sorted_ids,
            &sorted_weights,
            rows as i32,
            k as i32
        ],
    )?;
    download(rows, k, &sorted_ids, &sorted_weights)
}
// ANCHOR_END: exercise_3
