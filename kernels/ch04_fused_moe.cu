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
//      rounds each value as it loads it: the same bf16 values);
//      w13 [E, 2I, H] bf16, each expert's I gate rows then its I up rows; w2 [E, H, I] bf16;
//      the tiled path: sorted_ids [capacity], expert_ids [max_tiles], num_post [1]: chapter 3's
//      layout, pair ids sorted by expert, each expert's run padded with the placeholder P = T·k
//      to a multiple of BLOCK_M, one expert per tile of BLOCK_M slots (-1 past the last tile);
//      the decode path: ids [T·k] i32, the router's expert of each pair, read directly;
//      the grouped decode path: x in bf16 and chapter 3's layout at BLOCK_M = DECODE_GROUP (8);
//      weight [T·k] f32, the router's weights.
// Out: out [T, H] f32.
//
// THE TILED PATH. A block computes one tile: BLOCK_M consecutive slots of sorted_ids (one expert,
// read from expert_ids) times a slice of output columns. Its A rows are gathered by pair id (the
// token t = p / k in the first GEMM, the pair's own row of act in the second); placeholder rows
// are never read (their A rows are staged as zeros) and never written. The K dimension is walked
// BK at a time: the A rows and the B rows of the slice are copied into shared memory (16 bytes
// per copy when K is a multiple of 8; zero past the edges of the matrices, so no size needs to be
// a multiple of a tile), the warps load mma fragments with ldmatrix and multiply with mma.sync
// m16n8k16 (bf16 in, fp32 accumulate; kernels/mma.cuh). BLOCK_M is a launch argument (16, 32, 64
// or 128, the value chapter 3 padded to): a tile is BLOCK_M / 16 sub-tiles of 16 rows, and a
// sub-tile whose 16 slots are all placeholders is skipped.
//   Tile configurations (FusedCfg<WARPS, BK, NF, STAGES, WM>): WARPS warps per block, BK of K per
//   stage, NF fragments of 8 columns per warp and projection, STAGES shared-memory buffers, and
//   the warps arranged in WM rows. Three versions of the main loop:
//     version 1 (STAGES 1, fused_mainloop): stage a slice of K, wait, multiply, wait;
//     version 2 (STAGES ≥ 2, fused_mainloop_async): the slices go through STAGES buffers filled
//       by cp.async, the next slices' copies in flight while the tensor cores multiply; each
//       thread works out its copies' rows once per tile (fused_copies), so a stage only adds k0;
//     version 3 (WM > 1, with version 2's pipeline): a warp grid. In versions 1 and 2 (WM 1) a
//       warp owns every sub-tile of the tile and 8·NF columns per projection, so per k-step of
//       16 it loads an A fragment per sub-tile for only 2·NF mma each; in version 3 the WARPS
//       warps form WM × WN (WN = WARPS / WM) and warp w owns the sub-tiles w % WM, + WM, + 2·WM,
//       ... and the columns of group w / WM: fewer A loads, more mma per load.
//     versions 4 to 11 (sm_90a only, WgCfg, wg_mainloop): Hopper's warpgroup MMA (wgmma.cuh),
//       one warpgroup per 64 rows multiplying straight from shared memory, the stages in
//       wgmma's flat core-matrix layout (4) or its 128-byte swizzle (5, suffix _x), whose
//       copies read whole 128-byte lines; 6 (_w0) waits for each slice's MMA, copies a slice
//       deeper; 7 (_tma) brings the weight slices by TMA (kernels/tma.cuh); 8 (_tma_ws) is
//       warp-specialized, a producer warpgroup feeding the others through mbarriers
//       (ws_producer, ws_consumer); 9 (_tma_ws_mc) is 8 in clusters of two blocks that take one
//       copy of the weight slice between them when their tiles are of one expert (multicast;
//       slower than 8 on the H200); 10 (_tma_ws_ps) is 8 persistent, its blocks taking a
//       tile's column blocks one after another (ps_run); 11 (_tma_ws_ps_dy) is 10 with its
//       items handed out as the blocks free up (dy_next). The same bits as versions 1-3 (measured on the H200,
//       chapter 4's GPU test); never compiled into the emulator's path, which runs 1-3.
//   Each is instantiated as its own extern "C" entry points, named with the suffix
//   _w{WARPS}_k{BK}_n{NF}, then _s{STAGES} for version 2 (_w{WM}x{WN}_k{BK}_n{NF}_s{STAGES} for
//   version 3); the default, w4_k32_n1 (FUSED_THREADS, FUSED_BK, FUSED_BN1, FUSED_BN2), keeps the
//   plain names. Every configuration gives the same bits: an output's sum runs over the same
//   k-steps of 16, from k = 0 up, in one fp32 accumulator, whichever block, warp or stage holds
//   it.
//   fused_gemm1_swiglu: a block owns BN1 = 8·WN·NF intermediate columns n, and stages BOTH w13
//     row n (gate) and row I + n (up) of its expert. Warp w multiplies its gate columns and the
//     matching up columns into separate accumulators, so each lane holds the gate and the up
//     value of the same (slot, column) in its own registers: SwiGLU is the epilogue, in fp32,
//     before anything leaves the block. The [T·k, 2I] gate|up matrix never exists.
//   fused_gemm1_gateup: the same GEMM without the epilogue (the unfused layer, as upstream runs
//     it): gate|up [T·k, 2I] in bf16, 2I consecutive columns; fused_swiglu then reads it.
//   fused_gemm2: a block owns BN = 16·WN·NF output columns (warp column wn: NF fragments of 8 in
//     each half of them, as GEMM 1's gate and up). The epilogue multiplies by the pair's routing
//     weight in fp32.
//   fused_combine: out[t] = y[t·k] + y[t·k + 1] + ..., j in order: the same sum, and the same
//     bits, on every run. No float atomics anywhere.
//
// THE DECODE PATH. With few tokens a 16-row tile holds one or two real rows: the tensor cores idle
// and the time is reading the weights. (The host picks the path by shape: chapters/ch04-fused-moe/
// src/choose.rs, decode while T·k ≤ 4·E unless the measured table says otherwise.) These kernels read each pair's expert rows once, 16 bytes
// (8 bf16) per lane per load, and never build a tile, so they need no chapter 3 layout: a block
// is one pair (row of the grid's x) times a slice of columns (the grid's y); a warp owns whole
// columns, one after another. For one column, lane l of the warp sums chunks l, l + 32, l + 64,
// ... of 8 consecutive K values (in order inside a chunk, fmaf into one fp32 partial sum), and a
// butterfly of shuffles (xor 16, 8, 4, 2, 1) adds the 32 partial sums. That order depends only on
// K: not on the block size, the warps per block or the columns per warp (decode_* take those from
// the launch), so every geometry gives the same bits; the scalar loads used when K is not a
// multiple of 8 do the same arithmetic in the same order; so do the weight loads without an L1
// line (the `_na` twins of decode_gemm1_*, decode_gemm2 and decode_gemm2_sum: dec_load8_stream).
//   decode_gemm1_swiglu: act[p, n] for the pair of block x and the columns n of its warps; the
//     shared expert's T rows follow the T·k pairs in the same grid (x = T·k + t), and the block of
//     each shared row with y = 0 also computes Qwen2-MoE's gate logit (gate_logit_warp, the same
//     sum as fused_gate_logit). decode_gemm1_gateup: the same without SwiGLU (gate|up in bf16).
//   decode_gemm2_sum: the sum over k fused into the down projection: a block is one token t and a
//     slice of H; for each column, the warp computes the k pairs' dot products DECODE_PAIRS at a
//     time (their loads in flight together, their sums in one butterfly, dec_warp_sums, whose
//     additions are exactly dec_warp_sum's), and adds weight·dot to one fp32 accumulator, j in
//     order, then the shared expert's (σ(logit)·)dot. No [T·k, H] buffer, no combine launch.
//   decode_gemm2: the unfused down projection (y [T·k, H], and the shared expert's [T, H]) for
//     fused_combine, to show what the fusion saves.
//
// THE GROUPED DECODE PATH. The decode kernels read an expert's rows once per pair: an expert
// chosen by n pairs is read n times (at 64 tokens of Qwen3-30B-A3B, 512 pairs over about 127
// experts, four times on average). The grouped kernels take chapter 3's layout with BLOCK_M =
// DECODE_GROUP (8; any of 16..128 works too) and run one block per tile and column slice: the
// block compacts its tile's real pairs (a ballot per 32 slots; placeholders and garbage left
// out), and for each of its columns a warp loads each 16-byte chunk of the expert's rows once and
// multiplies it into up to DECODE_GROUP pairs' rows (x[p / k], or act[p]), one fp32 sum per
// (pair, row) (dec_lane_dots_group); a tile of more real pairs takes another pass of 8 over the
// weight rows just read (from L1 or L2). Every (pair, column) sum is the decode kernels' own: the same lane, the same
// chunks in the same order, the same fmaf, the same butterfly (dec_warp_sums, whose additions
// are dec_warp_sum's), the same roundings; so the grouped path gives the decode path's bits, in
// every fusion, geometry and BLOCK_M. The shared expert's tokens come in tiles after the routed
// tiles (tokens in order), and its gate logit with them.
//   decode_grouped_gemm1_swiglu (decode_grouped_gemm1_gateup: no SwiGLU): act by tile.
//   decode_grouped_gemm2: y = weight·dot rounded in fp32, by tile, exactly decode_gemm2's y; then
//     fused_combine sums over k as decode_gemm2_sum would (the same additions in the same order:
//     see Roundings). The sum over k cannot move into a tile of one expert's pairs, so this path
//     is one launch longer and writes and reads y [T·k, H] f32 (at 64 tokens of Qwen3, 4 MB each
//     way, against about 1.2 GB of weights). With Fusion::SwiGluSumK the host runs
//     decode_gemm2_sum after the grouped GEMM 1 instead: no y and no combine, but w2 read once
//     per pair again (a third of the weights).
//   Costs beyond the decode path's: fused_to_bf16 (x in bf16: each x row is read once per pair
//   and column, from L1, and bf16 halves those bytes), chapter 3's one or two launches, and a
//   combine; a tile of one real pair does the decode kernels' work plus a barrier. Not picked by
//   the host's rule until measured on the GPU (chapters/ch04-fused-moe/src/choose.rs).
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
//   (TMA) for the weights only, in versions 7 to 9 (A's rows are gathered: cp.async).
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
#define WG_TMA_BOX 64             // versions 7 to 9: a TMA box is this many rows of this many bf16 (the host's tensor maps)

// ANCHOR: config
// One tile configuration. GEMM 1 stages BN1 gate rows and the BN1 matching up rows; the plain
// GEMM (GEMM 2, gate|up) stages BN output rows; either way BROWS = 8·WN·NFRAG rows of B.
// STAGES 1 is version 1 of the main loop (stage, wait, multiply); STAGES ≥ 2 is version 2, with
// STAGES buffers in dynamic shared memory filled by cp.async (fused_mainloop_async).
// WM > 1 is version 3, the warp grid: the WARPS warps form WM rows × WN columns, warp w is
// row wm = w % WM and column wn = w / WM; it multiplies the tile's sub-tiles wm, wm + WM,
// wm + 2·WM, ... (interleaved, so that a BLOCK_M of 32 or 64 still gives every warp row a
// sub-tile) by the NFRAG B fragments of column group wn. So each warp holds WSUB = 8 / WM
// sub-tiles' accumulators of NFRAG fragments: per k-step of 16, one ldmatrix.x4 per sub-tile
// and one ldmatrix.x2 per fragment feed WSUB·NFRAG mma (at BLOCK_M 128; WM 1: 8 A loads and
// 2·NF B loads for 16·NF mma). WM 1 is every warp owning every sub-tile: versions 1 and 2.
template <int WARPS_, int BK_, int NF_, int STAGES_ = 1, int WM_ = 1>
struct FusedCfg {
    static constexpr int WARPS = WARPS_, BK = BK_, NF = NF_, STAGES = STAGES_, WM = WM_;
    static constexpr int WN = WARPS / WM;          // warp columns: column groups of the block
    static constexpr int THREADS = 32 * WARPS;
    static constexpr int SROW = BK + 8;            // a staged row's stride in bf16: 16-byte aligned rows, ldmatrix without bank conflicts
    static constexpr int NFRAG = 2 * NF;           // B fragments of 8 columns per warp
    static constexpr int WSUB = FUSED_MAX_SUBTILES / WM;  // sub-tiles a warp owns at most: its accumulators' first index
    static constexpr int BROWS = 8 * WN * NFRAG;
    static constexpr int BN1 = BROWS / 2;          // GEMM 1: intermediate columns per block
    static constexpr int BN = BROWS;               // plain GEMM: output columns per block
    static_assert(WARPS % WM == 0 && FUSED_MAX_SUBTILES % WM == 0, "WM divides the warps and the sub-tiles");
    static_assert(BK % 16 == 0 && THREADS % (BK / 8) == 0, "k-steps of 16; whole rows of 16-byte chunks per pass");
};
// ANCHOR_END: config

// ANCHOR: live
// The warp's live sub-tiles as a mask in a register: bit j for its j-th sub-tile, s = wm + j·WM,
// set when s < subtiles and sub-tile s holds a real pair. Read from s_live once, after
// fused_tile_rows, so the k loop and the epilogues test a register bit instead of loading a
// shared flag per sub-tile and k-step. Every lane computes the same mask; the OR over the warp
// (__reduce_or_sync, sm_80 on) gives that same value back, but in a register the compiler knows
// to be the same for the whole warp: without it ptxas treats each sub-tile's branch as divergent
// and pays a convergence barrier and the A address rebuilt from the thread index per sub-tile.
__device__ __forceinline__ unsigned fused_warp_or(unsigned v) {
#if defined(MOE_EMU) || __CUDA_ARCH__ < 800
    return v;  // every lane passes the same value here
#else
    return __reduce_or_sync(MOE_FULL_MASK, v);
#endif
}
template <class C>
__device__ __forceinline__ unsigned fused_warp_live(const int* s_live, int subtiles, int wm) {
    unsigned live = 0;
#pragma unroll
    for (int j = 0; j < C::WSUB; ++j) {
        const int s = wm + j * C::WM;
        if (s < subtiles && s_live[s]) live |= 1u << j;
    }
    return fused_warp_or(live);
}
// ANCHOR_END: live

// The staged B row of a warp's fragment f, counted from its first: NF fragments in the first half
// of the block's BROWS staged rows, then NF more at the same place in the second half (BN1 rows
// on). In GEMM 1 the halves are the gate rows and the matching up rows; in the plain GEMM they
// are the block's first and last BN / 2 columns. A constant for each f, so that a warp's B
// fragments are one register plus constants.
template <class C>
__device__ __forceinline__ constexpr int fused_frag_row(int f) {
    return f < C::NF ? 8 * f : C::BN1 + 8 * (f - C::NF);
}

// ANCHOR: stage_mma
// One staged slice of K (k0 … k0 + BK − 1) multiplied into the accumulators: for each k-step of
// 16, the warp's B fragments (staged rows col0 + fused_frag_row(f)), then each of its live
// sub-tiles' A fragment (the sub-tiles wm, wm + WM, ...: bit j of `live` for acc[j]) and its
// NFRAG mma. Every version of the main loop calls it, so they all multiply in the same order.
template <class C>
__device__ __forceinline__ void fused_stage_mma(const __nv_bfloat16* sA, const __nv_bfloat16* sB, int k0, int K,
                                                unsigned live, int wm, int col0, float acc[C::WSUB][C::NFRAG][4]) {
    if (!live) return;  // no sub-tile of this warp holds a pair (version 3, a short tile): no loads
    const int lane = threadIdx.x & 31;
    // Each lane's addresses are set here, once: in the k loop only kk and constants are added.
    // B fragments: matrix 0 = k kk..kk+7, matrix 1 = k kk+8..kk+15 of 8 staged rows (rows are
    // B's columns n: ldmatrix without .trans gives the col-major B fragment); lane l gives row
    // l % 8 of matrix (l / 8) % 2 (.x2 reads the addresses of lanes 0-15).
    const __nv_bfloat16* b0 = sB + (col0 + (lane & 7)) * C::SROW + ((lane >> 3) & 1) * 8;
    // A fragments: matrices 0..3 = (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15),
    // (rows 8-15, k 8-15) of a sub-tile; lane l gives row l % 8 of matrix l / 8, that is
    // sub-tile row l % 16 at k (l / 16)·8. The warp's j-th sub-tile starts j·WM·16 rows after
    // its first, wm·16.
    const __nv_bfloat16* a0 = sA + (wm * 16 + (lane & 15)) * C::SROW + (lane >> 4) * 8;
    for (int kk = 0; kk < C::BK && k0 + kk < K; kk += 16) {
        unsigned b[C::NFRAG][2];
#pragma unroll
        for (int f = 0; f < C::NFRAG; ++f) moe_ldmatrix_x2(b[f], b0 + fused_frag_row<C>(f) * C::SROW + kk);
#pragma unroll
        for (int j = 0; j < C::WSUB; ++j) {
            if (!((live >> j) & 1u)) continue;  // the same for the whole warp
            unsigned a[4];
            moe_ldmatrix_x4(a, a0 + j * C::WM * 16 * C::SROW + kk);
#pragma unroll
            for (int f = 0; f < C::NFRAG; ++f) moe_mma_m16n8k16_bf16(acc[j][f], a, b[f], acc[j][f]);
        }
    }
}
// ANCHOR_END: stage_mma

// ANCHOR: mainloop
// The tile's product, accumulated over K: acc[j][f] += A[sub-tile wm + j·WM] · B[fragment f]ᵀ
// for the warp's sub-tiles that hold a real pair (bit j of `live`; with WM 1 every sub-tile s of
// the BLOCK_M / 16, acc[s]) and its NFRAG B fragments f (8 columns each, starting at staged B
// row col0 + fused_frag_row(f)).
//   A [*, K] bf16, row s_arow[r] for tile row r (-1: a placeholder, staged as zeros);
//   B [*, K] bf16, row s_brow[n] for staged B row n (-1: past the matrix, staged as zeros).
// Every thread of the block calls it (it synchronises); each warp keeps its own accumulators.
template <class C>
__device__ __forceinline__ void fused_mainloop(const __nv_bfloat16* __restrict__ A, const int* s_arow,
                                               const __nv_bfloat16* __restrict__ B, const int* s_brow, int K,
                                               int subtiles, unsigned live, int wm, int col0,
                                               __nv_bfloat16* sA, __nv_bfloat16* sB,
                                               float acc[C::WSUB][C::NFRAG][4]) {
    const int tid = threadIdx.x;
    const int rows = subtiles * 16;
    const __nv_bfloat16 zero = __ushort_as_bfloat16(0);
    // Rows start 16-byte aligned when K is a multiple of 8: then copy 8 values at a time (a chunk
    // of 8 lies wholly inside K or wholly past it).
    const bool vec = K % 8 == 0;
    constexpr int CHUNKS = C::BK / 8;
    for (int k0 = 0; k0 < K; k0 += C::BK) {
        // Stage this K slice: consecutive threads copy consecutive columns of a row.
        if (vec) {
            for (int i = tid; i < rows * CHUNKS; i += C::THREADS) {
                const int r = i / CHUNKS, c = (i % CHUNKS) * 8, src = s_arow[r];
                uint4 v = make_uint4(0, 0, 0, 0);
                if (src >= 0 && k0 + c < K) v = *reinterpret_cast<const uint4*>(A + (size_t)src * K + k0 + c);
                *reinterpret_cast<uint4*>(&sA[r * C::SROW + c]) = v;
            }
            for (int i = tid; i < C::BROWS * CHUNKS; i += C::THREADS) {
                const int n = i / CHUNKS, c = (i % CHUNKS) * 8, src = s_brow[n];
                uint4 v = make_uint4(0, 0, 0, 0);
                if (src >= 0 && k0 + c < K) v = *reinterpret_cast<const uint4*>(B + (size_t)src * K + k0 + c);
                *reinterpret_cast<uint4*>(&sB[n * C::SROW + c]) = v;
            }
        } else {
            for (int i = tid; i < rows * C::BK; i += C::THREADS) {
                const int r = i / C::BK, c = i % C::BK, src = s_arow[r];
                sA[r * C::SROW + c] = (src >= 0 && k0 + c < K) ? A[(size_t)src * K + k0 + c] : zero;
            }
            for (int i = tid; i < C::BROWS * C::BK; i += C::THREADS) {
                const int n = i / C::BK, c = i % C::BK, src = s_brow[n];
                sB[n * C::SROW + c] = (src >= 0 && k0 + c < K) ? B[(size_t)src * K + k0 + c] : zero;
            }
        }
        __syncthreads();
        fused_stage_mma<C>(sA, sB, k0, K, live, wm, col0, acc);
        __syncthreads();
    }
}
// ANCHOR_END: mainloop

