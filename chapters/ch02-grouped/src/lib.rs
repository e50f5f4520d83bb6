//! Chapter 2: the MoE layer, real checkpoints, and the loop grouped by expert.
//!
//! A MoE layer routes each token to `k` of `E` SwiGLU experts (chapter 1's router), runs them,
//! and adds their outputs, times their weights; an optional shared expert runs on every token.
//! This crate holds the layer's weights packed the way kernels read them ([`weights`]), loads
//! them from Hugging Face checkpoints ([`checkpoint`]), and runs the layer three ways, each
//! checking the next, behind one trait ([`layer::MoeLayer`]):
//!
//! 1. [`literal::LiteralLayer`]: for each token, for each selected expert, run the MLP and add,
//!    in f64 (the oracle);
//! 2. [`grouped::GroupedCpu`]: grouped by expert on the CPU with candle: gather each expert's
//!    tokens, one matmul pair per expert, a weighted scatter-add back;
//! 3. [`device::GroupedDevice`]: grouped by expert on a device: one library GEMM per active
//!    expert and projection, and the gather, SwiGLU and combine kernels of
//!    `kernels/ch02_grouped.cu`.

pub mod checkpoint;
pub mod compare;
pub mod config;
pub mod conformance;
pub mod device;
pub mod error;
pub mod example;
#[cfg_attr(feature = "answers", path = "../answers/exercises.rs")]
pub mod exercises;
pub mod grouped;
pub mod io;
pub mod layer;
pub mod literal;
pub mod plan;
pub mod regimes;
pub mod weights;

pub use config::{Dtype, MoeConfig, SharedExpert};
pub use device::GroupedDevice;
pub use error::MoeError;
pub use grouped::GroupedCpu;
pub use layer::{LayerOutput, MoeLayer};
pub use literal::LiteralLayer;
pub use plan::GroupPlan;
pub use weights::{MoeWeights, SharedWeights};
