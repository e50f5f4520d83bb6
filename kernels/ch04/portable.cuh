// ch04/portable.cuh — the tiled path on mma.sync: versions 1 to 3 of the main loop (any GPU
// since Volta, and the emulator). Included by ch04_fused_moe.cu.
//
//   version 1 (w{WARPS}_k{BK}_n{NF})  fused_mainloop: stage a slice of K, wait, multiply
//   version 2 (_s{STAGES})            fused_mainloop_async: STAGES buffers filled by cp.async, the
//                                     next slices' copies in flight while the tensor cores multiply
//   version 3 (w{WM}x{WN}_…)          a WM × WN grid of warps on version 2's pipeline: fewer A
//                                     loads, more mma per load
// Their configurations: kernels/ch04/configs.def (FusedCfg below).
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
// Run one: `tools/bench/run ch04-tune --configs w4_k64_n1_s3` (a GPU; the tuner's names), or
// chapter 4's tests on the emulator (`cargo test -p ch04-fused-moe --test layer`).
#pragma once

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
    static constexpr int VERSION = WM > 1 ? 3 : STAGES > 1 ? 2 : 1;  // of the main loop
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
// (fused_warp_or, ch04/layer.cuh) gives that same value back, but in a register the compiler knows
// to be the same for the whole warp: without it ptxas treats each sub-tile's branch as divergent
// and pays a convergence barrier and the A address rebuilt from the thread index per sub-tile.
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
//   K = I, A = act, k = 1); y_bf16: that value rounded to bf16 instead, out [P, N] bf16 (the
//   engines' rounding of y: half the bytes written here and read by fused_combine).
// Grid (max_tiles, ceil(N / C::BN)), C::THREADS threads.
template <class C, bool BF16_OUT>
__device__ __forceinline__ void fused_gemm_impl(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ W,
                                                const int* __restrict__ sorted_ids, const int* __restrict__ expert_ids,
                                                const int* __restrict__ num_post, const float* __restrict__ weight,
                                                void* __restrict__ out, int P, int k, int N, int K, int E,
                                                int block_m, bool y_bf16) {
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
                else if (y_bf16)
                    static_cast<__nv_bfloat16*>(out)[(size_t)p * N + col] = __float2bfloat16(weight ? weight[p] * v : v);
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
//   fused_gemm2 (act, w2, sorted_ids, expert_ids, num_post, weight or null, y [P, H], P, H, I, E, block_m,
//                y_bf16: y in bf16, else f32)
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
                                        E, block_m, false);
}
extern "C" __global__ void __launch_bounds__(128)
    fused_gemm2(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids, const int* expert_ids,
                const int* num_post, const float* weight, void* y, int P, int H, int I, int E, int block_m,
                int y_bf16) {
    fused_gemm_impl<FusedDefault, false>(act, w2, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m,
                                         y_bf16 != 0);
}
// ANCHOR_END: entries

// The three entry points of every other configuration, stamped from the list
// (kernels/ch04/configs.def, expanded at the end of ch04_fused_moe.cu) with the configuration's
// name as their suffix: fused_gemm1_swiglu_w4_k64_n1_s3 and so on; the same parameters as the
// default's. TILE_ENTRIES takes the two GEMMs' bodies (templates on the configuration C), so
// versions 4 to 6 (hopper.cuh) stamp theirs with it too. No comment inside: a macro's body is one
// logical line.
#define TILE_ENTRIES(NAME, C, GEMM1_SWIGLU, GEMM)                                                       \
    extern "C" __global__ void __launch_bounds__(C::THREADS)                                                 \
        fused_gemm1_swiglu_##NAME(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,   \
                                  const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, \
                                  int H, int I, int E, int block_m) {                                         \
        GEMM1_SWIGLU<C>(x, w13, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m);               \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(C::THREADS)                                                 \
        fused_gemm1_gateup_##NAME(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,   \
                                  const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P,   \
                                  int k, int H, int I, int E, int block_m) {                                  \
        GEMM<C, true>(x, w13, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H, E, block_m,  \
                      false);                                                                                 \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(C::THREADS)                                                 \
        fused_gemm2_##NAME(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,          \
                           const int* expert_ids, const int* num_post, const float* weight, void* y, int P,   \
                           int H, int I, int E, int block_m, int y_bf16) {                                    \
        GEMM<C, false>(act, w2, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m,          \
                       y_bf16 != 0);                                                                          \
    }
#define FUSED_ENTRIES(NAME, C) TILE_ENTRIES(NAME, C, fused_gemm1_swiglu_impl, fused_gemm_impl)
