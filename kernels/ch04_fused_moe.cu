// ch04_fused_moe.cu — the fused MoE kernels: every expert's GEMMs in one launch each, on tensor
// cores, reading chapter 3's sorted, padded pairs (the tiled path); and, for a few tokens, kernels
// that stream each pair's expert weights once with no tile at all (the decode path), or the
// same arithmetic grouped by expert, each expert's weights streamed once per group of its pairs
// (the grouped decode path).
//
// A MoE layer in bf16 is, for the T·k (token, expert) pairs p = t·k + j of a batch:
//
//     act[p]   = silu(x[t] · w13[e]_gate) ⊙ (x[t] · w13[e]_up)      [T·k, I]   GEMM 1 + SwiGLU
//     y[p]     = weight[p] · (act[p] · w2[e]ᵀ)                          [T·k, H]   GEMM 2
//     out[t]   = Σ_j y[t·k + j]  (+ the shared expert)                  [T, H]     the sum over k
//
// In:  x [T, H] (f32; the tiled path rounds it to bf16 once with fused_to_bf16, the decode path
//      rounds each value as it loads it: the same bf16 values; or bf16 already, as chapter 6's
//      layer hands it: the laid-out paths read it as it is, the decode path through GEMM 1's
//      `_bf16` entry points, with the same bits);
//      w13 [E, 2I, H] bf16, each expert's I gate rows then its I up rows; w2 [E, H, I] bf16;
//      the tiled path: sorted_ids [capacity], expert_ids [max_tiles], num_post [1]: chapter 3's
//      layout, pair ids sorted by expert, each expert's run padded with the placeholder P = T·k
//      to a multiple of BLOCK_M, one expert per tile of BLOCK_M slots (-1 past the last tile);
//      the decode path: ids [T·k] i32, the router's expert of each pair, read directly;
//      the grouped decode path: x in bf16 and chapter 3's layout at BLOCK_M = DECODE_GROUP (8);
//      weight [T·k] f32, the router's weights.
// Out: out [T, H] f32.
//
// The kernels live in four files, one per path, each a progression to read top to bottom:
//   kernels/ch04/layer.cuh     what every path shares: the tile's rows (the gather through
//                              sorted_ids), the warp-uniform OR, the 64-bit row address; the
//                              elementwise kernels (x to bf16, the unfused SwiGLU, the sum over k)
//                              and the weight fill;
//   kernels/ch04/portable.cuh  the tiled path on mma.sync, versions 1 to 3 (any GPU since Volta,
//                              and the emulator);
//   kernels/ch04/hopper.cuh    the tiled path on Hopper's wgmma, versions 4 to 11 (sm_90a only);
//   kernels/ch04/decode.cuh    the decode and grouped decode paths (no tile).
// One family: this file includes them all, so the runtime loads one module, and the launch
// geometry below (every `#define NAME number`) reaches Rust as constants
// (moe_kernels::kernel_constants!).
//
// Roundings (the same places as chapter 2's bf16 layer, ch02_grouped.cu): x to bf16 once;
// gate and up each rounded to bf16 from their fp32 sums (chapter 2's GEMM writes gate|up in
// bf16); silu(g)·u computed in fp32 from those bf16 values, as ch02_swiglu_bf16 does, and rounded
// to bf16; the down projection summed in fp32 and kept in fp32; y = weight·dot rounded in fp32,
// then out = ((0 + y₀) + y₁) + ... (+ s, s = σ(logit)·shared) in fp32, j in order. The decode
// kernels follow exactly this sequence, fused or not: decode_gemm2_sum adds weight·dot to its
// accumulator in the order fused_combine adds y (no a·b + c is contracted: every kernel is
// compiled with --fmad=false). So within a path every fusion gives the same bits (and every tile
// configuration, BLOCK_M and decode geometry), and the grouped decode path is the decode path,
// bit for bit; the tiled and decode paths differ only in the order of the fp32 sums inside the
// dot products (tensor-core k-steps of 16, which also truncate, against 32 lane sums and a
// butterfly), within chapter 2's BF16_VS_BF16. The only
// difference from chapter 2: the routing weight applied as w·y rounded, then added (chapter 2:
// fmaf(w, y, acc), one rounding fewer), and the order of the sums.
//
// Indexing: every product that can pass 2³¹ is taken in 64 bits (size_t): an expert's offset
// e·2I·H (2.4 G elements for 288 experts at H 4096, I 1024), a pair's row p·I, p·H and p·2I, a
// token's row t·H, a tile's slot tile·BLOCK_M. Sizes themselves (T·k, H, I, E) are below 2³¹,
// checked by the host.
//
// Upstream: the Triton `fused_moe_kernel` of SGLang (python/sglang/srt/layers/moe/
// fused_moe_triton/fused_moe_triton_kernels.py) and vLLM (vllm/model_executor/layers/fused_moe/
// fused_moe.py), called twice per layer with `silu_and_mul` between, then `moe_sum`; their
// configs by shape (fused_moe_triton/configs/*.json: BLOCK_SIZE_M/N/K, GROUP_SIZE_M, num_warps,
// num_stages per batch size) play the part of FusedCfg and ch04_tuned.csv. For decode, vLLM and
// SGLang still run the same Triton kernel with BLOCK_SIZE_M 16 (the padding this path avoids);
// TensorRT-LLM and FlashInfer have dedicated small-batch MoE GEMV kernels.
//
// Differences:
// - SwiGLU is fused into the first GEMM by default (upstream writes gate|up [T·k, 2I] and runs a
//   separate silu_and_mul kernel; fused_gemm1_gateup + fused_swiglu are that layer).
// - The weighted down projection is kept in fp32 ([T·k, H] f32); upstream rounds it to the
//   compute type (bf16) before moe_sum. The sum over k runs in fixed order in its own kernel, or
//   inside decode_gemm2_sum.
// - A handful of tile configurations, no split-K, no quantized weights; clusters of two blocks in
//   version 9 only;
//   software pipelining (cp.async stages) in the configurations `_s{STAGES}`; bulk tensor copies
//   (TMA) for the weights only, in versions 7 to 11 (A's rows are gathered: cp.async).
// - Experts outside 0..E (e.g. -1 for an expert held by another rank in expert parallelism)
//   skip their tile or their pair: their rows of act and y are never written, and
//   decode_gemm2_sum leaves them out of its sum (fused_combine would add whatever their y rows
//   hold: the layer refuses such ids before it launches); upstream writes zeros for them.
#include "common.cuh"
#include "mma.cuh"
#include "wgmma.cuh"
#include "tma.cuh"

