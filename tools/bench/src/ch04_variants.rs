//! `bench ch04`'s variants: chapter 4's layer as it ships (`fused`) and with a path, a fusion, a
//! tile, the grouped order or a precision forced, each timed as its own `impl`; and which of them
//! must give another's bits.

use crate::ch04::DECODE_MAX_TOKENS;
use ch02_grouped::MoeLayer;
use ch04_fused_moe::{FusedDevice, Fusion, Path as FusedPath, TileConfig};

/// One implementation of chapter 4's layer timed as its own `impl`: the layer as the chapter
/// ships it (`fused`: the path, fusion and tiles its rules and measured table pick for each T,
/// with the per-kernel steps), or that layer with a path or a fusion forced. A variant is a clone
/// of the first layer (`FusedDevice`'s `with_*`): it shares the weights on the device.
pub struct Variant {
    pub imp: &'static str,
    pub about: &'static str,
    /// Measured up to this many tokens (the decode path re-reads an expert's weights for each
    /// of its pairs: at 4096 tokens a call would take long and say nothing new).
    pub max_tokens: Option<usize>,
    /// Runs only on an sm_90a GPU or the emulator (versions 4 to 11, Hopper's `wgmma`); left out
    /// elsewhere.
    pub needs_sm90a: bool,
    /// Given the hidden states already in bf16
    /// ([`Hidden::Bf16`](ch04_fused_moe::device::Hidden::Bf16)), as chapter 6's layer and the
    /// engines' kernels take them: no `fused_to_bf16` launch.
    pub bf16_hidden: bool,
    pub make: fn(FusedDevice) -> FusedDevice,
}

impl Variant {
    pub fn runs_at(&self, tokens: usize) -> bool {
        self.max_tokens.is_none_or(|m| tokens <= m)
    }
}

