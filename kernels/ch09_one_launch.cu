// ch09_one_launch.cu — the whole router in one launch: bf16 hidden states [T, H], the bf16 gate
// weight [E, H] and the fp32 bias in; the ids and weights [T, k] and chapter 3's layout (sorted
// pair ids, the expert of every tile, the padded total, each expert's count and first slot) out.
//
// The router article's section 8 expects this merge to lose: the gate GEMM is parallel across
// experts (a block per two experts, 144 blocks for 288), the top-k across rows (a warp per row),
// and one kernel that does both seems to need one of the two shapes. The way out is to keep the
// GEMM's grid and let the work that needs all of a row's logits run where they are all known:
//
//   1. every block computes its two experts' logits for its row group with chapter 5's tiny GEMM
//      (ch05/tiny_gemm.cuh, so the same bits), writes them to memory, and takes a ticket from
//      its row group's counter (__threadfence first, so its logits are visible to whoever sees
//      the ticket);
//   2. the block that takes a row group's last ticket knows every logit of those rows is in
//      memory: its 8 warps route the rows with chapter 5's row router (fr_row_screened,
//      ch05/router_screen.cuh: screened sigmoid rows, fr_row for the others), then it
//      takes a ticket from the grid's counter;
//   3. the block that takes the grid's last ticket knows every row is routed: it sorts every pair
//      by expert (one_sort below: chapter 3's warp ranks, a scan, the scatter) and zeroes the
//      counters for the next call. With one row group (T <= ROWS: every decode batch) the block
//      of step 2 is that block already, and goes on without the second ticket; with one row, the
//      warp that routed it lays it out alone (align_one_row, ch03/align.cuh): no sort.
//
// No block waits for another: a block that is not last simply ends. So nothing assumes how many
// blocks are resident at once, there is no grid-wide barrier, and the whole GPU computes the
// logits as the tiny GEMM does. The price is the logits' round trip through memory (L2) and one
// block doing the last two steps alone.
//
// Upstream: none ships this; the router article (section 8) describes DeepGEMM's Mega-Gate for
// SM100, which builds the gate GEMM like a large GEMM with bulk copies and a separate group of
// warps for the top-k, and returns only ids: the expert kernel still counts and sorts.
//
// Differences from chapters 5 and 8 (what the tests check): the logits are chapter 5's tiny GEMM's
// CUDA-core form at every row count (chapter 5 switches to its tensor-core form from 8 rows, which
// sums in another order), and from those logits the ids, weights and layout are chapter 8's
// stage's, bit for bit.
//
// Limits: E <= ONE_MAX_EXPERTS (the sort's table), k <= 32, H a multiple of 8 (chapter 5's).
#include "common.cuh"
#include "ch05/tiny_gemm.cuh"
#include "ch05/router_screen.cuh"
#include "ch03/align.cuh"

#define ONE_THREADS 256       // = TINY_THREADS: 8 warps
#define ONE_WARPS 8
#define ONE_MAX_EXPERTS 512   // the sort's per-warp table and its scan (4 experts per thread)

// ANCHOR: scan
// An exclusive prefix sum over s_val[0..n), n <= 4 * ONE_THREADS, in place; returns the total.
// Thread t adds entries 4t .. 4t+3, the warps' sums by shuffles, the block's in warp order.
__device__ __forceinline__ int one_block_scan(int* s_val, int n, int* s_warp_sum) {
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
    int local[4], sum = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int idx = 4 * t + i;
        local[i] = idx < n ? s_val[idx] : 0;
        sum += local[i];
    }
    const int incl = align_warp_inclusive(sum);
    if (lane == 31) s_warp_sum[warp] = incl;
    __syncthreads();
    int before = 0, total = 0;
#pragma unroll
    for (int w = 0; w < ONE_WARPS; ++w) {
        const int x = s_warp_sum[w];
        before += w < warp ? x : 0;
        total += x;
    }
    int run = before + incl - sum;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int idx = 4 * t + i;
        if (idx < n) s_val[idx] = run;
        run += local[i];
    }
    __syncthreads();
    return total;
}
// ANCHOR_END: scan

