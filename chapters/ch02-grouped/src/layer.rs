//! What every implementation of the MoE layer offers, so one test body checks them all.

use crate::config::Dtype;
use crate::config::MoeConfig;
use crate::error::MoeError;
use ch01_router::Routing;

/// A layer's output: the routing it chose and `out` [T, H] in f32.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerOutput {
    pub routing: Routing,
    pub out: Vec<f32>,
}

// ANCHOR: moe_layer
/// One MoE layer, built from [`MoeWeights`](crate::MoeWeights) for one compute type.
///
/// `forward` is the whole layer: the router (chapter 1: f32 logits from the f32 hidden states
/// and gate, then scores, top-k, renormalisation, scaling), then the experts. `experts` runs the
/// experts alone for a routing it is given, so two implementations can be compared on exactly
/// the same routing (a near tie that two routers break differently is chapter 1's business).
pub trait MoeLayer {
    /// A short name for messages and tables: `literal`, `grouped-cpu`, `grouped-device`.
    fn name(&self) -> &'static str;
    /// The compute type.
    fn dtype(&self) -> Dtype;
    /// The layer's sizes and router.
    fn config(&self) -> &MoeConfig;
    /// `out` [T, H] = Σⱼ weightⱼ · expertⱼ(hidden) (+ the shared expert), for `hidden` [T, H].
    fn experts(&self, hidden: &[f32], routing: &Routing) -> Result<Vec<f32>, MoeError>;
    /// The whole layer for `hidden` [T, H]: route, then [`MoeLayer::experts`].
    fn forward(&self, hidden: &[f32]) -> Result<LayerOutput, MoeError>;
}
// ANCHOR_END: moe_layer

/// Checks `hidden` against the layer and returns T. An empty batch (`T = 0`) is valid.
pub fn rows_of(config: &MoeConfig, hidden: &[f32]) -> Result<usize, MoeError> {
    let h = config.hidden;
    // `%` rather than `is_multiple_of`, which needs Rust 1.87 (the workspace's MSRV is 1.85).
    #[allow(clippy::manual_is_multiple_of)]
    let whole_rows = hidden.len() % h == 0;
    if !whole_rows {
        return Err(MoeError::Shape {
            what: format!("hidden [T, H] with H = {h}"),
            expected: hidden.len() / h * h,
            got: hidden.len(),
        });
    }
    Ok(hidden.len() / h)
}

/// Checks what [`MoeLayer::experts`] is handed, `hidden` [T, H] and a routing for T tokens,
/// against the layer, and returns T.
pub fn experts_rows(
    config: &MoeConfig,
    hidden: &[f32],
    routing: &Routing,
) -> Result<usize, MoeError> {
    let rows = rows_of(config, hidden)?;
    check_routing(config, rows, routing)?;
    Ok(rows)
}

/// Checks a routing handed to [`MoeLayer::experts`] against the layer and the batch.
pub fn check_routing(config: &MoeConfig, rows: usize, routing: &Routing) -> Result<(), MoeError> {
    let k = config.router.k;
    if routing.rows != rows || routing.k != k {
        return Err(MoeError::Shape {
            what: format!("routing [T, k] with T = {rows}, k = {k}"),
            expected: rows * k,
            got: routing.rows * routing.k,
        });
    }
    crate::error::expect_len("routing ids [T, k]", routing.ids.len(), rows * k)?;
    crate::error::expect_len("routing weights [T, k]", routing.weights.len(), rows * k)
}
