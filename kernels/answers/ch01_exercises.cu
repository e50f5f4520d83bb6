// ch01_exercises.cu, answered: the kernels of chapter 1's exercises (the stubs are in
// kernels/ch01_exercises.cu; `--features answers` builds this file in their place).
#include "common.cuh"

// Exercise 2. The softmax's denominator over all E experts cancels when the k picked scores are
// renormalised, so the weights are a softmax over the k picked logits alone; and softmax is
// monotonic, so the top-k can run on the logits. Subtracting the largest picked logit keeps
// every exponential at most 1 (no overflow), and the sum at least 1.
extern "C" __global__ void ex_softmax_selected(const float* __restrict__ logits, const int* __restrict__ ids,
                                               float* __restrict__ weights, int T, int E, int k, float scale) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    const float* x = logits + (size_t)t * E;
    const int* id = ids + (size_t)t * k;
    float* w = weights + (size_t)t * k;
    float m = -__int_as_float(0x7f800000);
    for (int j = 0; j < k; ++j)
        if (moe_isfinite(x[id[j]])) m = fmaxf(m, x[id[j]]);
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) sum += moe_isfinite(x[id[j]]) ? moe_expf(x[id[j]] - m) : 0.0f;
    for (int j = 0; j < k; ++j)
        w[j] = (moe_isfinite(x[id[j]]) && sum > 0.0f) ? moe_expf(x[id[j]] - m) / sum * scale : 0.0f;
}

// The selection order of the book: a greater key wins, and among equal keys the lower id.
__device__ __forceinline__ bool ex_better(float a, int ia, float b, int ib) {
    return a > b || (a == b && ia < ib);
}

// Exercise 3. One warp per row: the keys and scores of the row in shared memory, k rounds of a
// warp argmax (each lane its strided share, then a shuffle tree), then the weights.
extern "C" __global__ void ex_fused_sigmoid_router(const float* __restrict__ logits, const float* __restrict__ bias,
                                                   int* __restrict__ ids, float* __restrict__ weights, int T, int E,
                                                   int k, float scale) {
    DYNAMIC_SHARED(float, smem);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int t = blockIdx.x * 4 + warp;
    if (t >= T) return;
    float* key = smem + (size_t)warp * 2 * E;
    float* score = key + E;
    const float* x = logits + (size_t)t * E;
    for (int e = lane; e < E; e += 32) {
        const bool finite = moe_isfinite(x[e]);
        score[e] = finite ? moe_sigmoidf(x[e]) : 0.0f;
        key[e] = finite ? score[e] + bias[e] : -__int_as_float(0x7f800000);
    }
    __syncwarp();
    float total = 0.0f;  // every lane adds the same picked scores in the same order
    for (int round = 0; round < k; ++round) {
        float bk = 0.0f;
        int bi = -1;
        for (int e = lane; e < E; e += 32)
            if (key[e] == key[e] && (bi < 0 || ex_better(key[e], e, bk, bi))) { bk = key[e]; bi = e; }
        for (int off = 16; off > 0; off >>= 1) {
            const float ok = __shfl_xor_sync(MOE_FULL_MASK, bk, off);
            const int oi = __shfl_xor_sync(MOE_FULL_MASK, bi, off);
            if (oi >= 0 && (bi < 0 || ex_better(ok, oi, bk, bi))) { bk = ok; bi = oi; }
        }
        total += score[bi];
        if (lane == 0) ids[(size_t)t * k + round] = bi;
        __syncwarp();
        if (lane == 0) key[bi] = __int_as_float(0x7fc00000);  // NaN: never picked again
        __syncwarp();
    }
    for (int j = lane; j < k; j += 32)
        weights[(size_t)t * k + j] = score[ids[(size_t)t * k + j]] / (total + 1e-20f) * scale;
}
