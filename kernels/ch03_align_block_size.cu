// ch03_align_block_size.cu — sorting (token, expert) pairs by expert and padding each expert's
// run to a multiple of BLOCK_M: the bookkeeping a fused expert kernel reads (chapter 4).
//
// In:  ids [P] i32, the routing's expert ids flattened (pair p = t * k + j), E experts, BLOCK_M.
// Out: sorted_ids [capacity]   the pair indices sorted by expert, each expert's run padded with
//                               the placeholder P up to a multiple of BLOCK_M; slots past the
//                               padded total hold P too;
//      expert_ids [max_tiles]  the expert of each BLOCK_M-slot tile (-1 past the last tile);
//      num_post [1]            the padded total (a multiple of BLOCK_M).
// Within an expert, pairs keep ascending pair order (a stable sort), so the output is a pure
// function of the input: the same bits on every run, on every backend.
//
// How, without a sort and without float atomics:
//   count    per-expert counts (integer atomics in shared memory: a sum of ones, exact in any
//            order);
//   scan     padded counts -> each expert's first slot (a prefix sum over E);
//   scatter  each warp owns a contiguous range of pairs; warps' per-expert counts, prefixed in
//            warp order, give each warp its first slot per expert; inside a warp, 32 pairs at a
//            time, a pair's rank among the lanes before it with the same expert comes from 32
//            shuffles. Pair order is kept at every level: block, warp, lane.
// Up to ALIGN_ONE_BLOCK_MAX_PAIRS pairs, one block does all three in one launch (decode sizes);
// above, three launches: count per block of pairs, scan in one block, scatter per block.
//
// Upstream: vLLM's and SGLang's moe_align_block_size CUDA kernels (csrc/moe/moe_align_sum_kernels.cu
// in vLLM, sgl-kernel's moe_align_kernel.cu), which count with shared atomics and scatter with
// atomicAdd on per-expert cursors — which orders pairs within an expert by arrival.
//
// Differences:
// - Stable: pairs keep their order inside an expert, so every run gives the same sorted_ids.
// - Ids outside 0..E (garbage) are skipped, never written out of bounds (the host refuses them
//   with a typed error first).
#include "common.cuh"

#define ALIGN_THREADS 512               // threads of every block below (16 warps)
#define ALIGN_WARPS 16                  // = ALIGN_THREADS / 32
#define ALIGN_MAX_EXPERTS 512           // experts a block keeps counters for in shared memory
#define ALIGN_ONE_BLOCK_MAX_PAIRS 2048  // up to this many pairs, one launch
#define ALIGN_PAIRS_PER_BLOCK 2048      // pairs per block of the multi-block path

