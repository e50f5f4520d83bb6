// ch04/hopper.cuh — the tiled path on Hopper (sm_90a only): versions 4 to 11 of the main loop, on
// top of portable.cuh's tile (its rows, its epilogue's contract), kernels/wgmma.cuh and
// kernels/tma.cuh. Included by ch04_fused_moe.cu; compiled where NVRTC targets sm_90a and on the
// emulator (MOE_WGMMA: there kernels/emu/hopper.h runs wgmma, TMA and the mbarriers on the CPU).
//
//   version 4  (g{WGS}_…)  wgmma: one warpgroup per 64 rows multiplying straight from shared
//                          memory, the stages in wgmma's flat core-matrix layout (wg_mainloop)
//   version 5  (_x)        the 128-byte swizzle: the copies read whole 128-byte lines
//   version 6  (_w0)       each slice's wgmma waited for: the copies run a slice deeper
//   version 7  (_tma)      the weight slices by the tensor memory accelerator (kernels/tma.cuh)
//   version 8  (_ws)       warp-specialized: a producer warpgroup feeding the others through
//                          mbarriers (ws_producer, ws_consumer)
//   version 9  (_mc)       8 in clusters of two blocks that take one copy of the weight slice
//                          between them when their tiles are of one expert (multicast)
//   version 10 (_ps)       8 persistent: a block takes a tile's column blocks one after another
//                          (ps_run)
//   version 11 (_dy)       10 with its items handed out as the blocks free up (dy_next)
// Each gives versions 1-3's bits (chapter 4's GPU test, tests/hopper.rs). Their configurations:
// kernels/ch04/configs.def; WgCfg below derives what each version adds from its number.
// Run one: `tools/bench/run ch04-tune --configs g2_k64_n16_s4_x_tma_ws` on an H100 or H200, or
// the GPU test `cargo test --release -p ch04-fused-moe --test hopper -- --include-ignored`.
#pragma once

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
// VERSION (4 to 11) names what the configuration's main loop does, each version adding one idea
// to the one before (SWZ from 5, TMA from 7, WS from 8, MC in 9, PS from 10, DY in 11); W0 is
// version 6's wait, which version 7 may keep. The list of configurations: ch04/configs.def.
template <int VERSION_, int WGS_, int BK_, int NF_, int STAGES_, bool W0_ = false>
struct WgCfg {
    static constexpr int VERSION = VERSION_, WGS = WGS_, BK = BK_, NF = NF_, STAGES = STAGES_;
    static constexpr bool SWZ = VERSION >= 5;   // the 128-byte swizzled layout (`_x`)
    static constexpr bool W0 = W0_;             // each slice's wgmma waited for (`_w0`)
    static constexpr bool TMA = VERSION >= 7;   // the weight slices by TMA (`_tma`)
    static constexpr bool WS = VERSION >= 8;    // a producer warpgroup (`_ws`)
    static constexpr bool MC = VERSION == 9;    // clusters of two sharing the weight slice (`_mc`)
    static constexpr bool PS = VERSION >= 10;   // persistent blocks (`_ps`)
    static constexpr bool DY = VERSION == 11;   // items handed out as the blocks free up (`_dy`)
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
    static_assert(VERSION >= 4 && VERSION <= 11, "versions 4 to 11 run on wgmma");
    static_assert(VERSION == 6 ? W0 : !W0 || VERSION == 7, "_w0 is version 6's, and version 7 may keep it");
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
    return smem;  // versions 5 to 11 run on sm_90a (and the emulator) only
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

// The main loop of versions 4 to 7 (8 and 9: ws_producer, ws_consumer): acc += A[s_arow] ·
// B[s_brow]ᵀ over K, for this thread's warpgroup's 64 rows (live: whether any of them is a real
// pair; the warpgroup skips its wgmma when not, but still copies and meets every barrier).
// s_arow / s_brow: the source row of each staged row, -1 for a zero row.
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
#ifndef MOE_X_NO_WG_FENCE
        moe_fence_proxy_async();
#endif
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
    __trap();  // versions 4 to 7 exist only on sm_90a (and the emulator); the host never launches it anywhere else
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
                                            bool share = false, unsigned rank = 0, unsigned it0 = 0,
                                            bool dependent = false) {
#ifdef MOE_WGMMA
    const int t = threadIdx.x - 128 * C::WGS;  // 0..127
    const int r0 = t / 8, c = t % 8;           // the swizzled layout's copy of version 5
    const int dst0 = 128 * r0 + 16 * (c ^ (r0 & 7));
    constexpr int DSTEP = 128 * C::RSTEP;
    const unsigned row_bytes = (unsigned)K * 2u;
    const int nk = (K + C::BK - 1) / C::BK;
#ifdef MOE_X_PRODUCER_FENCE
    // Slices a producer thread's arrival lags its copies by: at most STAGES − 2, or the producer
    // would wait on an `empty` that needs the very arrival it holds back.
    constexpr int WS_FENCE_LAG = C::STAGES - 2;
#endif
    // Thread 0 asks the copy engine for B's slice kt (its weights) into buffer st.
    auto ask_b = [&](int kt, int st) {
        unsigned char* stage = smem + st * C::STAGE_BYTES;
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
    };
    // `dependent` (GEMM 2, launched as a dependent of GEMM 1 on versions 8, 10 and 11:
    // LaunchConfig::dependent; version 9 is launched plainly, and its wait returns at once): A is
    // GEMM 1's act, B the weights, which no earlier kernel writes. So on the block's first item the
    // weights of the first STAGES slices (every buffer is free) are asked for before the wait for
    // GEMM 1 (moe_grid_wait), and A's rows only after it; later items come after the wait.
    const int early = dependent && it0 == 0u ? (nk < C::STAGES ? nk : C::STAGES) : 0;
    if (early > 0) {
        if (t == 0)
            for (int kt = 0; kt < early; ++kt) ask_b(kt, kt);
        moe_grid_wait();
    }
    for (int kt = 0; kt < nk; ++kt) {
        const unsigned it = it0 + (unsigned)kt;  // version 10: counted on from the block's earlier items
        const int st = (int)(it % C::STAGES);
        if (it >= C::STAGES) moe_mbar_wait(&empty[st], (it / C::STAGES - 1u) & 1u);
        unsigned char* stage = smem + st * C::STAGE_BYTES;
        if (t == 0 && kt >= early) ask_b(kt, st);
        const int kc = kt * C::BK + 8 * c;
        const bool in_k = kc < K;
        const __nv_bfloat16* a = in_k ? A + kc : A;
        wg_copy_rows(stage + dst0, DSTEP, a, ca, row_bytes, in_k);
#ifdef MOE_X_PRODUCER_FENCE
        // Experiment: this thread's copies of slice kt − LAG have landed; the proxy fence makes
        // them visible to wgmma's reads, then a plain arrival (the consumers need no fence).
        moe_cp_async_commit();
        if (kt >= WS_FENCE_LAG) {
            moe_cp_async_wait(WS_FENCE_LAG);
            moe_fence_proxy_async();
            moe_mbar_arrive(&full[(it - WS_FENCE_LAG) % C::STAGES]);
        }
#else
        moe_cp_async_mbar_arrive(&full[st]);
#endif
    }
#ifdef MOE_X_PRODUCER_FENCE
    moe_cp_async_wait(0);
    moe_fence_proxy_async();
    for (int j = nk > WS_FENCE_LAG ? nk - WS_FENCE_LAG : 0; j < nk; ++j) moe_mbar_arrive(&full[(it0 + (unsigned)j) % C::STAGES]);
#endif
    if (!C::PS) moe_cp_async_wait(0);  // nothing of this thread's still landing when it leaves
#endif
}

