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
//   rank     inside a warp, the lanes holding the same expert are found with one ballot per bit
//            of the expert id (9 for 288 experts): a pair's rank among them is the number of
//            such lanes before it, and the lowest such lane speaks for them all;
//   count    per (warp, expert) counts in shared memory, written by those lowest lanes: no
//            atomics at all, so nothing depends on the order threads arrive in;
//   scan     padded counts -> each expert's first slot (a prefix sum over E, one expert per
//            thread: shuffles inside a warp, then the warps' totals);
//   scatter  a pair's slot = its expert's first slot + the pairs of that expert in earlier warps
//            (and blocks) + its rank in its warp. Pair order is kept at every level.
// Up to ALIGN_ONE_BLOCK_MAX_PAIRS pairs (one pair per thread), one block does it all in one
// launch (decode sizes). Above, two launches: each block counts its share of the pairs, then each
// block re-derives the scan from all blocks' counts (a few loads per expert) and scatters its
// share; a third launch for the scan alone would cost more than the work it saves.
//
// For measuring only: the `_arrival` twins take a pair's rank from an atomicAdd on a shared
// per-expert cursor instead, the way vLLM and SGLang scatter. Their runs hold the same pairs but
// in the order threads reach the atomic, which changes from run to run; the bench times both to
// show what the stable order costs.
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
#define ALIGN_MAX_EXPERTS 512           // experts: one per thread in the scan; 9-bit ids
#define ALIGN_ONE_BLOCK_MAX_PAIRS 512   // up to this many pairs (one per thread), one block
#define ALIGN_MIN_PAIRS_PER_BLOCK 512   // the two-launch path gives a block at least this many
#define ALIGN_MAX_BLOCKS 64             // ... and uses at most this many blocks

#include "ch03/align.cuh"

// ANCHOR: one_block
// All of it in one block, one pair per thread, for up to ALIGN_ONE_BLOCK_MAX_PAIRS pairs: one
// launch, one read of the ids, five barriers. The block has a thread per pair and per expert, in
// whole warps (at most ALIGN_THREADS): thread t holds pair t and, in the scan, expert t.
template <bool kStable>
__device__ void align_one_block_body(const int* __restrict__ ids, int P, int E, int block_m,
                                     int capacity, int max_tiles, int* __restrict__ sorted_ids,
                                     int* __restrict__ expert_ids, int* __restrict__ num_post) {
    __shared__ int s_warp[ALIGN_WARPS * ALIGN_MAX_EXPERTS];  // [warp][expert], row stride E
    __shared__ int s_start[ALIGN_MAX_EXPERTS];  // padded count, then first slot, per expert
    __shared__ int s_warp_sum[ALIGN_WARPS];
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5, block_warps = blockDim.x >> 5;
    const int e = t < P ? ids[t] : -1;
    const bool valid = e >= 0 && e < E;
    const int warps = (P + 31) / 32;  // the warps that hold pairs
    // Placeholders and -1 everywhere first (coalesced); the barriers below order the overwrites.
    for (int s = t; s < capacity; s += blockDim.x) sorted_ids[s] = P;
    for (int tile = t; tile < max_tiles; tile += blockDim.x) expert_ids[tile] = -1;
    for (int i = t; i < warps * E; i += blockDim.x) s_warp[i] = 0;
    for (int i = t; i < E; i += blockDim.x) s_start[i] = 0;
    // 1. rank: this pair's rank among the pairs of its expert in its warp (stable), or in the
    //    block by arrival (the measured twin).
    unsigned same = 0;
    int rank = 0;
    if (kStable) {
        same = align_same_key(valid ? e : E, align_key_bits(E));
        rank = __popc(same & ((1u << lane) - 1));
    }
    __syncthreads();
    if (kStable) {
        if (valid && rank == 0) s_warp[warp * E + e] = __popc(same);
    } else if (valid) {
        rank = atomicAdd(&s_warp[e], 1);  // row 0 as one counter per expert: arrival order
    }
    __syncthreads();
    // 2. count: the first pair of each expert adds the expert's pairs over the warps and pads.
    int count = 0;
    if (valid) {
        if (kStable) {
            for (int w = 0; w < warp; ++w) rank += s_warp[w * E + e];  // earlier warps' pairs
            if (rank == 0)
                for (int w = warp; w < warps; ++w) count += s_warp[w * E + e];
        } else if (rank == 0) {
            count = s_warp[e];
        }
        if (rank == 0) s_start[e] = align_pad(count, block_m);
    }
    __syncthreads();
    // 3. scan: thread t holds expert t's padded count; its first slot is the sum before it.
    const int padded = t < E ? s_start[t] : 0;
    const int incl = align_warp_inclusive(padded);
    if (lane == 31) s_warp_sum[warp] = incl;
    __syncthreads();
    int before = 0, total = 0;
#pragma unroll
    for (int w = 0; w < ALIGN_WARPS; ++w) {
        if (w >= block_warps) break;
        const int x = s_warp_sum[w];
        before += w < warp ? x : 0;
        total += x;
    }
    if (t < E) s_start[t] = before + incl - padded;
    __syncthreads();
    // 4. scatter; the first pair of each expert also writes its run's tiles.
    if (valid) {
        const int first = s_start[e];
        sorted_ids[first + rank] = t;
        if (rank == 0) {
            const int shift = __ffs(block_m) - 1;  // log2(block_m)
            const int end = first + align_pad(count, block_m);
            for (int tile = first >> shift; tile < end >> shift; ++tile) expert_ids[tile] = e;
        }
    }
    if (t == 0) *num_post = total;
}