// In-place inclusive prefix sum of s[0..n), by one warp (the caller's warp 0; the block
// synchronises after it): lane l sums its own contiguous chunk of ceil(n / 32) entries, the 32
// chunk totals are scanned with shuffles, and each lane adds the total of the chunks before its
// own. Integers: exact in any order.
__device__ void align_warp_scan(int* s, int n) {
    const int lane = threadIdx.x & 31, per = (n + 31) / 32;
    const int begin = min(n, lane * per), end = min(n, begin + per);
    int sum = 0;
    for (int i = begin; i < end; ++i) {
        sum += s[i];
        s[i] = sum;
    }
    int before = sum;  // inclusive scan of the chunk totals across lanes
    for (int off = 1; off < 32; off <<= 1) {
        const int up = __shfl_up_sync(MOE_FULL_MASK, before, off);
        if (lane >= off) before += up;
    }
    before -= sum;  // exclusive
    for (int i = begin; i < end; ++i) s[i] += before;
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

// Fills what the pairs do not: the placeholder P in every padding slot and past the padded total,
// and the expert of every tile (-1 past the last). Slots and tiles are dealt out grid-stride.
__device__ void align_fill(const int* s_end, const int* s_count, int E, int P, int block_m,
                           int total, int capacity, int max_tiles, int* sorted_ids,
                           int* expert_ids) {
    const int stride = gridDim.x * blockDim.x;
    for (int s = blockIdx.x * blockDim.x + threadIdx.x; s < capacity; s += stride) {
        if (s >= total) {
            sorted_ids[s] = P;
        } else {
            const int e = align_expert_of_slot(s_end, E, s);
            const int padded = (s_count[e] + block_m - 1) / block_m * block_m;
            if (s - (s_end[e] - padded) >= s_count[e]) sorted_ids[s] = P;
        }
    }
    for (int tile = blockIdx.x * blockDim.x + threadIdx.x; tile < max_tiles; tile += stride)
        expert_ids[tile] = tile * block_m < total ? align_expert_of_slot(s_end, E, tile * block_m) : -1;
}

// ANCHOR: scatter
// The stable scatter of pairs [begin, end) by one block. s_first[e] is the first slot of this
// block's pairs of expert e. Warp w owns the w-th sixteenth of the range: it counts its pairs per
// expert, the counts are prefixed in warp order, then each warp places its pairs 32 at a time.
__device__ void align_scatter_range(const int* __restrict__ ids, int begin, int end, int E,
                                    const int* s_first, int (*s_warp)[ALIGN_MAX_EXPERTS],
                                    int* sorted_ids) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int n = end - begin, per_warp = (n + ALIGN_WARPS - 1) / ALIGN_WARPS;
    const int w_begin = begin + min(n, warp * per_warp), w_end = begin + min(n, (warp + 1) * per_warp);
    for (int e = lane; e < E; e += 32) s_warp[warp][e] = 0;
    __syncwarp();
    for (int p = w_begin + lane; p < w_end; p += 32) {
        const int e = ids[p];
        if (e >= 0 && e < E) atomicAdd(&s_warp[warp][e], 1);
    }
    __syncthreads();
    // Exclusive prefix over the warps, per expert, from the block's first slot of the expert.
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        int next = s_first[e];
        for (int w = 0; w < ALIGN_WARPS; ++w) {
            const int c = s_warp[w][e];
            s_warp[w][e] = next;
            next += c;
        }
    }
    __syncthreads();
    // 32 pairs at a time, in order: a pair's rank among earlier lanes with the same expert.
    for (int base = w_begin; base < w_end; base += 32) {
        const int p = base + lane;
        const int e = p < w_end ? ids[p] : -1;
        const bool valid = e >= 0 && e < E;
        int rank = 0, same = 0;
        for (int l = 0; l < 32; ++l) {
            const int other = __shfl_sync(MOE_FULL_MASK, e, l);
            if (other == e) {
                same += 1;
                if (l < lane) rank += 1;
            }
        }
        if (valid) sorted_ids[s_warp[warp][e] + rank] = p;
        __syncwarp();
        if (valid && rank == 0) s_warp[warp][e] += same;  // one lane per expert advances it
        __syncwarp();
    }
}
// ANCHOR_END: scatter

// ANCHOR: one_block
// All of it in one block, for up to ALIGN_ONE_BLOCK_MAX_PAIRS pairs: one launch at decode sizes.
extern "C" __global__ void align_one_block(const int* __restrict__ ids, int P, int E, int block_m,
                                           int capacity, int max_tiles, int* __restrict__ sorted_ids,
                                           int* __restrict__ expert_ids, int* __restrict__ num_post) {
    __shared__ int s_count[ALIGN_MAX_EXPERTS];
    __shared__ int s_end[ALIGN_MAX_EXPERTS];
    __shared__ int s_first[ALIGN_MAX_EXPERTS];
    __shared__ int s_warp[ALIGN_WARPS][ALIGN_MAX_EXPERTS];
    const int t = threadIdx.x;
    for (int e = t; e < E; e += blockDim.x) s_count[e] = 0;
    __syncthreads();
    for (int p = t; p < P; p += blockDim.x) {
        const int e = ids[p];
        if (e >= 0 && e < E) atomicAdd(&s_count[e], 1);
    }
    __syncthreads();
    for (int e = t; e < E; e += blockDim.x) s_end[e] = (s_count[e] + block_m - 1) / block_m * block_m;
    __syncthreads();
    if (t < 32) align_warp_scan(s_end, E);
    __syncthreads();
    for (int e = t; e < E; e += blockDim.x)
        s_first[e] = s_end[e] - (s_count[e] + block_m - 1) / block_m * block_m;
    const int total = E > 0 ? s_end[E - 1] : 0;
    if (t == 0) *num_post = total;
    __syncthreads();
    align_fill(s_end, s_count, E, P, block_m, total, capacity, max_tiles, sorted_ids, expert_ids);
    align_scatter_range(ids, 0, P, E, s_first, s_warp, sorted_ids);
}
// ANCHOR_END: one_block