// Versions 8 to 11: the STAGES "full" barriers (the producer's 128 cp.async arrivals and thread
// 0's, with the bytes) and "empty" barriers (`releases` arrivals: every consumer warp, in
// version 9 once or twice), made by thread 0 before any thread goes on.
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

// A consumer warp gives a buffer back: one arrival on its `empty` by lane 0 once every lane of
// the warp is past its wait (4 · WGS arrivals a buffer, not one a thread: 32 times fewer atomics
// on shared memory a slice), and in version 9, when the blocks share B, one on the other block's.
template <class C>
__device__ __forceinline__ void ws_release(unsigned long long* e, bool share, unsigned rank) {
#ifdef MOE_WGMMA
    __syncwarp();
    if ((threadIdx.x & 31) == 0) {
        moe_mbar_arrive(e);
        if (C::MC && share) moe_mbar_arrive_cluster(e, rank ^ 1u);
    }
#endif
}

// A consumer warpgroup (wg < WGS): wait for slice kt, make the producer's cp.async writes
// visible to wgmma (the proxy fence), multiply, and release slice kt − 1 once its group is done
// (one group stays in flight, as in version 5): ws_release, one arrival a warp.
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
#ifndef MOE_X_NO_WS_FENCE
        moe_fence_proxy_async();
#endif
        if (live) {
            const unsigned char* stage = smem + st * C::STAGE_BYTES;
            const unsigned long long da = moe_wgmma_desc(stage + wg * 64 * C::BK * 2, C::LEAD, C::STRIDE) | C::LAYOUT;
            const unsigned long long db = moe_wgmma_desc(stage + C::A_BYTES, C::LEAD, C::STRIDE) | C::LAYOUT;
            moe_wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < C::BK / 16; ++kk)
                moe_wgmma_bf16<C::BN>(acc, da + C::KSTEP_UNITS * kk, db + C::KSTEP_UNITS * kk);
            moe_wgmma_commit();
#ifdef MOE_X_WS_W0
            moe_wgmma_wait<0>();
#else
            moe_wgmma_wait<1>();
