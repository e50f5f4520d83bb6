// ch04_exercises.cu -- the kernels of chapter 4's exercises 1 and 4, as a stub for you to write. The
// tests in chapters/ch04-fused-moe/tests/exercises.rs fail until you do; `tools/steps exercises 4`
// runs them. The answer is in kernels/answers/ch04_exercises.cu (read it after trying).
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

// Exercise 1: out[t, c] += y[p, c] for every pair p = t·k + j, with a float atomicAdd, one thread
// per element of y, in whatever order the threads reach the atomic.
//   y [T·k, H] f32; out [T, H] f32, zeroed by the host before the launch.
// Grid ceil(T·k·H / EX_COMBINE_THREADS) blocks of EX_COMBINE_THREADS threads (a grid-stride loop
// lets a smaller grid work too). T·k·H may pass 2^31: index in 64 bits.
extern "C" __global__ void ex_combine_atomic(const float* __restrict__ y, float* __restrict__ out, int T, int H,
                                             int k) {
    // TODO(exercise 1): one element of y per thread: find its token and column, then atomicAdd it
    // into out. Mind the 64-bit index.
}

// Exercise 4: the cp.async pipeline of the tiled path's version 2, on the simplest loop that has
// one. out[r] = Σ_c w[r, c], one block of EX_PIPE_THREADS threads per row r of w [R, K] f32, K a
// multiple of EX_PIPE_BK (the host checks). The row is walked in slices of EX_PIPE_BK floats;
// shared memory holds EX_PIPE_STAGES slices. Thread t copies floats 4t .. 4t + 3 of each slice
// (one 16-byte moe_cp_async16, kernels/mma.cuh) and adds floats t, t + EX_PIPE_THREADS,
// t + 2·EX_PIPE_THREADS and t + 3·EX_PIPE_THREADS of it, which other threads copied; at the end
// thread 0 adds the threads' sums in thread order.
//   Keep EX_PIPE_STAGES − 1 slices in flight: start them before the loop, one commit group each;
//   in the loop wait for slice kt only (moe_cp_async_wait), meet at a barrier, start slice
//   kt + EX_PIPE_STAGES − 1 into the buffer that slice kt − 1 has just finished with, commit
//   (a group even when there is no slice left, so that the count of groups stays in step), then
//   add slice kt while those copies are on their way.
#define EX_PIPE_THREADS 128  // threads per block
#define EX_PIPE_BK 512       // floats per slice: one 16-byte copy per thread
#define EX_PIPE_STAGES 3     // slices in shared memory at once

extern "C" __global__ void ex_rowsum_pipelined(const float* __restrict__ w, float* __restrict__ out, int K) {
    // TODO(exercise 4): the prologue, the loop (wait, barrier, refill, commit, add), and the
    // sum of the threads' partial sums into out[blockIdx.x].
}
