// ch03/align.cuh — the warp-level pieces of kernels/ch03_align_block_size.cu (a pair's rank
// among the lanes holding the same expert, a warp's prefix sum, the padding, the expert of a
// slot), in a header so that later chapters' kernels (chapter 8's routing stage) sort and pad
// with the very same instructions instead of a copy.
#pragma once
#include "common.cuh"

// ANCHOR: same_key
// The lanes of this warp whose key equals this lane's key (keys below 2^bits, bits <= 10): one
// ballot per bit, each keeping the lanes that agree on that bit. Every lane of the warp must call
// it, with the same bits. (Written out: ptxas 13.0 fails with "C7600 Register allocation failed"
// when the ballots are first kept in an array, inside align_scatter_body's loops.)
__device__ __forceinline__ unsigned align_same_key(int key, int bits) {
    unsigned same = MOE_FULL_MASK;
#pragma unroll
    for (int bit = 0; bit < 10; ++bit) {
        if (bit >= bits) break;
        const int mine = (key >> bit) & 1;
        const unsigned ones = __ballot_sync(MOE_FULL_MASK, mine);
        same &= mine ? ones : ~ones;
    }
    return same;
}

// The bits a key needs: experts 0..E-1, and E itself for a lane without a valid pair.
__device__ __forceinline__ int align_key_bits(int E) { return 32 - __clz(E); }
// ANCHOR_END: same_key

// Inclusive prefix sum of v over the 32 lanes of the warp. Every lane must call it.
__device__ __forceinline__ int align_warp_inclusive(int v) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        const int up = __shfl_up_sync(MOE_FULL_MASK, v, off);
        if (lane >= off) v += up;
    }
    return v;
}

// count rounded up to a multiple of block_m (a power of two: the host checks it).
__device__ __forceinline__ int align_pad(int count, int block_m) {
    return (count + block_m - 1) & ~(block_m - 1);
}

// The expert whose padded run [start, start + padded) holds slot s, given the inclusive ends of
// the runs in s_end[0..E) (non-decreasing): the first e with s < s_end[e].
__device__ __forceinline__ int align_expert_of_slot(const int* s_end, int E, int s) {
    int lo = 0, hi = E - 1;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (s < s_end[mid]) hi = mid; else lo = mid + 1;
    }
    return lo;
}