#endif
        }
#ifdef MOE_X_WS_W0
        // Experiment (tools/gpu/run's ws-w0-ab; within the run's drift at 4096 tokens, so off):
        // slice kt given back at its own wgmma's end, not one slice later; the item's last slice
        // too in the persistent versions 10 and 11, as the source does after its loop.
        if (C::PS || kt + 1 < nk) ws_release<C>(&empty[st], share, rank);
    }
#else
        if (kt > 0) ws_release<C>(&empty[(it - 1u) % C::STAGES], share, rank);
    }
    moe_wgmma_wait<0>();
    // Version 10: the item's last slice released too (its wgmma done), so the producer refills
    // its buffer for the next item while this warpgroup stores.
    if (C::PS) ws_release<C>(&empty[(it0 + (unsigned)nk - 1u) % C::STAGES], false, 0u);
#endif
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
                                                int b1, bool share = false, bool dependent = false) {
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
        ws_barriers_init<C>(s_full, s_empty, 4u * C::WGS * (C::MC && share ? 2u : 1u));
        // Version 9: neither block's copies may reach the other before its barriers exist, and
        // neither block may leave while the other can still arrive on its barriers.
        const bool shared_b = C::MC && share;
        const unsigned rank = C::MC ? moe_cluster_rank() : 0u;
        if (shared_b) moe_cluster_sync();
        if (wg == C::WGS) {
            const WgCopies<C::A_COPIES> ca =
                wg_copies<C::A_COPIES, C::RSTEP>(s_arow, (int)(threadIdx.x - 128 * C::WGS) / 8);
            ws_producer<C>(A, ca, K, smem, s_full, s_empty, bmap, b0, b1, shared_b, rank, 0u, dependent);
            if (shared_b) moe_cluster_sync();
            return false;
        }
        const bool live = wg_live(s_live, wg);
        ws_consumer<C>(K, live, wg, smem, s_full, s_empty, acc, shared_b, rank);
        if (shared_b) moe_cluster_sync();
        return live;
#else
        __trap();  // versions 8 and 9 exist only on sm_90a (and the emulator)
#endif
    }
    const bool live = wg_live(s_live, wg);
    wg_mainloop<C>(A, s_arow, B, s_brow, K, live, smem, acc, bmap, b0, b1);
    return live;
}