// ANCHOR: copies
// Version 2's copies, worked out once per tile, before its K loop. With K a multiple of 8 a
// stage is rows of CHUNKS = BK / 8 chunks of 16 bytes; copy i of a stage goes to thread
// i % THREADS, so thread tid copies chunk c = tid % CHUNKS of the rows r0 = tid / CHUNKS,
// r0 + RSTEP, r0 + 2·RSTEP, ... (RSTEP = THREADS / CHUNKS). THREADS is a multiple of CHUNKS, so
// every copy of a thread has the same chunk: its j-th copy lands j·RSTEP·SROW bf16 after its
// first, a constant. What differs from copy to copy is the source row, gathered through s_arow or
// s_brow: row[j] keeps it, and bit j of `full` whether there is one (clear: a placeholder or a
// row past the matrix, zero-filled; row[j] is then 0, so that even the address of a copy that
// reads nothing lies inside the matrix, as moe_cp_async16 asks). A stage's copy is then one
// multiply-add from a base set once per stage: base + row[j]·K, base = the matrix + k0 + c.
// (Version 2 used to derive all of it at every stage: i / CHUNKS, i % CHUNKS, a shared-memory
// read of s_arow or s_brow, a 64-bit multiply: about as many instructions as the mma.)
//   Why a row index: a 64-bit pointer per copy would cost two registers and a 64-bit add of k0
// per stage; a 32-bit element offset row·K would cost one register but can pass 2³² (a pair's row
// p·I of act at a large batch); the row index is one register, and row·K + base is one PTX
// mad.wide.u32 (32 × 32 → 64 bits; on sm_90 an IMAD.WIDE.U32 and a 64-bit add), exact for any
// size. The number of copies is bounded at compile time (COPIES: ⌈FUSED_MAX_BLOCK_M / RSTEP⌉ for
// A, ⌈BROWS / RSTEP⌉ for B); `count` says how many of them this thread makes for this tile.
template <int COPIES>
struct FusedCopies {
    static_assert(COPIES <= 32, "one bit of `full` per copy");
    unsigned row[COPIES];  // the source row of copy j (0 when it zero-fills)
    unsigned full;         // bit j: copy j reads row[j]; clear: it writes 16 zero bytes
    int count;             // copies j < count exist: r0 + j·RSTEP < the rows staged
};

template <class C, int COPIES>
__device__ __forceinline__ FusedCopies<COPIES> fused_copies(const int* s_rows, int nrows) {
    constexpr int CHUNKS = C::BK / 8, RSTEP = C::THREADS / CHUNKS;
    const int r0 = threadIdx.x / CHUNKS;
    FusedCopies<COPIES> cp;
    cp.full = 0;
    cp.count = 0;
#pragma unroll
    for (int j = 0; j < COPIES; ++j) {
        const int r = r0 + j * RSTEP;
        const int src = r < nrows ? s_rows[r] : -1;
        cp.row[j] = src >= 0 ? (unsigned)src : 0u;
        if (src >= 0) cp.full |= 1u << j;
        if (r < nrows) cp.count = j + 1;
    }
    return cp;
}

// base + row · row_bytes in one 32 × 32 → 64-bit multiply-add (mad.wide.u32). Written in PTX
// so that the compiler cannot hoist row · row_bytes, the same at every stage, out of the K loop:
// hoisted, each copy would hold a 64-bit product (two registers) and still cost a 64-bit add
// per stage, which is what the row index is there to avoid.
__device__ __forceinline__ const void* fused_row_address(const void* base, unsigned row, unsigned row_bytes) {
#ifdef MOE_EMU
    return static_cast<const char*>(base) + (size_t)row * row_bytes;
#else
    unsigned long long a;
    asm("mad.wide.u32 %0, %1, %2, %3;\n" : "=l"(a) : "r"(row), "r"(row_bytes), "l"(base));
    return reinterpret_cast<const void*>(a);
#endif
}

// Queues one stage's copies of one matrix: dst is this thread's first copy in the stage's buffer
// (row r0, chunk c), src the matrix at column k0 + c, in_k whether that column is inside K (when
// not, src is the matrix itself and every copy zero-fills). ALL: every thread makes all COPIES
// (the rows staged are a multiple of RSTEP at compile time), so `count` is not tested; it is
// tested once when the thread makes them all anyway (every thread at BLOCK_M 128).
template <class C, int COPIES, bool ALL>
__device__ __forceinline__ void fused_issue(const FusedCopies<COPIES>& cp, __nv_bfloat16* dst,
                                            const __nv_bfloat16* src, unsigned row_bytes, bool in_k) {
    constexpr int RSTEP = C::THREADS / (C::BK / 8);
    const unsigned full = in_k ? cp.full : 0u;
    if (ALL || cp.count == COPIES) {
#pragma unroll
        for (int j = 0; j < COPIES; ++j)
            moe_cp_async16(dst + j * RSTEP * C::SROW, fused_row_address(src, cp.row[j], row_bytes), (full >> j) & 1u);
    } else {
#pragma unroll
        for (int j = 0; j < COPIES; ++j) {
            if (j >= cp.count) break;
            moe_cp_async16(dst + j * RSTEP * C::SROW, fused_row_address(src, cp.row[j], row_bytes), (full >> j) & 1u);
        }
    }
}
// ANCHOR_END: copies

// ANCHOR: mainloop_async
// Version 2 of the main loop: the same products in the same order as version 1 (so the same
// bits), but K's slices go through C::STAGES shared-memory buffers filled by cp.async. While the
// tensor cores multiply slice kt, the copies of slices kt + 1 … kt + STAGES − 1 are in flight,
// so a block keeps its loads going instead of waiting for each slice in turn. Placeholder rows
// and columns past K are zero-filled by the copy itself (a source size of 0). With K a multiple
// of 8 each thread's copies are worked out once (fused_copies), and a stage only adds k0.
//   sA: STAGES buffers of subtiles · 16 rows, sB: STAGES buffers of C::BROWS rows (C::SROW each).
template <class C>
__device__ __forceinline__ void fused_mainloop_async(const __nv_bfloat16* __restrict__ A, const int* s_arow,
                                                     const __nv_bfloat16* __restrict__ B, const int* s_brow, int K,
                                                     int subtiles, unsigned live, int wm, int col0,
                                                     __nv_bfloat16* sA, __nv_bfloat16* sB,
                                                     float acc[C::WSUB][C::NFRAG][4]) {
    static_assert(C::STAGES >= 2, "version 2 needs at least two stages");
    const int tid = threadIdx.x, rows = subtiles * 16;
    const int a_stage = rows * C::SROW, b_stage = C::BROWS * C::SROW;
    const int ktiles = (K + C::BK - 1) / C::BK;
    const bool vec = K % 8 == 0;  // 16-byte copies need 16-byte aligned rows
    constexpr int CHUNKS = C::BK / 8, RSTEP = C::THREADS / CHUNKS;
    constexpr int A_COPIES = (FUSED_MAX_BLOCK_M + RSTEP - 1) / RSTEP, B_COPIES = (C::BROWS + RSTEP - 1) / RSTEP;
    const int chunk = (tid % CHUNKS) * 8;                  // this thread's columns: chunk … chunk + 7 of a slice
    const int first = (tid / CHUNKS) * C::SROW + chunk;   // its first copy's place in a stage's buffer
    const unsigned row_bytes = 2u * (unsigned)K;  // a row of bf16: below 2³² bytes (K < 2³¹)
    const FusedCopies<A_COPIES> ca = fused_copies<C, A_COPIES>(s_arow, rows);
    const FusedCopies<B_COPIES> cb = fused_copies<C, B_COPIES>(s_brow, C::BROWS);
    // Queues the copies of K slice kt into buffer `slot`.
    auto stage = [&](int kt, int slot) {
        const int k0 = kt * C::BK;
        __nv_bfloat16* a = sA + slot * a_stage;
        __nv_bfloat16* b = sB + slot * b_stage;
        if (vec) {
            const bool in_k = k0 + chunk < K;
            const int kc = in_k ? k0 + chunk : 0;
            fused_issue<C, A_COPIES, false>(ca, a + first, A + kc, row_bytes, in_k);
            fused_issue<C, B_COPIES, C::BROWS % RSTEP == 0>(cb, b + first, B + kc, row_bytes, in_k);
        } else {  // plain loads and stores, visible after the barrier before the slice is used
            const __nv_bfloat16 zero = __ushort_as_bfloat16(0);
            for (int i = tid; i < rows * C::BK; i += C::THREADS) {
                const int r = i / C::BK, c = i % C::BK, src = s_arow[r];
                a[r * C::SROW + c] = (src >= 0 && k0 + c < K) ? A[(size_t)src * K + k0 + c] : zero;
            }
            for (int i = tid; i < C::BROWS * C::BK; i += C::THREADS) {
                const int n = i / C::BK, c = i % C::BK, src = s_brow[n];
                b[n * C::SROW + c] = (src >= 0 && k0 + c < K) ? B[(size_t)src * K + k0 + c] : zero;
            }
        }
    };
    // The first STAGES − 1 slices in flight; one commit group per slice, empty past K.
    for (int s = 0; s < C::STAGES - 1; ++s) {
        if (s < ktiles) stage(s, s);
        moe_cp_async_commit();
    }
    for (int kt = 0; kt < ktiles; ++kt) {
        moe_cp_async_wait(C::STAGES - 2);  // this thread's copies of slice kt have landed
        __syncthreads();                   // everyone's have, and everyone is done with slice kt − 1
        const int next = kt + C::STAGES - 1;  // refills the buffer slice kt − 1 used
        if (next < ktiles) stage(next, next % C::STAGES);
        moe_cp_async_commit();
        const int slot = kt % C::STAGES;
        fused_stage_mma<C>(sA + slot * a_stage, sB + slot * b_stage, kt * C::BK, K, live, wm, col0, acc);
    }
    moe_cp_async_wait(0);  // only empty groups are left; nothing in flight at exit
}
// ANCHOR_END: mainloop_async

// The tile's product by the configuration's version of the main loop, with its staging buffers:
// version 1 in static shared memory, one stage sized for the largest BLOCK_M; versions 2 and 3 in
// dynamic shared memory, C::STAGES stages sized for this launch's BLOCK_M (the host passes
// STAGES · (block_m + BROWS) · SROW bf16: TileConfig::shared_bytes).
template <class C>
__device__ __forceinline__ void fused_tile_product(const __nv_bfloat16* __restrict__ A, const int* s_arow,
                                                   const __nv_bfloat16* __restrict__ B, const int* s_brow, int K,
                                                   int subtiles, unsigned live, int wm, int col0,
                                                   float acc[C::WSUB][C::NFRAG][4]) {
    if constexpr (C::STAGES == 1) {
        __shared__ __align__(16) __nv_bfloat16 sA[FUSED_MAX_BLOCK_M * C::SROW];
        __shared__ __align__(16) __nv_bfloat16 sB[C::BROWS * C::SROW];
        fused_mainloop<C>(A, s_arow, B, s_brow, K, subtiles, live, wm, col0, sA, sB, acc);
    } else {
        DYNAMIC_SHARED(__nv_bfloat16, stages);
        fused_mainloop_async<C>(A, s_arow, B, s_brow, K, subtiles, live, wm, col0, stages,
                                stages + C::STAGES * subtiles * 16 * C::SROW, acc);
    }
}

// The tile's rows: the pair of each slot (-1 for a placeholder), the A row it reads
// (pair / k: the token in GEMM 1; the pair itself in GEMM 2, k = 1), and whether each 16-row
// sub-tile holds a real pair. Returns the number of sub-tiles. Every thread calls it.
__device__ __forceinline__ int fused_tile_rows(const int* __restrict__ sorted_ids, int tile, int block_m, int P,
                                               int k, int* s_pair, int* s_arow, int* s_live) {
    const int subtiles = block_m / 16;
    for (int r = threadIdx.x; r < block_m; r += blockDim.x) {
        const int p = sorted_ids[(size_t)tile * block_m + r];
        const bool real = p >= 0 && p < P;
        s_pair[r] = real ? p : -1;
        s_arow[r] = real ? p / k : -1;
    }
    __syncthreads();
    if ((int)threadIdx.x < subtiles) {  // one thread per sub-tile: no two threads write one flag
        int live = 0;
        for (int r = 0; r < 16; ++r) live |= s_pair[threadIdx.x * 16 + r] >= 0;
        s_live[threadIdx.x] = live;
    }
    __syncthreads();
    return subtiles;
}

// ANCHOR: gemm1
// act[p, n] = bf16(silu(g) · u), g = bf16(x[p / k] · w13[e, n]), u = bf16(x[p / k] · w13[e, I + n]),
// for the pairs p of each tile and its expert e.
//   x [rows, H] bf16; w13 [E, 2I, H] bf16; sorted_ids [max_tiles · block_m], expert_ids [max_tiles],
//   num_post [1] i32; act [P, I] bf16 (rows of pairs never in sorted_ids are not written).
// Grid (max_tiles, ceil(I / C::BN1)), C::THREADS threads. block_m in {16, 32, 64, 128}.
template <class C>
__device__ __forceinline__ void fused_gemm1_swiglu_impl(const __nv_bfloat16* __restrict__ x,
                                                        const __nv_bfloat16* __restrict__ w13,
                                                        const int* __restrict__ sorted_ids,
                                                        const int* __restrict__ expert_ids,
                                                        const int* __restrict__ num_post,
                                                        __nv_bfloat16* __restrict__ act, int P, int k, int H, int I,
                                                        int E, int block_m) {
    __shared__ int s_pair[FUSED_MAX_BLOCK_M], s_arow[FUSED_MAX_BLOCK_M], s_brow[C::BROWS];
    __shared__ int s_live[FUSED_MAX_SUBTILES];
    const int tile = blockIdx.x, n0 = blockIdx.y * C::BN1;
    // Tiles past the padded total, and tiles of an expert this layer does not hold, do nothing
    // (the same decision for every thread of the block, before any barrier).
    if ((long long)tile * block_m >= (long long)*num_post) return;
    const int e = expert_ids[tile];
    if (e < 0 || e >= E) return;
    const int subtiles = fused_tile_rows(sorted_ids, tile, block_m, P, k, s_pair, s_arow, s_live);
    // Staged B rows 0..BN1-1: gate rows n0...; rows BN1..2·BN1-1: the matching up rows I+n0...
    for (int r = threadIdx.x; r < C::BROWS; r += C::THREADS) {
        const int n = n0 + (r % C::BN1);
        s_brow[r] = n < I ? (r < C::BN1 ? n : I + n) : -1;
    }
    // Not yet visible to other threads: fused_mainloop synchronises before its first read.
    const __nv_bfloat16* w = w13 + (size_t)e * 2 * (size_t)I * (size_t)H;  // 64-bit: E·2I·H can pass 2^31
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wm = warp % C::WM, wn = warp / C::WM;  // the warp's row and column in the grid (WM 1: 0, warp)
    // Warp column wn: gate fragments at staged rows col0 + 8f, up fragments BN1 rows further.
    const int col0 = 8 * C::NF * wn;
    const unsigned live = fused_warp_live<C>(s_live, subtiles, wm);
    float acc[C::WSUB][C::NFRAG][4] = {};  // [the warp's sub-tile][gate fragments, up fragments][fragment]
    __syncthreads();
    fused_tile_product<C>(x, s_arow, w, s_brow, H, subtiles, live, wm, col0, acc);
    // Epilogue: lane (g, t) = (lane / 4, lane % 4) holds rows g and g + 8 of each of the warp's
    // sub-tiles, columns 2t and 2t + 1 of each fragment, for the gate and the up projection alike.
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int j = 0; j < C::WSUB; ++j) {
        if (!((live >> j) & 1u)) continue;
        const int s = wm + j * C::WM;  // the tile's sub-tile
#pragma unroll
        for (int f = 0; f < C::NF; ++f) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int row = s * 16 + g + (i >> 1) * 8, col = n0 + col0 + 8 * f + 2 * t + (i & 1);
                const int p = s_pair[row];
                if (p < 0 || col >= I) continue;
                // Round gate and up to bf16 as the unfused layer stores them, then SwiGLU in fp32.
                const float gate = __bfloat162float(__float2bfloat16(acc[j][f][i]));
                const float up = __bfloat162float(__float2bfloat16(acc[j][C::NF + f][i]));
                act[(size_t)p * I + col] = __float2bfloat16((gate * moe_sigmoidf(gate)) * up);
            }
        }
    }
}
// ANCHOR_END: gemm1

// ANCHOR: gemm2
// The plain GEMM of a tile: out[p, n] = A[p / k] · W[e, n] for n < N, the pairs p of each tile and
// its expert e; W [E, N, K] bf16, A [*, K] bf16.
//   BF16_OUT: out [P, N] bf16, the value rounded (fused_gemm1_gateup: N = 2I, K = H, A = x);
//   else: out [P, N] f32, times weight[p] in fp32 when weight is not null (fused_gemm2: N = H,
//   K = I, A = act, k = 1).
// Grid (max_tiles, ceil(N / C::BN)), C::THREADS threads.
template <class C, bool BF16_OUT>
__device__ __forceinline__ void fused_gemm_impl(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ W,
                                                const int* __restrict__ sorted_ids, const int* __restrict__ expert_ids,
                                                const int* __restrict__ num_post, const float* __restrict__ weight,
                                                void* __restrict__ out, int P, int k, int N, int K, int E,
                                                int block_m) {
    __shared__ int s_pair[FUSED_MAX_BLOCK_M], s_arow[FUSED_MAX_BLOCK_M], s_brow[C::BROWS];
    __shared__ int s_live[FUSED_MAX_SUBTILES];
    const int tile = blockIdx.x, n0 = blockIdx.y * C::BN;
    if ((long long)tile * block_m >= (long long)*num_post) return;
    const int e = expert_ids[tile];
    if (e < 0 || e >= E) return;
    const int subtiles = fused_tile_rows(sorted_ids, tile, block_m, P, k, s_pair, s_arow, s_live);
    for (int r = threadIdx.x; r < C::BROWS; r += C::THREADS) s_brow[r] = n0 + r < N ? n0 + r : -1;
    const __nv_bfloat16* w = W + (size_t)e * (size_t)N * (size_t)K;  // 64-bit: E·N·K can pass 2^31
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wm = warp % C::WM, wn = warp / C::WM;  // the warp's row and column in the grid (WM 1: 0, warp)
    // Warp column wn: NF fragments of 8 columns from col0 in each half of the block's BN columns
    // (fused_frag_row), as GEMM 1 takes its gate and up fragments.
    const int col0 = 8 * C::NF * wn;
    const unsigned live = fused_warp_live<C>(s_live, subtiles, wm);
    float acc[C::WSUB][C::NFRAG][4] = {};  // [the warp's sub-tile][fragment of 8 columns][fragment]
    __syncthreads();
    fused_tile_product<C>(A, s_arow, w, s_brow, K, subtiles, live, wm, col0, acc);
    const int g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int j = 0; j < C::WSUB; ++j) {
        if (!((live >> j) & 1u)) continue;
        const int s = wm + j * C::WM;  // the tile's sub-tile
#pragma unroll
        for (int f = 0; f < C::NFRAG; ++f) {
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int row = s * 16 + g + (i >> 1) * 8;
                const int col = n0 + col0 + fused_frag_row<C>(f) + 2 * t + (i & 1);
                const int p = s_pair[row];
                if (p < 0 || col >= N) continue;
                const float v = acc[j][f][i];
                if (BF16_OUT)
                    static_cast<__nv_bfloat16*>(out)[(size_t)p * N + col] = __float2bfloat16(v);
                else
                    static_cast<float*>(out)[(size_t)p * N + col] = weight ? weight[p] * v : v;
            }
        }
    }
}
// ANCHOR_END: gemm2

