//! Chapter 4: the fused MoE kernel on tensor cores.
//!
//! Chapter 2's device layer launches two library GEMMs per active expert, and must bring the
//! routing back to the host first, because each GEMM's row count is a host number. Chapter 3
//! sorted the pairs by expert and padded each expert's run to tiles of BLOCK_M slots, on the
//! device. This chapter reads that layout with one kernel per projection for every expert at
//! once (`kernels/ch04_fused_moe.cu`): a block takes one tile (BLOCK_M pairs of one expert),
//! gathers its rows by pair id, multiplies on tensor cores (bf16 in, fp32 accumulate), and
//! applies SwiGLU (first GEMM) or the routing weight (second GEMM) before it stores by pair id;
//! a last kernel sums each token's k rows in a fixed order. The whole layer stays on the device
//! from the router to the output: no synchronisation, and a launch count that does not depend on
//! the routing ([`device::FusedDevice`]).
//!
//! With few tokens a 16-row tile is mostly padding: the decode path ([`choose::Path::Decode`])
//! streams each pair's expert rows once with no tile and no layout, and sums over k inside its
//! down projection, in two launches; the grouped decode path ([`choose::Path::DecodeGrouped`],
//! only when asked for until it is measured) does the same arithmetic a tile of one expert's
//! pairs at a time, reading each expert's weights once per 8 of its pairs, with the same bits.
//! [`choose`] holds the rule that picks the path, the fusion variants, the tile configurations,
//! and the table measured on the H200 that overrides the rule by shape; [`fill`] makes
//! deterministic weights on the device for layers too big for the host.
//!
//! [`regimes`] adds the shapes this chapter must get right beyond chapter 2's list.

pub mod choose;
pub mod device;
pub mod example;
#[cfg_attr(feature = "answers", path = "../answers/exercises.rs")]
pub mod exercises;
pub mod fill;
pub mod geometry;
pub mod regimes;

pub use choose::{
    choose_path, config_version, tile_named, DecodeGeometry, Fusion, Path, TileConfig, Version,
};
pub use device::{BatchPlan, FusedDevice, FusedWorkspace};

/// Two bf16 layers that round at the same places and sum in different orders (the tiled path's
/// tensor cores, the decode path's lanes and butterfly, chapter 2's cuBLAS), compared at the
/// production shapes the bench and the tuning tool run: max |a − b| over the rms of b. Chapter
/// 2's [`ch02_grouped::compare::Tolerance::BF16_VS_BF16`] (2e-3) was measured on the regimes'
/// small outputs; with H = 4096 and I = 1024 a few more bf16 roundings of gate, up and SwiGLU
/// tip the other way. On the H200: tiled against decode 2.65e-3 (GLM-like shape, 512 tokens),
/// decode against chapter 2's loop 2.2e-3 (Qwen3's shape, 512 tokens). A wrong expert, weight
/// or token moves an output by about the rms itself.
pub const ACROSS_SUM_ORDERS: ch02_grouped::compare::Tolerance =
    ch02_grouped::compare::Tolerance(5e-3);