extern "C" __global__ void align_one_block(const int* __restrict__ ids, int P, int E, int block_m,
                                           int capacity, int max_tiles, int* __restrict__ sorted_ids,
                                           int* __restrict__ expert_ids, int* __restrict__ num_post) {
    align_one_block_body<true>(ids, P, E, block_m, capacity, max_tiles, sorted_ids, expert_ids, num_post);
}
// ANCHOR_END: one_block

extern "C" __global__ void align_one_block_arrival(const int* __restrict__ ids, int P, int E,
                                                   int block_m, int capacity, int max_tiles,
                                                   int* __restrict__ sorted_ids,
                                                   int* __restrict__ expert_ids,
                                                   int* __restrict__ num_post) {
    align_one_block_body<false>(ids, P, E, block_m, capacity, max_tiles, sorted_ids, expert_ids, num_post);
}

// ANCHOR: multi_block
// Above ALIGN_ONE_BLOCK_MAX_PAIRS: 1. each block counts its `per_block` pairs per expert into
// blk_counts [B, E] (integer atomics in shared memory: a sum of ones, exact in any order) ...
extern "C" __global__ void align_count(const int* __restrict__ ids, int P, int E, int per_block,
                                       int capacity, int max_tiles, int* __restrict__ blk_counts,
                                       int* __restrict__ sorted_ids, int* __restrict__ expert_ids) {
    __shared__ int s_count[ALIGN_MAX_EXPERTS];
    const int t = threadIdx.x;
    // ... and fills every slot with the placeholder and every tile with -1 (coalesced, over the
    // grid): the second launch overwrites the pairs' slots and the tiles that hold pairs.
    const int stride = gridDim.x * blockDim.x, g = blockIdx.x * blockDim.x + t;
    for (int s = g; s < capacity; s += stride) sorted_ids[s] = P;
    for (int tile = g; tile < max_tiles; tile += stride) expert_ids[tile] = -1;
    const int begin = blockIdx.x * per_block, end = min(P, begin + per_block);
    for (int e = t; e < E; e += blockDim.x) s_count[e] = 0;
    __syncthreads();
    for (int p = begin + t; p < end; p += blockDim.x) {
        const int e = ids[p];
        if (e >= 0 && e < E) atomicAdd(&s_count[e], 1);
    }
    __syncthreads();
    for (int e = t; e < E; e += blockDim.x) blk_counts[(size_t)blockIdx.x * E + e] = s_count[e];
}