// ANCHOR: multi_block
// Above ALIGN_ONE_BLOCK_MAX_PAIRS: 1. each block counts its ALIGN_PAIRS_PER_BLOCK pairs per expert
// into blk_counts [B, E] ...
extern "C" __global__ void align_count(const int* __restrict__ ids, int P, int E,
                                       int* __restrict__ blk_counts) {
    __shared__ int s_count[ALIGN_MAX_EXPERTS];
    const int t = threadIdx.x;
    const int begin = blockIdx.x * ALIGN_PAIRS_PER_BLOCK, end = min(P, begin + ALIGN_PAIRS_PER_BLOCK);
    for (int e = t; e < E; e += blockDim.x) s_count[e] = 0;
    __syncthreads();
    for (int p = begin + t; p < end; p += blockDim.x) {
        const int e = ids[p];
        if (e >= 0 && e < E) atomicAdd(&s_count[e], 1);
    }
    __syncthreads();
    for (int e = t; e < E; e += blockDim.x) blk_counts[(size_t)blockIdx.x * E + e] = s_count[e];
}

// ... 2. one block sums them per expert, pads, scans, and gives every (block, expert) its first
// slot: exp_count [E], exp_end [E] (inclusive ends of the padded runs), blk_first [B, E] ...
extern "C" __global__ void align_scan(const int* __restrict__ blk_counts, int B, int E, int block_m,
                                      int* __restrict__ exp_count, int* __restrict__ exp_end,
                                      int* __restrict__ blk_first, int* __restrict__ num_post) {
    __shared__ int s_count[ALIGN_MAX_EXPERTS];
    __shared__ int s_end[ALIGN_MAX_EXPERTS];
    const int t = threadIdx.x;
    for (int e = t; e < E; e += blockDim.x) {
        int c = 0;
        for (int b = 0; b < B; ++b) c += blk_counts[(size_t)b * E + e];
        s_count[e] = c;
        s_end[e] = (c + block_m - 1) / block_m * block_m;
    }
    __syncthreads();
    if (t < 32) align_warp_scan(s_end, E);
    __syncthreads();
    for (int e = t; e < E; e += blockDim.x) {
        exp_count[e] = s_count[e];
        exp_end[e] = s_end[e];
        int next = s_end[e] - (s_count[e] + block_m - 1) / block_m * block_m;
        for (int b = 0; b < B; ++b) {
            blk_first[(size_t)b * E + e] = next;
            next += blk_counts[(size_t)b * E + e];
        }
    }
    if (t == 0) *num_post = E > 0 ? s_end[E - 1] : 0;
}

// ... 3. each block fills its share of the padding and tiles, then scatters its pairs.
extern "C" __global__ void align_scatter(const int* __restrict__ ids, int P, int E, int block_m,
                                         int capacity, int max_tiles,
                                         const int* __restrict__ exp_count,
                                         const int* __restrict__ exp_end,
                                         const int* __restrict__ blk_first,
                                         int* __restrict__ sorted_ids, int* __restrict__ expert_ids) {
    __shared__ int s_count[ALIGN_MAX_EXPERTS];
    __shared__ int s_end[ALIGN_MAX_EXPERTS];
    __shared__ int s_first[ALIGN_MAX_EXPERTS];
    __shared__ int s_warp[ALIGN_WARPS][ALIGN_MAX_EXPERTS];
    const int t = threadIdx.x;
    for (int e = t; e < E; e += blockDim.x) {
        s_count[e] = exp_count[e];
        s_end[e] = exp_end[e];
        s_first[e] = blk_first[(size_t)blockIdx.x * E + e];
    }
    __syncthreads();
    const int total = E > 0 ? s_end[E - 1] : 0;
    align_fill(s_end, s_count, E, P, block_m, total, capacity, max_tiles, sorted_ids, expert_ids);
    const int begin = blockIdx.x * ALIGN_PAIRS_PER_BLOCK, end = min(P, begin + ALIGN_PAIRS_PER_BLOCK);
    align_scatter_range(ids, begin, end, E, s_first, s_warp, sorted_ids);
}
// ANCHOR_END: multi_block
