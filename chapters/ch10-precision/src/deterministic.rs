//! The batch decides the kernel, and a deterministic mode.
//!
//! Chapter 6's layer picks its kernels by batch size: chapter 5's tiny GEMM on CUDA cores up to
//! 7 rows and on tensor cores from 8 (another summation order), cuBLAS past the switch point
//! (another again, chosen by cuBLAS per shape), and chapter 4's decode path at a few tokens, then
//! its tiled path with a tile and BLOCK_M per batch bucket. Each switch
//! changes the order of some sum, so the same token can get other output bits, and rarely other
//! experts, in another batch. [`deterministic`] pins every one of those choices: chapter 5's
//! tiny GEMM in its tensor-core form at every batch size (a row's logits are its own dot
//! products, in the same order whatever the other rows), the fused router (per row), and
//! chapter 4's tiled path with one tile, one fusion and one BLOCK_M at every batch size. A row's
//! arithmetic then never depends on the other rows of its batch.

use ch02_grouped::{MoeError, MoeLayer};
use ch04_fused_moe::choose::default_tile;
use ch04_fused_moe::{Fusion, Path};
use ch05_fused_router::tiny_gemm::GemmForm;
use ch05_fused_router::LogitsFrom;
use ch06_layer::AssembledLayer;

/// The BLOCK_M of the deterministic mode: chapter 3's smallest tile, so that decode sizes pad
/// the least.
pub const DETERMINISTIC_BLOCK_M: usize = 16;

// ANCHOR: deterministic
/// Chapter 6's `layer` in the deterministic mode: its logits from chapter 5's tiny GEMM on
/// tensor cores at every batch size (never cuBLAS, never the CUDA-core form), its experts on
/// chapter 4's tiled path with the layer's default tile, SwiGLU fused into GEMM 1, BLOCK_M
/// [`DETERMINISTIC_BLOCK_M`], at every batch size. The same token gives the same output bits in
/// every batch.
pub fn deterministic(layer: AssembledLayer) -> Result<AssembledLayer, MoeError> {
    let c = layer.config().clone();
    let tile = default_tile(c.hidden, c.intermediate);
    layer
        .with_logits(LogitsFrom::TinyGemm)
        .with_gemm_form(GemmForm::TensorCores)
        .map_experts(|e| {
            e.with_path(Path::Tiled)
                .with_fusion(Fusion::SwiGlu)
                .with_tile(tile)?
                .with_block_m(DETERMINISTIC_BLOCK_M)
        })
}
// ANCHOR_END: deterministic
