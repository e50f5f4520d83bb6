//! The launch geometry of `kernels/ch04_fused_moe.cu`: every `#define NAME number` of the family
//! (tile sizes, threads per block, the decode path's limits), named once in the kernel file; and
//! the tile heights the kernels take. Its own module, so that the rules (`crate::choose`) and the
//! launches (`crate::device`) both read it without reading each other.

moe_kernels::kernel_constants!("ch04_fused_moe");

/// The tile heights the kernels support: chapter 3's choices for BLOCK_M.
pub const BLOCK_MS: [usize; 4] = [16, 32, 64, 128];
