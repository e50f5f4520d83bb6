//! Chapter 6's exercises, as stubs for you to fill in (the book's page states them). Each has a
//! test in `tests/exercises.rs` that fails until you do; run them with `tools/steps exercises 6`
//! (or `cargo test -p ch06-layer --test exercises -- --ignored`). The answers live apart, in
//! `chapters/ch06-layer/answers/`; `--features answers` builds them in place of these stubs.

use crate::layer::{AssembledLayer, LayerWorkspace};
use ch01_router::chain::DeviceRouter;
use ch02_grouped::MoeError;
use half::bf16;
use moe_kernels::DeviceBuffer;

// ANCHOR: exercise_1
/// Exercise 1: the switch point from measurements. `measured` holds, for one gate shape, one
/// `(rows, pair_us, blas_us)` per measured row count, in any order: the cold medians of the tiny
/// GEMM's pair and of cuBLAS + the fused router. Return the largest row count at which the pair
/// is no slower (0 when it never is).
pub fn switch_point(measured: &[(usize, f64, f64)]) -> usize {
    let _ = measured;
    todo!("exercise 1: the last row count where the pair wins or ties")
}
// ANCHOR_END: exercise_1

// ANCHOR: exercise_2
/// Exercise 2: the layer with another router. Queue `router` (any of chapter 1's or chapter 5's
/// device routers, built for `ws.rows()` rows of this layer's gate) on `hidden` `[T, H]` bf16
/// and the layer's gate and bias, writing the workspace's routing buffers, then the layer's
/// experts on that routing, into `out` `[T, H]` f32. Only launches, as
/// [`AssembledLayer::enqueue`].
pub fn enqueue_with_router(
    layer: &AssembledLayer,
    router: &dyn DeviceRouter,
    ws: &LayerWorkspace,
    hidden: &DeviceBuffer<bf16>,
    out: &DeviceBuffer<f32>,
) -> Result<(), MoeError> {
    let _ = (layer, router, ws, hidden, out);
    todo!("exercise 2: the router into ws.routing_buffers(), then the experts from bf16")
}
// ANCHOR_END: exercise_2
