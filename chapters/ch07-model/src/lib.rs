//! Chapter 7: a whole model around chapter 6's layer.
//!
//! A decoder-only transformer is an embedding, a stack of layers, a final norm and an LM head;
//! each layer is attention then an MLP, each behind an RMSNorm and inside a residual sum. In a
//! MoE model most layers' MLP is a MoE layer, and that is the part this book built. This crate
//! puts the rest around it as plainly as it can be written:
//!
//! - [`config`]: `config.json` → the whole model's sizes (chapter 2 reads the MoE part);
//! - [`mod@load`]: the whole checkpoint through chapter 2's checkpoint code (its files, its tensor
//!   reader, its MoE packer), every tensor checked, every refusal typed and naming the tensor;
//! - [`cpu`]: the non-MoE parts in plain f32 loops on the CPU: linear layers, RMSNorm, the
//!   rotary embedding, one head's attention, SiLU, argmax;
//! - [`model`]: the decoder with a KV cache (the prompt in one pass, then one token per pass),
//!   every MoE layer on the device: chapter 6's assembled layer (bf16), or chapter 2's grouped
//!   layer in f32 (the path that reproduces transformers' fp32 tokens exactly);
//! - [`fixtures`]: the committed tiny models and transformers' greedy tokens.
//!
//! Two families run whole: Qwen3-MoE and GLM-4-MoE, whose MoE layer is DeepSeek-V3's (sigmoid
//! router with a correction bias, groups, routed scaling, a shared expert, dense first layers)
//! under ordinary grouped-query attention. DeepSeek-V3's own attention (MLA) is not here.

pub mod config;
pub mod cpu;
pub mod device;
pub mod error;
pub mod example;
#[cfg_attr(feature = "answers", path = "../answers/exercises.rs")]
pub mod exercises;
pub mod fixtures;
pub mod load;
pub mod model;

pub use config::{parse_model_config, ModelConfig};
pub use device::{DeviceModel, DeviceState, Part};
pub use error::ModelError;
pub use load::{load, ModelWeights};
pub use model::{KvCache, Model, Step};
