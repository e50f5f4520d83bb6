// ch04_exercises.cu -- the kernel of chapter 4's exercise 1, as a stub for you to write. The
// tests in chapters/ch04-fused-moe/tests/exercises.rs fail until you do; `tools/steps exercises 4`
// runs them. The answer is in kernels/answers/ch04_exercises.cu (read it after trying).
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
