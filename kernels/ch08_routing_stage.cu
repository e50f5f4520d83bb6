// ch08_routing_stage.cu — the routing stage: fp32 logits [T, E] and the bias in; the ids and
// weights [T, k], and chapter 3's layout (the pairs sorted by expert and padded to BLOCK_M, the
// expert of every tile, the padded total), with each expert's count and first slot, out.
//
// Chapter 6's layer routes with chapter 5's fused router (ids and weights to memory), then
// chapter 3's align reads the ids back and sorts them: two or three launches, and the ids make a
// round trip through memory between them. Here the router and the bookkeeping are one stage:
//
//   one block (stage_one_block_e{W}, up to STAGE_ONE_BLOCK_MAX_PAIRS pairs, one launch; from 17
//            rows stage_one_block_wide_e{W}, 32 warps, so that a warp still routes one row, and
//            the sort on the first 16 alone):
//            the block's warps route the rows with chapter 5's row router (a warp per row:
//            fr_row_screened, ch05/router_screen.cuh: sigmoid rows screened on approximate keys
//            as chapter 5's few-row kernel does, the others by fr_row's k rounds of warp
//            argmax), the ids into shared memory; then the
//            same threads hold one pair each and sort them as chapter 3's one-block kernel does
//            (ranks by ballots, per-warp counts, a scan over the experts, the scatter). The ids
//            never leave the SM until they are final.
//   two launches (more pairs):
//      1. stage_route_count_e{W}: a block routes 16 rows (a warp per row, as chapter 5's
//         many-row kernel: fr_row_screened, its many-row form) into shared memory,
//         writes the ids out, counts its pairs per expert in shared memory and adds the counts
//         into its chunk's row of chunk_counts [chunks, E] (integer atomics: a sum of whole
//         numbers, the same in any order); it also fills every slot with the placeholder;
//      2. stage_scatter: a block per chunk sums the chunks' counts per expert, scans, writes the
//         tiles' experts and scatters its chunk's pairs in order (chapter 3's multi-block
//         scatter). The last block to finish (a ticket in device memory) sets chunk_counts and
//         the ticket back to zero for the next call: no memset launch, nothing to wait for.
//
// Both give chapter 5's ids and weights (the screened and the exact router give the same bits)
// and chapter 3's layout (a stable sort
// is unique): the same bits as the pair + align, on every backend.
//
// Upstream: the routing kernels that FlashInfer took from TensorRT-LLM for its expert kernels
// (`routingDeepSeek`, `routingRenormalize` in trtllm-gen's MoE runner) take the logits and the
// bias, and one routing stage does the scores, the top-k, the counts and the permutation,
// arranged by row count (one small kernel for few rows, then more).
//
// Differences:
// - The row router is chapter 5's, instruction for instruction (so the same ids and weights, bit
//   for bit, as the pair): every family of chapter 1, grouped selection included.
// - Stable inside an expert (pairs in ascending order), as chapter 3: the layout is a pure
//   function of the routing; the counts are integer sums; no float atomics anywhere.
// - Limits: E <= STAGE_MAX_EXPERTS (one expert per thread in the scan), k <= 32 (chapter 5).
#include "common.cuh"
#include "ch05/router_screen.cuh"
#include "ch03/align.cuh"