// ANCHOR: entries
// The entry points of each tile configuration: the default, w4_k32_n1, under the plain names.
//   fused_gemm1_swiglu (x, w13, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m)
//   fused_gemm1_gateup (x, w13, sorted_ids, expert_ids, num_post, gateup [P, 2I], P, k, H, I, E, block_m)
//   fused_gemm2 (act, w2, sorted_ids, expert_ids, num_post, weight or null, y [P, H], P, H, I, E, block_m)
typedef FusedCfg<4, 32, 1> FusedDefault;
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm1_swiglu(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                       const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H, int I,
                       int E, int block_m) {
    fused_gemm1_swiglu_impl<FusedDefault>(x, w13, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m);
}
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm1_gateup(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                       const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k, int H,
                       int I, int E, int block_m) {
    fused_gemm_impl<FusedDefault, true>(x, w13, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H,
                                        E, block_m);
}
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm2(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids, const int* expert_ids,
                const int* num_post, const float* weight, float* y, int P, int H, int I, int E, int block_m) {
    fused_gemm_impl<FusedDefault, false>(act, w2, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m);
}
// ANCHOR_END: entries

// w4_k64_n1: K staged 64 at a time (half the barriers).
typedef FusedCfg<4, 64, 1> FusedW4K64N1;
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm1_swiglu_w4_k64_n1(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                                 const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H,
                                 int I, int E, int block_m) {
    fused_gemm1_swiglu_impl<FusedW4K64N1>(x, w13, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m);
}
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm1_gateup_w4_k64_n1(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                                 const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k,
                                 int H, int I, int E, int block_m) {
    fused_gemm_impl<FusedW4K64N1, true>(x, w13, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H,
                                        E, block_m);
}
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm2_w4_k64_n1(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,
                          const int* expert_ids, const int* num_post, const float* weight, float* y, int P, int H,
                          int I, int E, int block_m) {
    fused_gemm_impl<FusedW4K64N1, false>(act, w2, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E,
                                         block_m);
}

// w8_k32_n1: 8 warps, twice the columns per block (BN1 64, BN 128): each staged A row feeds
// twice as many fragments.
typedef FusedCfg<8, 32, 1> FusedW8K32N1;
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm1_swiglu_w8_k32_n1(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                                 const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H,
                                 int I, int E, int block_m) {
    fused_gemm1_swiglu_impl<FusedW8K32N1>(x, w13, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m);
}
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm1_gateup_w8_k32_n1(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                                 const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k,
                                 int H, int I, int E, int block_m) {
    fused_gemm_impl<FusedW8K32N1, true>(x, w13, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H,
                                        E, block_m);
}
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm2_w8_k32_n1(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,
                          const int* expert_ids, const int* num_post, const float* weight, float* y, int P, int H,
                          int I, int E, int block_m) {
    fused_gemm_impl<FusedW8K32N1, false>(act, w2, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E,
                                         block_m);
}

// w4_k32_n2: 4 warps of twice the fragments (BN1 64, BN 128): each A fragment loaded once
// feeds 4 mma instead of 2, at twice the accumulator registers.
typedef FusedCfg<4, 32, 2> FusedW4K32N2;
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm1_swiglu_w4_k32_n2(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                                 const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H,
                                 int I, int E, int block_m) {
    fused_gemm1_swiglu_impl<FusedW4K32N2>(x, w13, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m);
}
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm1_gateup_w4_k32_n2(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                                 const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k,
                                 int H, int I, int E, int block_m) {
    fused_gemm_impl<FusedW4K32N2, true>(x, w13, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H,
                                        E, block_m);
}
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm2_w4_k32_n2(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,
                          const int* expert_ids, const int* num_post, const float* weight, float* y, int P, int H,
                          int I, int E, int block_m) {
    fused_gemm_impl<FusedW4K32N2, false>(act, w2, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E,
                                         block_m);
}

// Version 2 (cp.async, STAGES buffers in dynamic shared memory): the configurations `_s{STAGES}`.

// w4_k64_n1_s3: the rule's tile, K in three stages in flight.
typedef FusedCfg<4, 64, 1, 3> FusedW4K64N1S3;
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm1_swiglu_w4_k64_n1_s3(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                             const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H,
                             int I, int E, int block_m) {
    fused_gemm1_swiglu_impl<FusedW4K64N1S3>(x, w13, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m);
}
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm1_gateup_w4_k64_n1_s3(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                             const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k,
                             int H, int I, int E, int block_m) {
    fused_gemm_impl<FusedW4K64N1S3, true>(x, w13, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H, E,
                                  block_m);
}
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm2_w4_k64_n1_s3(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, const float* weight, float* y, int P, int H,
                      int I, int E, int block_m) {
    fused_gemm_impl<FusedW4K64N1S3, false>(act, w2, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m);
}

// w4_k64_n1_s4: the same with four stages.
typedef FusedCfg<4, 64, 1, 4> FusedW4K64N1S4;
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm1_swiglu_w4_k64_n1_s4(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                             const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H,
                             int I, int E, int block_m) {
    fused_gemm1_swiglu_impl<FusedW4K64N1S4>(x, w13, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m);
}
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm1_gateup_w4_k64_n1_s4(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                             const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k,
                             int H, int I, int E, int block_m) {
    fused_gemm_impl<FusedW4K64N1S4, true>(x, w13, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H, E,
                                  block_m);
}
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm2_w4_k64_n1_s4(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, const float* weight, float* y, int P, int H,
                      int I, int E, int block_m) {
    fused_gemm_impl<FusedW4K64N1S4, false>(act, w2, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m);
}

// w8_k64_n1_s3: 8 warps (BN1 64, BN 128), three stages.
typedef FusedCfg<8, 64, 1, 3> FusedW8K64N1S3;
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm1_swiglu_w8_k64_n1_s3(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                             const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H,
                             int I, int E, int block_m) {
    fused_gemm1_swiglu_impl<FusedW8K64N1S3>(x, w13, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m);
}
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm1_gateup_w8_k64_n1_s3(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                             const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k,
                             int H, int I, int E, int block_m) {
    fused_gemm_impl<FusedW8K64N1S3, true>(x, w13, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H, E,
                                  block_m);
}
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm2_w8_k64_n1_s3(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, const float* weight, float* y, int P, int H,
                      int I, int E, int block_m) {
    fused_gemm_impl<FusedW8K64N1S3, false>(act, w2, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m);
}

// w4_k32_n2_s4: two fragments per warp (BN1 64, BN 128), four stages of 32.
typedef FusedCfg<4, 32, 2, 4> FusedW4K32N2S4;
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm1_swiglu_w4_k32_n2_s4(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                             const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H,
                             int I, int E, int block_m) {
    fused_gemm1_swiglu_impl<FusedW4K32N2S4>(x, w13, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m);
}
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm1_gateup_w4_k32_n2_s4(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                             const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k,
                             int H, int I, int E, int block_m) {
    fused_gemm_impl<FusedW4K32N2S4, true>(x, w13, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H, E,
                                  block_m);
}
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm2_w4_k32_n2_s4(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, const float* weight, float* y, int P, int H,
                      int I, int E, int block_m) {
    fused_gemm_impl<FusedW4K32N2S4, false>(act, w2, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m);
}

// Version 3 (a WM × WN warp grid, version 2's pipeline): the configurations `_w{WM}x{WN}`.
// Per k-step of 16 at BLOCK_M 128 a warp loads WSUB = 8 / WM A fragments (ldmatrix.x4) and
// NFRAG = 2·NF B fragments (ldmatrix.x2) for WSUB·NFRAG mma, against 8 and 2 for 16 in
// w8_k64_n1_s3; its accumulators are WSUB·NFRAG·4 registers.

// w2x2_k32_n4_s4: 4 warps as 2 × 2 (BN1 64, BN 128); a warp: 4 sub-tiles × 8 fragments, 32 mma
// per 4 A and 8 B loads, 128 accumulators; four stages of 32.
typedef FusedCfg<4, 32, 4, 4, 2> FusedW2x2K32N4S4;
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm1_swiglu_w2x2_k32_n4_s4(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                             const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H,
                             int I, int E, int block_m) {
    fused_gemm1_swiglu_impl<FusedW2x2K32N4S4>(x, w13, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m);
}
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm1_gateup_w2x2_k32_n4_s4(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                             const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k,
                             int H, int I, int E, int block_m) {
    fused_gemm_impl<FusedW2x2K32N4S4, true>(x, w13, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H, E,
                                  block_m);
}
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm2_w2x2_k32_n4_s4(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, const float* weight, float* y, int P, int H,
                      int I, int E, int block_m) {
    fused_gemm_impl<FusedW2x2K32N4S4, false>(act, w2, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m);
}

// w2x2_k64_n4_s3: the same warp grid, K in three stages of 64 (half the barriers).
typedef FusedCfg<4, 64, 4, 3, 2> FusedW2x2K64N4S3;
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm1_swiglu_w2x2_k64_n4_s3(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                             const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H,
                             int I, int E, int block_m) {
    fused_gemm1_swiglu_impl<FusedW2x2K64N4S3>(x, w13, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m);
}
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm1_gateup_w2x2_k64_n4_s3(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                             const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k,
                             int H, int I, int E, int block_m) {
    fused_gemm_impl<FusedW2x2K64N4S3, true>(x, w13, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H, E,
                                  block_m);
}
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm2_w2x2_k64_n4_s3(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, const float* weight, float* y, int P, int H,
                      int I, int E, int block_m) {
    fused_gemm_impl<FusedW2x2K64N4S3, false>(act, w2, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m);
}

// w2x4_k32_n2_s4: 8 warps as 2 × 4 (BN1 64, BN 128); a warp: 4 sub-tiles × 4 fragments, 16 mma
// per 4 A and 4 B loads, 64 accumulators; four stages of 32.
typedef FusedCfg<8, 32, 2, 4, 2> FusedW2x4K32N2S4;
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm1_swiglu_w2x4_k32_n2_s4(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                             const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H,
                             int I, int E, int block_m) {
    fused_gemm1_swiglu_impl<FusedW2x4K32N2S4>(x, w13, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m);
}
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm1_gateup_w2x4_k32_n2_s4(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                             const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k,
                             int H, int I, int E, int block_m) {
    fused_gemm_impl<FusedW2x4K32N2S4, true>(x, w13, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H, E,
                                  block_m);
}
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm2_w2x4_k32_n2_s4(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, const float* weight, float* y, int P, int H,
                      int I, int E, int block_m) {
    fused_gemm_impl<FusedW2x4K32N2S4, false>(act, w2, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m);
}

// ANCHOR: wg_config
// VERSIONS 4 AND 5 (sm_90a only): Hopper's warpgroup MMA (kernels/wgmma.cuh) instead of mma.sync. A
// block is WGS warpgroups of 128 threads, one per 64 rows of the tile (so BLOCK_M = 64·WGS: the
// host pads chapter 3's layout to it); every warpgroup multiplies its 64 rows by all the block's
// BN = 16·NF staged B rows, one wgmma m64nBNk16 per k-step of 16, and holds the 64 × BN product
// in its registers (BN / 2 fp32 per thread). Nothing goes through ldmatrix or the register file
// on the way in: wgmma reads both operands from shared memory itself, through descriptors. The
// slices of K arrive as in version 2 (STAGES buffers filled by cp.async, 16 bytes per copy), but
// laid out in wgmma's core matrices (8 rows × 16 bytes, 128 contiguous bytes) instead of padded
// rows: chunk i of a stage's operand (row (i / (8·CHUNKS))·8 + i % 8, 16-byte column
// (i / 8) % CHUNKS) lives at byte 16·i, so a thread's copies sit THREADS·16 bytes apart and eight
// neighbouring threads fill one core matrix. GEMM 1 stages BN1 = BN / 2 gate rows then the BN1
// matching up rows, so a thread's gate and up values for one column sit NF / 2 fragments apart
// in its accumulators, and SwiGLU is the epilogue as before. Needs K (H and I) a multiple of 8.
// Each output's sum is the same as the other versions': k-steps of 16 from k = 0 up into one
// fp32 accumulator; whether wgmma's k-step rounds as mma.sync's does is measured, not assumed
// (chapter 4's GPU test compares every version 4 to 11 configuration with the portable path's bits).
// SWZ (version 5): the 128-byte swizzled layout instead (BK 64: a staged row is 128 bytes, the swizzle's
// width): row r's 128 bytes at byte 128·r, its 16-byte chunk c at chunk c ^ (r % 8) (the
// hardware XORs address bits 4-6 with bits 7-9, so a stage starts on 1024 bytes). Then eight
// neighbouring threads copy one row's eight chunks: one whole 128-byte line of global memory per
// eight threads (the flat layout's mapping reads 64 bytes of each of 8 rows), into eight
// different bank groups of shared memory.
// W0 (_w0): the main loop waits for each slice's wgmma before it goes on (wait<0>, not wait<1>),
// so a buffer is free one slice after its product instead of two and the copies run STAGES − 1
// slices ahead instead of STAGES − 2: more bytes in flight where memory is the bound, no
// product overlapping the next slice's barrier and copies where the tensor cores are.
// TMA (version 7, _tma): the B slices (weight rows) come through the tensor memory accelerator
// instead (kernels/tma.cuh): one thread asks for each 64-row box of the slice, the copy engine
// writes it in the swizzled layout and counts its bytes on the stage's mbarrier, which every
// thread waits on beside its own cp.async of A (the gathered rows stay cp.async: a box is a
// rectangle of the tensor, A's rows are scattered). Rows past N (or past I in GEMM 1's halves)
// are the next rows of the weight tensor, not zeros: their products land only in columns the
// epilogue never stores.
// WS (version 8, _ws, with TMA): warp specialization. One more warpgroup, the producer, does
// nothing but copy: its thread 0 asks for B's boxes, its 128 threads gather A's rows with
// cp.async, and each buffer's "full" mbarrier completes when both have landed (every producer
// thread's cp.async arrival, thread 0's arrival with the bytes). The WGS consumer warpgroups do
// nothing but wait on "full", multiply, and arrive on the buffer's "empty" mbarrier once their
// wgmma has read it; the producer waits on "empty" before refilling. No __syncthreads in the
// loop: each side runs as far ahead as the buffers allow (every buffer but the one whose wgmma
// group is still running may be filling: STAGES − 1 slices ahead).
// PS (version 10, _ps, with WS): persistent. As many blocks as the SMs hold at once (the host's
// grid) work through the items of the grid versions 1 to 9 launch, tile × column block, a tile's
// column blocks one after another (ps_loop): block b takes items b, b + gridDim.x, ... The
// barriers are set up once and their uses counted across the block's items, so the producer
// fills the next item's buffers while the consumers still multiply, and then store, this one,
// and no block launch or barrier set-up comes between items.
// DY (version 11, _dy, with PS): version 10 with its items handed out as the blocks free up
// instead of by a fixed stride: the producer's thread 0 takes the next item from a counter in
// global memory (one atomicAdd) and passes it to its warpgroup and the consumers through a ring
// of DY_SLOTS items in shared memory (dy_next), so the items at work at any moment are the
// ones handed out last, however unevenly the blocks run.
template <int WGS_, int BK_, int NF_, int STAGES_, bool SWZ_ = false, bool W0_ = false, bool TMA_ = false,
          bool WS_ = false, bool MC_ = false, bool PS_ = false, bool DY_ = false>
struct WgCfg {
    static constexpr int WGS = WGS_, BK = BK_, NF = NF_, STAGES = STAGES_;
    static constexpr bool SWZ = SWZ_, W0 = W0_, TMA = TMA_, WS = WS_, MC = MC_, PS = PS_, DY = DY_;
    static constexpr int AHEAD = W0 ? STAGES - 1 : STAGES - 2;  // slices copied ahead of the product
    static constexpr int THREADS = 128 * (WGS + (WS ? 1 : 0));
    static constexpr int COPIERS = WS ? 128 : THREADS;     // threads that issue the cp.async
    static constexpr int BM = 64 * WGS;                   // the tile's rows: BLOCK_M
    static constexpr int BN = 16 * NF;                     // B rows staged: wgmma's N
    static constexpr int BN1 = BN / 2;                     // GEMM 1: intermediate columns per block
    static constexpr int BROWS = BN;
    static constexpr int CHUNKS = BK / 8;                  // 16-byte chunks per staged row
    static constexpr int RSTEP = COPIERS / CHUNKS;         // rows between a thread's copies
    static constexpr int A_COPIES = BM / RSTEP, B_COPIES = BN / RSTEP;
    static constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
    // The descriptors: flat, 128 bytes between core matrices along K and 16·BK along M or N, a
    // k-step of 16 two core matrices on (256 bytes); swizzled, 1024 bytes between groups of 8
    // rows (the leading offset unused: K fits in one swizzle row) and a k-step 32 bytes on.
    static constexpr unsigned LEAD = SWZ ? 16 : 128;
    static constexpr unsigned STRIDE = SWZ ? 1024 : 16 * BK;
    static constexpr unsigned long long LAYOUT = SWZ ? 1ull << 62 : 0ull;  // descriptor bits 62-63: 1 = 128-byte swizzle
    static constexpr int KSTEP_UNITS = SWZ ? 2 : 16;       // a k-step's advance, in 16-byte units
    static constexpr int ACC = BN / 2;                     // fp32 accumulators per thread
    static_assert(BK % 16 == 0 && THREADS % (8 * CHUNKS) == 0, "whole core matrices per pass of the block");
    static_assert(BM % RSTEP == 0 && BN % RSTEP == 0 && A_COPIES <= 32 && B_COPIES <= 32, "copies per thread");
    static_assert(BN == 128 || BN == 256, "wgmma.cuh instantiates N = 128 and 256");
    static_assert(AHEAD >= 1, "a buffer is refilled two slices (W0: one) after its product was issued");
    static_assert(!SWZ || BK == 64, "the 128-byte swizzle holds one staged row of 64 bf16");
    static_assert(!TMA || (SWZ && BN % (2 * WG_TMA_BOX) == 0 && BK == WG_TMA_BOX),
                  "TMA boxes: WG_TMA_BOX swizzled rows of BK, two halves of whole boxes");
    static_assert(!WS || TMA, "version 8's producer asks for B's boxes");
    static_assert(!MC || WS, "version 9 is version 8 in clusters of two");
    static_assert(!PS || (WS && !MC), "version 10 is version 8, persistent");
    static_assert(!DY || PS, "version 11 is version 10 with its items handed out as blocks free up");
    static constexpr int BOX_ROWS = WG_TMA_BOX;            // TMA: rows of one box (the host's tensor maps)
    static constexpr int HALF_BOXES = BN / 2 / BOX_ROWS;   // TMA: boxes per half of B (gate | up, or two column halves)
};
// ANCHOR_END: wg_config

// A thread's copies of one operand: the source row of copy j (0 when it zero-fills) and, in bit
// j of `full`, whether it reads that row (rows r0, r0 + RSTEP, ... of s_rows, -1: a zero row).
template <int COPIES>
struct WgCopies {
    unsigned row[COPIES];
    unsigned full;
};
template <int COPIES, int RSTEP>
__device__ __forceinline__ WgCopies<COPIES> wg_copies(const int* s_rows, int r0) {
    WgCopies<COPIES> cp;
    cp.full = 0;
#pragma unroll
    for (int j = 0; j < COPIES; ++j) {
        const int s = s_rows[r0 + j * RSTEP];
        cp.row[j] = s >= 0 ? (unsigned)s : 0u;
        cp.full |= (s >= 0 ? 1u : 0u) << j;
    }
    return cp;
}

// The dynamic shared memory from its first WG_SWIZZLE_ALIGN boundary on (the swizzled stages'
// start; the host adds as many bytes).
__device__ __forceinline__ unsigned char* wg_swizzle_aligned(unsigned char* smem) {
#ifdef MOE_WGMMA
    const unsigned off = (unsigned)__cvta_generic_to_shared(smem);
    return smem + ((WG_SWIZZLE_ALIGN - (off & (WG_SWIZZLE_ALIGN - 1))) & (WG_SWIZZLE_ALIGN - 1));
#else
    return smem;  // versions 5 to 10 run on sm_90a only
#endif
}

// ANCHOR: wg_mainloop
// This thread's copies of one operand's slice: COPIES cp.async of 16 bytes, the j-th `dstep`
// bytes after `dst`, from row cp.row[j] of `src` (already offset to the slice's column); 0 bytes
// for a zero row or a column past K (in_k false).
template <int COPIES>
__device__ __forceinline__ void wg_copy_rows(unsigned char* dst, int dstep, const __nv_bfloat16* src,
                                             const WgCopies<COPIES>& cp, unsigned row_bytes, bool in_k) {
#pragma unroll
    for (int j = 0; j < COPIES; ++j)
        moe_cp_async16(dst + j * dstep, fused_row_address(src, cp.row[j], row_bytes), in_k && ((cp.full >> j) & 1u));
}

