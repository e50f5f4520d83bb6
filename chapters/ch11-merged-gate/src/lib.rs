//! Chapter 11: a gate merged into the GEMM in front of the experts, and radix select.
//!
//! In Kimi K3 a projection of 3,584 rows reads the same hidden state as the 896-expert gate (the
//! router article, section 7). Stacking the two weights turns two GEMMs into one; the GEMM then
//! writes fp32 for every column (the logits must not be rounded), and one kernel after it
//! selects 16 of the 896 logits and casts the projection's columns to bf16.
//!
//! - [`radix`] (`kernels/ch11_merged_gate.cu`, `radix_topk`): the top-k by radix select, a block
//!   per row (or `radix_topk_half`, four warps a row, or `radix_topk_warp`, a warp a row), the
//!   k-th largest key found by binning leading bits; the same ids and weights as chapter 5's
//!   fused router, bit for bit, on every regime and both backends.
//! - [`merged`]: the front three ways: separate (projection GEMM + chapter 5's pair), merged
//!   (one GEMM over the stacked weight, then `merged_gate` or `merged_gate_half`), and the
//!   bf16-output variant.
//! - [`front`]: Kimi K3's shapes, its router, its bias range, random inputs.
//! - [`host`]: the fronts on host data, and the bf16 variant's flip rate along the row axis.

pub mod example;
#[cfg_attr(feature = "answers", path = "../answers/exercises.rs")]
pub mod exercises;
pub mod front;
pub mod host;
pub mod merged;
pub mod radix;

pub use front::{FrontInputs, FrontShape, KIMI_K3};
pub use merged::{Bf16Gate, FrontOutputs, MergedGate, SeparateGate};
pub use radix::{route_logits_radix, route_logits_radix_in, Logits, RadixForm, RadixTopk};
