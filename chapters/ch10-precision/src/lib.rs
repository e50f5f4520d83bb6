//! Chapter 10: precision.
//!
//! A top-k is not continuous: a rounding error changes a token's experts exactly when it is
//! larger than the gap at the cut (chapter 1). This crate measures how often that happens for
//! the arithmetics an engine might use (two fp32 summation orders, bf16 logits, a bf16 bias)
//! against the fp64 router, at three real router shapes, on synthetic rows; the distribution of
//! the gap it is compared with; and what one such flip does to a layer's output, beside the
//! error a bf16 layer makes anyway.
//!
//! - [`shapes`]: the shapes, the bias spreads and the arithmetics, as data;
//! - [`logits`]: the logits summed in fp64, in fp32 in order, and in fp32 in the order of
//!   chapter 5's tiny GEMM;
//! - [`keys`]: rank keys in fp64 and fp32, and chapter 1's selection over them;
//! - [`hist`]: a log-scale histogram (medians of millions of errors without keeping them);
//! - [`flips`]: the run, and the CSVs it writes (`cargo run -p ch10-precision --bin ch10-flips`);
//! - [`output`]: one flip through chapter 2's layer;
//! - [`deterministic`]: the batch decides the kernel, and a mode in which it does not.

pub mod deterministic;
pub mod example;
#[cfg_attr(feature = "answers", path = "../answers/exercises.rs")]
pub mod exercises;
pub mod flips;
pub mod hist;
pub mod keys;
pub mod logits;
pub mod output;
pub mod shapes;

pub use shapes::{Arithmetic, BiasSpread, Shape, Sum, ARITHMETICS, SHAPES};