#define STAGE_THREADS 512              // threads of every block (16 warps) but the wide one
// Two switches, each timed on its own on the H200 (MOE_NVRTC_DEFINES=NAME=VALUE; the results
// README has the runs): the screened row router won at most row counts of sigmoid rows, so it
// stays; the early trigger made the stage a quarter slower from 4096 rows and is off (the
// suspect, not measured: stage_scatter's blocks, started at once, hold SMs while they wait).
#ifndef STAGE_SCREEN  // 1: route with chapter 5's screened row router; 0: fr_row alone
#define STAGE_SCREEN 1
#endif
#ifndef STAGE_EARLY_TRIGGER  // 1: stage_route_count lets stage_scatter's blocks start at once
#define STAGE_EARLY_TRIGGER 0
#endif
// STAGE_SHORT_CHAIN=1 shortens the two launches' chains of dependent memory reads:
// stage_route_count routes its rows' ids into shared memory and counts from there (not a
// read-back of what it just stored), and stage_scatter issues each warp's first 32 ids loads
// together with the chunk counts' loads (one wait for both, not one after the other). Timed
// against 0 in one call on an H100 (the H200 results README has the run): a small gain, well
// under the half microsecond predicted. On; CI runs the stage's emulator tests with it off too.
#ifndef STAGE_SHORT_CHAIN
#define STAGE_SHORT_CHAIN 1
#endif
// Two switches for the one-block arrangement's few rows, the same bits either way, timed on an
// H100 (two calls, each switch's own A/B in the cycle probe and both together in the bench; the
// H200 results README has the runs): on. CI runs the stage's emulator tests with them off too.
// STAGE_SPARE_WARPS=1: with fewer rows than warps, the warps without a row write the
// placeholders and zeros while the others route, instead of every warp writing its share first
// (about 500 to 700 cycles less at 1 and 4 rows in the probe).
#ifndef STAGE_SPARE_WARPS
#define STAGE_SPARE_WARPS 1
#endif
// STAGE_FEW_ROWS=1: with no more rows than BLOCK_M (and at most 32), the sort after the route
// takes one barrier, not four (stage_few_rows; about 900 cycles less at 1, 4 and 16 rows).
#ifndef STAGE_FEW_ROWS
#define STAGE_FEW_ROWS 1
#endif
#ifndef STAGE_PROBE  // phase marks for tools/gpu/probes/ch08_stage_phases.cu; empty here
#define STAGE_PROBE(n)
#endif
#define STAGE_WARPS 16                 // = STAGE_THREADS / 32
#define STAGE_WIDE_THREADS 1024        // the wide one block: 32 warps, a warp per row to 32 rows
#define STAGE_WIDE_WARPS 32            // = STAGE_WIDE_THREADS / 32
#define STAGE_MAX_EXPERTS 512          // one expert per thread in the scan
#define STAGE_ONE_BLOCK_MAX_PAIRS 512  // one pair per thread: the one-block arrangement's limit
#define STAGE_ROWS_PER_BLOCK 16        // rows a block of stage_route_count routes (a warp each)
#define STAGE_MAX_CHUNKS 64            // at most this many chunks (blocks of stage_scatter)