// ANCHOR: sort
// Every pair of ids [P] sorted by expert in one block (chapter 3's layout; counts and offsets
// too): warp w owns the w-th eighth of the pairs and counts them 32 at a time by ballot ranks
// into its row of a [warp][expert] table; the experts' padded counts are scanned into first
// slots; each warp's cursor per expert starts after the earlier warps' pairs; the scatter goes
// 32 pairs at a time, in order. The ids were written by other blocks: read through the L2.
__device__ __forceinline__ void one_sort(const int* ids, int P, int E, int block_m, int capacity, int max_tiles,
                         int* __restrict__ sorted_ids, int* __restrict__ expert_ids,
                         int* __restrict__ num_post, int* __restrict__ counts,
                         int* __restrict__ offsets) {
    __shared__ int s_warp[ONE_WARPS * ONE_MAX_EXPERTS];  // per-warp counts, then cursors
    __shared__ int s_first[ONE_MAX_EXPERTS];             // padded counts, then first slots
    __shared__ int s_end[ONE_MAX_EXPERTS];               // the end of each padded run
    __shared__ int s_warp_sum[ONE_WARPS];
    const int t = threadIdx.x, lane = t & 31, warp = t >> 5, bits = align_key_bits(E);
    for (int i = t; i < ONE_WARPS * E; i += ONE_THREADS) s_warp[i] = 0;
    for (int s = t; s < capacity; s += ONE_THREADS) sorted_ids[s] = P;
    for (int tile = t; tile < max_tiles; tile += ONE_THREADS) expert_ids[tile] = -1;
    __syncthreads();
    const int per_warp = (P + ONE_WARPS - 1) / ONE_WARPS;
    const int w_begin = min(P, warp * per_warp), w_end = min(P, (warp + 1) * per_warp);
    // 1. Each warp's pairs per expert.
    for (int base = w_begin; base < w_end; base += 32) {
        const int p = base + lane, e = p < w_end ? __ldcg(&ids[p]) : -1;
        const bool valid = e >= 0 && e < E;
        const unsigned same = align_same_key(valid ? e : E, bits);
        if (valid && (same & ((1u << lane) - 1)) == 0) s_warp[warp * E + e] += __popc(same);
        __syncwarp();
    }
    __syncthreads();
    // 2. Each expert's count, padded, then scanned into first slots.
    for (int e = t; e < E; e += ONE_THREADS) {
        int c = 0;
        for (int w = 0; w < ONE_WARPS; ++w) c += s_warp[w * E + e];
        counts[e] = c;
        s_first[e] = align_pad(c, block_m);
    }
    __syncthreads();
    const int total = one_block_scan(s_first, E, s_warp_sum);
    // 3. Each warp's first slot per expert; the runs' ends for the tiles.
    for (int e = t; e < E; e += ONE_THREADS) {
        const int first = s_first[e];
        offsets[e] = first;
        int next = first;
        for (int w = 0; w < ONE_WARPS; ++w) {
            const int c = s_warp[w * E + e];
            s_warp[w * E + e] = next;
            next += c;
        }
        s_end[e] = first + align_pad(next - first, block_m);
    }
    if (t == 0) {
        offsets[E] = total;
        *num_post = total;
    }
    __syncthreads();
    // 4. The tiles that hold pairs.
    const int tiles = total >> (__ffs(block_m) - 1);
    for (int tile = t; tile < tiles; tile += ONE_THREADS)
        expert_ids[tile] = align_expert_of_slot(s_end, E, tile * block_m);
    // 5. The scatter, 32 pairs at a time per warp, in order.
    for (int base = w_begin; base < w_end; base += 32) {
        const int p = base + lane, e = p < w_end ? __ldcg(&ids[p]) : -1;
        const bool valid = e >= 0 && e < E;
        const unsigned same = align_same_key(valid ? e : E, bits);
        const int rank = __popc(same & ((1u << lane) - 1));
        if (valid) sorted_ids[s_warp[warp * E + e] + rank] = p;
        __syncwarp();
        if (valid && rank == 0) s_warp[warp * E + e] += __popc(same);
        __syncwarp();
    }
}
// ANCHOR_END: sort