// The main loop of versions 4 to 9: acc += A[s_arow] · B[s_brow]ᵀ over K, for this thread's warpgroup's 64
// rows (live: whether any of them is a real pair; the warpgroup skips its wgmma when not, but
// still copies and meets every barrier). s_arow / s_brow: the source row of each staged row, -1
// for a zero row.
template <class C>
__device__ __forceinline__ void wg_mainloop(const __nv_bfloat16* __restrict__ A, const int* s_arow,
                                            const __nv_bfloat16* __restrict__ B, const int* s_brow, int K, bool live,
                                            unsigned char* smem, float (&acc)[C::ACC], const void* bmap, int b0,
                                            int b1) {
#ifdef MOE_WGMMA
    const int t = threadIdx.x;
    // This thread's copies: rows r0, r0 + RSTEP, ... of each operand, 16-byte column c; at byte
    // dst0 of a stage's operand, then RSTEP rows further each.
    const int r0 = C::SWZ ? t / 8 : 8 * (t / (8 * C::CHUNKS)) + t % 8;
    const int c = C::SWZ ? t % 8 : (t / 8) % C::CHUNKS;
    const int dst0 = C::SWZ ? 128 * r0 + 16 * (c ^ (r0 & 7)) : 16 * t;
    constexpr int DSTEP = C::SWZ ? 128 * C::RSTEP : 16 * C::THREADS;
    if (C::SWZ) smem = wg_swizzle_aligned(smem);
    const WgCopies<C::A_COPIES> ca = wg_copies<C::A_COPIES, C::RSTEP>(s_arow, r0);
    const WgCopies<C::B_COPIES> cb = wg_copies<C::B_COPIES, C::RSTEP>(s_brow, r0);
    const unsigned row_bytes = (unsigned)K * 2u;
    const int nk = (K + C::BK - 1) / C::BK;
    // Version 7: one mbarrier per buffer, one arrival (thread 0's, with the bytes) per phase.
    __shared__ __align__(8) unsigned long long s_full[C::STAGES];
    if (C::TMA) {
        if (t == 0) {
#pragma unroll
            for (int s = 0; s < C::STAGES; ++s) moe_mbar_init(&s_full[s], 1);
            moe_mbar_init_fence();
        }
        __syncthreads();
    }
    // Slice kt into buffer `stage`: columns past K (and zero rows) are copies of 0 bytes.
    auto issue = [&](int stage, int kt) {
        const int kc = kt * C::BK + 8 * c;
        const bool in_k = kc < K;
        const __nv_bfloat16* a = in_k ? A + kc : A;
        const __nv_bfloat16* b = in_k ? B + kc : B;
        unsigned char* dst = smem + stage * C::STAGE_BYTES + dst0;
        wg_copy_rows(dst, DSTEP, a, ca, row_bytes, in_k);
        if (C::TMA) {
            // Version 7: B's boxes, rows b0.. then b1.., each 64 rows at column kt·BK.
            if (t == 0) {
                unsigned char* bst = smem + stage * C::STAGE_BYTES + C::A_BYTES;
                moe_mbar_arrive_expect_tx(&s_full[stage], C::B_BYTES);
#pragma unroll
                for (int h = 0; h < 2; ++h)
#pragma unroll
                    for (int j = 0; j < C::HALF_BOXES; ++j)
                        moe_tma_load_2d(bst + (h * C::HALF_BOXES + j) * C::BOX_ROWS * 128, bmap, kt * C::BK,
                                        (h ? b1 : b0) + j * C::BOX_ROWS, &s_full[stage]);
            }
            return;
        }
        dst += C::A_BYTES;
        wg_copy_rows(dst, DSTEP, b, cb, row_bytes, in_k);
    };
    // The pipeline: slice kt + AHEAD is copied while slice kt is multiplied, and one group of
    // wgmma stays in flight while the warps go on to the next slice's barrier and copies. So a
    // buffer is refilled only two slices after it was multiplied (STAGES = AHEAD + 2): by then
    // every warpgroup has waited for that group (wait<1> one slice later) and met a barrier.
    // W0: no group stays in flight (wait<0>), so the buffer of slice kt − 1 is free at slice
    // kt's barrier (STAGES = AHEAD + 1).
    constexpr int AHEAD = C::AHEAD;
#pragma unroll
    for (int s = 0; s < AHEAD; ++s) {
        if (s < nk) issue(s, s);
        moe_cp_async_commit();
    }
    const int wg = t / 128;
    for (int kt = 0; kt < nk; ++kt) {
        // Slice kt has landed (this thread's copies: AHEAD + kt groups committed, at most
        // AHEAD − 1 still running), is visible to wgmma (the proxy fence) and to every thread
        // (the barrier); and every warpgroup is past its wait for slice kt − 2's group.
        moe_cp_async_wait(AHEAD - 1);
        if (C::TMA) moe_mbar_wait(&s_full[kt % C::STAGES], (unsigned)(kt / C::STAGES) & 1u);  // B's boxes landed
        moe_fence_proxy_async();
        __syncthreads();
        const int next = kt + AHEAD;  // into the buffer of slice kt − 2 (W0: kt − 1)
        if (next < nk) issue(next % C::STAGES, next);
        moe_cp_async_commit();
        if (live) {
            const unsigned char* st = smem + (kt % C::STAGES) * C::STAGE_BYTES;
            const unsigned long long da = moe_wgmma_desc(st + wg * 64 * C::BK * 2, C::LEAD, C::STRIDE) | C::LAYOUT;
            const unsigned long long db = moe_wgmma_desc(st + C::A_BYTES, C::LEAD, C::STRIDE) | C::LAYOUT;
            moe_wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < C::BK / 16; ++kk)
                moe_wgmma_bf16<C::BN>(acc, da + C::KSTEP_UNITS * kk, db + C::KSTEP_UNITS * kk);
            moe_wgmma_commit();
            if (C::W0)
                moe_wgmma_wait<0>();  // slice kt's group done
            else
                moe_wgmma_wait<1>();  // slice kt − 1's group done; slice kt's may still run
        }
    }
    // Every product in the accumulators before the epilogue. Unconditional: a warpgroup that
    // issued nothing waits for nothing, and behind `if (live)` ptxas injects a wait of its own
    // where the paths meet (its advisory C7517).
    moe_wgmma_wait<0>();
#else
    __trap();  // versions 4 to 9 exist only on sm_90a; the host never launches it anywhere else
#endif
}
// ANCHOR_END: wg_mainloop

// Whether warpgroup wg's 64 rows hold a real pair (fused_tile_rows' flags, 4 sub-tiles of 16).
// Every lane reads the same flags; the OR over the warp gives that value back in a register the
// compiler knows to be the same across the warp (as fused_warp_live does): read from shared
// memory alone, the branch around the wgmma looks divergent to ptxas, which then serializes
// every wgmma of the loop (its advisory C7518, "wgmma.mma_async instructions are serialized").
__device__ __forceinline__ bool wg_live(const int* s_live, int wg) {
    const int live = s_live[4 * wg] | s_live[4 * wg + 1] | s_live[4 * wg + 2] | s_live[4 * wg + 3];
    return fused_warp_or((unsigned)live) != 0;
}

// ANCHOR: ws_mainloop
// Version 8's two sides of the main loop (WgCfg's WS); `full` and `empty` are STAGES mbarriers
// each, initialized by wg_tile_product. Slice kt lives in buffer kt % STAGES; its use of that
// buffer is the (kt / STAGES)-th, whose parity the waits name.
// The producer warpgroup: slice kt into its buffer once the consumers have released the slice
// STAGES before it.
// Version 9 (C::MC, `share`): the two blocks of a cluster multiply tiles of one expert by the
// same weight slice; block `rank` asks for half `rank` of B's boxes (the gate rows or the up
// rows, or a half of the columns) for both blocks at once, and refills a buffer only once both
// blocks' consumers have released it (their arrivals on its `empty`).
template <class C>
__device__ __forceinline__ void ws_producer(const __nv_bfloat16* __restrict__ A, const WgCopies<C::A_COPIES>& ca,
                                            int K, unsigned char* smem, unsigned long long* full,
                                            unsigned long long* empty, const void* bmap, int b0, int b1,
                                            bool share = false, unsigned rank = 0, unsigned it0 = 0) {
#ifdef MOE_WGMMA
    const int t = threadIdx.x - 128 * C::WGS;  // 0..127
    const int r0 = t / 8, c = t % 8;           // the swizzled layout's copy of version 5
    const int dst0 = 128 * r0 + 16 * (c ^ (r0 & 7));
    constexpr int DSTEP = 128 * C::RSTEP;
    const unsigned row_bytes = (unsigned)K * 2u;
    const int nk = (K + C::BK - 1) / C::BK;
    for (int kt = 0; kt < nk; ++kt) {
        const unsigned it = it0 + (unsigned)kt;  // version 10: counted on from the block's earlier items
        const int st = (int)(it % C::STAGES);
        if (it >= C::STAGES) moe_mbar_wait(&empty[st], (it / C::STAGES - 1u) & 1u);
        unsigned char* stage = smem + st * C::STAGE_BYTES;
        if (t == 0) {
            moe_mbar_arrive_expect_tx(&full[st], C::B_BYTES);  // both halves land here either way
            if (C::MC && share) {
#pragma unroll
                for (int j = 0; j < C::HALF_BOXES; ++j)
                    moe_tma_load_2d_multicast(stage + C::A_BYTES + (rank * C::HALF_BOXES + j) * C::BOX_ROWS * 128,
                                              bmap, kt * C::BK, (rank ? b1 : b0) + j * C::BOX_ROWS, &full[st],
                                              (unsigned short)0x3);
            } else {
#pragma unroll
                for (int h = 0; h < 2; ++h)
#pragma unroll
                    for (int j = 0; j < C::HALF_BOXES; ++j)
                        moe_tma_load_2d(stage + C::A_BYTES + (h * C::HALF_BOXES + j) * C::BOX_ROWS * 128, bmap,
                                        kt * C::BK, (h ? b1 : b0) + j * C::BOX_ROWS, &full[st]);
            }
        }
        const int kc = kt * C::BK + 8 * c;
        const bool in_k = kc < K;
        const __nv_bfloat16* a = in_k ? A + kc : A;
        wg_copy_rows(stage + dst0, DSTEP, a, ca, row_bytes, in_k);
        moe_cp_async_mbar_arrive(&full[st]);
    }
    if (!C::PS) moe_cp_async_wait(0);  // nothing of this thread's still landing when it leaves
#endif
}

// Versions 8 to 11: the STAGES "full" barriers (the producer's 128 cp.async arrivals and thread
// 0's, with the bytes) and "empty" barriers (`releases` arrivals: every consumer thread, or in
// version 9 every consumer warp, once or twice), made by thread 0 before any thread goes on.
template <class C>
__device__ __forceinline__ void ws_barriers_init(unsigned long long* full, unsigned long long* empty,
                                                 unsigned releases) {
#ifdef MOE_WGMMA
    if (threadIdx.x == 0) {
        for (int st = 0; st < C::STAGES; ++st) {
            moe_mbar_init(&full[st], 128 + 1);
            moe_mbar_init(&empty[st], releases);
        }
        moe_mbar_init_fence();
    }
    __syncthreads();
#endif
}

// A consumer warpgroup (wg < WGS): wait for slice kt, make the producer's cp.async writes
// visible to wgmma (the proxy fence), multiply, and release slice kt − 1 once its group is done
// (one group stays in flight, as in version 5).
// Version 9: one arrival a warp (lane 0, once the warp's wait is behind all its lanes) on this
// block's `empty` and, when the blocks share B, on the other block's.
template <class C>
__device__ __forceinline__ void ws_consumer(int K, bool live, int wg, unsigned char* smem, unsigned long long* full,
                                            unsigned long long* empty, float (&acc)[C::ACC], bool share = false,
                                            unsigned rank = 0, unsigned it0 = 0) {
#ifdef MOE_WGMMA
    const int nk = (K + C::BK - 1) / C::BK;
    for (int kt = 0; kt < nk; ++kt) {
        const unsigned it = it0 + (unsigned)kt;
        const int st = (int)(it % C::STAGES);
        moe_mbar_wait(&full[st], (it / C::STAGES) & 1u);
        moe_fence_proxy_async();
        if (live) {
            const unsigned char* stage = smem + st * C::STAGE_BYTES;
            const unsigned long long da = moe_wgmma_desc(stage + wg * 64 * C::BK * 2, C::LEAD, C::STRIDE) | C::LAYOUT;
            const unsigned long long db = moe_wgmma_desc(stage + C::A_BYTES, C::LEAD, C::STRIDE) | C::LAYOUT;
            moe_wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < C::BK / 16; ++kk)
                moe_wgmma_bf16<C::BN>(acc, da + C::KSTEP_UNITS * kk, db + C::KSTEP_UNITS * kk);
            moe_wgmma_commit();
            moe_wgmma_wait<1>();
        }
        if (kt > 0) {
            unsigned long long* e = &empty[(it - 1u) % C::STAGES];
            if (C::MC) {
                __syncwarp();
                if ((threadIdx.x & 31) == 0) {
                    moe_mbar_arrive(e);
                    if (share) moe_mbar_arrive_cluster(e, rank ^ 1u);
                }
            } else {
                moe_mbar_arrive(e);
            }
        }
    }
    moe_wgmma_wait<0>();
    // Version 10: the item's last slice released too (its wgmma done), so the producer refills
    // its buffer for the next item while this warpgroup stores.
    if (C::PS) moe_mbar_arrive(&empty[(it0 + (unsigned)nk - 1u) % C::STAGES]);
#endif
}
// ANCHOR_END: ws_mainloop

// Version 9: whether this tile (of expert e, live) and the other tile of its cluster (tile ^ 1)
// belong to the same expert, and so multiply the same weight slice. Both blocks compute the same
// answer; a tile past the layout, or of another expert, shares nothing, and then both blocks run
// as version 8 does.
template <class C>
__device__ __forceinline__ bool wg_cluster_shares(int tile, int e, const int* __restrict__ expert_ids,
                                                  const int* __restrict__ num_post, int block_m) {
    if (!C::MC) return false;
    const int other = tile ^ 1;
    return (long long)other * block_m < (long long)*num_post && expert_ids[other] == e;
}

// The block's product for versions 4 to 9, as fused_tile_product is for the others: zeroes this
// thread's accumulators and runs the main loop on the dynamic shared memory; returns whether the
// thread's warpgroup holds a real pair (when not, its accumulators stay zero and unused).
template <class C>
__device__ __forceinline__ bool wg_tile_product(const __nv_bfloat16* __restrict__ A, const int* s_arow,
                                                const __nv_bfloat16* __restrict__ B, const int* s_brow, int K,
                                                const int* s_live, float (&acc)[C::ACC], const void* bmap, int b0,
                                                int b1, bool share = false) {
#pragma unroll
    for (int i = 0; i < C::ACC; ++i) acc[i] = 0.0f;
    DYNAMIC_SHARED(unsigned char, smem);
    const int wg = threadIdx.x / 128;
    if (C::WS) {
        // Version 8: the barriers, then each warpgroup to its side (the producer, last, returns
        // false: it holds no rows).
#ifdef MOE_WGMMA
        __shared__ __align__(8) unsigned long long s_full[C::STAGES], s_empty[C::STAGES];
        smem = wg_swizzle_aligned(smem);
        // Version 9: a warp's arrival, or two when the cluster's blocks share B (the other
        // block's warps release this block's buffers too).
        ws_barriers_init<C>(s_full, s_empty, C::MC ? 4u * C::WGS * (share ? 2u : 1u) : 128u * C::WGS);
        // Version 9: neither block's copies may reach the other before its barriers exist, and
        // neither block may leave while the other can still arrive on its barriers.
        const bool shared_b = C::MC && share;
        const unsigned rank = C::MC ? moe_cluster_rank() : 0u;
        if (shared_b) moe_cluster_sync();
        if (wg == C::WGS) {
            const WgCopies<C::A_COPIES> ca =
                wg_copies<C::A_COPIES, C::RSTEP>(s_arow, (int)(threadIdx.x - 128 * C::WGS) / 8);
            ws_producer<C>(A, ca, K, smem, s_full, s_empty, bmap, b0, b1, shared_b, rank);
            if (shared_b) moe_cluster_sync();
            return false;
        }
        const bool live = wg_live(s_live, wg);
        ws_consumer<C>(K, live, wg, smem, s_full, s_empty, acc, shared_b, rank);
        if (shared_b) moe_cluster_sync();
        return live;
#else
        __trap();  // versions 8 and 9 exist only on sm_90a
#endif
    }
    const bool live = wg_live(s_live, wg);
    wg_mainloop<C>(A, s_arow, B, s_brow, K, live, smem, acc, bmap, b0, b1);
    return live;
}

// Columns col and col + 1 of `row` (n columns): one aligned store of the pair when `pair` (n even,
// so row + col is 2-element aligned) and both are inside, else each inside one on its own.
__device__ __forceinline__ void wg_store2(__nv_bfloat16* row, int col, int n, bool pair, __nv_bfloat16 v0,
                                          __nv_bfloat16 v1) {
    if (pair && col + 1 < n) {
        __nv_bfloat162 two;
        two.x = v0;
        two.y = v1;
        *reinterpret_cast<__nv_bfloat162*>(row + col) = two;
    } else {
        if (col < n) row[col] = v0;
        if (col + 1 < n) row[col + 1] = v1;
    }
}
__device__ __forceinline__ void wg_store2(float* row, int col, int n, bool pair, float v0, float v1) {
    if (pair && col + 1 < n) {
        *reinterpret_cast<float2*>(row + col) = make_float2(v0, v1);
    } else {
        if (col < n) row[col] = v0;
        if (col + 1 < n) row[col + 1] = v1;
    }
}

// ANCHOR: wg_epilogues
// GEMM 1's epilogue on versions 4 to 11: SwiGLU of this thread's gate and up accumulators into
// act's rows. rows[r]: the pair of the tile's row r (s_pair, or version 10's slice of
// sorted_ids); a row that holds no pair (< 0 or ≥ P) is not stored.
template <class C>
__device__ __forceinline__ void wg_store_swiglu(const float (&acc)[C::ACC], const int* rows, int P,
                                                __nv_bfloat16* __restrict__ act, int n0, int I) {
    const int wg = threadIdx.x / 128;
    // Thread (warp w of its warpgroup, g, q) holds rows 64·wg + 16w + g (+ 8), columns
    // n0 + 8j + 2q (+ 1): the gate in fragment j, the up value in fragment j + BN1 / 8.
    const int lane = threadIdx.x & 31, w4 = (threadIdx.x >> 5) & 3, g = lane >> 2, q = lane & 3;
    const bool even = (I & 1) == 0;  // then two neighbouring columns are one aligned 4-byte store
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int p = rows[64 * wg + 16 * w4 + g + 8 * h];
        if (p < 0 || p >= P) continue;
        __nv_bfloat16* row = act + (size_t)p * I;
#pragma unroll
        for (int j = 0; j < C::BN1 / 8; ++j) {
            const int col = n0 + 8 * j + 2 * q;
            __nv_bfloat16 v[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const float gate = __bfloat162float(__float2bfloat16(acc[4 * j + 2 * h + i]));
                const float up = __bfloat162float(__float2bfloat16(acc[4 * (j + C::BN1 / 8) + 2 * h + i]));
                v[i] = __float2bfloat16((gate * moe_sigmoidf(gate)) * up);
            }
            wg_store2(row, col, I, even, v[0], v[1]);
        }
    }
}

// The plain GEMM's epilogue on versions 4 to 11: this thread's accumulators into out's rows (bf16,
// or fp32 times the pair's weight), rows[] as wg_store_swiglu's.
template <class C, bool BF16_OUT>
__device__ __forceinline__ void wg_store_rows(const float (&acc)[C::ACC], const int* rows, int P,
                                              const float* __restrict__ weight, void* __restrict__ out, int n0,
                                              int N) {
    const int wg = threadIdx.x / 128;
    const int lane = threadIdx.x & 31, w4 = (threadIdx.x >> 5) & 3, g = lane >> 2, q = lane & 3;
    const bool even = (N & 1) == 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int p = rows[64 * wg + 16 * w4 + g + 8 * h];
        if (p < 0 || p >= P) continue;
        const float wp = (!BF16_OUT && weight) ? weight[p] : 1.0f;
#pragma unroll
        for (int j = 0; j < C::BN / 8; ++j) {
            const int col = n0 + 8 * j + 2 * q;
            const float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
            if (BF16_OUT) {
                wg_store2(static_cast<__nv_bfloat16*>(out) + (size_t)p * N, col, N, even, __float2bfloat16(v0),
                          __float2bfloat16(v1));
            } else {
                // weight · v rounded as fused_gemm_impl rounds it (no weight: v itself).
                wg_store2(static_cast<float*>(out) + (size_t)p * N, col, N, even, weight ? wp * v0 : v0,
                          weight ? wp * v1 : v1);
            }
        }
    }
}
// ANCHOR_END: wg_epilogues

