// ch05_exercises.cu -- the kernel of chapter 5's exercise 2, as a stub for you to write. The
// tests in chapters/ch05-fused-router/tests/exercises.rs fail until you do; `tools/steps
// exercises 5` runs them. The answer is in kernels/answers/ch05_exercises.cu (read it after
// trying).
//
// Upstream: the packed (key, index) reductions of top-k kernels, which move one 64-bit word per
// shuffle instead of a key and an index.
#include "common.cuh"

#define EX_ROWS_PER_BLOCK 4  // rows, one warp each, of one block

// Exercise 2: the argmax of each row of keys [T, E] (finite or -inf), ties to the lowest expert
// id, with ONE 64-bit shuffle per step of the warp's tree: pack each candidate (key, id) into an
// unsigned long long whose integer order is the selection's order, reduce with
// __shfl_xor_sync on the packed word, and unpack the winner's id into ids[t]. One warp per row,
// EX_ROWS_PER_BLOCK rows per block, any E >= 1.
extern "C" __global__ void ex_row_argmax(const float* __restrict__ keys, int* __restrict__ ids, int T, int E) {
    // TODO(exercise 2): each lane's best over its strided share, packed; a xor tree of max;
    // lane 0 writes the id.
}
