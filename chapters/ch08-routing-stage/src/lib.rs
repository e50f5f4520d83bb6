//! Chapter 8 (Part II begins): the routing stage.
//!
//! Chapter 6's layer routes with chapter 5's fused router, whose ids and weights go to memory,
//! and then chapter 3's align reads the ids back to sort them by expert. The expert kernels that
//! FlashInfer took from TensorRT-LLM take the logits instead, and one routing stage does the
//! scores, the top-k, the counting and the sorting. This chapter builds that stage
//! ([`stage`], `kernels/ch08_routing_stage.cu`) from the two halves the book already has:
//! chapter 5's row router (`kernels/ch05/router_row.cuh`) and chapter 3's warp-level sort
//! (`kernels/ch03/align.cuh`), in one launch for few rows and two for many
//! ([`Arrangement`]). Its outputs are exactly chapter 5's ids and weights and chapter 3's
//! layout, so chapter 4's experts take them unchanged; the tests check that bit for bit against
//! the pair + align ([`stage::pair_then_align`]) on every regime and both backends.
//!
//! [`StagedLayer`] is chapter 6's layer with the stage in place of the router and the align:
//! the logits GEMM, the stage, chapter 4's experts on the stage's layout, wherever chapter 4
//! reads a layout; on the decode path, which reads none, it is chapter 6's layer.

pub mod error;
pub mod example;
#[cfg_attr(feature = "answers", path = "../answers/exercises.rs")]
pub mod exercises;
pub mod layer;
pub mod stage;

pub use error::StageError;
pub use layer::{StagedLayer, StagedWorkspace};
pub use stage::{
    arrangement_for, pair_then_align, route_stage, route_stage_as, Arrangement, RoutingStage,
    StageBuffers, StageOutput, ONE_BLOCK_MAX_ROWS,
};