// ANCHOR: wg_gemm1
// GEMM 1 + SwiGLU on versions 4 to 9: fused_gemm1_swiglu_impl's contract, BLOCK_M = C::BM.
template <class C>
__device__ __forceinline__ void wg_gemm1_swiglu_impl(const __nv_bfloat16* __restrict__ x,
                                                     const __nv_bfloat16* __restrict__ w13,
                                                     const int* __restrict__ sorted_ids,
                                                     const int* __restrict__ expert_ids,
                                                     const int* __restrict__ num_post, __nv_bfloat16* __restrict__ act,
                                                     int P, int k, int H, int I, int E, int block_m,
                                                     const void* w13_map = nullptr) {
    __shared__ int s_pair[FUSED_MAX_BLOCK_M], s_arow[FUSED_MAX_BLOCK_M], s_brow[C::BROWS];
    __shared__ int s_live[FUSED_MAX_SUBTILES];
    if (block_m != C::BM) __trap();  // the host pads to C::BM; anything else is a launch bug
    const int tile = blockIdx.x, n0 = blockIdx.y * C::BN1;
    if ((long long)tile * block_m >= (long long)*num_post) return;
    const int e = expert_ids[tile];
    if (e < 0 || e >= E) return;
    fused_tile_rows(sorted_ids, tile, block_m, P, k, s_pair, s_arow, s_live);
    for (int r = threadIdx.x; r < C::BROWS; r += C::THREADS) {
        const int n = n0 + (r % C::BN1);
        s_brow[r] = n < I ? (r < C::BN1 ? n : I + n) : -1;
    }
    __syncthreads();
    const __nv_bfloat16* w = w13 + (size_t)e * 2 * (size_t)I * (size_t)H;
    float acc[C::ACC];
    // Version 7's boxes: gate rows e·2I + n0.., up rows e·2I + I + n0.. of w13 viewed as [E·2I, H].
    const int g0 = e * 2 * I + n0;
    if (!wg_tile_product<C>(x, s_arow, w, s_brow, H, s_live, acc, w13_map, g0, g0 + I,
                            wg_cluster_shares<C>(tile, e, expert_ids, num_post, block_m)))
        return;
    wg_store_swiglu<C>(acc, s_pair, P, act, n0, I);
}
// ANCHOR_END: wg_gemm1

// The plain GEMM on versions 4 to 9: fused_gemm_impl's contract, BLOCK_M = C::BM.
template <class C, bool BF16_OUT>
__device__ __forceinline__ void wg_gemm_impl(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ W,
                                             const int* __restrict__ sorted_ids, const int* __restrict__ expert_ids,
                                             const int* __restrict__ num_post, const float* __restrict__ weight,
                                             void* __restrict__ out, int P, int k, int N, int K, int E, int block_m,
                                             const void* w_map = nullptr) {
    __shared__ int s_pair[FUSED_MAX_BLOCK_M], s_arow[FUSED_MAX_BLOCK_M], s_brow[C::BROWS];
    __shared__ int s_live[FUSED_MAX_SUBTILES];
    if (block_m != C::BM) __trap();
    const int tile = blockIdx.x, n0 = blockIdx.y * C::BN;
    if ((long long)tile * block_m >= (long long)*num_post) return;
    const int e = expert_ids[tile];
    if (e < 0 || e >= E) return;
    fused_tile_rows(sorted_ids, tile, block_m, P, k, s_pair, s_arow, s_live);
    for (int r = threadIdx.x; r < C::BROWS; r += C::THREADS) s_brow[r] = n0 + r < N ? n0 + r : -1;
    __syncthreads();
    const __nv_bfloat16* w = W + (size_t)e * (size_t)N * (size_t)K;
    float acc[C::ACC];
    // Version 7's boxes: rows e·N + n0.. of W viewed as [E·N, K], in two halves of BN / 2.
    const int r0 = e * N + n0;
    if (!wg_tile_product<C>(A, s_arow, w, s_brow, K, s_live, acc, w_map, r0, r0 + C::BN / 2,
                            wg_cluster_shares<C>(tile, e, expert_ids, num_post, block_m)))
        return;
    wg_store_rows<C, BF16_OUT>(acc, s_pair, P, weight, out, n0, N);
}

// ANCHOR: ps_loop
// VERSION 10 (sm_90a, _ps): version 8's producer and consumers, persistent (WgCfg's PS). The
// block's items are the blocks of version 8's grid, tile × column block, but in the other order:
// a tile's column blocks one after another (item w: tile w / col_blocks, column block
// w % col_blocks), so the blocks at work at any moment share a few tiles' rows of A and a few
// experts' weights, which stay in L2 between them; block b takes items b, b + gridDim.x, ... The
// barriers are set up once; `it` counts the block's slices over all its items, so each side
// names the right buffer and parity however far the other is behind, and the producer runs
// STAGES − 1 slices into the next item while the consumers finish and store this one. Neither
// side can use the other's shared rows (the producer is an item ahead), so each reads the tile's
// pairs from sorted_ids itself: the producer its copies' rows, the consumers whether their 64
// rows hold a pair and, in the epilogue, which pair each row is.

// The producer thread's copies of one tile (wg_copies' rows, read from sorted_ids: the A row of
// pair p is p / k, a row past the pairs a zero row).
template <class C>
__device__ __forceinline__ WgCopies<C::A_COPIES> ps_copies(const int* __restrict__ rows, int r0, int P, int k) {
    WgCopies<C::A_COPIES> cp;
    cp.full = 0;
#pragma unroll
    for (int j = 0; j < C::A_COPIES; ++j) {
        const int s = rows[r0 + j * C::RSTEP];
        const bool real = s >= 0 && s < P;
        cp.row[j] = real ? (unsigned)(s / k) : 0u;
        cp.full |= (real ? 1u : 0u) << j;
    }
    return cp;
}

// Whether warpgroup wg's 64 rows of the tile hold a pair: two rows a lane, OR-ed over the warp
// into a value ptxas knows is the warp's (as wg_live).
__device__ __forceinline__ bool ps_live(const int* __restrict__ rows, int wg, int P) {
    const int lane = threadIdx.x & 31;
    const int a = rows[64 * wg + lane], b = rows[64 * wg + 32 + lane];
    return fused_warp_or((a >= 0 && a < P) || (b >= 0 && b < P) ? 1u : 0u) != 0;
}

// Version 11's item counters, one pair per entry point (DY_COUNTERS of them): [0] the next item
// to hand out, [1] the blocks that found none left. Zero when the module loads, and zero again
// when each launch ends: the block that finds none left last puts both back. The layer's kernels
// run one after another on the process's one stream (the tiled GEMMs are plain launches, never
// dependent ones), so no two launches of an entry point count at once.
#define DY_COUNTERS 6
#define DY_SLOTS 4  // items a block's producer may have drawn that its consumers have not read
__device__ unsigned int dy_counters[DY_COUNTERS][2];

// ANCHOR: dy_next
// Version 11: the block's next item, for the calling thread's side; the n-th call of each side
// (n counted by each). The producer's thread 0 waits until the consumers have read the item
// DY_SLOTS before, takes the next one from the counter, writes it into the ring and arrives on
// its slot's `ifull`; its warpgroup meets at a named barrier (1: __syncthreads is barrier 0)
// and reads it. Each consumer thread waits on `ifull`, reads the item, and one lane a warp
// (once every lane has read it) arrives on the slot's `iempty`. A value of `items` or more
// (past the last item) means none left; the thread 0 that takes one past the end last (the grid's last to finish
// taking) puts the counters back to zero for the next launch.
template <class C>
__device__ __forceinline__ int dy_next(unsigned* counter, int items, volatile int* ring, unsigned long long* ifull,
                                       unsigned long long* iempty, bool producer, unsigned n) {
#ifdef MOE_WGMMA
    const unsigned slot = n % DY_SLOTS, use = n / DY_SLOTS;
    if (producer) {
        if (threadIdx.x == 128 * C::WGS) {
            if (use > 0) moe_mbar_wait(&iempty[slot], (use - 1u) & 1u);
            const int w = (int)atomicAdd(&counter[0], 1u);
            ring[slot] = w;
            moe_mbar_arrive(&ifull[slot]);
            if (w >= items) {
                // This block's last add to counter[0] before its add to counter[1], and every
                // block's before the reset: the atomics alone are relaxed, unordered between
                // two addresses (a fence each way, once per block and launch).
                __threadfence();
                if (atomicAdd(&counter[1], 1u) == gridDim.x - 1u) {
                    __threadfence();
                    atomicExch(&counter[1], 0u);
                    atomicExch(&counter[0], 0u);
                }
            }
        }
        __syncwarp();
        asm volatile("bar.sync 1, 128;\n" ::: "memory");
        return ring[slot];
    }
    moe_mbar_wait(&ifull[slot], use & 1u);
    const int w = ring[slot];
    __syncwarp();
    if ((threadIdx.x & 31) == 0) moe_mbar_arrive(&iempty[slot]);
    return w;
#else
    return items;
#endif
}
// ANCHOR_END: dy_next

// The persistent block. A [*, K] is gathered by rows (pair / k); B's slices come through `bmap`,
// item (tile of expert e, column block cb) reading rows b0 = e·b_expert + cb·b_cols and
// b0 + b_half on of the map's view; store(acc, rows, cb) is the epilogue of one item.
template <class C, class Store>
__device__ __forceinline__ void ps_run(const __nv_bfloat16* __restrict__ A, const int* __restrict__ sorted_ids,
                                       const int* __restrict__ expert_ids, const int* __restrict__ num_post, int P,
                                       int k, int K, int E, int col_blocks, const void* bmap, int b_expert,
                                       int b_cols, int b_half, Store store, unsigned* counter = nullptr) {
#ifdef MOE_WGMMA
    __shared__ __align__(8) unsigned long long s_full[C::STAGES], s_empty[C::STAGES];
    // Version 11: the ring of items handed out and its barriers (dy_next).
    __shared__ __align__(8) unsigned long long s_ifull[DY_SLOTS], s_iempty[DY_SLOTS];
    __shared__ int s_ring[DY_SLOTS];
    DYNAMIC_SHARED(unsigned char, smem);
    smem = wg_swizzle_aligned(smem);
    const int tiles = (*num_post + C::BM - 1) / C::BM;
    const int items = tiles * col_blocks;
    const int nk = (K + C::BK - 1) / C::BK;
    if (C::DY && threadIdx.x == 0) {
        for (int s = 0; s < DY_SLOTS; ++s) {
            moe_mbar_init(&s_ifull[s], 1);
            moe_mbar_init(&s_iempty[s], 4u * C::WGS);
        }
    }
    ws_barriers_init<C>(s_full, s_empty, 128u * C::WGS);  // its fence and barrier cover the ring's
    const int wg = threadIdx.x / 128;
    unsigned it = 0;      // slices of the block's items before this one
    unsigned drawn = 0;   // version 11: items this thread's side has taken
    // Version 10: items b, b + gridDim.x, ...; version 11: as dy_next hands them out.
    auto take = [&] { return dy_next<C>(counter, items, s_ring, s_ifull, s_iempty, wg == C::WGS, drawn++); };
    for (int w = C::DY ? take() : (int)blockIdx.x; w < items; w = C::DY ? take() : w + (int)gridDim.x) {
        const int tile = w / col_blocks, cb = w % col_blocks;
        const int e = expert_ids[tile];
        if (e < 0 || e >= E) continue;  // both sides skip it: neither counts its slices
        const int* rows = sorted_ids + (size_t)tile * C::BM;
        const int b0 = e * b_expert + cb * b_cols;
        if (wg == C::WGS) {
            const WgCopies<C::A_COPIES> ca = ps_copies<C>(rows, (int)(threadIdx.x - 128 * C::WGS) / 8, P, k);
            ws_producer<C>(A, ca, K, smem, s_full, s_empty, bmap, b0, b0 + b_half, false, 0u, it);
        } else {
            const bool live = ps_live(rows, wg, P);
            float acc[C::ACC];
#pragma unroll
            for (int i = 0; i < C::ACC; ++i) acc[i] = 0.0f;
            ws_consumer<C>(K, live, wg, smem, s_full, s_empty, acc, false, 0u, it);
            if (live) store(acc, rows, cb);
        }
        it += (unsigned)nk;
    }
    if (wg == C::WGS) moe_cp_async_wait(0);  // nothing of the producer's still landing when it leaves
#else
    __trap();  // versions 10 and 11 exist only on sm_90a
#endif
}

// GEMM 1 + SwiGLU on versions 10 and 11: wg_gemm1_swiglu_impl's contract, any grid of one dimension.
template <class C>
__device__ __forceinline__ void ps_gemm1_swiglu_impl(const __nv_bfloat16* __restrict__ x,
                                                     const int* __restrict__ sorted_ids,
                                                     const int* __restrict__ expert_ids,
                                                     const int* __restrict__ num_post, __nv_bfloat16* __restrict__ act,
                                                     int P, int k, int H, int I, int E, int block_m,
                                                     const void* w13_map, unsigned* counter = nullptr) {
    if (block_m != C::BM) __trap();
    // Version 7's boxes: gate rows e·2I + n0.., up rows e·2I + I + n0.. of w13 viewed as [E·2I, H].
    ps_run<C>(x, sorted_ids, expert_ids, num_post, P, k, H, E, (I + C::BN1 - 1) / C::BN1, w13_map, 2 * I, C::BN1,
              I, [&](const float(&acc)[C::ACC], const int* rows, int cb) {
                  wg_store_swiglu<C>(acc, rows, P, act, cb * C::BN1, I);
              }, counter);
}

// The plain GEMM on versions 10 and 11: wg_gemm_impl's contract, any grid of one dimension.
template <class C, bool BF16_OUT>
__device__ __forceinline__ void ps_gemm_impl(const __nv_bfloat16* __restrict__ A, const int* __restrict__ sorted_ids,
                                             const int* __restrict__ expert_ids, const int* __restrict__ num_post,
                                             const float* __restrict__ weight, void* __restrict__ out, int P, int k,
                                             int N, int K, int E, int block_m, const void* w_map,
                                             unsigned* counter = nullptr) {
    if (block_m != C::BM) __trap();
    // Version 7's boxes: rows e·N + n0.. of W viewed as [E·N, K], in two halves of BN / 2.
    ps_run<C>(A, sorted_ids, expert_ids, num_post, P, k, K, E, (N + C::BN - 1) / C::BN, w_map, N, C::BN, C::BN / 2,
              [&](const float(&acc)[C::ACC], const int* rows, int cb) {
                  wg_store_rows<C, BF16_OUT>(acc, rows, P, weight, out, cb * C::BN, N);
              }, counter);
}
// ANCHOR_END: ps_loop