// ANCHOR: few_rows
// The sort when no expert can hold more than one tile: T <= BLOCK_M rows, each of which picks an
// expert at most once, so an expert's padded run is BLOCK_M slots when it has a pair and empty
// when not, and its first slot is BLOCK_M times the number of picked experts below it. The route
// has already marked, in shared memory, which rows picked each expert (s_rows[e], bit r: row r)
// and which experts were picked (s_marks, one bit an expert, 32 to a word); integer ORs, the
// same whatever order they land in. From those, after the barrier that ends the route, each
// thread finds what it writes without another barrier:
//   thread x < E, expert x: its count (the bits of s_rows[x]), its first slot (the marks below
//       it: the words of earlier warps' experts summed by one redux, then its own word's lower
//       bits) and, when picked, its one tile;
//   thread p < P, pair p (row p / k): its rank among its expert's pairs (the rows before its own
//       in s_rows[e]: the sort is stable) and so its slot.
// The placeholders went out before the barrier.
__device__ __forceinline__ void stage_few_rows(const int* s_ids, const unsigned* s_rows,
                                               const unsigned* s_marks, int P, int E, int k,
                                               int block_m, int* __restrict__ ids,
                                               int* __restrict__ sorted_ids,
                                               int* __restrict__ expert_ids,
                                               int* __restrict__ num_post,
                                               int* __restrict__ counts,
                                               int* __restrict__ offsets) {
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int ew = (E + 31) >> 5;  // the marks' words
    if (warp >= ew && warp * 32 >= P) return;  // warp-uniform: nothing to write
    // Lane i holds word i's number of marks; the marks in the words below the warp's own, and in
    // all of them, are one redux each (every lane of the warp takes part).
    const int n = lane < ew ? __popc(s_marks[lane]) : 0;
    const int below_warp = __reduce_add_sync(MOE_FULL_MASK, lane < warp ? n : 0);
    const int total = __reduce_add_sync(MOE_FULL_MASK, n);
    STAGE_PROBE(5);
    if (t < E) {
        const int below = below_warp + __popc(s_marks[warp] & ((1u << lane) - 1u));
        const int count = __popc(s_rows[t]);
        counts[t] = count;
        offsets[t] = below * block_m;
        if (count > 0) expert_ids[below] = t;
    }
    if (t == 0) {
        offsets[E] = total * block_m;
        *num_post = total * block_m;
    }
    STAGE_PROBE(6);
    // The pairs: the marks below the pair's expert, by a scan of the words' counts over the lanes.
    if (warp * 32 < P) {  // warp-uniform
        const int before_word = align_warp_inclusive(n) - n;  // lane i: marks in words < i
        const int e = t < P ? s_ids[t] : -1;
        const bool valid = e >= 0 && e < E;
        const int w = valid ? e >> 5 : 0;
        const int below = __shfl_sync(MOE_FULL_MASK, before_word, w) +
                          (valid ? __popc(s_marks[w] & ((1u << (e & 31)) - 1u)) : 0);
        if (t < P) ids[t] = e;
        STAGE_PROBE(7);
        if (valid) {
            const int row = t / k;
            const int rank = __popc(s_rows[e] & ((1u << row) - 1u));
            sorted_ids[below * block_m + rank] = t;
        }
    }
}
// ANCHOR_END: few_rows

// The one block's barrier after the route: __syncthreads in the 16-warp block; in the wide one,
// whose last 16 warps leave after the route (they hold no pair and no expert: P, E <= 512), a
// barrier of the first STAGE_THREADS threads alone (bar.sync 1; barrier 0 would count the warps
// that left).
template <int WARPS>
__device__ __forceinline__ void stage_sort_sync() {
    if (WARPS == STAGE_WARPS) {
        __syncthreads();
    } else {
#ifdef MOE_EMU
        moe_named_barrier_sync<1, STAGE_THREADS>();
#else
        asm volatile("bar.sync 1, %0;\n" ::"n"(STAGE_THREADS) : "memory");
#endif
    }
}

