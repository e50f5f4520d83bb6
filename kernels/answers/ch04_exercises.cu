// ch04_exercises.cu -- the answer to the kernel of chapter 4's exercise 1 (the stub is
// kernels/ch04_exercises.cu). Built in place of the stub with `--features answers`.
//
// Upstream: the scatter-add way of summing a token's k expert rows: PyTorch's `index_add_` (what
// Hugging Face's eager expert loop and the from-scratch chapter's reference backend call), and
// the fused-MoE variants that add each weighted row straight into the output with a float
// atomicAdd from the second GEMM's epilogue.
//
// Differences: a kernel of its own, over the [T·k, H] rows that fused_gemm2 leaves, so that it can
// be compared with fused_combine on the same input.
#include "common.cuh"

#define EX_COMBINE_THREADS 256  // threads per block

// ANCHOR: combine_atomic
// Exercise 1: every element of y adds itself into its token's output row. The k additions into one
// out[t, c] come from k different threads (k·H elements apart, in different warps or blocks), so
// the order of the sum is the order in which they reach the atomic: on a GPU, the scheduler's.
extern "C" __global__ void ex_combine_atomic(const float* __restrict__ y, float* __restrict__ out, int T, int H,
                                             int k) {
    const size_t n = (size_t)T * k * H;  // 64-bit: T·k·H passes 2^31 at 65,536 tokens, k 8, H 4096
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const size_t p = i / H, c = i % H;
        atomicAdd(&out[(p / k) * H + c], y[i]);
    }
}
// ANCHOR_END: combine_atomic
