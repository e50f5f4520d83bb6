// ch04_exercises.cu -- the answers to the kernels of chapter 4's exercises 1 and 4 (the stub is
// kernels/ch04_exercises.cu). Built in place of the stub with `--features answers`.
//
// Upstream: the scatter-add way of summing a token's k expert rows: PyTorch's `index_add_` (what
// Hugging Face's eager expert loop and the from-scratch chapter's reference backend call), and
// the fused-MoE variants that add each weighted row straight into the output with a float
// atomicAdd from the second GEMM's epilogue. Exercise 4: the cp.async pipeline of the tiled path's
// version 2 (fused_mainloop_async in kernels/ch04_fused_moe.cu), and of every Triton GEMM with
// num_stages > 1.
//
// Differences: a kernel of its own, over the [T·k, H] rows that fused_gemm2 leaves, so that it can
// be compared with fused_combine on the same input.
#include "common.cuh"
#include "mma.cuh"

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

// Exercise 4's constants: the same as the stub's.
#define EX_PIPE_THREADS 128  // threads per block
#define EX_PIPE_BK 512       // floats per slice: one 16-byte copy per thread
#define EX_PIPE_STAGES 3     // slices in shared memory at once

// ANCHOR: rowsum_pipelined
// Exercise 4: out[r] = Σ_c w[r, c] through a pipeline of EX_PIPE_STAGES slices. Commit group g of
// every thread holds its copy of slice g (or nothing, past the last slice), so at iteration kt
// `wait(STAGES − 2)` means "every group up to kt has landed", and the barrier after it makes the
// other threads' copies visible and says that every thread has finished adding slice kt − 1,
// whose buffer the refill then takes.
extern "C" __global__ void ex_rowsum_pipelined(const float* __restrict__ w, float* __restrict__ out, int K) {
    __shared__ __align__(16) float buf[EX_PIPE_STAGES * EX_PIPE_BK];
    __shared__ float part[EX_PIPE_THREADS];
    const int tid = threadIdx.x;
    const float* row = w + (size_t)blockIdx.x * K;  // 64-bit: R·K may pass 2^31
    const int slices = K / EX_PIPE_BK;
    for (int s = 0; s < EX_PIPE_STAGES - 1; ++s) {  // the prologue: STAGES − 1 slices in flight
        if (s < slices) moe_cp_async16(&buf[s * EX_PIPE_BK + 4 * tid], row + (size_t)s * EX_PIPE_BK + 4 * tid, true);
        moe_cp_async_commit();
    }
    float acc = 0.0f;
    for (int kt = 0; kt < slices; ++kt) {
        moe_cp_async_wait(EX_PIPE_STAGES - 2);  // this thread's copy of slice kt has landed
        __syncthreads();                         // everyone's has, and slice kt − 1 is done with
        const int next = kt + EX_PIPE_STAGES - 1;
        if (next < slices)
            moe_cp_async16(&buf[(next % EX_PIPE_STAGES) * EX_PIPE_BK + 4 * tid], row + (size_t)next * EX_PIPE_BK + 4 * tid,
                           true);
        moe_cp_async_commit();  // a group even when empty: the waits count groups
        const float* b = &buf[(kt % EX_PIPE_STAGES) * EX_PIPE_BK];
        for (int i = 0; i < 4; ++i) acc += b[tid + i * EX_PIPE_THREADS];  // four other threads' copies
    }
    part[tid] = acc;
    __syncthreads();
    if (tid == 0) {
        float s = 0.0f;
        for (int t = 0; t < EX_PIPE_THREADS; ++t) s += part[t];
        out[blockIdx.x] = s;
    }
}
// ANCHOR_END: rowsum_pipelined
