//! Chapter 1's exercises, as stubs for you to fill in (the book's page states them). Each has a
//! test in `tests/exercises.rs` that fails until you do; run them with
//! `tools/steps exercises 1` (or `cargo test -p ch01-router --test exercises -- --ignored`).
//! The kernels of exercises 2 and 3 are in `kernels/ch01_exercises.cu`. The answers live apart,
//! in `chapters/ch01-router/answers/` and `kernels/answers/`; `--features answers` builds them in
//! place of these stubs.

use crate::chain::{DeviceRouterError, RouterOutputs};
use crate::config::RouterConfig;
use moe_kernels::{Device, DeviceBuffer, KernelSource};

/// `kernels/ch01_exercises.cu` (the answers' version with `--features answers`).
pub static KERNELS: KernelSource = moe_kernels::kernel_family!("ch01_exercises");

// ANCHOR: exercise_1
/// Exercise 1: how many of `rows` rows of `logits` [rows, experts] select a different *set* of
/// experts when the bias is rounded to bf16 than with the fp32 `bias`?
pub fn rows_changed_by_bf16_bias(
    config: &RouterConfig,
    logits: &[f32],
    rows: usize,
    experts: usize,
    bias: &[f32],
) -> usize {
    let _ = (config, logits, rows, experts, bias);
    todo!("exercise 1: route twice with the literal router and compare the sets of ids")
}
// ANCHOR_END: exercise_1

// ANCHOR: exercise_2
/// Exercise 2: the softmax router in two launches after the GEMM. Queue a top-k on the logits
/// themselves (`router_topk` of chapter 1's kernels, with the logits as keys), then your kernel
/// `ex_softmax_selected`, which turns the picked logits into weights. `logits` [rows, experts]
/// f32 in; ids [rows, k] and weights [rows, k] out.
pub fn softmax_router_from_logits(
    device: &'static Device,
    config: &RouterConfig,
    rows: usize,
    experts: usize,
    logits: &DeviceBuffer<f32>,
    outputs: &RouterOutputs<'_>,
) -> Result<(), DeviceRouterError> {
    let _ = (device, config, rows, experts, logits, outputs);
    todo!("exercise 2: router_topk on the logits, then ex_softmax_selected")
}
// ANCHOR_END: exercise_2

// ANCHOR: exercise_3
/// Exercise 3: the GLM router after the GEMM (sigmoid scores, bias, top-k, renormalised weights)
/// in one launch of your kernel `ex_fused_sigmoid_router`, one warp per row.
pub fn fused_sigmoid_router(
    device: &'static Device,
    config: &RouterConfig,
    rows: usize,
    experts: usize,
    logits: &DeviceBuffer<f32>,
    bias: &DeviceBuffer<f32>,
    outputs: &RouterOutputs<'_>,
) -> Result<(), DeviceRouterError> {
    let _ = (device, config, rows, experts, logits, bias, outputs);
    todo!("exercise 3: one launch of ex_fused_sigmoid_router")
}
// ANCHOR_END: exercise_3