// ... 2. every block sums the counts per expert (and those of the blocks before it), pads and
// scans them, writes its share of the tiles' experts, and scatters its pairs. Warp w owns
// the w-th sixteenth of the block's pairs and places them 32 at a time, in order.
template <bool kStable>
__device__ void align_scatter_body(const int* __restrict__ ids, int P, int E, int block_m,
                                   int per_block, const int* __restrict__ blk_counts,
                                   int* __restrict__ sorted_ids,
                                   int* __restrict__ expert_ids, int* __restrict__ num_post) {
    __shared__ int s_warp[ALIGN_WARPS * ALIGN_MAX_EXPERTS];  // [warp][expert]: counts, then cursors
    __shared__ int s_end[ALIGN_MAX_EXPERTS];                 // inclusive end of each padded run
    __shared__ int s_warp_sum[ALIGN_WARPS];
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5, b = blockIdx.x;
    const int bits = align_key_bits(E);
    // Expert t: its pairs in all blocks and in the blocks before this one.
    int count = 0, earlier = 0;
    if (t < E)
        for (int bb = 0; bb < gridDim.x; ++bb) {
            const int c = blk_counts[(size_t)bb * E + t];
            count += c;
            earlier += bb < b ? c : 0;
        }
    const int padded = t < E ? align_pad(count, block_m) : 0;
    const int incl = align_warp_inclusive(padded);
    if (lane == 31) s_warp_sum[warp] = incl;
    for (int i = t; i < ALIGN_WARPS * E; i += blockDim.x) s_warp[i] = 0;
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < ALIGN_WARPS; ++w) {
        const int x = s_warp_sum[w];
        before += w < warp ? x : 0;
        total += x;
    }
    const int start = before + incl - padded;  // expert t's first slot
    if (t < E) s_end[t] = start + padded;
    // This block's pairs: warp w's contiguous share [w_begin, w_end).
    const int begin = b * per_block, n = max(0, min(P, begin + per_block) - begin);
    const int per_warp = (n + ALIGN_WARPS - 1) / ALIGN_WARPS;
    const int w_begin = begin + min(n, warp * per_warp), w_end = begin + min(n, (warp + 1) * per_warp);
    if (kStable)
        for (int base = w_begin; base < w_end; base += 32) {
            const int p = base + lane, e = p < w_end ? ids[p] : -1;
            const bool valid = e >= 0 && e < E;
            const unsigned same = align_same_key(valid ? e : E, bits);
            if (valid && (same & ((1u << lane) - 1)) == 0) s_warp[warp * E + e] += __popc(same);
            __syncwarp();  // the next lowest lane of this expert reads what this one wrote
        }
    __syncthreads();
    // Per expert, the warps' first slots (stable), or one cursor in row 0 (arrival).
    if (t < E) {
        int next = start + earlier;
        if (kStable)
            for (int w = 0; w < ALIGN_WARPS; ++w) {
                const int c = s_warp[w * E + t];
                s_warp[w * E + t] = next;
                next += c;
            }
        else
            s_warp[t] = next;
    }
    __syncthreads();
    // The tiles that hold pairs, dealt out over the grid (align_count wrote -1 and the
    // placeholders everywhere).
    const int stride = gridDim.x * blockDim.x, g = b * blockDim.x + t;
    const int tiles = total >> (__ffs(block_m) - 1);
    for (int tile = g; tile < tiles; tile += stride)
        expert_ids[tile] = align_expert_of_slot(s_end, E, tile * block_m);
    if (g == 0) *num_post = total;
    // The scatter, 32 pairs at a time per warp.
    for (int base = w_begin; base < w_end; base += 32) {
        const int p = base + lane, e = p < w_end ? ids[p] : -1;
        const bool valid = e >= 0 && e < E;
        if (!kStable) {
            if (valid) sorted_ids[atomicAdd(&s_warp[e], 1)] = p;
            continue;
        }
        const unsigned same = align_same_key(valid ? e : E, bits);
        const int rank = __popc(same & ((1u << lane) - 1));
        if (valid) sorted_ids[s_warp[warp * E + e] + rank] = p;
        __syncwarp();
        if (valid && rank == 0) s_warp[warp * E + e] += __popc(same);  // the lowest lane advances it
        __syncwarp();
    }
}

extern "C" __global__ void align_scatter(const int* __restrict__ ids, int P, int E, int block_m,
                                         int per_block, const int* __restrict__ blk_counts,
                                         int* __restrict__ sorted_ids, int* __restrict__ expert_ids,
                                         int* __restrict__ num_post) {
    align_scatter_body<true>(ids, P, E, block_m, per_block, blk_counts,
                             sorted_ids, expert_ids, num_post);
}
// ANCHOR_END: multi_block

extern "C" __global__ void align_scatter_arrival(const int* __restrict__ ids, int P, int E,
                                                 int block_m, int per_block,
                                                 const int* __restrict__ blk_counts,
                                                 int* __restrict__ sorted_ids,
                                                 int* __restrict__ expert_ids,
                                                 int* __restrict__ num_post) {
    align_scatter_body<false>(ids, P, E, block_m, per_block, blk_counts,
                              sorted_ids, expert_ids, num_post);
}
