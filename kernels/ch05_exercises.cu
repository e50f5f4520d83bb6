// ch05_exercises.cu -- the kernels of chapter 5's exercises 2 and 3, as stubs for you to write. The
// tests in chapters/ch05-fused-router/tests/exercises.rs fail until you do; `tools/steps
// exercises 5` runs them. The answers are in kernels/answers/ch05_exercises.cu (read them after
// trying).
//
// Upstream: the packed (key, index) reductions of top-k kernels, which move one 64-bit word per
// shuffle instead of a key and an index (exercise 2); the ids sorted within each row that some
// expert kernels' bookkeeping expects (exercise 3).
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

// Exercise 3: each row's k picks sorted by expert id, the weights moving with their ids:
// ids [T, k] i32 (distinct within a row) and weights [T, k] f32 in; sorted_ids and
// sorted_weights [T, k] out. One warp per row, EX_ROWS_PER_BLOCK rows per block, k <= 32: lane r
// holds pick r, counts with shuffles how many of the row's ids are smaller than its own, and
// writes its pick at that place. No shared memory, no sort network.
extern "C" __global__ void ex_sort_by_id(const int* __restrict__ ids, const float* __restrict__ weights,
                                         int* __restrict__ sorted_ids, float* __restrict__ sorted_weights,
                                         int T, int k) {
    // TODO(exercise 3): lane r < k loads pick r; k shuffles of the ids give its rank; write.
}
