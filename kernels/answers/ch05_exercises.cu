// ch05_exercises.cu -- the answers to the kernels of chapter 5's exercises 2 and 3 (the stubs are
// in kernels/ch05_exercises.cu). Built in place of the stubs with `--features answers`.
//
// Upstream: the packed (key, index) reductions of top-k kernels, which move one 64-bit word per
// shuffle instead of a key and an index (exercise 2); the ids sorted within each row that some
// expert kernels' bookkeeping expects (exercise 3).
#include "common.cuh"

#define EX_ROWS_PER_BLOCK 4  // rows, one warp each, of one block

// ANCHOR: packed_argmax
// A float's bits made into an unsigned integer of the same order: flip every bit of a negative
// number (its magnitude order is reversed), set the sign bit of a positive one. -0.0 is first
// made +0.0: the two compare equal as floats, so they must pack to the same key, and the tie
// then goes to the lower id as everywhere else.
__device__ __forceinline__ unsigned int ex_ordered_bits(float x) {
    const unsigned int u = __float_as_uint(x == 0.0f ? 0.0f : x);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// (key, id) as one word: the key's ordered bits above, the complement of the id below, so a
// larger key wins and, for equal keys, the lower id (whose complement is larger).
__device__ __forceinline__ unsigned long long ex_pack(float key, int id) {
    return ((unsigned long long)ex_ordered_bits(key) << 32) | (unsigned int)~id;
}

extern "C" __global__ void ex_row_argmax(const float* __restrict__ keys, int* __restrict__ ids, int T, int E) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int t = blockIdx.x * EX_ROWS_PER_BLOCK + warp;
    if (t >= T) return;
    const float* row = keys + (size_t)t * E;
    unsigned long long best = 0;  // below every packed candidate (an id's complement is never 0 here)
    for (int e = lane; e < E; e += 32) {
        const unsigned long long p = ex_pack(row[e], e);
        best = p > best ? p : best;
    }
    for (int off = 16; off > 0; off >>= 1) {
        const unsigned long long o = __shfl_xor_sync(MOE_FULL_MASK, best, off);
        best = o > best ? o : best;
    }
    if (lane == 0) ids[t] = ~(unsigned int)(best & 0xffffffffull);
}
// ANCHOR_END: packed_argmax

// ANCHOR: sort_by_id
// Exercise 3: a rank sort in one warp. Every lane takes part in every shuffle (the loop bound k
// is the same for all), lanes past k hold no pick and write nothing. The ids of a row are
// distinct, so the ranks are 0..k-1, each once: every slot is written exactly once.
extern "C" __global__ void ex_sort_by_id(const int* __restrict__ ids, const float* __restrict__ weights,
                                         int* __restrict__ sorted_ids, float* __restrict__ sorted_weights,
                                         int T, int k) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int t = blockIdx.x * EX_ROWS_PER_BLOCK + warp;
    if (t >= T) return;
    const size_t row = (size_t)t * k;
    const int id = lane < k ? ids[row + lane] : 0;
    const float w = lane < k ? weights[row + lane] : 0.0f;
    int rank = 0;
    for (int j = 0; j < k; ++j) rank += __shfl_sync(MOE_FULL_MASK, id, j) < id;
    if (lane < k) {
        sorted_ids[row + rank] = id;
        sorted_weights[row + rank] = w;
    }
}
// ANCHOR_END: sort_by_id
