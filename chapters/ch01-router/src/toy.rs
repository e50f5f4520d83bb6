//! The toy layer of the router article: 8 experts, k = 2, sigmoid scores.
//!
//! Without a bias, experts 2 and 5 win with scores 0.881 and 0.870 (weights 0.503 and 0.497).
//! With the selection bias below, expert 0 (bias 8.13) overtakes expert 2 at the cut, and
//! experts 5 and 0 are selected with weights from their unbiased scores 0.870 and 0.769. Stored
//! in bf16, expert 5's bias 8.03 becomes 8.0 and the selection flips to 0 and 2.

use half::bf16;

use crate::config::RouterConfig;

// ANCHOR: toy_logits
/// The toy's `[8]` logits. σ(2.0) = 0.881 and σ(1.9) = 0.870 are the two best scores;
/// σ(1.2) = 0.769 is expert 0, the one the bias promotes. The other five stay far below.
pub fn logits() -> [f32; 8] {
    [1.2, -0.6, 2.0, 0.4, -1.3, 1.9, 0.9, -0.2]
}

/// The toy's `[8]` selection biases: about 8, a few hundredths apart, as in a GLM-5
/// checkpoint. Only experts 0 (8.13), 2 (8.00) and 5 (8.03) come near the cut; the best of the
/// others, expert 6, reaches a rank key of 0.711 + 7.99 = 8.70 (8.71 in bf16), below 8.87.
pub fn bias() -> [f32; 8] {
    [8.13, 8.01, 8.00, 7.98, 8.02, 8.03, 7.99, 8.04]
}
// ANCHOR_END: toy_logits

/// [`bias`] after a round trip through bf16, as a checkpoint stored in bf16 would hold it:
/// between 8 and 16, bf16 values are 0.0625 apart, so 8.03 becomes 8.0 and 8.13 becomes 8.125.
pub fn bias_bf16() -> [f32; 8] {
    bias().map(|b| bf16::from_f32(b).to_f32())
}

/// The toy's router: sigmoid scores, renormalised, k = 2, no groups, no scaling.
pub fn config() -> RouterConfig {
    RouterConfig::glm5(2)
}
