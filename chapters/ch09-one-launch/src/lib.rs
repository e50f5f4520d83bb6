//! Chapter 9: the whole router in one launch.
//!
//! Chapter 8's stage still needs its logits from a kernel before it: the tiny GEMM or cuBLAS.
//! The router article's section 8 says why nobody merges the GEMM with the top-k: the GEMM is
//! parallel across experts and the top-k across rows. This chapter's kernel
//! ([`router`], `kernels/ch09_one_launch.cu`) keeps the GEMM's grid (chapter 5's tiny GEMM, two
//! experts per block) and hands the rest to whichever block finishes last: the last block of a
//! row group routes those rows, and the last of those sorts every pair, by tickets in device
//! memory, with no grid-wide barrier. Its ids, weights and layout are chapter 8's stage's on the
//! same logits, bit for bit; its logits are chapter 5's tiny GEMM's (the CUDA-core form).
//!
//! [`OneLaunchLayer`] is chapter 6's layer routed by it: one launch for the whole router.

pub mod example;
#[cfg_attr(feature = "answers", path = "../answers/exercises.rs")]
pub mod exercises;
pub mod layer;
pub mod router;

pub use layer::{OneLaunchLayer, OneLaunchWorkspace};
pub use router::{route_one_launch, OneLaunch};