#define FUSED_THREADS 128         // threads of the default tile configuration: 4 warps
#define FUSED_WARPS 4             // = FUSED_THREADS / 32
#define FUSED_MAX_BLOCK_M 128     // the largest BLOCK_M a tile supports (16, 32, 64, 128)
#define FUSED_MAX_SUBTILES 8      // = FUSED_MAX_BLOCK_M / 16
#define FUSED_BK 32               // the default configuration's K per shared-memory stage: two mma k-steps of 16
#define FUSED_BN1 32              // the default configuration's intermediate columns per block of fused_gemm1_swiglu
#define FUSED_BN2 64              // the default configuration's output columns per block of fused_gemm2
#define FUSED_ELEMENTWISE_THREADS 256  // threads per block of fused_to_bf16, fused_swiglu and fused_combine
#define FUSED_TO_BF16_VALUES 8    // values fused_to_bf16 converts per thread and pass: 32 bytes in, 16 out
#define DECODE_MAX_THREADS 1024   // the decode kernels take any multiple of 32 threads up to this
#define DECODE_CHUNK 8            // K values per lane and load in the decode kernels: 16 bytes of bf16
#define DECODE_PAIRS 4            // pairs of one token whose dot products decode_gemm2_sum runs together
#define DECODE_GROUP 8            // pairs of one expert the grouped decode kernels multiply per weight load (and BLOCK_M)
#define DECODE_GROUP_MAX_THREADS 512  // the grouped decode kernels take any multiple of 32 threads up to this
#define WG_SWIZZLE_ALIGN 1024     // version 5's stages start on this many bytes: the host adds as many to its shared memory
#define WG_TMA_BOX 64             // versions 7 to 11: a TMA box is this many rows of this many bf16 (the host's tensor maps)
#ifndef WG_GROUP_M  // (tools/gpu/run's group-ab sets it through MOE_NVRTC_DEFINES; its timings: bench/results/h100/README.md)
#define WG_GROUP_M 4             // versions 4 to 8 on a grid of one dimension: tiles taken this many at a time, every column block of them
#endif
static_assert(WG_GROUP_M >= 1, "a group holds at least one tile");
#define DY_COUNTERS 6           // version 11: pairs of item counters, one pair per entry point
#define DY_SLOTS 4  // items a block's producer may have drawn that its consumers have not read

#include "ch04/layer.cuh"
#include "ch04/portable.cuh"
#include "ch04/hopper.cuh"
#include "ch04/decode.cuh"

// ANCHOR: configs
// The tile configurations, from one list (kernels/ch04/configs.def, one line a configuration,
// read by the Rust crate too). First pass: version 11's counters, three pairs for each of its
// configurations in the list's order (DY_<name> its first; an enumerator's value is the one before
// it plus one, so a line of another version adds nothing).
enum Ch04DyPairs {
#define DEFAULT_TILE(name, version, warps, wm, bk, nf, stages)
#define PORTABLE_TILE(name, version, warps, wm, bk, nf, stages)
#define HOPPER_TILE(name, version, wgs, bk, nf, stages, w0) \
    DY_##name, DY_##name##_last = DY_##name + (version == 11 ? 3 : 0) - 1,
#include "ch04/configs.def"
#undef DEFAULT_TILE
#undef PORTABLE_TILE
#undef HOPPER_TILE
    DY_PAIRS
};
static_assert(DY_PAIRS == DY_COUNTERS, "dy_counters holds a pair for each version 11 entry point");

// Second pass: each configuration's type and its three entry points (portable.cuh's
// FUSED_ENTRIES, hopper.cuh's HOPPER_ENTRIES_<version>); the default's are written out in
// portable.cuh, under the plain names, and its line checked against them.
#define DEFAULT_TILE(name, version, warps, wm, bk, nf, stages)                                   \
    static_assert(FusedDefault::VERSION == version && FusedDefault::WARPS == warps &&            \
                      FusedDefault::WM == wm && FusedDefault::BK == bk && FusedDefault::NF == nf && \
                      FusedDefault::STAGES == stages,                                            \
                  "configs.def's default is portable.cuh's FusedDefault");
#define PORTABLE_TILE(name, version, warps, wm, bk, nf, stages)                                  \
    typedef FusedCfg<warps, bk, nf, stages, wm> FusedCfg_##name;                                 \
    static_assert(FusedCfg_##name::VERSION == version, "configs.def: the version of " #name);    \
    FUSED_ENTRIES(name, FusedCfg_##name)
#define HOPPER_TILE(name, version, wgs, bk, nf, stages, w0)                                      \
    typedef WgCfg<version, wgs, bk, nf, stages, (w0 != 0)> WgCfg_##name;                               \
    HOPPER_ENTRIES_##version(name, WgCfg_##name)
#include "ch04/configs.def"
#undef DEFAULT_TILE
#undef PORTABLE_TILE
#undef HOPPER_TILE
// ANCHOR_END: configs
