// ch01_exercises.cu -- the kernels of chapter 1's exercises, as stubs for you to write. The
// tests in chapters/ch01-router/tests/exercises.rs fail until you do; `tools/steps exercises 1`
// runs them. The answers are in kernels/answers/ch01_exercises.cu (read them after trying).
//
// Upstream: none (exercises).
#include "common.cuh"

// Exercise 2: the weights of a softmax router from the k experts a top-k picked on the logits.
// weights[t, j] = scale * exp(logits[t, ids[t, j]]) / sum over the k picked of exp(logits), with
// non-finite picked logits weighing 0 (and a row with no finite pick all 0). One thread per row.
extern "C" __global__ void ex_softmax_selected(const float* __restrict__ logits, const int* __restrict__ ids,
                                               float* __restrict__ weights, int T, int E, int k, float scale) {
    // TODO(exercise 2)
}

// Exercise 3: the whole GLM router after the GEMM in one kernel, one warp per row: scores
// sigmoid(logit) (0 for a non-finite logit), keys score + bias (-inf for a non-finite logit),
// k rounds of argmax over the keys with ties to the lowest id, weights from the scores of the
// picked experts, renormalised (sum + 1e-20) and scaled. Launched with 4 rows (warps) per block
// and (4 * E) floats of dynamic shared memory.
extern "C" __global__ void ex_fused_sigmoid_router(const float* __restrict__ logits, const float* __restrict__ bias,
                                                   int* __restrict__ ids, float* __restrict__ weights, int T, int E,
                                                   int k, float scale) {
    // TODO(exercise 3)
}
