//! Chapter 6: the MoE layer assembled.
//!
//! Chapters 1 to 5 build every piece of a MoE layer; this chapter puts them together the way an
//! engine calls them: bf16 hidden states `[T, H]` in, the layer's output `[T, H]` out, in one
//! enqueue ([`AssembledLayer::enqueue`]) with no host synchronisation, so a CUDA graph captured
//! for a batch size replays the whole layer:
//!
//! 1. the router's logits: chapter 5's tiny GEMM up to the switch point measured on the H200
//!    ([`switch`]), cuBLAS above;
//! 2. chapter 5's fused router: scores, top-k, renormalisation and routed scaling in one kernel,
//!    for every family of chapter 1;
//! 3. chapter 4's experts on chapter 4's plan for the batch: at decode sizes two kernels reading
//!    the router's ids directly; above, chapter 3's align, the two tiled GEMMs and the sum over k;
//!    the shared expert (Qwen2-MoE's gated one, DeepSeek's and GLM's plain one) in the same
//!    launches or beside them.
//!
//! The router and the experts read the same bf16 copy of the input, so at one token without a
//! shared expert the layer is four launches.
//! [`AssembledLayer`] implements chapter 2's [`MoeLayer`](ch02_grouped::MoeLayer), so chapter 2's
//! literal loop and its Hugging Face fixtures check it.

pub mod example;
#[cfg_attr(feature = "answers", path = "../answers/exercises.rs")]
pub mod exercises;
pub mod layer;
pub mod switch;

pub use layer::{router_for, AssembledLayer, LayerWorkspace};
pub use switch::{logits_for, switch_rows, SwitchPoint, DEFAULT_SWITCH_ROWS, SWITCH_POINTS};
