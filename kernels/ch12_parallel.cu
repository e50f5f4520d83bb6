// ch12_parallel.cu — the three small kernels that chapter 12's layers add around chapter 4's
// experts when the layer is spread over several GPUs (ranks).
//
//   ch12_gather_rows   expert parallelism, before the dispatch: out[i] = x[rows[i]], one bf16
//                      row of H per pair a rank sends, its pairs grouped by destination rank so
//                      that each destination's rows are one contiguous block of the send buffer.
//   ch12_combine       expert parallelism, after the results come back: a token's k weighted
//                      expert outputs summed in slot order, then the shared expert's output:
//                      out[t] = ((0 + y[at[t,0]]) + y[at[t,1]]) + ... + shared[t], the additions
//                      chapter 4's fused_combine makes, in its order, whichever rank computed a
//                      slot and whenever its rows arrived.
//   ch12_sum_ranks     tensor parallelism's reduction in a fixed order: out[i] = ((0 + p₀[i]) +
//                      p₁[i]) + ..., the ranks' partial outputs gathered side by side [R, n]. With
//                      NCCL this follows an all-gather; an all-reduce would add in the ring's order,
//                      which is not the ranks' order.
//
// Upstream: vLLM's and SGLang's expert-parallel paths permute the rows by destination before
// their all-to-all (DeepEP's `dispatch`, or the engines' own `moe_permute` / `moe_unpermute`
// kernels around NCCL all-to-alls) and sum the returned rows weighted after (DeepEP's `combine`).
//
// Differences:
// - A token's row is sent once per pair, not once per destination rank as DeepEP sends it: the
//   receiver then treats each pair as a token of k = 1 for chapter 4's layer, and each pair's
//   weighted output comes back alone, so the sum over k can run in slot order.
// - The routing weight is applied on the expert's rank (chapter 4's GEMM 2 epilogue), as on one
//   GPU; DeepEP's combine applies it on the way back.
// - No float atomics: every sum is a loop in a fixed order (DESIGN.md's rule).
#include "common.cuh"

#define CH12_THREADS 256  // threads per block of every kernel here

// ANCHOR: gather_rows
// x [T, H] bf16, rows [n] i32 (each in 0..T), out [n, H] bf16: a grid-stride loop over n·H
// values; a row index outside 0..T writes zeros (never read out of bounds).
extern "C" __global__ void ch12_gather_rows(const __nv_bfloat16* __restrict__ x, const int* __restrict__ rows,
                                            __nv_bfloat16* __restrict__ out, int T, int n, int H) {
    const size_t total = (size_t)n * H;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x) {
        const size_t i = e / H, c = e % H;
        const int r = rows[i];
        out[e] = (r >= 0 && r < T) ? x[(size_t)r * H + c] : __float2bfloat16(0.0f);
    }
}
// ANCHOR_END: gather_rows

// ANCHOR: combine
// y [n, H] f32 (the returned weighted outputs, one row per pair), at [T, k] i32 (the row of y
// holding token t's slot j), shared [T, H] f32 or null, out [T, H] f32.
extern "C" __global__ void ch12_combine(const float* __restrict__ y, const int* __restrict__ at,
                                        const float* __restrict__ shared, float* __restrict__ out,
                                        int n, int T, int H, int k) {
    const size_t total = (size_t)T * H;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (size_t)gridDim.x * blockDim.x) {
        const size_t t = e / H, c = e % H;
        float acc = 0.0f;
        for (int j = 0; j < k; ++j) {
            const int r = at[t * k + j];
            if (r >= 0 && r < n) acc = acc + y[(size_t)r * H + c];
        }
        if (shared) acc = acc + shared[e];
        out[e] = acc;
    }
}
// ANCHOR_END: combine

// ANCHOR: sum_ranks
// parts [R, n] f32 (rank r's partial output at r·n), out [n] f32.
extern "C" __global__ void ch12_sum_ranks(const float* __restrict__ parts, float* __restrict__ out,
                                          long long n, int R) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float acc = 0.0f;
        for (int r = 0; r < R; ++r) acc = acc + parts[(size_t)r * n + i];
        out[i] = acc;
    }
}
// ANCHOR_END: sum_ranks