// ANCHOR: wg_entries
// The configurations of versions 4 to 11, g{WGS}_k{BK}_n{NF}_s{STAGES} (BLOCK_M 64·WGS, BN 16·NF), then _x
// for the 128-byte swizzled layout (and _w0 for version 6's main loop), each with the three entry
// points of the other versions. Launched only on sm_90a GPUs. Written out rather than generated
// by a macro, as every entry point of the book: the build finds a family's kernels by their
// `extern "C" __global__ void NAME(` text (kernels/build-support), and a reader by grep.
typedef WgCfg<1, 64, 8, 4> WgG1K64N8S4;
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm1_swiglu_g1_k64_n8_s4(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H, int I,
                      int E, int block_m) {
    wg_gemm1_swiglu_impl<WgG1K64N8S4>(x, w13, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m);
}
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm1_gateup_g1_k64_n8_s4(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k, int H,
                      int I, int E, int block_m) {
    wg_gemm_impl<WgG1K64N8S4, true>(x, w13, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H, E, block_m);
}
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm2_g1_k64_n8_s4(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, const float* weight, float* y, int P, int H,
                      int I, int E, int block_m) {
    wg_gemm_impl<WgG1K64N8S4, false>(act, w2, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m);
}
typedef WgCfg<2, 64, 8, 4> WgG2K64N8S4;
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm1_swiglu_g2_k64_n8_s4(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H, int I,
                      int E, int block_m) {
    wg_gemm1_swiglu_impl<WgG2K64N8S4>(x, w13, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m);
}
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm1_gateup_g2_k64_n8_s4(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k, int H,
                      int I, int E, int block_m) {
    wg_gemm_impl<WgG2K64N8S4, true>(x, w13, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H, E, block_m);
}
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm2_g2_k64_n8_s4(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, const float* weight, float* y, int P, int H,
                      int I, int E, int block_m) {
    wg_gemm_impl<WgG2K64N8S4, false>(act, w2, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m);
}
typedef WgCfg<2, 64, 16, 4> WgG2K64N16S4;
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm1_swiglu_g2_k64_n16_s4(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H, int I,
                      int E, int block_m) {
    wg_gemm1_swiglu_impl<WgG2K64N16S4>(x, w13, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m);
}
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm1_gateup_g2_k64_n16_s4(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k, int H,
                      int I, int E, int block_m) {
    wg_gemm_impl<WgG2K64N16S4, true>(x, w13, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H, E, block_m);
}
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm2_g2_k64_n16_s4(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, const float* weight, float* y, int P, int H,
                      int I, int E, int block_m) {
    wg_gemm_impl<WgG2K64N16S4, false>(act, w2, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m);
}
typedef WgCfg<1, 64, 8, 4, true> WgG1K64N8S4X;
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm1_swiglu_g1_k64_n8_s4_x(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H, int I,
                      int E, int block_m) {
    wg_gemm1_swiglu_impl<WgG1K64N8S4X>(x, w13, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m);
}
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm1_gateup_g1_k64_n8_s4_x(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k, int H,
                      int I, int E, int block_m) {
    wg_gemm_impl<WgG1K64N8S4X, true>(x, w13, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H, E, block_m);
}
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm2_g1_k64_n8_s4_x(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, const float* weight, float* y, int P, int H,
                      int I, int E, int block_m) {
    wg_gemm_impl<WgG1K64N8S4X, false>(act, w2, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m);
}
typedef WgCfg<2, 64, 8, 4, true> WgG2K64N8S4X;
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm1_swiglu_g2_k64_n8_s4_x(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H, int I,
                      int E, int block_m) {
    wg_gemm1_swiglu_impl<WgG2K64N8S4X>(x, w13, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m);
}
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm1_gateup_g2_k64_n8_s4_x(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k, int H,
                      int I, int E, int block_m) {
    wg_gemm_impl<WgG2K64N8S4X, true>(x, w13, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H, E, block_m);
}
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm2_g2_k64_n8_s4_x(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, const float* weight, float* y, int P, int H,
                      int I, int E, int block_m) {
    wg_gemm_impl<WgG2K64N8S4X, false>(act, w2, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m);
}
typedef WgCfg<2, 64, 16, 4, true> WgG2K64N16S4X;
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm1_swiglu_g2_k64_n16_s4_x(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H, int I,
                      int E, int block_m) {
    wg_gemm1_swiglu_impl<WgG2K64N16S4X>(x, w13, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m);
}
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm1_gateup_g2_k64_n16_s4_x(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k, int H,
                      int I, int E, int block_m) {
    wg_gemm_impl<WgG2K64N16S4X, true>(x, w13, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H, E, block_m);
}
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm2_g2_k64_n16_s4_x(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, const float* weight, float* y, int P, int H,
                      int I, int E, int block_m) {
    wg_gemm_impl<WgG2K64N16S4X, false>(act, w2, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m);
}
// _w0: the smallest swizzled tile with its main loop waiting for each slice's wgmma (WgCfg's W0):
// three slices in flight through 4 buffers, or two through 3 (three blocks to an SM).
typedef WgCfg<1, 64, 8, 4, true, true> WgG1K64N8S4XW0;
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm1_swiglu_g1_k64_n8_s4_x_w0(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H, int I,
                      int E, int block_m) {
    wg_gemm1_swiglu_impl<WgG1K64N8S4XW0>(x, w13, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m);
}
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm1_gateup_g1_k64_n8_s4_x_w0(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k, int H,
                      int I, int E, int block_m) {
    wg_gemm_impl<WgG1K64N8S4XW0, true>(x, w13, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H, E, block_m);
}
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm2_g1_k64_n8_s4_x_w0(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, const float* weight, float* y, int P, int H,
                      int I, int E, int block_m) {
    wg_gemm_impl<WgG1K64N8S4XW0, false>(act, w2, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m);
}
typedef WgCfg<1, 64, 8, 3, true, true> WgG1K64N8S3XW0;
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm1_swiglu_g1_k64_n8_s3_x_w0(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H, int I,
                      int E, int block_m) {
    wg_gemm1_swiglu_impl<WgG1K64N8S3XW0>(x, w13, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m);
}
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm1_gateup_g1_k64_n8_s3_x_w0(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k, int H,
                      int I, int E, int block_m) {
    wg_gemm_impl<WgG1K64N8S3XW0, true>(x, w13, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H, E, block_m);
}
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm2_g1_k64_n8_s3_x_w0(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, const float* weight, float* y, int P, int H,
                      int I, int E, int block_m) {
    wg_gemm_impl<WgG1K64N8S3XW0, false>(act, w2, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m);
}
// _tma (version 7): the weight slices through the tensor memory accelerator (WgCfg's TMA), for
// the configurations the tuning run picks among versions 5 and 6; each entry point takes one more
// parameter, the device address of its weight tensor's map (kernels/tma.cuh), which the host
// encodes once per tensor.
typedef WgCfg<1, 64, 8, 3, true, true, true> WgG1K64N8S3XW0T;
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm1_swiglu_g1_k64_n8_s3_x_w0_tma(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H, int I,
                      int E, int block_m, const void* w13_map) {
    wg_gemm1_swiglu_impl<WgG1K64N8S3XW0T>(x, w13, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m, w13_map);
}
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm1_gateup_g1_k64_n8_s3_x_w0_tma(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k, int H,
                      int I, int E, int block_m, const void* w13_map) {
    wg_gemm_impl<WgG1K64N8S3XW0T, true>(x, w13, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H, E, block_m, w13_map);
}
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm2_g1_k64_n8_s3_x_w0_tma(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, const float* weight, float* y, int P, int H,
                      int I, int E, int block_m, const void* w2_map) {
    wg_gemm_impl<WgG1K64N8S3XW0T, false>(act, w2, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m, w2_map);
}
typedef WgCfg<1, 64, 8, 4, true, true, true> WgG1K64N8S4XW0T;
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm1_swiglu_g1_k64_n8_s4_x_w0_tma(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H, int I,
                      int E, int block_m, const void* w13_map) {
    wg_gemm1_swiglu_impl<WgG1K64N8S4XW0T>(x, w13, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m, w13_map);
}
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm1_gateup_g1_k64_n8_s4_x_w0_tma(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k, int H,
                      int I, int E, int block_m, const void* w13_map) {
    wg_gemm_impl<WgG1K64N8S4XW0T, true>(x, w13, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H, E, block_m, w13_map);
}
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm2_g1_k64_n8_s4_x_w0_tma(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, const float* weight, float* y, int P, int H,
                      int I, int E, int block_m, const void* w2_map) {
    wg_gemm_impl<WgG1K64N8S4XW0T, false>(act, w2, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m, w2_map);
}
typedef WgCfg<2, 64, 8, 4, true, false, true> WgG2K64N8S4XT;
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm1_swiglu_g2_k64_n8_s4_x_tma(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H, int I,
                      int E, int block_m, const void* w13_map) {
    wg_gemm1_swiglu_impl<WgG2K64N8S4XT>(x, w13, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m, w13_map);
}
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm1_gateup_g2_k64_n8_s4_x_tma(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k, int H,
                      int I, int E, int block_m, const void* w13_map) {
    wg_gemm_impl<WgG2K64N8S4XT, true>(x, w13, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H, E, block_m, w13_map);
}
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm2_g2_k64_n8_s4_x_tma(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, const float* weight, float* y, int P, int H,
                      int I, int E, int block_m, const void* w2_map) {
    wg_gemm_impl<WgG2K64N8S4XT, false>(act, w2, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m, w2_map);
}
typedef WgCfg<2, 64, 16, 4, true, false, true> WgG2K64N16S4XT;
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm1_swiglu_g2_k64_n16_s4_x_tma(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H, int I,
                      int E, int block_m, const void* w13_map) {
    wg_gemm1_swiglu_impl<WgG2K64N16S4XT>(x, w13, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m, w13_map);
}
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm1_gateup_g2_k64_n16_s4_x_tma(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k, int H,
                      int I, int E, int block_m, const void* w13_map) {
    wg_gemm_impl<WgG2K64N16S4XT, true>(x, w13, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H, E, block_m, w13_map);
}
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm2_g2_k64_n16_s4_x_tma(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, const float* weight, float* y, int P, int H,
                      int I, int E, int block_m, const void* w2_map) {
    wg_gemm_impl<WgG2K64N16S4XT, false>(act, w2, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m, w2_map);
}
// _ws (version 8): warp-specialized (WgCfg's WS), one producer warpgroup more than version 7's
// consumers; the same parameters as version 7's entry points.
typedef WgCfg<1, 64, 8, 4, true, false, true, true> WgG1K64N8S4XTW;
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm1_swiglu_g1_k64_n8_s4_x_tma_ws(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H, int I,
                      int E, int block_m, const void* w13_map) {
    wg_gemm1_swiglu_impl<WgG1K64N8S4XTW>(x, w13, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m, w13_map);
}
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm1_gateup_g1_k64_n8_s4_x_tma_ws(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k, int H,
                      int I, int E, int block_m, const void* w13_map) {
    wg_gemm_impl<WgG1K64N8S4XTW, true>(x, w13, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H, E, block_m, w13_map);
}
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm2_g1_k64_n8_s4_x_tma_ws(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, const float* weight, float* y, int P, int H,
                      int I, int E, int block_m, const void* w2_map) {
    wg_gemm_impl<WgG1K64N8S4XTW, false>(act, w2, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m, w2_map);
}
typedef WgCfg<1, 64, 8, 3, true, false, true, true> WgG1K64N8S3XTW;
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm1_swiglu_g1_k64_n8_s3_x_tma_ws(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H, int I,
                      int E, int block_m, const void* w13_map) {
    wg_gemm1_swiglu_impl<WgG1K64N8S3XTW>(x, w13, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m, w13_map);
}
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm1_gateup_g1_k64_n8_s3_x_tma_ws(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k, int H,
                      int I, int E, int block_m, const void* w13_map) {
    wg_gemm_impl<WgG1K64N8S3XTW, true>(x, w13, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H, E, block_m, w13_map);
}
extern "C" __global__ void __launch_bounds__(256)
    fused_gemm2_g1_k64_n8_s3_x_tma_ws(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, const float* weight, float* y, int P, int H,
                      int I, int E, int block_m, const void* w2_map) {
    wg_gemm_impl<WgG1K64N8S3XTW, false>(act, w2, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m, w2_map);
}
typedef WgCfg<2, 64, 8, 6, true, false, true, true> WgG2K64N8S6XTW;
extern "C" __global__ void __launch_bounds__(384)
    fused_gemm1_swiglu_g2_k64_n8_s6_x_tma_ws(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H, int I,
                      int E, int block_m, const void* w13_map) {
    wg_gemm1_swiglu_impl<WgG2K64N8S6XTW>(x, w13, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m, w13_map);
}
extern "C" __global__ void __launch_bounds__(384)
    fused_gemm1_gateup_g2_k64_n8_s6_x_tma_ws(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k, int H,
                      int I, int E, int block_m, const void* w13_map) {
    wg_gemm_impl<WgG2K64N8S6XTW, true>(x, w13, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H, E, block_m, w13_map);
}
extern "C" __global__ void __launch_bounds__(384)
    fused_gemm2_g2_k64_n8_s6_x_tma_ws(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, const float* weight, float* y, int P, int H,
                      int I, int E, int block_m, const void* w2_map) {
    wg_gemm_impl<WgG2K64N8S6XTW, false>(act, w2, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m, w2_map);
}
typedef WgCfg<2, 64, 16, 4, true, false, true, true> WgG2K64N16S4XTW;
extern "C" __global__ void __launch_bounds__(384)
    fused_gemm1_swiglu_g2_k64_n16_s4_x_tma_ws(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H, int I,
                      int E, int block_m, const void* w13_map) {
    wg_gemm1_swiglu_impl<WgG2K64N16S4XTW>(x, w13, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m, w13_map);
}
extern "C" __global__ void __launch_bounds__(384)
    fused_gemm1_gateup_g2_k64_n16_s4_x_tma_ws(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k, int H,
                      int I, int E, int block_m, const void* w13_map) {
    wg_gemm_impl<WgG2K64N16S4XTW, true>(x, w13, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H, E, block_m, w13_map);
}
extern "C" __global__ void __launch_bounds__(384)
    fused_gemm2_g2_k64_n16_s4_x_tma_ws(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, const float* weight, float* y, int P, int H,
                      int I, int E, int block_m, const void* w2_map) {
    wg_gemm_impl<WgG2K64N16S4XTW, false>(act, w2, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m, w2_map);
}
// _mc (version 9): version 8 in clusters of two blocks (__cluster_dims__: the grid's x is even,
// blocks 2j and 2j + 1 one cluster) that multicast the weight slice when their tiles are of one
// expert (wg_cluster_shares); the same parameters as version 8's entry points.
typedef WgCfg<1, 64, 8, 4, true, false, true, true, true> WgG1K64N8S4XTWM;
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(256)
    fused_gemm1_swiglu_g1_k64_n8_s4_x_tma_ws_mc(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H, int I,
                      int E, int block_m, const void* w13_map) {
    wg_gemm1_swiglu_impl<WgG1K64N8S4XTWM>(x, w13, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m, w13_map);
}
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(256)
    fused_gemm1_gateup_g1_k64_n8_s4_x_tma_ws_mc(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k, int H,
                      int I, int E, int block_m, const void* w13_map) {
    wg_gemm_impl<WgG1K64N8S4XTWM, true>(x, w13, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H, E, block_m, w13_map);
}
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(256)
    fused_gemm2_g1_k64_n8_s4_x_tma_ws_mc(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, const float* weight, float* y, int P, int H,
                      int I, int E, int block_m, const void* w2_map) {
    wg_gemm_impl<WgG1K64N8S4XTWM, false>(act, w2, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m, w2_map);
}
typedef WgCfg<2, 64, 16, 4, true, false, true, true, true> WgG2K64N16S4XTWM;
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384)
    fused_gemm1_swiglu_g2_k64_n16_s4_x_tma_ws_mc(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H, int I,
                      int E, int block_m, const void* w13_map) {
    wg_gemm1_swiglu_impl<WgG2K64N16S4XTWM>(x, w13, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m, w13_map);
}
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384)
    fused_gemm1_gateup_g2_k64_n16_s4_x_tma_ws_mc(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k, int H,
                      int I, int E, int block_m, const void* w13_map) {
    wg_gemm_impl<WgG2K64N16S4XTWM, true>(x, w13, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H, E, block_m, w13_map);
}
extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384)
    fused_gemm2_g2_k64_n16_s4_x_tma_ws_mc(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, const float* weight, float* y, int P, int H,
                      int I, int E, int block_m, const void* w2_map) {
    wg_gemm_impl<WgG2K64N16S4XTWM, false>(act, w2, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m, w2_map);
}
// _ps (version 10): version 8, persistent: as many blocks as the SMs hold at once (the host's
// grid, one dimension), each working through the tiles × column blocks of version 8's grid; the same
// parameters as version 8's entry points (the weight pointers unused: every slice of B comes
// through the tensor map).
typedef WgCfg<1, 64, 8, 4, true, false, true, true, false, true> WgG1K64N8S4XTWP;
extern "C" __global__ void __launch_bounds__(256, 1)
    fused_gemm1_swiglu_g1_k64_n8_s4_x_tma_ws_ps(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H, int I,
                      int E, int block_m, const void* w13_map) {
    ps_gemm1_swiglu_impl<WgG1K64N8S4XTWP>(x, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m, w13_map);
}
extern "C" __global__ void __launch_bounds__(256, 1)
    fused_gemm1_gateup_g1_k64_n8_s4_x_tma_ws_ps(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k, int H,
                      int I, int E, int block_m, const void* w13_map) {
    ps_gemm_impl<WgG1K64N8S4XTWP, true>(x, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H, E, block_m, w13_map);
}
extern "C" __global__ void __launch_bounds__(256, 1)
    fused_gemm2_g1_k64_n8_s4_x_tma_ws_ps(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, const float* weight, float* y, int P, int H,
                      int I, int E, int block_m, const void* w2_map) {
    ps_gemm_impl<WgG1K64N8S4XTWP, false>(act, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m, w2_map);
}
typedef WgCfg<2, 64, 16, 4, true, false, true, true, false, true> WgG2K64N16S4XTWP;
extern "C" __global__ void __launch_bounds__(384, 1)
    fused_gemm1_swiglu_g2_k64_n16_s4_x_tma_ws_ps(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H, int I,
                      int E, int block_m, const void* w13_map) {
    ps_gemm1_swiglu_impl<WgG2K64N16S4XTWP>(x, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m, w13_map);
}
extern "C" __global__ void __launch_bounds__(384, 1)
    fused_gemm1_gateup_g2_k64_n16_s4_x_tma_ws_ps(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k, int H,
                      int I, int E, int block_m, const void* w13_map) {
    ps_gemm_impl<WgG2K64N16S4XTWP, true>(x, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H, E, block_m, w13_map);
}
extern "C" __global__ void __launch_bounds__(384, 1)
    fused_gemm2_g2_k64_n16_s4_x_tma_ws_ps(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, const float* weight, float* y, int P, int H,
                      int I, int E, int block_m, const void* w2_map) {
    ps_gemm_impl<WgG2K64N16S4XTWP, false>(act, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m, w2_map);
}
// _dy (version 11): version 10 with its items handed out as the blocks free up, each entry point
// counting on its own pair of dy_counters; the same parameters as version 10's.
typedef WgCfg<1, 64, 8, 4, true, false, true, true, false, true, true> WgG1K64N8S4XTWPD;
extern "C" __global__ void __launch_bounds__(256, 1)
    fused_gemm1_swiglu_g1_k64_n8_s4_x_tma_ws_ps_dy(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H, int I,
                      int E, int block_m, const void* w13_map) {
    ps_gemm1_swiglu_impl<WgG1K64N8S4XTWPD>(x, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m, w13_map,
                                           dy_counters[0]);
}
extern "C" __global__ void __launch_bounds__(256, 1)
    fused_gemm1_gateup_g1_k64_n8_s4_x_tma_ws_ps_dy(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k, int H,
                      int I, int E, int block_m, const void* w13_map) {
    ps_gemm_impl<WgG1K64N8S4XTWPD, true>(x, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H, E, block_m,
                                         w13_map, dy_counters[1]);
}
extern "C" __global__ void __launch_bounds__(256, 1)
    fused_gemm2_g1_k64_n8_s4_x_tma_ws_ps_dy(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, const float* weight, float* y, int P, int H,
                      int I, int E, int block_m, const void* w2_map) {
    ps_gemm_impl<WgG1K64N8S4XTWPD, false>(act, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m, w2_map,
                                          dy_counters[2]);
}
typedef WgCfg<2, 64, 16, 4, true, false, true, true, false, true, true> WgG2K64N16S4XTWPD;
extern "C" __global__ void __launch_bounds__(384, 1)
    fused_gemm1_swiglu_g2_k64_n16_s4_x_tma_ws_ps_dy(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, int H, int I,
                      int E, int block_m, const void* w13_map) {
    ps_gemm1_swiglu_impl<WgG2K64N16S4XTWPD>(x, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m, w13_map,
                                            dy_counters[3]);
}
extern "C" __global__ void __launch_bounds__(384, 1)
    fused_gemm1_gateup_g2_k64_n16_s4_x_tma_ws_ps_dy(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P, int k, int H,
                      int I, int E, int block_m, const void* w13_map) {
    ps_gemm_impl<WgG2K64N16S4XTWPD, true>(x, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H, E, block_m,
                                          w13_map, dy_counters[4]);
}
extern "C" __global__ void __launch_bounds__(384, 1)
    fused_gemm2_g2_k64_n16_s4_x_tma_ws_ps_dy(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,
                      const int* expert_ids, const int* num_post, const float* weight, float* y, int P, int H,
                      int I, int E, int block_m, const void* w2_map) {
    ps_gemm_impl<WgG2K64N16S4XTWPD, false>(act, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m, w2_map,
                                           dy_counters[5]);
}
// ANCHOR_END: wg_entries

// act[r, n] = bf16(silu(g) · u), g = gateup[r, n], u = gateup[r, I + n]: the unfused layer's
// SwiGLU (upstream's silu_and_mul), the same arithmetic as GEMM 1's epilogue.
//   gateup [rows, 2I] bf16; act [rows, I] bf16. One thread per element, grid-stride.
extern "C" __global__ void fused_swiglu(const __nv_bfloat16* __restrict__ gateup, __nv_bfloat16* __restrict__ act,
                                        long long rows, int I) {
    const size_t n = (size_t)rows * I;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        const size_t r = e / I, c = e % I;
        const float gate = __bfloat162float(gateup[r * 2 * I + c]);
        const float up = __bfloat162float(gateup[r * 2 * I + I + c]);
        act[e] = __float2bfloat16((gate * moe_sigmoidf(gate)) * up);
    }
}

// ANCHOR: combine
// out[t, c] = Σ_{j < k} y[t·k + j, c], j in order (+ shared[t, c], times sigmoid(shared_gate[t])
// when the shared expert is gated): one thread per output element, a fixed order, no atomics.
//   y [T·k, H] f32 (already weighted); shared [T, H] f32 or null; shared_gate [T] f32 (the
//   logit) or null; out [T, H] f32.
extern "C" __global__ void fused_combine(const float* y, const float* shared, const float* shared_gate,
                                         float* __restrict__ out, int T, int H, int k) {
    // A dependent launch of the down projection (LaunchConfig::dependent): its inputs are that
    // kernel's output, read after the wait through plain pointers (see moe_grid_wait).
    moe_grid_wait();
    const size_t n = (size_t)T * H;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        const size_t t = e / H, c = e % H;
        float acc = 0.0f;
        for (int j = 0; j < k; ++j) acc = acc + y[(t * k + j) * H + c];
        if (shared) {
            float s = shared[e];
            if (shared_gate) s = s * moe_sigmoidf(shared_gate[t]);
            acc = acc + s;
        }
        out[e] = acc;
    }
}
// ANCHOR_END: combine

// x [n] f32 -> xb [n] bf16, rounded to nearest even: the layer's input as the GEMMs read it.
// FUSED_TO_BF16_VALUES (8) values per thread and pass, two 16-byte loads and one 16-byte store,
// where both buffers are 16-byte aligned (they are, as allocated); the values past the last
// whole 8, or all of them when a buffer is not aligned, one at a time. Every value is rounded
// the same way on either path. (One value per thread, the kernel ran at about half the copy rate
// at 4096 tokens: 26.3 µs cold for Qwen3's 33.6 MB of x, 51.8 µs for GLM's 67 MB.)
extern "C" __global__ void fused_to_bf16(const float* __restrict__ x, __nv_bfloat16* __restrict__ xb, long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const bool aligned = ((reinterpret_cast<unsigned long long>(x) | reinterpret_cast<unsigned long long>(xb)) & 15) == 0;
    const long long groups = aligned ? n / FUSED_TO_BF16_VALUES : 0;
    for (long long i = first; i < groups; i += stride) {
        const float4 a = reinterpret_cast<const float4*>(x)[2 * i];
        const float4 b = reinterpret_cast<const float4*>(x)[2 * i + 1];
        const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        unsigned w[4];
#pragma unroll
        for (int j = 0; j < 4; ++j)  // the lower address in the low half
            w[j] = (unsigned)__bfloat16_as_ushort(__float2bfloat16(v[2 * j])) |
                   ((unsigned)__bfloat16_as_ushort(__float2bfloat16(v[2 * j + 1])) << 16);
        reinterpret_cast<uint4*>(xb)[i] = make_uint4(w[0], w[1], w[2], w[3]);
    }
    for (long long i = groups * FUSED_TO_BF16_VALUES + first; i < n; i += stride) xb[i] = __float2bfloat16(x[i]);
}

// ---------------------------------------------------------------------------------------------
// The decode path's pieces.