// The wide block against the 16-warp one at 24 and 32 rows, the phase probe in one run on an
// H100 (the H100 results README has it): 0.74 to 0.78 of its cycles at 24, 0.87 to 0.89 at 32;
// with all 32 warps through the sort, 0.95 at 24 and 1.06 at 32 (GLM-like).
// ANCHOR: one_block
// One block of WARPS warps (STAGE_WARPS, or STAGE_WIDE_WARPS for 17 to 32 rows, so that a warp
// routes one row), for T * k <= STAGE_ONE_BLOCK_MAX_PAIRS. Outputs as the file's comment says;
// counts [E] and offsets [E + 1] (each expert's first slot, then the total). The pairs are held
// by the first P threads whatever WARPS is (P <= 512: at most 16 warps hold pairs), so the wide
// block's last 16 warps leave after the route (stage_sort_sync).
template <int SLOTS, int WARPS>
__device__ void stage_one_block(const float* __restrict__ logits, const float* __restrict__ bias,
                                int T, int E, int k, int scoring, int n_group, int topk_group,
                                int renormalize, float scale, int block_m, int capacity,
                                int max_tiles, int* __restrict__ ids, float* __restrict__ weights,
                                int* __restrict__ sorted_ids, int* __restrict__ expert_ids,
                                int* __restrict__ num_post, int* __restrict__ counts,
                                int* __restrict__ offsets) {
    __shared__ int s_ids[STAGE_ONE_BLOCK_MAX_PAIRS];          // the routing's ids, pair order
    __shared__ int s_warp[STAGE_WARPS * STAGE_MAX_EXPERTS];   // [warp][expert], row stride E
    __shared__ int s_start[STAGE_MAX_EXPERTS];  // padded count, then first slot, per expert
    __shared__ int s_warp_sum[STAGE_WARPS];
    constexpr int THREADS = WARPS * 32;
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    const int P = T * k, warps = (P + 31) / 32;  // the warps that hold pairs
    // A programmatic dependent of the logits GEMM (common.cuh): wait before the first write, so
    // that nothing here can overtake the kernel ahead, whatever that kernel is.
    STAGE_PROBE(0);
#if STAGE_FEW_ROWS
    // stage_few_rows's marks, zeroed before the wait (so behind the kernel ahead, not after it).
    __shared__ unsigned s_rows[STAGE_MAX_EXPERTS];        // [expert]: bit r, row r picked it
    __shared__ unsigned s_marks[STAGE_MAX_EXPERTS / 32];  // bit e % 32 of word e / 32: e picked
    const bool few = T <= block_m && T <= 32;              // block-uniform
    if (few) {
        for (int x = t; x < E; x += THREADS) s_rows[x] = 0;
        if (t < STAGE_MAX_EXPERTS / 32) s_marks[t] = 0;
        __syncthreads();
    }
#else
    constexpr bool few = false;
#endif
    moe_grid_wait();
    STAGE_PROBE(1);
    // Placeholders, -1 and zeros first; the barriers below order the overwrites.
#if STAGE_SPARE_WARPS
    // With fewer rows than warps, only the warps without a row write them, while the others
    // route; with a row in every warp, every warp writes its share first.
    const int spare = T < WARPS ? T * 32 : 0;  // the first thread without a row
    if (t >= spare) {                          // warp-uniform
        const int i = t - spare, n = THREADS - spare;
        for (int s = i; s < capacity; s += n) sorted_ids[s] = P;
        for (int tile = i; tile < max_tiles; tile += n) expert_ids[tile] = -1;
        if (!few) {  // block-uniform; stage_few_rows reads neither and writes every count
            for (int x = i; x < warps * E; x += n) s_warp[x] = 0;
            for (int x = i; x < E; x += n) {
                s_start[x] = 0;
                counts[x] = 0;
            }
        }
    }
#else
    for (int s = t; s < capacity; s += THREADS) sorted_ids[s] = P;
    for (int tile = t; tile < max_tiles; tile += THREADS) expert_ids[tile] = -1;
    if (!few) {  // block-uniform; stage_few_rows reads neither and writes every count
        for (int i = t; i < warps * E; i += THREADS) s_warp[i] = 0;
        if (t < E) {
            s_start[t] = 0;
            counts[t] = 0;
        }
    }
#endif
    STAGE_PROBE(2);
    // 1. Route: warp w routes rows w, w + WARPS, ...; lane r < k writes pick r into s_ids
    //    (chapter 5's row router takes any pointer: here one into shared memory) and its weight
    //    to memory.
    for (int row = warp; row < T; row += WARPS) {
#if STAGE_SCREEN
        fr_row_screened<SLOTS, true>(logits, bias, s_ids, weights, row, E, k, scoring, n_group,
                                     topk_group, renormalize, scale);
#else
        fr_row<SLOTS>(logits, bias, s_ids, weights, row, E, k, scoring, n_group, topk_group,
                      renormalize, scale);
#endif
#if STAGE_FEW_ROWS
        if (few) {  // the row's picks marked for stage_few_rows (integer ORs: any order)
            __syncwarp();
            if (lane < k) {
                const int e = s_ids[row * k + lane];
                if (e >= 0 && e < E) {
                    atomicOr(&s_rows[e], 1u << row);
                    atomicOr(&s_marks[e >> 5], 1u << (e & 31));
                }
            }
        }
#endif
    }
    STAGE_PROBE(3);
    __syncthreads();
    STAGE_PROBE(4);
    // The sort is the first 16 warps' (every pair and every expert is theirs): the wide block's
    // others are done.
    if (WARPS > STAGE_WARPS && warp >= STAGE_WARPS) return;
#if STAGE_FEW_ROWS
    if (few) {
        stage_few_rows(s_ids, s_rows, s_marks, P, E, k, block_m, ids, sorted_ids, expert_ids,
                       num_post, counts, offsets);
        STAGE_PROBE(8);
        return;
    }
#endif
    // 2. From here thread t holds pair t, as in chapter 3's one-block kernel.
    const int e = t < P ? s_ids[t] : -1;
    if (t < P) ids[t] = e;
    const bool valid = e >= 0 && e < E;
    const unsigned same = align_same_key(valid ? e : E, align_key_bits(E));
    int rank = __popc(same & ((1u << lane) - 1));
    if (valid && rank == 0) s_warp[warp * E + e] = __popc(same);
    stage_sort_sync<WARPS>();
    STAGE_PROBE(5);
    // 3. Count: the first pair of each expert adds its expert's pairs over the warps and pads.
    int count = 0;
    if (valid) {
        for (int w = 0; w < warp; ++w) rank += s_warp[w * E + e];  // earlier warps' pairs
        if (rank == 0) {
            for (int w = warp; w < warps; ++w) count += s_warp[w * E + e];
            s_start[e] = align_pad(count, block_m);
            counts[e] = count;
        }
    }
    stage_sort_sync<WARPS>();
    STAGE_PROBE(6);
    // 4. Scan: thread t holds expert t's padded count; its first slot is the sum before it.
    const int padded = t < E ? s_start[t] : 0;
    const int incl = align_warp_inclusive(padded);
    if (lane == 31) s_warp_sum[warp] = incl;
    stage_sort_sync<WARPS>();
    int before = 0, total = 0;
#pragma unroll
    for (int w = 0; w < STAGE_WARPS; ++w) {
        const int x = s_warp_sum[w];
        before += w < warp ? x : 0;
        total += x;
    }
    if (t < E) {
        s_start[t] = before + incl - padded;
        offsets[t] = before + incl - padded;
    }
    if (t == 0) {
        offsets[E] = total;
        *num_post = total;
    }
    stage_sort_sync<WARPS>();
    STAGE_PROBE(7);
    // 5. Scatter; the first pair of each expert also writes its run's tiles.
    if (valid) {
        const int first = s_start[e];
        sorted_ids[first + rank] = t;
        if (rank == 0) {
            const int shift = __ffs(block_m) - 1;  // log2(block_m)
            const int end = first + align_pad(count, block_m);
            for (int tile = first >> shift; tile < end >> shift; ++tile) expert_ids[tile] = e;
        }
    }
    STAGE_PROBE(8);
}
// ANCHOR_END: one_block

