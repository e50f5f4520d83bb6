// ch05/tiny_gemm.cuh — the tiny GEMM of kernels/ch05_tiny_gemm.cu (the router's fp32 logits
// for a few rows, a block per two experts), in a header so that chapter 9's one-launch router
// computes its logits with the very same instructions, so the same bits, instead of a copy. The
// kernel file's comment describes the design; chapter 5's page walks through it.
#pragma once
#include "common.cuh"

#define TINY_THREADS 256       // threads of one block: 8 warps
#define TINY_EXPERTS_PER_BLOCK 2  // gate rows one block owns (144 blocks for 288 experts)
#define TINY_ROWS 16           // most token rows one block computes (more rows: more blocks along y)
#define TINY_SLICES 2          // 16-byte slices of H a thread loads per expert before it multiplies

// The 8 bf16 of one 16-byte slice, widened to fp32 (exact: a bf16 is the top half of an fp32).
__device__ __forceinline__ void tiny_unpack8(uint4 v, float* f) {
    const unsigned int w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        f[2 * i] = __uint_as_float(w[i] << 16);           // the lower address: the low half
        f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}

// ANCHOR: tiny_gemm
// logits[t, e] = sum_h hidden[t, h] * gate[e, h]
//   hidden [T, H] bf16, gate [E, H] bf16, logits [T, E] fp32; H % 8 == 0
// Grid: (ceil(E / 2), ceil(T / ROWS)); block: 256 threads. Block (bx, by) computes experts
// 2bx, 2bx+1 for rows by*ROWS .. by*ROWS+ROWS-1. Thread i owns the 16-byte slices i, i+256,
// i+512, ... of H: it adds their products in that order, 8 fmaf per slice, into one fp32
// accumulator per (expert, row); the warp adds its 32 lanes with a xor tree; thread q*ROWS+r
// adds the 8 warps' sums for expert q, row r in warp order. ROWS (1, 2, 4, 8 or 16, a template
// parameter so that one row keeps 2 accumulators, not 32) does not change that order.
template <int ROWS>
__device__ __forceinline__ void tiny_gemm(const __nv_bfloat16* __restrict__ hidden,
                                          const __nv_bfloat16* __restrict__ gate,
                                          float* __restrict__ logits, int T, int H, int E) {
    constexpr int EPB = TINY_EXPERTS_PER_BLOCK;
    __shared__ float partial[TINY_THREADS / 32][EPB][ROWS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int e0 = blockIdx.x * EPB, experts = min(EPB, E - e0);
    const int t0 = blockIdx.y * ROWS, rows = min(ROWS, T - t0);
    const int slices = H >> 3;  // 16-byte slices per row
    // The router kernel after this one is a dependent launch: let its blocks be scheduled now,
    // so they are resident, their bias loaded, when the logits land (it waits for them itself).
    moe_launch_dependents();
    float acc[EPB][ROWS];
#pragma unroll
    for (int q = 0; q < EPB; ++q)
#pragma unroll
        for (int r = 0; r < ROWS; ++r) acc[q][r] = 0.0f;
    // ANCHOR: tiny_gemm_loop
    for (int s0 = threadIdx.x; s0 < slices; s0 += TINY_THREADS * TINY_SLICES) {
        // The gate weight first: it depends on no earlier kernel, and it is the cold read that
        // the kernel's time is made of. Its loads are in flight while the hidden rows load.
        uint4 w[EPB][TINY_SLICES];
#pragma unroll
        for (int q = 0; q < EPB; ++q)
#pragma unroll
            for (int g = 0; g < TINY_SLICES; ++g) {
                const int s = s0 + g * TINY_THREADS;
                w[q][g] = (q < experts && s < slices)
                              ? reinterpret_cast<const uint4*>(gate + (size_t)(e0 + q) * H)[s]
                              : make_uint4(0u, 0u, 0u, 0u);
            }
#pragma unroll
        for (int g = 0; g < TINY_SLICES; ++g) {
            const int s = s0 + g * TINY_THREADS;
            if (s >= slices) break;
            // Then this slice of every row, all issued before the first is used: one wait for
            // all of them instead of one per row (a load inside the row loop, behind the row
            // count's test, cannot be moved up by the compiler: it would read past the rows).
            uint4 xv[ROWS];
#pragma unroll
            for (int r = 0; r < ROWS; ++r)
                xv[r] = r < rows ? reinterpret_cast<const uint4*>(hidden + (size_t)(t0 + r) * H)[s]
                                 : make_uint4(0u, 0u, 0u, 0u);
            float wf[EPB][8];
#pragma unroll
            for (int q = 0; q < EPB; ++q) tiny_unpack8(w[q][g], wf[q]);
#pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                if (r >= rows) break;
                float xf[8];
                tiny_unpack8(xv[r], xf);
#pragma unroll
                for (int q = 0; q < EPB; ++q)
#pragma unroll
                    for (int i = 0; i < 8; ++i) acc[q][r] = fmaf(xf[i], wf[q][i], acc[q][r]);
            }
        }
    }
    // ANCHOR_END: tiny_gemm_loop
    // The block's sum: a xor tree in each warp, then the warps' sums in warp order.
#pragma unroll
    for (int q = 0; q < EPB; ++q) {
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            if (r >= rows) break;
            float v = acc[q][r];
            for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(MOE_FULL_MASK, v, off);
            if (lane == 0) partial[warp][q][r] = v;
        }
    }
    __syncthreads();
    const int q = threadIdx.x / ROWS, r = threadIdx.x % ROWS;
    if (q < experts && r < rows) {
        float v = partial[0][q][r];
        for (int k = 1; k < TINY_THREADS / 32; ++k) v += partial[k][q][r];
        logits[(size_t)(t0 + r) * E + e0 + q] = v;
    }
}
// ANCHOR_END: tiny_gemm