// A value as the layer multiplies it: bf16 exactly; f32 (the layer's input) rounded to bf16.
__device__ __forceinline__ float dec_value(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ float dec_value(const float* p) { return __bfloat162float(__float2bfloat16(*p)); }

// 8 bf16 values loaded as 16 bytes, as floats.
__device__ __forceinline__ void dec_unpack8(uint4 u, float v[8]) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // the lower address in the low half; bf16 -> f32 is a shift
        v[2 * i] = __uint_as_float(w[i] << 16);
        v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}

// 8 consecutive values (16 bytes of bf16, 32 of f32; 16-byte aligned) as dec_value gives them.
__device__ __forceinline__ void dec_load8(const __nv_bfloat16* p, float v[8]) {
    dec_unpack8(*reinterpret_cast<const uint4*>(p), v);
}
__device__ __forceinline__ void dec_load8(const float* p, float v[8]) {
    const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    const float f[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = __bfloat162float(__float2bfloat16(f[i]));
}

// ANCHOR: dec_load8_stream
// dec_load8 for weight rows that no other warp of the SM will read: `ld.global.nc.L1::no_allocate`,
// the read-only path without a place in the L1 (the line goes from the L2 to the registers). The
// decode kernels stream each weight row once. Whether that is faster depends on the batch (in a
// standalone harness on the H200, bench/results/h200/logs/ch04_decode_harness_experiment.log,
// faster at one token and slower at 8 GLM-like tokens), so the decode geometry chooses
// (DecodeGeometry's `_na`, the measured table per bucket). The same values as dec_load8, which is
// what the emulator runs.
__device__ __forceinline__ void dec_load8_stream(const __nv_bfloat16* p, float v[8]) {
#ifdef MOE_EMU
    dec_load8(p, v);
#else
    uint4 u;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w)
                 : "l"(p));
    dec_unpack8(u, v);
#endif
}
// A weight row's 8 values: streamed (NA) or as dec_load8 loads them.
template <bool NA>
__device__ __forceinline__ void dec_load8_w(const __nv_bfloat16* p, float v[8]) {
    if (NA)
        dec_load8_stream(p, v);
    else
        dec_load8(p, v);
}
// ANCHOR_END: dec_load8_stream

// ANCHOR: decode_dot
// This lane's partial sums of R dot products a · b[r] over K: chunks lane, lane + 32, ... of
// DECODE_CHUNK values, each chunk in order, fmaf into s[r]. vec (K % 8 == 0, rows 16-byte
// aligned): one 16-byte load per chunk and row (the rows b[r] streamed when NA: dec_load8_w); else
// one value at a time, in the same order, so the bits do not depend on which.
template <class AT, int R, bool NA = false>
__device__ __forceinline__ void dec_lane_dots(const AT* __restrict__ a, const __nv_bfloat16* const* b, int K,
                                              bool vec, float s[R]) {
    const int lane = threadIdx.x & 31;
    if (vec) {
#pragma unroll 4
        for (int c = lane * DECODE_CHUNK; c < K; c += 32 * DECODE_CHUNK) {
            float av[DECODE_CHUNK];
            dec_load8(a + c, av);
#pragma unroll
            for (int r = 0; r < R; ++r) {
                float bv[DECODE_CHUNK];
                dec_load8_w<NA>(b[r] + c, bv);
#pragma unroll
                for (int j = 0; j < DECODE_CHUNK; ++j) s[r] = fmaf(av[j], bv[j], s[r]);
            }
        }
    } else {
        for (int c = lane * DECODE_CHUNK; c < K; c += 32 * DECODE_CHUNK)
            for (int j = 0; j < DECODE_CHUNK && c + j < K; ++j) {
                const float av = dec_value(a + c + j);
#pragma unroll
                for (int r = 0; r < R; ++r) s[r] = fmaf(av, __bfloat162float(b[r][c + j]), s[r]);
            }
    }
}

// The same partial sums for R independent pairs of rows a[r] · b[r] (rows with live[r] false
// are skipped and their s[r] stays 0): the k pairs of one token in decode_gemm2_sum.
template <int R, bool NA = false>
__device__ __forceinline__ void dec_lane_dots_rows(const __nv_bfloat16* const* a, const __nv_bfloat16* const* b,
                                                   const bool* live, int K, bool vec, float s[R]) {
    const int lane = threadIdx.x & 31;
    if (vec) {
#pragma unroll 2
        for (int c = lane * DECODE_CHUNK; c < K; c += 32 * DECODE_CHUNK) {
#pragma unroll
            for (int r = 0; r < R; ++r) {
                if (!live[r]) continue;
                float av[DECODE_CHUNK], bv[DECODE_CHUNK];
                dec_load8(a[r] + c, av);
                dec_load8_w<NA>(b[r] + c, bv);
#pragma unroll
                for (int j = 0; j < DECODE_CHUNK; ++j) s[r] = fmaf(av[j], bv[j], s[r]);
            }
        }
    } else {
        for (int c = lane * DECODE_CHUNK; c < K; c += 32 * DECODE_CHUNK)
            for (int j = 0; j < DECODE_CHUNK && c + j < K; ++j)
#pragma unroll
                for (int r = 0; r < R; ++r)
                    if (live[r]) s[r] = fmaf(dec_value(a[r] + c + j), __bfloat162float(b[r][c + j]), s[r]);
    }
}

// The warp's sum of one value per lane: a fixed butterfly (xor 16, 8, 4, 2, 1). Both lanes of a
// pair add the same two numbers, so every lane ends with the same bits.
__device__ __forceinline__ float dec_warp_sum(float s) {
    for (int off = 16; off > 0; off >>= 1) s = s + __shfl_xor_sync(MOE_FULL_MASK, s, off);
    return s;
}

// R sums (R = 1, 2 or 4; 8 in the grouped kernels) in one butterfly, each with exactly
// dec_warp_sum's additions: at xor 16 (and 8 for R = 4, 8 and 4 for R = 8) a lane keeps the half
// of its values its lane bit selects and receives the other lanes' half, so it adds its own value
// and its partner's, in the order dec_warp_sum does, with half the shuffles; then the remaining
// xors down to 1 on the one value left. Lane 0 ends with all R sums in v[0..R) (the other lanes'
// v is scratch): 2(R − 1) + 5 − log2(R) shuffles instead of 5R.
template <int R>
__device__ __forceinline__ void dec_warp_sums(float v[R]) {
    const int lane = threadIdx.x & 31;
    int off = 16;
#pragma unroll
    for (int n = R; n > 1; n >>= 1, off >>= 1) {
        const bool upper = (lane & off) != 0;
#pragma unroll
        for (int i = 0; i < n / 2; ++i) {
            const float keep = upper ? v[n / 2 + i] : v[i], send = upper ? v[i] : v[n / 2 + i];
            v[i] = keep + __shfl_xor_sync(MOE_FULL_MASK, send, off);
        }
    }
    for (; off > 0; off >>= 1) v[0] = v[0] + __shfl_xor_sync(MOE_FULL_MASK, v[0], off);
    // Value j now sits in lanes whose bits 4 (3, 2) spell j: lane j·32/R among them.
    const float own = v[0];
#pragma unroll
    for (int j = 1; j < R; ++j) {
        const float t = __shfl_sync(MOE_FULL_MASK, own, j * (32 / R));
        if (lane == 0) v[j] = t;
    }
}
// ANCHOR_END: decode_dot

// logit = row · g in fp32 (Qwen2-MoE's shared-expert gate), by one warp: lane l sums columns l,
// l + 32, ... in order, then dec_warp_sum. The same bits from a bf16 row and from its f32 source.
template <class AT>
__device__ __forceinline__ float gate_logit_warp(const AT* __restrict__ row, const __nv_bfloat16* __restrict__ g,
                                                 int H) {
    const int lane = threadIdx.x & 31;
    float s = 0.0f;
    for (int c = lane; c < H; c += 32) s = fmaf(dec_value(row + c), __bfloat162float(g[c]), s);
    return dec_warp_sum(s);
}

// ANCHOR: decode_gemm1
// Block (x, y): row x of the grid is pair p = x < T·k (token p / k, expert ids[p]; an id outside
// 0..E: nothing), or the shared expert's token x - T·k; its warps own columns n = y·(warps ·
// cols_per_warp) + warp·cols_per_warp + c, c < cols_per_warp. For each: g = x[t] · w[n],
// u = x[t] · w[I + n] (two sums sharing the loads of x), then
//   SWIGLU: out[row, n] = bf16(silu(bf16(g)) · bf16(u)) [rows, I];
//   else:   out[row, n] = bf16(g), out[row, I + n] = bf16(u) [rows, 2I].
// The shared rows' block y = 0 also writes shared_logit[t] = x[t] · shared_gate (if not null).
template <bool SWIGLU, bool NA>
__device__ __forceinline__ void decode_gemm1_impl(const float* __restrict__ x, const int* __restrict__ ids,
                                                  const __nv_bfloat16* __restrict__ w13,
                                                  const __nv_bfloat16* __restrict__ shared_w13,
                                                  const __nv_bfloat16* __restrict__ shared_gate,
                                                  float* __restrict__ shared_logit, __nv_bfloat16* __restrict__ out,
                                                  __nv_bfloat16* __restrict__ shared_out, int T, int k, int H, int I,
                                                  int E, int Is, int cols_per_warp) {
    const int P = T * k, row = blockIdx.x;
    int t, inter;
    const __nv_bfloat16* w;
    __nv_bfloat16* o;
    if (row < P) {
        const int e = ids[row];
        if (e < 0 || e >= E) return;  // the whole block
        t = row / k;
        inter = I;
        w = w13 + (size_t)e * 2 * (size_t)I * (size_t)H;  // 64-bit: E·2I·H can pass 2^31
        o = out + (size_t)row * (SWIGLU ? 1 : 2) * I;
    } else {
        t = row - P;
        inter = Is;
        w = shared_w13;
        o = shared_out + (size_t)t * (SWIGLU ? 1 : 2) * Is;
    }
    const float* xr = x + (size_t)t * H;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const bool vec = H % DECODE_CHUNK == 0;
    for (int c = 0; c < cols_per_warp; ++c) {
        const int n = blockIdx.y * warps * cols_per_warp + warp * cols_per_warp + c;
        if (n >= inter) break;  // the same for the whole warp
        const __nv_bfloat16* rows[2] = {w + (size_t)n * H, w + (size_t)(inter + n) * H};
        float s[2] = {0.0f, 0.0f};
        dec_lane_dots<float, 2, NA>(xr, rows, H, vec, s);
        dec_warp_sums<2>(s);  // lane 0: the gate's and the up projection's sums
        const float g = s[0], u = s[1];
        if (lane == 0) {
            if (SWIGLU) {
                const float gate = __bfloat162float(__float2bfloat16(g));
                const float up = __bfloat162float(__float2bfloat16(u));
                o[n] = __float2bfloat16((gate * moe_sigmoidf(gate)) * up);
            } else {
                o[n] = __float2bfloat16(g);
                o[inter + n] = __float2bfloat16(u);
            }
        }
    }
    if (row >= P && shared_gate && blockIdx.y == 0 && warp == 0) {
        const float logit = gate_logit_warp(xr, shared_gate, H);
        if (lane == 0) shared_logit[t] = logit;
    }
}
// ANCHOR_END: decode_gemm1

// Grid (T·k [+ T with a shared expert], ceil(max(I, Is) / (warps · cols_per_warp))), any multiple
// of 32 threads up to DECODE_MAX_THREADS. shared_w13 [2Is, H] or null (then no shared rows);
// shared_gate [H] or null; shared_logit [T] f32; act [T·k, I], shared_act [T, Is] bf16.
extern "C" __global__ void __launch_bounds__(DECODE_MAX_THREADS)
    decode_gemm1_swiglu(const float* x, const int* ids, const __nv_bfloat16* w13, const __nv_bfloat16* shared_w13,
                        const __nv_bfloat16* shared_gate, float* shared_logit, __nv_bfloat16* act,
                        __nv_bfloat16* shared_act, int T, int k, int H, int I, int E, int Is, int cols_per_warp) {
    moe_launch_dependents();  // the down projection, a dependent launch, may be scheduled now
    decode_gemm1_impl<true, false>(x, ids, w13, shared_w13, shared_gate, shared_logit, act, shared_act, T, k, H, I,
                                   E, Is, cols_per_warp);
}
// The same grid; gateup [T·k, 2I], shared_gateup [T, 2Is] bf16.
extern "C" __global__ void __launch_bounds__(DECODE_MAX_THREADS)
    decode_gemm1_gateup(const float* x, const int* ids, const __nv_bfloat16* w13, const __nv_bfloat16* shared_w13,
                        const __nv_bfloat16* shared_gate, float* shared_logit, __nv_bfloat16* gateup,
                        __nv_bfloat16* shared_gateup, int T, int k, int H, int I, int E, int Is, int cols_per_warp) {
    decode_gemm1_impl<false, false>(x, ids, w13, shared_w13, shared_gate, shared_logit, gateup, shared_gateup, T, k,
                                    H, I, E, Is, cols_per_warp);
}
// The `_na` twins of the decode kernels: the same arguments and bits, the weight rows streamed
// (dec_load8_stream). Separate entry points, not a run-time flag: the originals keep their code,
// and neither loop is compiled around the other's registers (with a flag decode_gemm2 took 40
// instead of 34).
extern "C" __global__ void __launch_bounds__(DECODE_MAX_THREADS)
    decode_gemm1_swiglu_na(const float* x, const int* ids, const __nv_bfloat16* w13, const __nv_bfloat16* shared_w13,
                           const __nv_bfloat16* shared_gate, float* shared_logit, __nv_bfloat16* act,
                           __nv_bfloat16* shared_act, int T, int k, int H, int I, int E, int Is, int cols_per_warp) {
    moe_launch_dependents();
    decode_gemm1_impl<true, true>(x, ids, w13, shared_w13, shared_gate, shared_logit, act, shared_act, T, k, H, I, E,
                                  Is, cols_per_warp);
}
extern "C" __global__ void __launch_bounds__(DECODE_MAX_THREADS)
    decode_gemm1_gateup_na(const float* x, const int* ids, const __nv_bfloat16* w13, const __nv_bfloat16* shared_w13,
                           const __nv_bfloat16* shared_gate, float* shared_logit, __nv_bfloat16* gateup,
                           __nv_bfloat16* shared_gateup, int T, int k, int H, int I, int E, int Is,
                           int cols_per_warp) {
    decode_gemm1_impl<false, true>(x, ids, w13, shared_w13, shared_gate, shared_logit, gateup, shared_gateup, T, k,
                                   H, I, E, Is, cols_per_warp);
}

// ANCHOR: decode_gemm2_sum
// out[t, n] = ((0 + w₀·d₀) + w₁·d₁) + ... (+ s), dⱼ = act[t·k + j] · w2[ids[t·k + j], n] over I,
// wⱼ = weight[t·k + j], j in order (a pair with an id outside 0..E adds nothing); s = shared_act[t]
// · shared_w2[n] over Is, times σ(shared_logit[t]) when that is not null. The sum over k of
// fused_combine, in the same order with the same roundings, inside the down projection.
//   act [T·k, I] bf16; ids [T·k] i32; weight [T·k] f32; w2 [E, H, I] bf16; shared_act [T, Is]
//   bf16 and shared_w2 [H, Is] bf16, or null; shared_logit [T] f32 or null; out [T, H] f32.
// Grid (T, ceil(H / (warps · cols_per_warp))), any multiple of 32 threads up to DECODE_MAX_THREADS.
template <bool NA>
__device__ __forceinline__ void decode_gemm2_sum_impl(const __nv_bfloat16* act, const int* __restrict__ ids,
                                                      const float* __restrict__ weight,
                                                      const __nv_bfloat16* __restrict__ w2,
                                                      const __nv_bfloat16* shared_act,
                                                      const __nv_bfloat16* __restrict__ shared_w2,
                                                      const float* shared_logit, float* __restrict__ out, int T,
                                                      int k, int H, int I, int E, int Is, int cols_per_warp) {
    const int t = blockIdx.x;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const bool vec = I % DECODE_CHUNK == 0, shared_vec = Is % DECODE_CHUNK == 0;
    // A dependent launch (LaunchConfig::dependent): this block may be scheduled while GEMM 1 still
    // runs, and waits here for its output. act (and the shared expert's act and logit) are read
    // through plain pointers, not const __restrict__ (see moe_grid_wait in common.cuh). It used to
    // ask the L2 for its w2 rows before the wait; without that, the layer took 3 to 6% less at 8
    // tokens of both shapes and at one GLM-like token, and the same at one Qwen3 token
    // (bench/results/h200/logs/ch04_tune_all_T1_T8_no_prefetch.csv beside ch04_tune_all.csv).
    moe_grid_wait();
    for (int c = 0; c < cols_per_warp; ++c) {
        const int n = blockIdx.y * warps * cols_per_warp + warp * cols_per_warp + c;
        if (n >= H) break;  // the same for the whole warp
        float acc = 0.0f;
        // DECODE_PAIRS pairs at a time: their loads in flight together, their sums in one
        // butterfly; added to acc one by one, j in order.
        for (int j0 = 0; j0 < k; j0 += DECODE_PAIRS) {
            const __nv_bfloat16* arow[DECODE_PAIRS];
            const __nv_bfloat16* wrow[DECODE_PAIRS];
            bool live[DECODE_PAIRS];
            float s[DECODE_PAIRS];
#pragma unroll
            for (int q = 0; q < DECODE_PAIRS; ++q) {
                const size_t p = (size_t)t * k + j0 + q;
                const int e = j0 + q < k ? ids[p] : -1;
                live[q] = e >= 0 && e < E;  // the same for the whole warp
                arow[q] = act + p * I;
                wrow[q] = live[q] ? w2 + ((size_t)e * H + n) * (size_t)I : nullptr;  // 64-bit: E·H·I can pass 2^31
                s[q] = 0.0f;
            }
            dec_lane_dots_rows<DECODE_PAIRS, NA>(arow, wrow, live, I, vec, s);
            dec_warp_sums<DECODE_PAIRS>(s);
#pragma unroll
            for (int q = 0; q < DECODE_PAIRS; ++q)
                if (live[q]) acc = acc + weight[(size_t)t * k + j0 + q] * s[q];  // lane 0's is the one kept
        }
        if (shared_act) {
            const __nv_bfloat16* row = shared_w2 + (size_t)n * Is;
            float s = 0.0f;
            dec_lane_dots<__nv_bfloat16, 1, NA>(shared_act + (size_t)t * Is, &row, Is, shared_vec, &s);
            float v = dec_warp_sum(s);
            if (shared_logit) v = v * moe_sigmoidf(shared_logit[t]);
            acc = acc + v;
        }
        if (lane == 0) out[(size_t)t * H + n] = acc;
    }
}
extern "C" __global__ void __launch_bounds__(DECODE_MAX_THREADS)
    decode_gemm2_sum(const __nv_bfloat16* act, const int* __restrict__ ids, const float* __restrict__ weight,
                     const __nv_bfloat16* __restrict__ w2, const __nv_bfloat16* shared_act,
                     const __nv_bfloat16* __restrict__ shared_w2, const float* shared_logit, float* __restrict__ out,
                     int T, int k, int H, int I, int E, int Is, int cols_per_warp) {
    decode_gemm2_sum_impl<false>(act, ids, weight, w2, shared_act, shared_w2, shared_logit, out, T, k, H, I, E, Is,
                                 cols_per_warp);
}
extern "C" __global__ void __launch_bounds__(DECODE_MAX_THREADS)
    decode_gemm2_sum_na(const __nv_bfloat16* act, const int* __restrict__ ids, const float* __restrict__ weight,
                        const __nv_bfloat16* __restrict__ w2, const __nv_bfloat16* shared_act,
                        const __nv_bfloat16* __restrict__ shared_w2, const float* shared_logit,
                        float* __restrict__ out, int T, int k, int H, int I, int E, int Is, int cols_per_warp) {
    decode_gemm2_sum_impl<true>(act, ids, weight, w2, shared_act, shared_w2, shared_logit, out, T, k, H, I, E, Is,
                                cols_per_warp);
}
// ANCHOR_END: decode_gemm2_sum