// ANCHOR: route_count
// Launch 1 of 2: grid ceil(T / STAGE_ROWS_PER_BLOCK), STAGE_THREADS threads. Block b routes rows
// [16 b, 16 b + 16) (a warp each), then adds its pairs' counts per expert into row
// b / blocks_per_chunk of chunk_counts [chunks, E] (zero on entry: see stage_scatter).
template <int SLOTS>
__device__ void stage_route_count(const float* __restrict__ logits,
                                  const float* __restrict__ bias, int T, int E, int k, int scoring,
                                  int n_group, int topk_group, int renormalize, float scale,
                                  int blocks_per_chunk, int capacity, int max_tiles,
                                  int* __restrict__ ids, float* __restrict__ weights,
                                  int* __restrict__ sorted_ids, int* __restrict__ expert_ids,
                                  int* __restrict__ chunk_counts) {
    __shared__ int s_count[STAGE_MAX_EXPERTS];
#if STAGE_SHORT_CHAIN
    __shared__ int s_ids[STAGE_ONE_BLOCK_MAX_PAIRS];  // the block's ids, pair order
#endif
    const int t = threadIdx.x, warp = t >> 5, b = blockIdx.x;
    const int P = T * k;
    // A programmatic dependent, as stage_one_block; stage_scatter, a dependent of this launch,
    // may have its blocks resident now (they wait for this grid to finish).
    moe_grid_wait();
#if STAGE_EARLY_TRIGGER
    moe_launch_dependents();
#endif
    // Every slot the placeholder and every tile -1 (coalesced, over the grid): stage_scatter
    // overwrites the pairs' slots and the tiles that hold pairs.
    const int stride = gridDim.x * STAGE_THREADS, g = b * STAGE_THREADS + t;
    for (int s = g; s < capacity; s += stride) sorted_ids[s] = P;
    for (int tile = g; tile < max_tiles; tile += stride) expert_ids[tile] = -1;
    for (int e = t; e < E; e += STAGE_THREADS) s_count[e] = 0;
    const int row0 = b * STAGE_ROWS_PER_BLOCK, row = row0 + warp;
#if STAGE_SHORT_CHAIN
    // The row router writes ids[row * k + r]: here, into s_ids, whose pair 0 is row0's first.
    int* route_ids = s_ids - (size_t)row0 * k;
#else
    int* route_ids = ids;
#endif
    if (row < T)  // the whole warp: a row is a warp's work
#if STAGE_SCREEN
        fr_row_screened<SLOTS, false>(logits, bias, route_ids, weights, row, E, k, scoring,
                                      n_group, topk_group, renormalize, scale);
#else
        fr_row<SLOTS>(logits, bias, route_ids, weights, row, E, k, scoring, n_group, topk_group,
                      renormalize, scale);
#endif
    __syncthreads();  // the block's ids written (and visible to the block), s_count zeroed
    // The block's pairs, one per thread (16 rows * k <= 512 pairs).
    const int p = row0 * k + t, end = min(T, row0 + STAGE_ROWS_PER_BLOCK) * k;
    if (p < end) {
#if STAGE_SHORT_CHAIN
        const int e = s_ids[t];
        ids[p] = e;  // stage_scatter's input, coalesced
#else
        const int e = ids[p];
#endif
        if (e >= 0 && e < E) atomicAdd(&s_count[e], 1);  // integers: exact in any order
    }
    __syncthreads();
    int* row_counts = chunk_counts + (size_t)(b / blocks_per_chunk) * E;
    for (int e = t; e < E; e += STAGE_THREADS) {
        const int c = s_count[e];
        if (c != 0) atomicAdd(&row_counts[e], c);
    }
}
// ANCHOR_END: route_count