// Columns col and col + 1 of `row` (n columns): one aligned store of the pair when `pair` (n even,
// so row + col is 2-element aligned) and both are inside, else each inside one on its own.
// WHOLE: the caller knows both (wg_store_row), and there is no test.
template <bool WHOLE = false>
__device__ __forceinline__ void wg_store2(__nv_bfloat16* row, int col, int n, bool pair, __nv_bfloat16 v0,
                                          __nv_bfloat16 v1) {
    if (WHOLE || (pair && col + 1 < n)) {
        __nv_bfloat162 two;
        two.x = v0;
        two.y = v1;
        *reinterpret_cast<__nv_bfloat162*>(row + col) = two;
    } else {
        if (col < n) row[col] = v0;
        if (col + 1 < n) row[col + 1] = v1;
    }
}
template <bool WHOLE = false>
__device__ __forceinline__ void wg_store2(float* row, int col, int n, bool pair, float v0, float v1) {
    if (WHOLE || (pair && col + 1 < n)) {
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
// The arithmetic is moe_sigmoidf's, (gate · 1/(1 + e^−gate)) · up, in two passes over SWIGLU_CH
// fragments at a time (their 2·SWIGLU_CH values): every e^−gate, then every reciprocal. Written
// value by value, CUDA's compiler wraps each exponential's last choice and each division's slow
// path in a branch region (BSSY … BSYNC in the machine code) that the next value's instructions
// do not cross: a thread's values run one after another, each a chain of dependent
// instructions, while the tensor cores wait (the block holds the SM's shared memory: no other
// block runs beside it). moe_expf_flat chooses by masks, and where every reciprocal of the pass
// is in moe_rcp_rn_fast's range (all but gates below −87.3) the pass takes it: two straight runs
// the compiler interleaves.
constexpr int SWIGLU_CH = 4;
template <class C>
__device__ __forceinline__ void wg_store_swiglu(const float (&acc)[C::ACC], const int* rows, int P,
                                                __nv_bfloat16* __restrict__ act, int n0, int I) {
    const int wg = threadIdx.x / 128;
    // Thread (warp w of its warpgroup, g, q) holds rows 64·wg + 16w + g (+ 8), columns
    // n0 + 8j + 2q (+ 1): the gate in fragment j, the up value in fragment j + BN1 / 8.
    const int lane = threadIdx.x & 31, w4 = (threadIdx.x >> 5) & 3, g = lane >> 2, q = lane & 3;
    const bool even = (I & 1) == 0;  // then two neighbouring columns are one aligned 4-byte store
    constexpr int J = C::BN1 / 8;
    static_assert(J % SWIGLU_CH == 0, "the passes cover the fragments");
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int p = rows[64 * wg + 16 * w4 + g + 8 * h];
#ifdef MOE_X_SWIGLU_PAIRED_STORES
        // The lanes with a row to store (a quad shares its row, so a lane's partner q ^ 1 too).
        const unsigned live = __ballot_sync(MOE_FULL_MASK, p >= 0 && p < P);
#endif
        if (p < 0 || p >= P) continue;
        __nv_bfloat16* row = act + (size_t)p * I;
#ifdef MOE_X_SWIGLU_VALUE_BY_VALUE
        // Experiment (tools/gpu/run's epilogue-ab): the same values, one after another.
#pragma unroll
        for (int j = 0; j < J; ++j) {
            const int col = n0 + 8 * j + 2 * q;
            __nv_bfloat16 v[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                const float gate = __bfloat162float(__float2bfloat16(acc[4 * j + 2 * h + i]));
                const float up = __bfloat162float(__float2bfloat16(acc[4 * (j + J) + 2 * h + i]));
                v[i] = __float2bfloat16((gate * moe_sigmoidf(gate)) * up);
            }
            wg_store2(row, col, I, even, v[0], v[1]);
        }
#else
#pragma unroll
        for (int j0 = 0; j0 < J; j0 += SWIGLU_CH) {
            float gate[2 * SWIGLU_CH], den[2 * SWIGLU_CH], s[2 * SWIGLU_CH];
            bool fast = true;
#pragma unroll
            for (int c = 0; c < 2 * SWIGLU_CH; ++c) {
                gate[c] = __bfloat162float(__float2bfloat16(acc[4 * (j0 + c / 2) + 2 * h + c % 2]));
                den[c] = 1.0f + moe_expf_flat(-gate[c]);
                fast &= moe_rcp_fast_ok(den[c]);
            }
            if (fast) {
#pragma unroll
                for (int c = 0; c < 2 * SWIGLU_CH; ++c) s[c] = moe_rcp_rn_fast(den[c]);
            } else {
#pragma unroll
                for (int c = 0; c < 2 * SWIGLU_CH; ++c) s[c] = 1.0f / den[c];
            }
#ifdef MOE_X_SWIGLU_PAIRED_STORES
            // Experiment (tools/gpu/run's stores-ab; no gain measured, so off): fragments j and
            // j + 1 of a quad, 16 columns, as four 8-byte stores (whole 32-byte sectors) instead
            // of eight 4-byte ones (half sectors, which Nsight Compute flags on this store).
            // Thread q keeps its own pair of one fragment and takes the other's from lane q ^ 1:
            // even q writes columns 2q .. 2q + 3 of fragment j's 8 (its own, then lane q + 1's),
            // odd q columns 8 + 2(q − 1) .. of fragment j + 1 (lane q − 1's, then its own). Needs
            // I % 4 == 0 and the block inside I.
            __nv_bfloat162 v[SWIGLU_CH];
#pragma unroll
            for (int jj = 0; jj < SWIGLU_CH; ++jj) {
                const int j = j0 + jj;
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    const float up = __bfloat162float(__float2bfloat16(acc[4 * (j + J) + 2 * h + i]));
                    (i ? v[jj].y : v[jj].x) = __float2bfloat16((gate[2 * jj + i] * s[2 * jj + i]) * up);
                }
            }
            if ((I & 3) == 0 && n0 + C::BN1 <= I) {
#pragma unroll
                for (int jj = 0; jj < SWIGLU_CH; jj += 2) {
                    const __nv_bfloat162 mine = (q & 1) ? v[jj + 1] : v[jj];
                    const __nv_bfloat162 send = (q & 1) ? v[jj] : v[jj + 1];
                    unsigned bits = *reinterpret_cast<const unsigned*>(&send);
                    bits = __shfl_xor_sync(live, bits, 1);
                    const __nv_bfloat162 got = *reinterpret_cast<const __nv_bfloat162*>(&bits);
                    uint2 four;
                    four.x = *reinterpret_cast<const unsigned*>((q & 1) ? &got : &mine);
                    four.y = *reinterpret_cast<const unsigned*>((q & 1) ? &mine : &got);
                    const int col = n0 + 8 * (j0 + jj) + 2 * (q & ~1) + 8 * (q & 1);
                    *reinterpret_cast<uint2*>(row + col) = four;
                }
            } else {
#pragma unroll
                for (int jj = 0; jj < SWIGLU_CH; ++jj)
                    wg_store2(row, n0 + 8 * (j0 + jj) + 2 * q, I, even, v[jj].x, v[jj].y);
            }
#else
#pragma unroll
            for (int jj = 0; jj < SWIGLU_CH; ++jj) {
                const int j = j0 + jj;
                __nv_bfloat16 v[2];
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    const float up = __bfloat162float(__float2bfloat16(acc[4 * (j + J) + 2 * h + i]));
                    v[i] = __float2bfloat16((gate[2 * jj + i] * s[2 * jj + i]) * up);
                }
                wg_store2(row, n0 + 8 * j + 2 * q, I, even, v[0], v[1]);
            }
#endif
        }
#endif
    }
}