// The unfused down projection: y[p, n] = weight[p] · (act[p] · w2[ids[p], n]) for the pair of
// block row x < T·k (nothing for an id outside 0..E), shared_y[t, n] = shared_act[t] ·
// shared_w2[n] for the shared rows x = T·k + t; fused_combine then sums (the same bits as
// decode_gemm2_sum). y [T·k, H] f32, shared_y [T, H] f32 or null.
// Grid (T·k [+ T], ceil(H / (warps · cols_per_warp))), any multiple of 32 threads.
template <bool NA>
__device__ __forceinline__ void decode_gemm2_impl(const __nv_bfloat16* act, const int* __restrict__ ids,
                                                  const float* __restrict__ weight, const __nv_bfloat16* __restrict__ w2,
                                                  const __nv_bfloat16* shared_act,
                                                  const __nv_bfloat16* __restrict__ shared_w2, float* __restrict__ y,
                                                  float* __restrict__ shared_y, int T, int k, int H, int I, int E,
                                                  int Is, int cols_per_warp) {
    const int P = T * k, row = blockIdx.x;
    const __nv_bfloat16 *a, *w;
    float* o;
    int K;
    float scale = 1.0f;
    bool weighted = false;
    if (row < P) {
        const int e = ids[row];
        if (e < 0 || e >= E) return;  // the whole block
        a = act + (size_t)row * I;
        w = w2 + (size_t)e * H * (size_t)I;  // 64-bit: E·H·I can pass 2^31
        o = y + (size_t)row * H;
        K = I;
        scale = weight[row];
        weighted = true;
    } else {
        a = shared_act + (size_t)(row - P) * Is;
        w = shared_w2;
        o = shared_y + (size_t)(row - P) * H;
        K = Is;
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const bool vec = K % DECODE_CHUNK == 0;
    // A dependent launch, as decode_gemm2_sum: the wait for GEMM 1's act (act and shared_act:
    // plain pointers, see moe_grid_wait). Then let fused_combine, a dependent of this kernel, be
    // scheduled.
    moe_grid_wait();
    moe_launch_dependents();
    for (int c = 0; c < cols_per_warp; ++c) {
        const int n = blockIdx.y * warps * cols_per_warp + warp * cols_per_warp + c;
        if (n >= H) break;
        const __nv_bfloat16* row_n = w + (size_t)n * K;
        float s = 0.0f;
        dec_lane_dots<__nv_bfloat16, 1, NA>(a, &row_n, K, vec, &s);
        const float v = dec_warp_sum(s);
        if (lane == 0) o[n] = weighted ? scale * v : v;
    }
}

extern "C" __global__ void __launch_bounds__(DECODE_MAX_THREADS)
    decode_gemm2(const __nv_bfloat16* act, const int* __restrict__ ids, const float* __restrict__ weight,
                 const __nv_bfloat16* __restrict__ w2, const __nv_bfloat16* shared_act,
                 const __nv_bfloat16* __restrict__ shared_w2, float* __restrict__ y, float* __restrict__ shared_y,
                 int T, int k, int H, int I, int E, int Is, int cols_per_warp) {
    decode_gemm2_impl<false>(act, ids, weight, w2, shared_act, shared_w2, y, shared_y, T, k, H, I, E, Is,
                             cols_per_warp);
}
extern "C" __global__ void __launch_bounds__(DECODE_MAX_THREADS)
    decode_gemm2_na(const __nv_bfloat16* act, const int* __restrict__ ids, const float* __restrict__ weight,
                    const __nv_bfloat16* __restrict__ w2, const __nv_bfloat16* shared_act,
                    const __nv_bfloat16* __restrict__ shared_w2, float* __restrict__ y, float* __restrict__ shared_y,
                    int T, int k, int H, int I, int E, int Is, int cols_per_warp) {
    decode_gemm2_impl<true>(act, ids, weight, w2, shared_act, shared_w2, y, shared_y, T, k, H, I, E, Is,
                            cols_per_warp);
}

// ---------------------------------------------------------------------------------------------
// The grouped decode path: each expert's weights streamed once per group of its pairs.

// ANCHOR: decode_grouped_dot
// This lane's partial sums of NB·R dot products a[r] · b[q] over K, into s[q·R + r], for the
// first n ≤ R rows a[r] = A + arow[r]·K (the others are not read; their sums stay as they are)
// and NB rows b[q] of one expert: each chunk of each b[q] is loaded once, then multiplied into
// every a[r]. For each (r, q) the chunks, their order, the fmaf and its operands are
// dec_lane_dots's (a first): the same bits as one dec_lane_dots per row a[r], with the b rows
// read once instead of n times. (Row numbers rather than pointers: half the registers.)
template <int R, int NB>
__device__ __forceinline__ void dec_lane_dots_group(const __nv_bfloat16* __restrict__ A, const int* arow, int n,
                                                    const __nv_bfloat16* const* b, int K, bool vec,
                                                    float s[NB * R]) {
    const int lane = threadIdx.x & 31;
    if (vec) {
        for (int c = lane * DECODE_CHUNK; c < K; c += 32 * DECODE_CHUNK) {
            float bv[NB][DECODE_CHUNK];
#pragma unroll
            for (int q = 0; q < NB; ++q) dec_load8(b[q] + c, bv[q]);
#pragma unroll
            for (int r = 0; r < R; ++r) {
                if (r >= n) break;  // the same for the whole warp
                float av[DECODE_CHUNK];
                dec_load8(A + (size_t)arow[r] * K + c, av);  // 64-bit: p·I
#pragma unroll
                for (int q = 0; q < NB; ++q)
#pragma unroll
                    for (int j = 0; j < DECODE_CHUNK; ++j) s[q * R + r] = fmaf(av[j], bv[q][j], s[q * R + r]);
            }
        }
    } else {
        for (int c = lane * DECODE_CHUNK; c < K; c += 32 * DECODE_CHUNK)
            for (int j = 0; j < DECODE_CHUNK && c + j < K; ++j) {
                float bv[NB];
#pragma unroll
                for (int q = 0; q < NB; ++q) bv[q] = __bfloat162float(b[q][c + j]);
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    if (r >= n) break;
                    const float av = dec_value(A + (size_t)arow[r] * K + c + j);
#pragma unroll
                    for (int q = 0; q < NB; ++q) s[q * R + r] = fmaf(av, bv[q], s[q * R + r]);
                }
            }
    }
}

// The rows of a grouped block, in s_row[0..count) (count returned; every thread calls it): for a
// routed tile (tile < tiles), the real pairs p (0 ≤ p < P) among its block_m slots of
// sorted_ids, in slot order (placeholders and garbage left out); for a shared tile, the tokens
// (tile − tiles)·block_m + r below T. Warp 0 compacts them with a ballot per 32 slots.
__device__ __forceinline__ int dec_group_rows(const int* __restrict__ sorted_ids, int tile, int tiles,
                                              int block_m, int P, int T, int* s_row, int* s_count) {
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        int count = 0;
        for (int r0 = 0; r0 < block_m; r0 += 32) {
            const int r = r0 + lane;
            int row = -1;
            if (r < block_m) {
                if (tile < tiles) {
                    const int p = sorted_ids[(size_t)tile * block_m + r];  // 64-bit: tile·block_m
                    row = p >= 0 && p < P ? p : -1;
                } else {
                    const long long t = (long long)(tile - tiles) * block_m + r;
                    row = t < T ? (int)t : -1;
                }
            }
            const unsigned real = __ballot_sync(MOE_FULL_MASK, row >= 0);
            if (row >= 0) s_row[count + __popc(real & ((1u << lane) - 1u))] = row;
            count += __popc(real);
        }
        if (lane == 0) *s_count = count;
    }
    __syncthreads();
    return *s_count;
}
// ANCHOR_END: decode_grouped_dot

// ANCHOR: decode_grouped_gemm1
// decode_gemm1_impl's outputs, a block per tile of chapter 3's layout (BLOCK_M = block_m slots
// of one expert) instead of per pair: block (x, y) with x < tiles is routed tile x (nothing past
// num_post or for an expert outside 0..E), x ≥ tiles the shared expert's tokens (x − tiles)·
// block_m ... (+ block_m − 1); its warps own the columns decode_gemm1_impl's do. For each column
// n a warp loads the gate row n and the up row I + n chunk by chunk and multiplies each chunk
// into DECODE_GROUP of the tile's rows at once (dec_lane_dots_group: its pairs' x[p / k], bf16);
// a tile of more real rows takes more passes of DECODE_GROUP (the rows just read come from L1).
// The same sums, butterflies (dec_warp_sums, whose additions are dec_warp_sum's) and roundings
// per (pair, column) as decode_gemm1_impl: the same bits, whichever tile a pair sits in.
//   SWIGLU: out[p, n] = bf16(silu(bf16(g)) · bf16(u)) [P, I]; else gate|up [P, 2I].
// The shared tiles' blocks y = 0 also write shared_logit[t] (gate_logit_warp, one warp per token).
template <bool SWIGLU>
__device__ __forceinline__ void decode_grouped_gemm1_impl(
    const __nv_bfloat16* __restrict__ x, const int* __restrict__ sorted_ids, const int* __restrict__ expert_ids,
    const int* __restrict__ num_post, const __nv_bfloat16* __restrict__ w13,
    const __nv_bfloat16* __restrict__ shared_w13, const __nv_bfloat16* __restrict__ shared_gate,
    float* __restrict__ shared_logit, __nv_bfloat16* __restrict__ out, __nv_bfloat16* __restrict__ shared_out,
    int T, int k, int H, int I, int E, int Is, int cols_per_warp, int block_m, int tiles) {
    __shared__ int s_row[FUSED_MAX_BLOCK_M];
    __shared__ int s_count;
    const int tile = blockIdx.x;
    const bool routed = tile < tiles;
    int inter;
    const __nv_bfloat16* w;
    __nv_bfloat16* o;
    if (routed) {
        // The same decision for every thread of the block, before any barrier.
        if ((long long)tile * block_m >= (long long)*num_post) return;
        const int e = expert_ids[tile];
        if (e < 0 || e >= E) return;
        inter = I;
        w = w13 + (size_t)e * 2 * (size_t)I * (size_t)H;  // 64-bit: E·2I·H can pass 2^31
        o = out;
    } else {
        inter = Is;
        w = shared_w13;
        o = shared_out;
    }
    const int rows = dec_group_rows(sorted_ids, tile, tiles, block_m, T * k, T, s_row, &s_count);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const bool vec = H % DECODE_CHUNK == 0;
    const size_t stride = (size_t)(SWIGLU ? 1 : 2) * inter;
    for (int c = 0; c < cols_per_warp; ++c) {
        const int n = blockIdx.y * warps * cols_per_warp + warp * cols_per_warp + c;
        if (n >= inter) break;  // the same for the whole warp
        const __nv_bfloat16* wrow[2] = {w + (size_t)n * H, w + (size_t)(inter + n) * H};
        for (int g0 = 0; g0 < rows; g0 += DECODE_GROUP) {
            const int live = min(DECODE_GROUP, rows - g0);
            int xrow[DECODE_GROUP];  // the token of each row
#pragma unroll
            for (int r = 0; r < DECODE_GROUP; ++r) {
                const int row = s_row[g0 + min(r, live - 1)];
                xrow[r] = routed ? row / k : row;
            }
            float s[2 * DECODE_GROUP];  // [gate of rows 0..G) | up of rows 0..G)]
#pragma unroll
            for (int i = 0; i < 2 * DECODE_GROUP; ++i) s[i] = 0.0f;
            dec_lane_dots_group<DECODE_GROUP, 2>(x, xrow, live, wrow, H, vec, s);
            // Lane 0: every row's gate sum, then its up sum (two butterflies of 8: one of 16
            // would index s at run time, in local memory).
            dec_warp_sums<DECODE_GROUP>(s);
            dec_warp_sums<DECODE_GROUP>(s + DECODE_GROUP);
            if (lane == 0) {
#pragma unroll
                for (int r = 0; r < DECODE_GROUP; ++r) {
                    if (r >= live) break;
                    __nv_bfloat16* orow = o + (size_t)s_row[g0 + r] * stride;  // 64-bit: p·I, p·2I
                    const float g = s[r], u = s[DECODE_GROUP + r];
                    if (SWIGLU) {
                        const float gate = __bfloat162float(__float2bfloat16(g));
                        const float up = __bfloat162float(__float2bfloat16(u));
                        orow[n] = __float2bfloat16((gate * moe_sigmoidf(gate)) * up);
                    } else {
                        orow[n] = __float2bfloat16(g);
                        orow[inter + n] = __float2bfloat16(u);
                    }
                }
            }
        }
    }
    if (!routed && shared_gate && blockIdx.y == 0) {
        for (int r = warp; r < rows; r += warps) {  // the same for the whole warp
            const int t = s_row[r];
            const float logit = gate_logit_warp(x + (size_t)t * H, shared_gate, H);
            if (lane == 0) shared_logit[t] = logit;
        }
    }
}
// ANCHOR_END: decode_grouped_gemm1

// Grid (tiles [+ ceil(T / block_m) shared tiles], ceil(max(I, Is) / (warps · cols_per_warp))),
// any multiple of 32 threads up to DECODE_MAX_THREADS. x [T, H] bf16 (fused_to_bf16's); the
// layout as fused_gemm1_swiglu reads it, block_m ≤ FUSED_MAX_BLOCK_M, tiles = its max_tiles;
// the rest as decode_gemm1_swiglu (act [T·k, I], shared_act [T, Is] bf16).
extern "C" __global__ void __launch_bounds__(DECODE_GROUP_MAX_THREADS)
    decode_grouped_gemm1_swiglu(const __nv_bfloat16* x, const int* sorted_ids, const int* expert_ids,
                                const int* num_post, const __nv_bfloat16* w13, const __nv_bfloat16* shared_w13,
                                const __nv_bfloat16* shared_gate, float* shared_logit, __nv_bfloat16* act,
                                __nv_bfloat16* shared_act, int T, int k, int H, int I, int E, int Is,
                                int cols_per_warp, int block_m, int tiles) {
    moe_launch_dependents();  // as decode_gemm1_swiglu
    decode_grouped_gemm1_impl<true>(x, sorted_ids, expert_ids, num_post, w13, shared_w13, shared_gate, shared_logit,
                                    act, shared_act, T, k, H, I, E, Is, cols_per_warp, block_m, tiles);
}
// The same grid; gateup [T·k, 2I], shared_gateup [T, 2Is] bf16.
extern "C" __global__ void __launch_bounds__(DECODE_GROUP_MAX_THREADS)
    decode_grouped_gemm1_gateup(const __nv_bfloat16* x, const int* sorted_ids, const int* expert_ids,
                                const int* num_post, const __nv_bfloat16* w13, const __nv_bfloat16* shared_w13,
                                const __nv_bfloat16* shared_gate, float* shared_logit, __nv_bfloat16* gateup,
                                __nv_bfloat16* shared_gateup, int T, int k, int H, int I, int E, int Is,
                                int cols_per_warp, int block_m, int tiles) {
    decode_grouped_gemm1_impl<false>(x, sorted_ids, expert_ids, num_post, w13, shared_w13, shared_gate,
                                     shared_logit, gateup, shared_gateup, T, k, H, I, E, Is, cols_per_warp, block_m,
                                     tiles);
}

// ANCHOR: decode_grouped_gemm2
// decode_gemm2's outputs, a block per tile: y[p, n] = weight[p] · (act[p] · w2[e, n]) over I for
// the real pairs p of routed tile x (its expert e), shared_y[t, n] = shared_act[t] · shared_w2[n]
// over Is for the tokens of shared tile x − tiles. Each chunk of w2 row n is loaded once per
// DECODE_GROUP rows; per (pair, column) the sums, the butterfly and the rounding of weight·dot
// are decode_gemm2's, so fused_combine then gives decode_gemm2_sum's bits. (The sum over k cannot
// move in here: a tile holds pairs of one expert, never the k pairs of one token.)
//   act [T·k, I] bf16; weight [T·k] f32; w2 [E, H, I] bf16; shared_act [T, Is], shared_w2 [H, Is]
//   bf16 or null; y [T·k, H] f32; shared_y [T, H] f32 or null.
// Grid (tiles [+ ceil(T / block_m)], ceil(H / (warps · cols_per_warp))), any multiple of 32
// threads up to DECODE_MAX_THREADS.
extern "C" __global__ void __launch_bounds__(DECODE_GROUP_MAX_THREADS)
    decode_grouped_gemm2(const __nv_bfloat16* __restrict__ act, const int* __restrict__ sorted_ids,
                         const int* __restrict__ expert_ids, const int* __restrict__ num_post,
                         const float* __restrict__ weight, const __nv_bfloat16* __restrict__ w2,
                         const __nv_bfloat16* __restrict__ shared_act, const __nv_bfloat16* __restrict__ shared_w2,
                         float* __restrict__ y, float* __restrict__ shared_y, int T, int k, int H, int I, int E,
                         int Is, int cols_per_warp, int block_m, int tiles) {
    __shared__ int s_row[FUSED_MAX_BLOCK_M];
    __shared__ int s_count;
    const int tile = blockIdx.x;
    const bool routed = tile < tiles;
    const __nv_bfloat16 *a0, *w;
    float* o;
    int K;
    if (routed) {
        if ((long long)tile * block_m >= (long long)*num_post) return;
        const int e = expert_ids[tile];
        if (e < 0 || e >= E) return;
        a0 = act;
        w = w2 + (size_t)e * H * (size_t)I;  // 64-bit: E·H·I can pass 2^31
        o = y;
        K = I;
    } else {
        a0 = shared_act;
        w = shared_w2;
        o = shared_y;
        K = Is;
    }
    const int rows = dec_group_rows(sorted_ids, tile, tiles, block_m, T * k, T, s_row, &s_count);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const bool vec = K % DECODE_CHUNK == 0;
    for (int c = 0; c < cols_per_warp; ++c) {
        const int n = blockIdx.y * warps * cols_per_warp + warp * cols_per_warp + c;
        if (n >= H) break;  // the same for the whole warp
        const __nv_bfloat16* wrow = w + (size_t)n * K;
        for (int g0 = 0; g0 < rows; g0 += DECODE_GROUP) {
            const int live = min(DECODE_GROUP, rows - g0);
            int arow[DECODE_GROUP];
#pragma unroll
            for (int r = 0; r < DECODE_GROUP; ++r) arow[r] = s_row[g0 + min(r, live - 1)];
            float s[DECODE_GROUP];
#pragma unroll
            for (int i = 0; i < DECODE_GROUP; ++i) s[i] = 0.0f;
            dec_lane_dots_group<DECODE_GROUP, 1>(a0, arow, live, &wrow, K, vec, s);
            dec_warp_sums<DECODE_GROUP>(s);
            if (lane == 0) {
#pragma unroll
                for (int r = 0; r < DECODE_GROUP; ++r) {
                    if (r >= live) break;
                    const int p = s_row[g0 + r];
                    o[(size_t)p * H + n] = routed ? weight[p] * s[r] : s[r];  // 64-bit: p·H
                }
            }
        }
    }
}
// ANCHOR_END: decode_grouped_gemm2

// logit[t] = x[t] · g in fp32 (Qwen2-MoE's shared-expert gate), one warp per token
// (gate_logit_warp).
//   x [T, H] bf16; g [H] bf16; logit [T] f32. Grid ceil(T / FUSED_WARPS), FUSED_THREADS threads.
extern "C" __global__ void __launch_bounds__(FUSED_THREADS)
    fused_gate_logit(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ g,
                     float* __restrict__ logit, int T, int H) {
    const int t = blockIdx.x * FUSED_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (t >= T) return;  // the whole warp leaves together
    const float s = gate_logit_warp(x + (size_t)t * H, g, H);
    if (lane == 0) logit[t] = s;
}

// ANCHOR: fill
// out[i] = bf16(scale · u), u = 2·(h >> 40)·2⁻²⁴ − 1 in [-1, 1), h = splitmix64(seed + (offset +
// i + 1)·φ): deterministic weights made on the device, for layers too big to build on the host
// (the 2.4 G-element w13 of a GLM-sized layer). Every step is exact or one IEEE rounding, so the
// host's twin (ch04_fused_moe::fill) gives the same bits. Grid-stride, any grid.
extern "C" __global__ void fused_fill_bf16(__nv_bfloat16* __restrict__ out, long long n, long long offset,
                                           unsigned long long seed, float scale) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        unsigned long long z = seed + (unsigned long long)(offset + i + 1) * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z = z ^ (z >> 31);
        const float u = (float)(unsigned)(z >> 40) * (1.0f / 16777216.0f);  // exact: 24 bits
        out[i] = __float2bfloat16((2.0f * u - 1.0f) * scale);
    }
}
// ANCHOR_END: fill
