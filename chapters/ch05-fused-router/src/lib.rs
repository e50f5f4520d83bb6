//! Chapter 5: the fused router pair.
//!
//! Chapter 1's chain routes a batch with one plain kernel per operation: six to eight launches,
//! each reading its input from memory and writing its output back. This chapter routes it with
//! two:
//!
//! - the tiny GEMM ([`tiny_gemm`], `kernels/ch05_tiny_gemm.cu`): fp32 logits `[T, E]` from bf16
//!   hidden states `[T, H]` and a bf16 gate weight `[E, H]`, built for few rows: blocks own two
//!   experts' rows, threads own 16-byte slices of H, the gate weight's loads go out first;
//! - the fused router ([`fused`], `kernels/ch05_fused_router.cu`): one warp per token row, the
//!   row's scores and rank keys in registers, k rounds of warp argmax, the weights from the
//!   unbiased scores, renormalised and scaled, for every family of chapter 1 (softmax, sigmoid +
//!   bias, √softplus, grouped selection); and for few rows the same router with one block per
//!   row, a thread per expert and the picks by rank counts (the same bits, a shorter chain).
//!
//! [`FusedRouter`] implements chapter 1's [`DeviceRouter`](ch01_router::chain::DeviceRouter), so
//! chapter 1's test body ([`ch01_router::conformance`]) checks it on every regime and backend.
//! Two combinations come with it: cuBLAS logits + the fused router ([`LogitsFrom::Blas`], what
//! an engine runs above 16 rows), and the tiny GEMM + chapter 1's chain ([`TinyGemmChain`]).

pub mod example;
#[cfg_attr(feature = "answers", path = "../answers/exercises.rs")]
pub mod exercises;
pub mod fused;
pub mod io;
pub mod tiny_gemm;

pub use fused::{
    route_fused, route_logits_fused, route_logits_fused_as, FusedRouter, FusedTopk, LogitsFrom,
    RowForm, TinyGemmChain,
};