// The plain GEMM's epilogue on versions 4 to 11, one row: this thread's accumulators of half h
// into row p of out (bf16, or fp32 times the pair's weight wp, y_bf16: that rounded to bf16).
// WHOLE: N is even and every column of the block is inside it, so each pair of columns is one
// aligned store with no test (wg_store2's test and its branch, a region around every store, left
// out).
template <class C, bool BF16_OUT, bool WHOLE>
__device__ __forceinline__ void wg_store_row(const float (&acc)[C::ACC], int h, int p, const float* __restrict__ weight,
                                             float wp, void* __restrict__ out, int n0, int N, bool even, bool y_bf16) {
    const int q = threadIdx.x & 3;
#pragma unroll
    for (int j = 0; j < C::BN / 8; ++j) {
        const int col = n0 + 8 * j + 2 * q;
        const float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
        if (BF16_OUT) {
            wg_store2<WHOLE>(static_cast<__nv_bfloat16*>(out) + (size_t)p * N, col, N, even, __float2bfloat16(v0),
                             __float2bfloat16(v1));
        } else if (y_bf16) {
            wg_store2<WHOLE>(static_cast<__nv_bfloat16*>(out) + (size_t)p * N, col, N, even,
                             __float2bfloat16(weight ? wp * v0 : v0), __float2bfloat16(weight ? wp * v1 : v1));
        } else {
            // weight · v rounded as fused_gemm_impl rounds it (no weight: v itself).
            wg_store2<WHOLE>(static_cast<float*>(out) + (size_t)p * N, col, N, even, weight ? wp * v0 : v0,
                             weight ? wp * v1 : v1);
        }
    }
}

// The plain GEMM's epilogue on versions 4 to 11: this thread's accumulators into out's rows,
// rows[] as wg_store_swiglu's; wg_store_row's WHOLE form where the block allows it.
template <class C, bool BF16_OUT>
__device__ __forceinline__ void wg_store_rows(const float (&acc)[C::ACC], const int* rows, int P,
                                              const float* __restrict__ weight, void* __restrict__ out, int n0,
                                              int N, bool y_bf16, const float* wpre = nullptr) {
    const int wg = threadIdx.x / 128;
    const int lane = threadIdx.x & 31, w4 = (threadIdx.x >> 5) & 3, g = lane >> 2;
    const bool even = (N & 1) == 0;
#ifdef MOE_X_STORES_TESTED
    const bool whole = false;  // experiment (tools/gpu/run's epilogue-ab): every store tested
#else
    const bool whole = even && n0 + C::BN <= N;
#endif
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int p = rows[64 * wg + 16 * w4 + g + 8 * h];
        if (p < 0 || p >= P) continue;
        // wpre: the two rows' weights, read by the caller before the main loop (MOE_X_EAGER_TILE).
        const float wp = (!BF16_OUT && weight) ? (wpre ? wpre[h] : weight[p]) : 1.0f;
        if (whole)
            wg_store_row<C, BF16_OUT, true>(acc, h, p, weight, wp, out, n0, N, even, y_bf16);
        else
            wg_store_row<C, BF16_OUT, false>(acc, h, p, weight, wp, out, n0, N, even, y_bf16);
    }
}
// ANCHOR_END: wg_epilogues

// ANCHOR: wg_item
// The block's tile and column block on versions 4 to 9. On a grid of two dimensions (tiles ×
// column blocks) they are blockIdx.x and blockIdx.y: the blocks that run together hold many
// tiles of one column block, and each tile's rows of A are read again for every column block,
// far apart in time. On a grid of one dimension (the host's grouped order; versions 4 to 8, and 9
// with the experiment MOE_X_MC_GROUPED) the blocks go through the tiles WG_GROUP_M at a time,
// every column block of those before the next ones (the engines' GROUP_SIZE_M): the rows of A of
// a group stay in L2 while all its column blocks read them. `ncb` is the GEMM's column blocks.
// Any grid gives the same bits. Version 9 (MC) takes WG_GROUP_M rounded up to even, so that its
// clusters stay pairs of tiles of one group.
template <bool MC>
__device__ __forceinline__ void wg_item(int ncb, int& tile, int& cb) {
    if (gridDim.y > 1 || ncb == 1) {
        tile = (int)blockIdx.x;
        cb = (int)blockIdx.y;
        return;
    }
    constexpr int G = MC ? (WG_GROUP_M + 1) / 2 * 2 : WG_GROUP_M;
    const int tiles = (int)gridDim.x / ncb, pid = (int)blockIdx.x, per = G * ncb;
    const int first = (pid / per) * G;
    const int size = min(tiles - first, G);
    tile = first + (pid % per) % size;
    cb = (pid % per) / size;
}
// ANCHOR_END: wg_item

