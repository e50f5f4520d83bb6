//! Chapter 3: sorting (token, expert) pairs by expert, padded to tiles (`moe_align_block_size`).
//!
//! A fused expert kernel (chapter 4) walks tiles of BLOCK_M consecutive slots, each tile one
//! expert's pairs. This crate builds that layout from a routing's `T·k` ids three ways, each
//! checking the next: the most literal (sort, then pad, [`literal`]), a CPU reference shaped like
//! the kernel (counts, prefix sum, stable scatter, [`reference`](mod@reference)), and the kernel of
//! `kernels/ch03_align_block_size.cu` on a device ([`device`]). All three give the same bits.

pub mod device;
pub mod error;
pub mod example;
#[cfg_attr(feature = "answers", path = "../answers/exercises.rs")]
pub mod exercises;
pub mod layout;
pub mod literal;
pub mod reference;
pub mod regimes;
pub mod text;

pub use error::AlignError;
pub use layout::{capacity, choose_block_m, max_tiles, padding_share, Aligned};
