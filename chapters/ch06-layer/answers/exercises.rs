//! Chapter 6's exercises, answered (built with `--features answers` in place of
//! `src/exercises.rs`).

use crate::layer::{AssembledLayer, LayerWorkspace};
use ch01_router::chain::{DeviceMatrix, DeviceRouter, GateInputs, RouterOutputs};
use ch02_grouped::MoeError;
use ch04_fused_moe::device::Hidden;
use half::bf16;
use moe_kernels::DeviceBuffer;

// ANCHOR: exercise_1
/// Exercise 1: the switch point from measurements (see the stub).
pub fn switch_point(measured: &[(usize, f64, f64)]) -> usize {
    measured
        .iter()
        .filter(|&&(_, pair, blas)| pair <= blas)
        .map(|&(rows, _, _)| rows)
        .max()
        .unwrap_or(0)
}
// ANCHOR_END: exercise_1

// ANCHOR: exercise_2
/// Exercise 2: the layer with another router (see the stub).
pub fn enqueue_with_router(
    layer: &AssembledLayer,
    router: &dyn DeviceRouter,
    ws: &LayerWorkspace,
    hidden: &DeviceBuffer<bf16>,
    out: &DeviceBuffer<f32>,
) -> Result<(), MoeError> {
    if ws.rows() == 0 {
        return Ok(());
    }
    let (gate, bias) = layer.gate();
    let (ids, weights) = ws.routing_buffers();
    router.enqueue(
        &GateInputs {
            hidden: DeviceMatrix::Bf16(hidden),
            weight: DeviceMatrix::Bf16(gate),
            bias,
        },
        &RouterOutputs { ids, weights },
    )?;
    layer.experts_layer().enqueue_experts_from(
        ws.experts_workspace(),
        Hidden::Bf16(hidden),
        ids,
        weights,
        out,
    )
}
// ANCHOR_END: exercise_2