#ifdef MOE_X_EAGER_TILE
// Experiment (tools/gpu/run's tile-ab; a gain within the run's drift at the tuned tiles, so off):
// a block's first reads on versions 4 to 9 all at once.
// fused_tile_rows waits for the padded total, then for the tile's expert, then reads its rows and
// meets the block twice; here the three loads go out together (every slot up to the capacity and
// every tile's expert is written by the layout's producer, the placeholder and -1 past the
// layout, so a tile past the total reads defined values and then leaves), and a ballot per warp
// of rows gives the sub-tiles' flags without a second pass. Returns the tile's expert, or -1 for
// a tile past the total; s_pair, s_arow and s_live are visible after the caller's next barrier.
template <class C>
__device__ __forceinline__ int wg_tile_begin(const int* __restrict__ sorted_ids, const int* __restrict__ expert_ids,
                                             const int* __restrict__ num_post, int tile, int block_m, int P, int k,
                                             int* s_pair, int* s_arow, int* s_live) {
    static_assert(C::THREADS >= C::BM, "one row a thread");
    const int r = (int)threadIdx.x;
    const int post = *num_post;
    // Version 9's grid is rounded up to whole clusters: its last block's tile may lie past the
    // layout's buffers, so there the two reads wait for the total.
    int e = -1, p = -1;
    auto read = [&] {
        e = expert_ids[tile];
        if (r < block_m) p = sorted_ids[(size_t)tile * block_m + r];
    };
    if (!C::MC) read();
    if ((long long)tile * block_m >= (long long)post) return -1;
    if (C::MC) read();
    const bool real = p >= 0 && p < P;
    if (r < block_m) {
        s_pair[r] = real ? p : -1;
        s_arow[r] = real ? p / k : -1;
        // A warp holds 32 rows, two sub-tiles of 16 (block_m is a multiple of 64).
        const unsigned b = __ballot_sync(MOE_FULL_MASK, real);
        if ((r & 31) == 0) {
            s_live[r / 16] = (b & 0xffffu) != 0u;
            s_live[r / 16 + 1] = (b >> 16) != 0u;
        }
    }
    return e;
}
#endif

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
    int tile, cb;
    wg_item<C::MC>((I + C::BN1 - 1) / C::BN1, tile, cb);
    const int n0 = cb * C::BN1;
#ifdef MOE_X_EAGER_TILE
    const int e = wg_tile_begin<C>(sorted_ids, expert_ids, num_post, tile, block_m, P, k, s_pair, s_arow, s_live);
    if (e < 0 || e >= E) return;
#else
    if ((long long)tile * block_m >= (long long)*num_post) return;
    const int e = expert_ids[tile];
    if (e < 0 || e >= E) return;
    fused_tile_rows(sorted_ids, tile, block_m, P, k, s_pair, s_arow, s_live);
#endif
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
                                             bool y_bf16, const void* w_map = nullptr) {
    __shared__ int s_pair[FUSED_MAX_BLOCK_M], s_arow[FUSED_MAX_BLOCK_M], s_brow[C::BROWS];
    __shared__ int s_live[FUSED_MAX_SUBTILES];
    if (block_m != C::BM) __trap();
    int tile, cb;
    wg_item<C::MC>((N + C::BN - 1) / C::BN, tile, cb);
    const int n0 = cb * C::BN;
#ifdef MOE_X_EAGER_TILE
    const int e = wg_tile_begin<C>(sorted_ids, expert_ids, num_post, tile, block_m, P, k, s_pair, s_arow, s_live);
    if (e < 0 || e >= E) return;
#else
    if ((long long)tile * block_m >= (long long)*num_post) return;
    const int e = expert_ids[tile];
    if (e < 0 || e >= E) return;
    fused_tile_rows(sorted_ids, tile, block_m, P, k, s_pair, s_arow, s_live);
#endif
    for (int r = threadIdx.x; r < C::BROWS; r += C::THREADS) s_brow[r] = n0 + r < N ? n0 + r : -1;
    __syncthreads();
    const __nv_bfloat16* w = W + (size_t)e * (size_t)N * (size_t)K;
    float acc[C::ACC];
#ifdef MOE_X_EAGER_TILE
    // The experiment's other half: a consumer thread's two rows' weights read now, landing while
    // the main loop runs, instead of after it (wg_store_rows' load, one latency a row).
    float wpre[2] = {1.0f, 1.0f};
    if (!BF16_OUT && weight && (int)threadIdx.x < 128 * C::WGS) {
        const int lane = threadIdx.x & 31, w4 = (threadIdx.x >> 5) & 3, wg = threadIdx.x / 128;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            // wg_store_rows' row of half h (this thread's accumulator rows).
            const int p = s_pair[64 * wg + 16 * w4 + (lane >> 2) + 8 * h];
            if (p >= 0 && p < P) wpre[h] = weight[p];
        }
    }
