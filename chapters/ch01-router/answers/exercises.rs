//! Chapter 1's exercises, answered (`--features answers` builds this file in place of
//! `src/exercises.rs`). Try them first.

use crate::chain::{self, DeviceRouterError, RouterOutputs};
use crate::config::RouterConfig;
use crate::literal::LiteralRouter;
use moe_kernels::{args, Device, DeviceBuffer, KernelSource, LaunchConfig};

/// `kernels/answers/ch01_exercises.cu`.
pub static KERNELS: KernelSource = moe_kernels::kernel_family!("ch01_exercises");

/// Exercise 1: route with both biases through the f64 literal router and count the rows whose
/// sorted ids differ.
pub fn rows_changed_by_bf16_bias(
    config: &RouterConfig,
    logits: &[f32],
    rows: usize,
    experts: usize,
    bias: &[f32],
) -> usize {
    let b16: Vec<f32> = bias
        .iter()
        .map(|&b| half::bf16::from_f32(b).to_f32())
        .collect();
    let router = LiteralRouter {
        config: config.clone(),
    };
    let a = router
        .route_rows(logits, rows, experts, Some(bias))
        .expect("valid inputs");
    let b = router
        .route_rows(logits, rows, experts, Some(&b16))
        .expect("valid inputs");
    let set = |ids: &[u32]| {
        let mut v = ids.to_vec();
        v.sort_unstable();
        v
    };
    a.iter()
        .zip(&b)
        .filter(|(x, y)| set(&x.ids) != set(&y.ids))
        .count()
}

/// Exercise 2: the top-k on the logits (softmax is monotonic, so it picks the same experts as a
/// top-k on the scores, up to ties that rounding creates), then the weights of the picks.
pub fn softmax_router_from_logits(
    device: &'static Device,
    config: &RouterConfig,
    rows: usize,
    experts: usize,
    logits: &DeviceBuffer<f32>,
    outputs: &RouterOutputs<'_>,
) -> Result<(), DeviceRouterError> {
    config.validate(experts, None)?;
    if rows == 0 {
        return Ok(());
    }
    let (t, e, k) = (rows as i32, experts as i32, config.k as i32);
    let m = device.load(&chain::KERNELS)?;
    m.launch(
        "router_topk",
        chain::topk_launch(rows, experts),
        &args![logits, logits, outputs.ids, t, e, k],
    )?;
    device.load(&KERNELS)?.launch(
        "ex_softmax_selected",
        LaunchConfig::for_elements(rows, 128),
        &args![
            logits,
            outputs.ids,
            outputs.weights,
            t,
            e,
            k,
            config.routed_scaling
        ],
    )?;
    Ok(())
}

/// Exercise 3: one launch; four rows (warps) per block, each warp's keys and scores in shared
/// memory.
pub fn fused_sigmoid_router(
    device: &'static Device,
    config: &RouterConfig,
    rows: usize,
    experts: usize,
    logits: &DeviceBuffer<f32>,
    bias: &DeviceBuffer<f32>,
    outputs: &RouterOutputs<'_>,
) -> Result<(), DeviceRouterError> {
    config.validate(experts, None)?;
    if rows == 0 {
        return Ok(());
    }
    let shared = (4 * 2 * experts * 4) as u32;
    device.load(&KERNELS)?.launch(
        "ex_fused_sigmoid_router",
        LaunchConfig::blocks(rows.div_ceil(4) as u32, 128).with_shared(shared),
        &args![
            logits,
            bias,
            outputs.ids,
            outputs.weights,
            rows as i32,
            experts as i32,
            config.k as i32,
            config.routed_scaling
        ],
    )?;
    Ok(())
}