// ANCHOR: scatter
// Launch 2 of 2: grid = chunks, STAGE_THREADS threads; chunk c holds pairs
// [c * per_chunk, (c + 1) * per_chunk). Every block sums chunk_counts per expert over all chunks
// (and over the chunks before its own), pads and scans them, writes its share of the tiles'
// experts and scatters its pairs: warp w owns the w-th sixteenth of the chunk's pairs and places
// them 32 at a time, in order (chapter 3's align_scatter). Block 0 also writes counts and
// offsets. The last block to finish zeroes chunk_counts and the ticket.
extern "C" __global__ void __launch_bounds__(STAGE_THREADS) stage_scatter(
    const int* ids, int P, int E, int block_m, int per_chunk,
    int* __restrict__ chunk_counts, unsigned* __restrict__ ticket, int* __restrict__ sorted_ids,
    int* __restrict__ expert_ids, int* __restrict__ num_post, int* __restrict__ counts,
    int* __restrict__ offsets) {
    __shared__ int s_warp[STAGE_WARPS * STAGE_MAX_EXPERTS];  // [warp][expert]: counts, cursors
    __shared__ int s_end[STAGE_MAX_EXPERTS];                 // inclusive end of each padded run
    __shared__ int s_warp_sum[STAGE_WARPS];
    __shared__ bool s_last;
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5, c = blockIdx.x;
    const int chunks = gridDim.x, bits = align_key_bits(E);
    // A programmatic dependent of stage_route_count: the ids and the counts are its output, read
    // after the wait through a plain pointer and __ldcg (see moe_grid_wait in common.cuh).
    moe_grid_wait();
    // This chunk's pairs: warp w's contiguous share [w_begin, w_end) (STAGE_WARP_SHARE).
#define STAGE_WARP_SHARE                                                           \
    const int begin = c * per_chunk, n = max(0, min(P, begin + per_chunk) - begin); \
    const int per_warp = (n + STAGE_WARPS - 1) / STAGE_WARPS;                      \
    const int w_begin = begin + min(n, warp * per_warp);                           \
    const int w_end = begin + min(n, (warp + 1) * per_warp);
#if STAGE_SHORT_CHAIN
    STAGE_WARP_SHARE
    // The warp's first 32 ids, loaded now: their wait overlaps the chunk counts' below.
    const int first_e = w_begin + lane < w_end ? ids[w_begin + lane] : -1;
#endif
    // Expert t: its pairs in all chunks, and in the chunks before this one.
    int count = 0, earlier = 0;
    if (t < E)
        for (int cc = 0; cc < chunks; ++cc) {
            const int n = __ldcg(&chunk_counts[(size_t)cc * E + t]);
            count += n;
            earlier += cc < c ? n : 0;
        }
    const int padded = t < E ? align_pad(count, block_m) : 0;
    const int incl = align_warp_inclusive(padded);
    if (lane == 31) s_warp_sum[warp] = incl;
    for (int i = t; i < STAGE_WARPS * E; i += STAGE_THREADS) s_warp[i] = 0;
    __syncthreads();  // every read of chunk_counts by this block is done
    // The ticket: the block that takes the last one is the last to have read chunk_counts.
    if (t == 0) s_last = atomicAdd(ticket, 1u) == (unsigned)(chunks - 1);
    int before = 0, total = 0;
#pragma unroll
    for (int w = 0; w < STAGE_WARPS; ++w) {
        const int x = s_warp_sum[w];
        before += w < warp ? x : 0;
        total += x;
    }
    const int start = before + incl - padded;  // expert t's first slot
    if (t < E) s_end[t] = start + padded;
    if (c == 0 && t < E) {
        counts[t] = count;
        offsets[t] = start;
    }
    if (c == 0 && t == 0) offsets[E] = total;
#if !STAGE_SHORT_CHAIN
    STAGE_WARP_SHARE
#endif
#undef STAGE_WARP_SHARE
    for (int base = w_begin; base < w_end; base += 32) {
#if STAGE_SHORT_CHAIN
        const int p = base + lane;
        const int e = base == w_begin ? first_e : p < w_end ? ids[p] : -1;
#else
        const int p = base + lane, e = p < w_end ? ids[p] : -1;
#endif
        const bool valid = e >= 0 && e < E;
        const unsigned same = align_same_key(valid ? e : E, bits);
        if (valid && (same & ((1u << lane) - 1)) == 0) s_warp[warp * E + e] += __popc(same);
        __syncwarp();  // the next lowest lane of this expert reads what this one wrote
    }
    __syncthreads();
    if (s_last) {  // all chunks' counts read by every block: zero them for the next call
        for (int i = t; i < chunks * E; i += STAGE_THREADS) chunk_counts[i] = 0;
        if (t == 0) *ticket = 0u;
    }
    // Per expert, the warps' first slots.
    if (t < E) {
        int next = start + earlier;
        for (int w = 0; w < STAGE_WARPS; ++w) {
            const int x = s_warp[w * E + t];
            s_warp[w * E + t] = next;
            next += x;
        }
    }
    __syncthreads();
    // The tiles that hold pairs, dealt out over the grid.
    const int stride = chunks * STAGE_THREADS, g = c * STAGE_THREADS + t;
    const int tiles = total >> (__ffs(block_m) - 1);
    for (int tile = g; tile < tiles; tile += stride)
        expert_ids[tile] = align_expert_of_slot(s_end, E, tile * block_m);
    if (g == 0) *num_post = total;
    // The scatter, 32 pairs at a time per warp.
    for (int base = w_begin; base < w_end; base += 32) {
#if STAGE_SHORT_CHAIN
        const int p = base + lane;
        const int e = base == w_begin ? first_e : p < w_end ? ids[p] : -1;
#else
        const int p = base + lane, e = p < w_end ? ids[p] : -1;
#endif
        const bool valid = e >= 0 && e < E;
        const unsigned same = align_same_key(valid ? e : E, bits);
        const int rank = __popc(same & ((1u << lane) - 1));
        if (valid) sorted_ids[s_warp[warp * E + e] + rank] = p;
        __syncwarp();
        if (valid && rank == 0) s_warp[warp * E + e] += __popc(same);  // the lowest lane advances
        __syncwarp();
    }
}
// ANCHOR_END: scatter