#else
    const float* wpre = nullptr;
#endif
    // Version 7's boxes: rows e·N + n0.. of W viewed as [E·N, K], in two halves of BN / 2.
    const int r0 = e * N + n0;
    // GEMM 2 (!BF16_OUT) is a dependent launch on versions 8, 10 and 11 (ws_producer's `dependent`).
    if (!wg_tile_product<C>(A, s_arow, w, s_brow, K, s_live, acc, w_map, r0, r0 + C::BN / 2,
                            wg_cluster_shares<C>(tile, e, expert_ids, num_post, block_m), !BF16_OUT))
        return;
    wg_store_rows<C, BF16_OUT>(acc, s_pair, P, weight, out, n0, N, y_bf16, wpre);
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
// into a value ptxas knows is the warp's. Each lane's value differs, so this is a real reduction
// on every backend, not fused_warp_or (which takes one value the whole warp already shares).
__device__ __forceinline__ bool ps_live(const int* __restrict__ rows, int wg, int P) {
    const int lane = threadIdx.x & 31;
    const int a = rows[64 * wg + lane], b = rows[64 * wg + 32 + lane];
    return __reduce_or_sync(MOE_FULL_MASK, (a >= 0 && a < P) || (b >= 0 && b < P) ? 1u : 0u) != 0;
}

// Version 11's item counters, one pair per entry point (DY_COUNTERS of them): [0] the next item
// to hand out, [1] the blocks that found none left. Zero when the module loads, and zero again
// when each launch ends: the block that finds none left last puts both back. The layer's kernels
// run one after another on the process's one stream, and GEMM 2, the one dependent launch among
// the tiled GEMMs, starts early only beside GEMM 1 (or the unfused SwiGLU), never beside another
// launch of its own entry point, so no two launches of an entry point count at once.
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
        moe_named_barrier_sync<1, 128>();
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
// `dependent`: GEMM 2, launched as a dependent of GEMM 1 (ws_producer's `dependent`).
template <class C, class Store>
__device__ __forceinline__ void ps_run(const __nv_bfloat16* __restrict__ A, const int* __restrict__ sorted_ids,
                                       const int* __restrict__ expert_ids, const int* __restrict__ num_post, int P,
                                       int k, int K, int E, int col_blocks, const void* bmap, int b_expert,
                                       int b_cols, int b_half, Store store, unsigned* counter = nullptr,
                                       bool dependent = false) {
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
    ws_barriers_init<C>(s_full, s_empty, 4u * C::WGS);  // its fence and barrier cover the ring's
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
            ws_producer<C>(A, ca, K, smem, s_full, s_empty, bmap, b0, b0 + b_half, false, 0u, it, dependent);
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
    __trap();  // versions 10 and 11 exist only on sm_90a (and the emulator)
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
                                             int N, int K, int E, int block_m, bool y_bf16, const void* w_map,
                                             unsigned* counter = nullptr) {
    if (block_m != C::BM) __trap();
    // Version 7's boxes: rows e·N + n0.. of W viewed as [E·N, K], in two halves of BN / 2.
    ps_run<C>(A, sorted_ids, expert_ids, num_post, P, k, K, E, (N + C::BN - 1) / C::BN, w_map, N, C::BN, C::BN / 2,
              [&](const float(&acc)[C::ACC], const int* rows, int cb) {
                  wg_store_rows<C, BF16_OUT>(acc, rows, P, weight, out, cb * C::BN, N, y_bf16);
              }, counter, !BF16_OUT);  // GEMM 2: a dependent launch (ws_producer's `dependent`)
}
// ANCHOR_END: ps_loop

