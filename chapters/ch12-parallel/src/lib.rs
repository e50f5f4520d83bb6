//! Chapter 12: the layer across GPUs.
//!
//! A model whose experts do not fit one GPU spreads each MoE layer over several, in one of two
//! ways:
//!
//! - **tensor parallelism** ([`TensorParallel`]): every rank holds a slice of every expert's
//!   intermediate dimension and the same tokens; each runs chapter 6's layer on its slice and an
//!   all-reduce sums the partial outputs;
//! - **expert parallelism** ([`ExpertParallel`]): every rank holds whole experts, a contiguous
//!   E/R of them, and its own tokens; each token's (token, expert) pairs travel to the ranks that
//!   hold their experts and their weighted results travel back (two all-to-alls), and the home
//!   rank sums each token's k results in slot order, so the bits never depend on which rank
//!   answered first.
//!
//! The communication is a trait ([`Communicator`]) with NCCL as its implementation
//! ([`nccl::Nccl`]; one process per GPU) and an in-process one
//! ([`in_process::InProcess`]: ranks as threads on the emulator) that exists only for the tests
//! and the example.

pub mod comm;
pub mod dispatch;
pub mod error;
pub mod example;
#[cfg_attr(feature = "answers", path = "../answers/exercises.rs")]
pub mod exercises;
pub mod expert;
pub mod in_process;
pub mod kernels;
pub mod nccl;
pub mod shard;
pub mod tensor;

pub use comm::{Communicator, Element};
pub use dispatch::{ranks_bound, ranks_visited, DispatchPlan};
pub use error::ParallelError;
pub use expert::{EpOutput, ExpertParallel};
pub use in_process::{run_ranks, InProcess};
pub use shard::{expert_range, tensor_slice};
pub use tensor::{TensorParallel, TP_TOLERANCE};