/// The timed variants of chapter 4's layer: the first is the layer itself; then each path
/// forced at every T (where the decode and tiled paths cross), and each fusion undone on each
/// path (what the fusion buys). The fusion figure draws every `fused_*` one over `fused`.
pub const VARIANTS: &[Variant] = &[
    Variant {
        imp: "fused",
        about: "chapter 4's layer: path, fusion and tiles by its rules and measured table",
        max_tokens: None,
        needs_sm90a: false,
        bf16_hidden: false,
        make: |l| l,
    },
    Variant {
        imp: "fused_tiled",
        about: "the tiled path at every T (SwiGLU fused into GEMM 1)",
        max_tokens: None,
        needs_sm90a: false,
        bf16_hidden: false,
        make: |l| l.with_path(FusedPath::Tiled),
    },
    Variant {
        imp: "fused_tiled_v1",
        about: "the tiled path at every T with chapter 4's first main loop: the rule's tile \
                w4_k64_n1, one stage (stage a slice of K, wait, multiply)",
        max_tokens: None,
        needs_sm90a: false,
        bf16_hidden: false,
        make: |l| {
            l.with_path(FusedPath::Tiled)
                .with_tile(TILE_V1)
                .expect("w4_k64_n1 is one of TILE_CONFIGS")
        },
    },
    Variant {
        imp: "fused_tiled_v5",
        about: "the tiled path at every T on version 5 (sm_90a only): Hopper's wgmma, two \
                warpgroups by 256 staged rows (g2_k64_n16_s4_x: the 128-byte swizzle, BLOCK_M 128)",
        max_tokens: None,
        needs_sm90a: true,
        bf16_hidden: false,
        make: |l| {
            l.with_path(FusedPath::Tiled)
                .with_tile(TILE_V4)
                .expect("an sm_90a GPU: layers() leaves this variant out elsewhere")
        },
    },
    Variant {
        imp: "fused_ungrouped",
        about: "chapter 4's layer with versions 4 to 8 launched on the plain grid of tiles × \
                column blocks instead of the grouped order (tiles WG_GROUP_M at a time, every \
                column block of them: the engines' GROUP_SIZE_M), the default",
        max_tokens: None,
        needs_sm90a: true,
        bf16_hidden: false,
        make: |l| l.with_grouped_order(false),
    },
    Variant {
        imp: "fused_bf16y",
        about: "chapter 4's layer with the tiled path's y (each pair's weighted output) stored in \
                bf16 before the sum over k, as the engines store it (FusedDevice::with_bf16_y): \
                half the bytes through GEMM 2's stores and the combine's loads",
        max_tokens: None,
        needs_sm90a: false,
        bf16_hidden: false,
        make: |l| l.with_bf16_y(true),
    },
    Variant {
        imp: "fused_bf16x",
        about: "chapter 4's layer given the hidden states already in bf16, as chapter 6's layer \
                and the engines' kernels take them (FusedDevice::enqueue_experts_from): no \
                fused_to_bf16 launch; the same bits as fused",
        max_tokens: None,
        needs_sm90a: false,
        bf16_hidden: true,
        make: |l| l,
    },
    Variant {
        imp: "fused_bf16x_bf16y",
        about: "fused_bf16x with the tiled path's y in bf16 too (as fused_bf16y): the engines' \
                input and their stored y; the sum over k and the output stay f32",
        max_tokens: None,
        needs_sm90a: false,
        bf16_hidden: true,
        make: |l| l.with_bf16_y(true),
    },
    Variant {
        imp: "fused_portable",
        about: "the tiled path at every T on the tile a GPU without sm_90a gets \
                (choose::portable_tile: version 3, cp.async, w2x2_k64_n4_s3), forced on this GPU",
        max_tokens: None,
        needs_sm90a: false,
        bf16_hidden: false,
        make: |l| {
            let (h, i) = (l.config().hidden, l.config().intermediate);
            l.with_path(FusedPath::Tiled)
                .with_tile(ch04_fused_moe::choose::portable_tile(h, i, true))
                .expect("a portable configuration runs on every GPU")
        },
    },
    Variant {
        imp: "fused_tiled_unfused",
        about: "the tiled path, unfused: gate|up written, a SwiGLU kernel",
        max_tokens: None,
        needs_sm90a: false,
        bf16_hidden: false,
        make: |l| l.with_path(FusedPath::Tiled).with_fusion(Fusion::Unfused),
    },
    Variant {
        imp: "fused_decode",
        about: "the decode path (SwiGLU in GEMM 1, the sum over k in GEMM 2)",
        max_tokens: Some(DECODE_MAX_TOKENS),
        needs_sm90a: false,
        bf16_hidden: false,
        // The fusion named: with the path forced, the layer would take the tuned table's
        // fusion for that path where the table has one.
        make: |l| {
            l.with_path(FusedPath::Decode)
                .with_fusion(Fusion::SwiGluSumK)
        },
    },
    Variant {
        imp: "fused_decode_swiglu",
        about: "the decode path, the sum over k in its own kernel",
        max_tokens: Some(DECODE_MAX_TOKENS),
        needs_sm90a: false,
        bf16_hidden: false,
        make: |l| l.with_path(FusedPath::Decode).with_fusion(Fusion::SwiGlu),
    },
    Variant {
        imp: "fused_decode_unfused",
        about: "the decode path, unfused: gate|up written, SwiGLU and the sum in their own kernels",
        max_tokens: Some(DECODE_MAX_TOKENS),
        needs_sm90a: false,
        bf16_hidden: false,
        make: |l| l.with_path(FusedPath::Decode).with_fusion(Fusion::Unfused),
    },
    Variant {
        imp: "fused_decode_grouped",
        about: "the grouped decode path: each expert's weights read once per 8 of its pairs \
                (chapter 3's layout at BLOCK_M 8, both GEMMs by tile, then the combine kernel); \
                the decode path's bits",
        max_tokens: Some(DECODE_MAX_TOKENS),
        needs_sm90a: false,
        bf16_hidden: false,
        make: |l| l.with_path(FusedPath::DecodeGrouped),
    },
];

/// Chapter 4's first tile, version 1 of the main loop: the `fused_tiled_v1` variant.
const TILE_V1: TileConfig = ch04_fused_moe::tile_named("w4_k64_n1");

/// Version 5's largest tile: the `fused_tiled_v5` variant.
const TILE_V4: TileConfig = ch04_fused_moe::tile_named("g2_k64_n16_s4_x");

/// Variants that must give another's bits, not only agree within a tolerance: (variant, the one
/// whose bits it must give). The grouped decode path is the decode path's arithmetic in another
/// launch order (`kernels/ch04/decode.cuh`, "THE GROUPED DECODE PATH"); every tile
/// configuration, either version of the main loop, multiplies in the same order.
pub const SAME_BITS: &[(&str, &str)] = &[
    ("fused_decode_grouped", "fused_decode"),
    ("fused_tiled_v1", "fused_tiled"),
    ("fused_tiled_v5", "fused_tiled"),
    ("fused_portable", "fused_tiled"),
    ("fused_ungrouped", "fused"),
    ("fused_bf16x", "fused"),
    ("fused_bf16x_bf16y", "fused_bf16y"),
];