// ANCHOR: wg_entries
// The three entry points of a configuration of versions 4 to 11 (named NAME, WgCfg C), one macro
// a version, stamped from the list (kernels/ch04/configs.def, expanded at the end of
// ch04_fused_moe.cu) as HOPPER_ENTRIES_<version>; launched only on sm_90a GPUs.
// Versions 4 to 6: fused_gemm1_swiglu_NAME, fused_gemm1_gateup_NAME and fused_gemm2_NAME take
// the default's parameters (portable.cuh's TILE_ENTRIES), BLOCK_M = 64·WGS.
#define WG_ENTRIES(NAME, C) TILE_ENTRIES(NAME, C, wg_gemm1_swiglu_impl, wg_gemm_impl)
// fused_gemm2_NAME's y_bf16 (every version): y in bf16 instead of f32 (portable.cuh's fused_gemm2).
// Versions 7 to 9: one more parameter, the device address of the weight tensor's map
// (kernels/tma.cuh; the host encodes one per tensor). ATTRS: the launch bounds, and version 9's
// clusters of two blocks (__cluster_dims__: the grid's x is even, blocks 2j and 2j + 1 one
// cluster). From version 7 on, GEMM 1's entry points let the next launch be scheduled at once
// (moe_launch_dependents); the host launches GEMM 2 of versions 8, 10 and 11 as a dependent, and
// its producer waits for GEMM 1 before it copies act (ws_producer's `dependent`). Elsewhere
// both are no-ops.
#define WG_TMA_ENTRIES(NAME, C, ATTRS)                                                                      \
    extern "C" __global__ void ATTRS                                                                          \
        fused_gemm1_swiglu_##NAME(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,   \
                                  const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, \
                                  int H, int I, int E, int block_m, const void* w13_map) {                    \
        moe_launch_dependents();                                                                              \
        wg_gemm1_swiglu_impl<C>(x, w13, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m,        \
                                w13_map);                                                                     \
    }                                                                                                         \
    extern "C" __global__ void ATTRS                                                                          \
        fused_gemm1_gateup_##NAME(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,   \
                                  const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P,   \
                                  int k, int H, int I, int E, int block_m, const void* w13_map) {             \
        moe_launch_dependents();                                                                              \
        wg_gemm_impl<C, true>(x, w13, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H, E,   \
                              block_m, false, w13_map);                                                       \
    }                                                                                                         \
    extern "C" __global__ void ATTRS                                                                          \
        fused_gemm2_##NAME(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,          \
                           const int* expert_ids, const int* num_post, const float* weight, void* y, int P,   \
                           int H, int I, int E, int block_m, int y_bf16, const void* w2_map) {                \
        wg_gemm_impl<C, false>(act, w2, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m,  \
                               y_bf16 != 0, w2_map);                                                          \
    }
// Versions 10 and 11: version 8's parameters (the weight pointers unused: every slice of B comes
// through the tensor map), as many blocks as the SMs hold at once (the host's grid, one
// dimension); version 11's entry points each count on their own pair of dy_counters (c1, c2, c3;
// version 10's: none).
#define PS_ENTRIES(NAME, C, c1, c2, c3)                                                                     \
    extern "C" __global__ void __launch_bounds__(C::THREADS, 1)                                              \
        fused_gemm1_swiglu_##NAME(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,   \
                                  const int* expert_ids, const int* num_post, __nv_bfloat16* act, int P, int k, \
                                  int H, int I, int E, int block_m, const void* w13_map) {                    \
        moe_launch_dependents();                                                                              \
        ps_gemm1_swiglu_impl<C>(x, sorted_ids, expert_ids, num_post, act, P, k, H, I, E, block_m, w13_map, c1); \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(C::THREADS, 1)                                              \
        fused_gemm1_gateup_##NAME(const __nv_bfloat16* x, const __nv_bfloat16* w13, const int* sorted_ids,   \
                                  const int* expert_ids, const int* num_post, __nv_bfloat16* gateup, int P,   \
                                  int k, int H, int I, int E, int block_m, const void* w13_map) {             \
        moe_launch_dependents();                                                                              \
        ps_gemm_impl<C, true>(x, sorted_ids, expert_ids, num_post, nullptr, gateup, P, k, 2 * I, H, E, block_m, \
                              false, w13_map, c2);                                                            \
    }                                                                                                         \
    extern "C" __global__ void __launch_bounds__(C::THREADS, 1)                                              \
        fused_gemm2_##NAME(const __nv_bfloat16* act, const __nv_bfloat16* w2, const int* sorted_ids,          \
                           const int* expert_ids, const int* num_post, const float* weight, void* y, int P,   \
                           int H, int I, int E, int block_m, int y_bf16, const void* w2_map) {                \
        ps_gemm_impl<C, false>(act, sorted_ids, expert_ids, num_post, weight, y, P, 1, H, I, E, block_m,      \
                               y_bf16 != 0, w2_map, c3);                                                      \
    }
#define HOPPER_ENTRIES_4(NAME, C) WG_ENTRIES(NAME, C)
#define HOPPER_ENTRIES_5(NAME, C) WG_ENTRIES(NAME, C)
#define HOPPER_ENTRIES_6(NAME, C) WG_ENTRIES(NAME, C)
#define HOPPER_ENTRIES_7(NAME, C) WG_TMA_ENTRIES(NAME, C, __launch_bounds__(C::THREADS))
#define HOPPER_ENTRIES_8(NAME, C) WG_TMA_ENTRIES(NAME, C, __launch_bounds__(C::THREADS))
#define HOPPER_ENTRIES_9(NAME, C) WG_TMA_ENTRIES(NAME, C, __cluster_dims__(2, 1, 1) __launch_bounds__(C::THREADS))
#define HOPPER_ENTRIES_10(NAME, C) PS_ENTRIES(NAME, C, nullptr, nullptr, nullptr)
#define HOPPER_ENTRIES_11(NAME, C) \
    PS_ENTRIES(NAME, C, dy_counters[DY_##NAME], dy_counters[DY_##NAME + 1], dy_counters[DY_##NAME + 2])
// ANCHOR_END: wg_entries

