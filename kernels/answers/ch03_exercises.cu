// ch03_exercises.cu -- the answer to the kernel of chapter 3's exercise 2 (the stub is
// kernels/ch03_exercises.cu). Built in place of the stub with `--features answers`.
//
// Upstream: the scatter of vLLM's and SGLang's moe_align_block_size, count_and_sort_expert_tokens_kernel
// (`rank_post_pad = atomicAdd(&cumsum_buffer[expert_id], 1); sorted_token_ids[rank_post_pad] = i;`),
// here in one block.
//
// Differences: one block does the counting, the scan and the scatter (on their large path, vLLM
// and SGLang count in one kernel and scatter from a grid of blocks in a second); ids outside 0..E
// are skipped; tiles past the total hold -1.
#include "common.cuh"

#define EX_THREADS 512        // one block of this many threads
#define EX_MAX_EXPERTS 1024   // experts the block keeps counters and cursors for

// ANCHOR: atomic_cursor
// Exercise 2: count, scan, fill, then scatter through a cursor per expert. The counts and the
// scan are exact whatever the order of the atomics (a sum of ones); the scatter is not: the slot a
// pair gets is the number of pairs of its expert that took a slot before it, and on a GPU that is
// the order in which threads of different warps reach the atomicAdd, which changes from run to
// run. Every expert's run holds the same pairs each time; their order within the run does not.
extern "C" __global__ void ex_align_atomic_cursor(const int* __restrict__ ids, int P, int E, int block_m,
                                                  int capacity, int max_tiles, int* __restrict__ sorted_ids,
                                                  int* __restrict__ expert_ids, int* __restrict__ num_post) {
    __shared__ int s_count[EX_MAX_EXPERTS];
    __shared__ int s_cursor[EX_MAX_EXPERTS + 1];  // first slot of each expert, then its next free one
    const int t = threadIdx.x;
    for (int e = t; e < E; e += blockDim.x) s_count[e] = 0;
    __syncthreads();
    for (int p = t; p < P; p += blockDim.x) {
        const int e = ids[p];
        if (e >= 0 && e < E) atomicAdd(&s_count[e], 1);
    }
    __syncthreads();
    if (t == 0) {  // a serial scan: E adds on one thread (the chapter's kernel scans with a warp)
        int sum = 0;
        for (int e = 0; e < E; ++e) {
            s_cursor[e] = sum;
            sum += (s_count[e] + block_m - 1) / block_m * block_m;
        }
        s_cursor[E] = sum;
        *num_post = sum;
    }
    for (int s = t; s < capacity; s += blockDim.x) sorted_ids[s] = P;
    for (int tile = t; tile < max_tiles; tile += blockDim.x) expert_ids[tile] = -1;
    __syncthreads();  // the block's global writes above are seen by the block below
    for (int e = t; e < E; e += blockDim.x)
        for (int s = s_cursor[e]; s < s_cursor[e + 1]; s += block_m) expert_ids[s / block_m] = e;
    __syncthreads();  // the cursors are read above and moved below
    for (int p = t; p < P; p += blockDim.x) {
        const int e = ids[p];
        if (e >= 0 && e < E) sorted_ids[atomicAdd(&s_cursor[e], 1)] = p;
    }
}
// ANCHOR_END: atomic_cursor
