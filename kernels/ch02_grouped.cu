// ch02_grouped.cu — the small kernels around the per-expert GEMMs of the loop grouped by expert.
//
// The loop grouped by expert runs one MoE layer as:
//
//     xs      = hidden[token_of]                 gather: the pairs' rows, sorted by expert
//     for each active expert e:
//         h[e's slots] = xs[e's slots] @ w13[e].T     library GEMM  [n_e, 2I]
//     a       = silu(h[:, :I]) * h[:, I:]          SwiGLU over every slot at once
//     for each active expert e:
//         y[e's slots] = a[e's slots] @ w2[e].T       library GEMM  [n_e, H]
//     out[t]  = sum_j weight[t, j] * y[slot_of[t, j]]  (+ the shared expert)   combine
//
// The GEMMs are the runtime's library GEMM (cuBLAS on the GPU, the reference GEMM on the
// emulator); this file holds the three kernels between them. 3 + 2 x (active experts) launches:
// chapter 4 replaces the per-expert GEMMs with one kernel for every expert.
//
// Upstream: the per-expert loop of Hugging Face's MoE blocks (`Qwen3MoeExperts.forward`, the
// "eager" experts implementation: `index_select`, two `F.linear`, `index_add_`), and the
// reference backend grouped by expert of the from-scratch MoE chapter the book is built from.
//
// Differences:
// - The scatter-add is a gather: each output row sums its own k slots in slot order j = 0..k-1
//   (one thread per output element), so no two threads add into one address and the sum has the
//   same order, and bits, every run. The eager loop's `index_add_` on a GPU adds with float
//   atomics in arrival order; transformers' default `grouped_mm` path sums a token's k rows with
//   a reshape and a sum, deterministic like ours.
// - The sigmoid of SwiGLU and of the shared-expert gate comes from common.cuh (moe_expf), so the
//   emulator and the GPU give the same bits.
#include "common.cuh"

#define CH02_THREADS 256  // threads per block of every kernel below

// ANCHOR: gather
// xs[s, :] = hidden[token_of[s], :], converted to the compute type. One block per slot, its
// threads striding over the hidden dimension (consecutive threads, consecutive addresses).
//   hidden [T, H] f32; token_of [P] i32 (each in 0..T, checked on the host); xs [P, H]
extern "C" __global__ void ch02_gather_f32(const float* __restrict__ hidden,
                                           const int* __restrict__ token_of,
                                           float* __restrict__ xs, int P, int H) {
    const int s = blockIdx.x;
    if (s >= P) return;
    const float* src = hidden + (size_t)token_of[s] * H;
    float* dst = xs + (size_t)s * H;
    for (int c = threadIdx.x; c < H; c += blockDim.x) dst[c] = src[c];
}

extern "C" __global__ void ch02_gather_bf16(const float* __restrict__ hidden,
                                            const int* __restrict__ token_of,
                                            __nv_bfloat16* __restrict__ xs, int P, int H) {
    const int s = blockIdx.x;
    if (s >= P) return;
    const float* src = hidden + (size_t)token_of[s] * H;
    __nv_bfloat16* dst = xs + (size_t)s * H;
    for (int c = threadIdx.x; c < H; c += blockDim.x) dst[c] = __float2bfloat16(src[c]);
}
// ANCHOR_END: gather

// ANCHOR: swiglu
// a[s, i] = silu(h[s, i]) * h[s, I + i]: each row of h is [gate | up], as w13 packs each
// expert's gate rows before its up rows. silu(g) = g * sigmoid(g), computed in f32 and rounded
// once to the output type. One thread per output element.
//   h [P, 2I]; a [P, I]
__device__ __forceinline__ float ch02_silu_mul(float g, float u) {
    return (g * moe_sigmoidf(g)) * u;
}

extern "C" __global__ void ch02_swiglu_f32(const float* __restrict__ h, float* __restrict__ a,
                                           int P, int I) {
    const size_t n = (size_t)P * I;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        const size_t s = e / I, i = e % I;
        const float* row = h + s * 2 * I;
        a[e] = ch02_silu_mul(row[i], row[I + i]);
    }
}

extern "C" __global__ void ch02_swiglu_bf16(const __nv_bfloat16* __restrict__ h,
                                            __nv_bfloat16* __restrict__ a, int P, int I) {
    const size_t n = (size_t)P * I;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        const size_t s = e / I, i = e % I;
        const __nv_bfloat16* row = h + s * 2 * I;
        a[e] = __float2bfloat16(
            ch02_silu_mul(__bfloat162float(row[i]), __bfloat162float(row[I + i])));
    }
}
// ANCHOR_END: swiglu

// ANCHOR: combine
// out[t, c] = sum_{j < k} weight[t, j] * y[slot_of[t, j], c]  (+ shared[t, c], times
// sigmoid(shared_gate[t]) when the shared expert is gated), in f32, j in order, one fmaf per
// term: the same order, and so the same bits, on every run and on both backends.
//   y [P, H] f32; slot_of [T, k] i32; weight [T, k] f32; shared [T, H] f32 or null;
//   shared_gate [T] f32 (the logit) or null; out [T, H] f32
extern "C" __global__ void ch02_combine(const float* __restrict__ y,
                                        const int* __restrict__ slot_of,
                                        const float* __restrict__ weight,
                                        const float* __restrict__ shared,
                                        const float* __restrict__ shared_gate,
                                        float* __restrict__ out, int T, int H, int k) {
    const size_t n = (size_t)T * H;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        const size_t t = e / H, c = e % H;
        float acc = 0.0f;
        for (int j = 0; j < k; ++j) {
            const size_t slot = (size_t)slot_of[t * k + j];
            acc = fmaf(weight[t * k + j], y[slot * H + c], acc);
        }
        if (shared) {
            float s = shared[e];
            if (shared_gate) s = s * moe_sigmoidf(shared_gate[t]);
            acc = acc + s;
        }
        out[e] = acc;
    }
}
// ANCHOR_END: combine