// One one-block entry point: NAME, THREADS threads of WARPS warps, SLOTS experts per lane.
#define STAGE_ONE_BLOCK_ENTRY(NAME, THREADS, WARPS, SLOTS)                                         \
    extern "C" __global__ void __launch_bounds__(THREADS) NAME(                                    \
        const float* __restrict__ logits, const float* __restrict__ bias, int T, int E, int k,     \
        int scoring, int n_group, int topk_group, int renormalize, float scale, int block_m,       \
        int capacity, int max_tiles, int* __restrict__ ids, float* __restrict__ weights,           \
        int* __restrict__ sorted_ids, int* __restrict__ expert_ids, int* __restrict__ num_post,    \
        int* __restrict__ counts, int* __restrict__ offsets) {                                     \
        stage_one_block<SLOTS, WARPS>(logits, bias, T, E, k, scoring, n_group, topk_group,         \
                                      renormalize, scale, block_m, capacity, max_tiles, ids,       \
                                      weights, sorted_ids, expert_ids, num_post, counts, offsets); \
    }

// Three entry points per row width (experts per row, at most): 128, 256, 288, 320, 384 and 512
// (4, 8, 9, 10, 12 and 16 experts per lane), as chapter 5's: the one block of 16 warps, the wide
// one of 32, and the two launches' first.
#define STAGE_ENTRIES(W, SLOTS)                                                                    \
    STAGE_ONE_BLOCK_ENTRY(stage_one_block_e##W, STAGE_THREADS, STAGE_WARPS, SLOTS)                 \
    STAGE_ONE_BLOCK_ENTRY(stage_one_block_wide_e##W, STAGE_WIDE_THREADS, STAGE_WIDE_WARPS, SLOTS)  \
    extern "C" __global__ void __launch_bounds__(STAGE_THREADS) stage_route_count_e##W(            \
        const float* __restrict__ logits, const float* __restrict__ bias, int T, int E, int k,     \
        int scoring, int n_group, int topk_group, int renormalize, float scale,                    \
        int blocks_per_chunk, int capacity, int max_tiles, int* __restrict__ ids,                  \
        float* __restrict__ weights, int* __restrict__ sorted_ids, int* __restrict__ expert_ids,   \
        int* __restrict__ chunk_counts) {                                                          \
        stage_route_count<SLOTS>(logits, bias, T, E, k, scoring, n_group, topk_group, renormalize, \
                                 scale, blocks_per_chunk, capacity, max_tiles, ids, weights,       \
                                 sorted_ids, expert_ids, chunk_counts);                            \
    }

STAGE_ENTRIES(128, 4)
STAGE_ENTRIES(256, 8)
STAGE_ENTRIES(288, 9)
STAGE_ENTRIES(320, 10)
STAGE_ENTRIES(384, 12)
STAGE_ENTRIES(512, 16)
