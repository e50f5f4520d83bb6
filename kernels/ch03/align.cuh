// ch03/align.cuh — the warp-level pieces of kernels/ch03_align_block_size.cu (a pair's rank
// among the lanes holding the same expert, a warp's prefix sum, the padding, the expert of a
// slot), in a header so that later chapters' kernels (chapter 8's routing stage, chapter 9's one
// launch) sort and pad with the very same instructions instead of a copy; and one row's layout
// by one warp (align_one_row, chapter 9's at one row).
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

// ANCHOR: one_row
// Chapter 3's layout of one row's k picks, by the one warp that routed the row, with no barrier
// (chapter 9's one launch, at one row). A row picks an expert at most once, so each picked
// expert's run is one tile (the row's pair, then BLOCK_M - 1 placeholders) and the runs follow
// the picked experts in ascending order. Lane
// r < k reads pick r from s_ids, where the router's lanes wrote it. Every lane learns every pick
// by k shuffles (issued together: nothing waits for the one before) and counts, on its own: the
// picks below its own (its pick's tile), the picks in its word of experts (lane i: experts 32 i
// to 32 i + 31, one bit each) and the picks below that word. Expert x = 32 i + lane then takes
// word i's two numbers from lane i, by two more shuffles. The pairs are 0 .. k - 1 (P = k), and
// with one row capacity = k BLOCK_M and max_tiles = k (k <= E): the warp writes every slot and
// every tile there is, and nothing else writes the layout. E <= 32 * ALIGN_ONE_ROW_WORDS.
// (A pick out of range would be no pick; chapter 1's configurations, checked, never give one.)
#define ALIGN_ONE_ROW_WORDS 16
__device__ __forceinline__ void align_one_row(const int* s_ids, int E, int k, int block_m,
                                              int capacity, int max_tiles, int* __restrict__ ids,
                                              int* __restrict__ sorted_ids,
                                              int* __restrict__ expert_ids,
                                              int* __restrict__ num_post,
                                              int* __restrict__ counts,
                                              int* __restrict__ offsets) {
    const int lane = threadIdx.x & 31;
    __syncwarp();  // the router's lanes wrote s_ids
    const int e = lane < k ? s_ids[lane] : -1;
    const bool valid = e >= 0 && e < E;
    if (lane < k) ids[lane] = e;
    const unsigned picked = __ballot_sync(MOE_FULL_MASK, valid);
    const int n = __popc(picked);  // the picked experts, one tile each
    int rank = 0, below_word = 0;
    unsigned word = 0;
#pragma unroll 8
    for (int j = 0; j < k; ++j) {  // warp-uniform
        const int ej = __shfl_sync(MOE_FULL_MASK, e, j);
        if (picked >> j & 1u) {
            rank += ej < e;
            below_word += ej < 32 * lane;
            if ((ej >> 5) == lane) word |= 1u << (ej & 31);
        }
    }
    // Every expert's count (0 or 1) and first slot (BLOCK_M times the picks below it).
#pragma unroll
    for (int i = 0; i < ALIGN_ONE_ROW_WORDS; ++i) {
        if (32 * i >= E) break;  // warp-uniform
        const unsigned w = __shfl_sync(MOE_FULL_MASK, word, i);
        const int below_i = __shfl_sync(MOE_FULL_MASK, below_word, i);
        const int x = 32 * i + lane;
        if (x < E) {
            counts[x] = (w >> lane) & 1u;
            offsets[x] = (below_i + __popc(w & ((1u << lane) - 1u))) * block_m;
        }
    }
    if (lane == 0) {
        offsets[E] = n * block_m;
        *num_post = n * block_m;
    }
    // The pairs at the head of their tiles, the placeholders everywhere else.
    if (valid) {
        sorted_ids[rank * block_m] = lane;
        expert_ids[rank] = e;
    }
    for (int s = lane; s < capacity; s += 32)
        if ((s & (block_m - 1)) != 0 || s >= n * block_m) sorted_ids[s] = k;
    for (int tile = n + lane; tile < max_tiles; tile += 32) expert_ids[tile] = -1;
}
// ANCHOR_END: one_row