// ANCHOR: one_launch
// Grid (ceil(E / 2), ceil(T / ROWS)), ONE_THREADS threads: block (bx, by) is chapter 5's tiny GEMM
// block for experts 2bx, 2bx+1 and rows [by ROWS, by ROWS + ROWS). logits [T, E] is scratch;
// group_tickets [gridDim.y] and *grid_ticket are zero on entry and left zero.
template <int ROWS, int SLOTS>
__device__ void one_launch(const __nv_bfloat16* __restrict__ hidden,
                           const __nv_bfloat16* __restrict__ gate,
                           const float* __restrict__ bias, int T, int H, int E, int k, int scoring,
                           int n_group, int topk_group, int renormalize, float scale,
                           int block_m, int capacity, int max_tiles, float* logits,
                           unsigned* group_tickets, unsigned* grid_ticket, int* ids,
                           float* __restrict__ weights, int* __restrict__ sorted_ids,
                           int* __restrict__ expert_ids, int* __restrict__ num_post,
                           int* __restrict__ counts, int* __restrict__ offsets) {
    __shared__ bool s_last;
    const int warp = threadIdx.x >> 5;
    // 1. This block's logits (chapter 5's tiny GEMM, the same instructions), then its ticket.
    tiny_gemm<ROWS>(hidden, gate, logits, T, H, E);
    __threadfence();  // every thread's logits visible to the GPU before the ticket is taken
    __syncthreads();
    if (threadIdx.x == 0)
        s_last = atomicAdd(&group_tickets[blockIdx.y], 1u) == gridDim.x - 1;
    __syncthreads();
    if (!s_last) return;  // another block will route these rows
    // 2. The row group's last block: every logit of its rows is in memory. Route them, a warp per
    //    row (chapter 5's row router reads the logits through the L2), then the grid's ticket.
    __threadfence();
    if (threadIdx.x == 0) group_tickets[blockIdx.y] = 0u;  // for the next call
    const int t0 = blockIdx.y * ROWS, rows = min(ROWS, T - t0);
    // One row: warp 0 routes it into shared memory and lays it out alone (align_one_row,
    // ch03/align.cuh), the whole layout; no barrier, no sort for many pairs.
    static_assert(ONE_MAX_EXPERTS <= 32 * ALIGN_ONE_ROW_WORDS, "align_one_row's words");
    __shared__ int s_ids[32];  // k <= 32
    const bool one = T == 1;   // block-uniform
    int* route_ids = one ? s_ids : ids;
    for (int r = warp; r < rows; r += ONE_WARPS)
        fr_row_screened<SLOTS, true>(logits, bias, route_ids, weights, t0 + r, E, k, scoring,
                                     n_group, topk_group, renormalize, scale);
    if (one) {
        if (warp == 0)
            align_one_row(s_ids, E, k, block_m, capacity, max_tiles, ids, sorted_ids, expert_ids,
                          num_post, counts, offsets);
        return;
    }
    if (gridDim.y > 1) {
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) s_last = atomicAdd(grid_ticket, 1u) == gridDim.y - 1;
        __syncthreads();
        if (!s_last) return;
        __threadfence();
        if (threadIdx.x == 0) *grid_ticket = 0u;
    } else {
        // One row group (T <= ROWS): this block routed every row, so it is the grid's last block
        // already; the barrier makes its ids visible to all of its threads. No second ticket.
        __syncthreads();
    }
    // 3. The grid's last block: every row is routed. The bookkeeping of every pair.
    one_sort(ids, T * k, E, block_m, capacity, max_tiles, sorted_ids, expert_ids, num_post, counts,
             offsets);
}
// ANCHOR_END: one_launch

// Entry points: block heights 1, 4 and 16 rows (the host picks the smallest that holds min(T, 16);
// the height does not change a logit's bits) times the row widths of chapters 5 and 8.
#define ONE_ENTRY(R, W, SLOTS)                                                                     \
    extern "C" __global__ void __launch_bounds__(ONE_THREADS) one_launch_r##R##_e##W(              \
        const __nv_bfloat16* __restrict__ hidden, const __nv_bfloat16* __restrict__ gate,          \
        const float* __restrict__ bias, int T, int H, int E, int k, int scoring, int n_group,      \
        int topk_group, int renormalize, float scale, int block_m, int capacity, int max_tiles,    \
        float* logits, unsigned* group_tickets, unsigned* grid_ticket, int* ids,                   \
        float* __restrict__ weights, int* __restrict__ sorted_ids, int* __restrict__ expert_ids,   \
        int* __restrict__ num_post, int* __restrict__ counts, int* __restrict__ offsets) {         \
        one_launch<R, SLOTS>(hidden, gate, bias, T, H, E, k, scoring, n_group, topk_group,         \
                             renormalize, scale, block_m, capacity, max_tiles, logits,             \
                             group_tickets, grid_ticket, ids, weights, sorted_ids, expert_ids,     \
                             num_post, counts, offsets);                                           \
    }
#define ONE_WIDTHS(R)     \
    ONE_ENTRY(R, 128, 4)  \
    ONE_ENTRY(R, 256, 8)  \
    ONE_ENTRY(R, 288, 9)  \
    ONE_ENTRY(R, 320, 10) \
    ONE_ENTRY(R, 384, 12) \
    ONE_ENTRY(R, 512, 16)

ONE_WIDTHS(1)
ONE_WIDTHS(4)
ONE_WIDTHS(16)
