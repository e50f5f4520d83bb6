//! Chapter 5's exercises, as stubs for you to fill in (the book's page states them). Each has a
//! test in `tests/exercises.rs` that fails until you do; run them with
//! `tools/steps exercises 5` (or `cargo test -p ch05-fused-router --test exercises -- --ignored`).
//! The kernels of exercises 2 and 3 are in `kernels/ch05_exercises.cu`. The answers live apart, in
//! `chapters/ch05-fused-router/answers/` and `kernels/answers/`; `--features answers` builds them
//! in place of these stubs.

use ch01_router::chain::DeviceRouterError;
use ch01_router::config::RouterConfig;
use ch01_router::routing::Routing;
use moe_kernels::{Device, KernelSource};

/// `kernels/ch05_exercises.cu` (the answer's version with `--features answers`).
pub static KERNELS: KernelSource = moe_kernels::kernel_family!("ch05_exercises");

/// The launch-geometry constants of `ch05_exercises.cu`: `EX_ROWS_PER_BLOCK`.
pub mod geometry {
    moe_kernels::kernel_constants!("ch05_exercises");
}

// ANCHOR: exercise_1
/// Exercise 1: bf16 logits. Of `rows` rows of fp32 `logits` [rows, experts], how many select a
/// different *set* of experts through the fused kernel when the logits are first rounded to
/// bf16 (what a GEMM that writes bf16 would hand it) than with the logits as they are?
pub fn rows_changed_by_bf16_logits(
    device: &'static Device,
    config: &RouterConfig,
    logits: &[f32],
    rows: usize,
    experts: usize,
    bias: Option<&[f32]>,
) -> Result<usize, DeviceRouterError> {
    let _ = (device, config, logits, rows, experts, bias);
    todo!("exercise 1: route both through route_logits_fused and compare the sets of ids")
}
// ANCHOR_END: exercise_1

// ANCHOR: exercise_2
/// Exercise 2: the argmax of each row of `keys` [rows, experts] (finite or −∞; ties to the
/// lowest id) on the device, by one launch of your kernel `ex_row_argmax`, which moves one packed
/// 64-bit word per shuffle. Check `experts ≥ 1` and the length of `keys` (typed errors); an empty
/// batch launches nothing.
pub fn row_argmax_on_device(
    device: &'static Device,
    keys: &[f32],
    rows: usize,
    experts: usize,
) -> Result<Vec<i32>, DeviceRouterError> {
    let _ = (device, keys, rows, experts);
    todo!("exercise 2: check, upload, one launch of ex_row_argmax, download")
}
// ANCHOR_END: exercise_2

// ANCHOR: exercise_3
/// Exercise 3: each row of `routing` with its picks sorted by expert id (the weights move with
/// their ids), on the device, by one launch of your kernel `ex_sort_by_id`. Check `k ≤ 32` (a
/// [`DeviceRouterError::Limit`]); an empty routing launches nothing.
pub fn sort_by_id_on_device(
    device: &'static Device,
    routing: &Routing,
) -> Result<Routing, DeviceRouterError> {
    let _ = (device, routing);
    todo!("exercise 3: check k, upload ids and weights, one launch of ex_sort_by_id, download")
}
// ANCHOR_END: exercise_3
