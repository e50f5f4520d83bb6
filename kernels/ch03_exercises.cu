// ch03_exercises.cu -- the kernel of chapter 3's exercise 2, as a stub for you to write. The
// tests in chapters/ch03-align/tests/exercises.rs fail until you do; `tools/steps exercises 3`
// runs them. The answer is in kernels/answers/ch03_exercises.cu (read it after trying).
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

// Exercise 2: the whole bookkeeping of kernels/ch03_align_block_size.cu in one block, with the
// scatter written the way the production engines write it: each expert's cursor starts at its
// first slot, and every pair takes the next slot of its expert with an integer atomicAdd on the
// cursor. Same buffers as align_one_block:
//   ids [P] i32; sorted_ids [capacity] (every slot not holding a pair holds P); expert_ids
//   [max_tiles] (the expert of each tile, -1 past the last); num_post [1] (the padded total).
// Ids outside 0..E are skipped: never counted, never written. Launched with one block of
// EX_THREADS threads, for any P and E <= EX_MAX_EXPERTS.
// Within an expert the pairs may come out in any order (that is the point of the exercise): the
// test checks each expert's run as a set.
extern "C" __global__ void ex_align_atomic_cursor(const int* __restrict__ ids, int P, int E, int block_m,
                                                  int capacity, int max_tiles, int* __restrict__ sorted_ids,
                                                  int* __restrict__ expert_ids, int* __restrict__ num_post) {
    // TODO(exercise 2): count into shared memory, scan the padded counts into each expert's first
    // slot (the cursors), fill the placeholders and the tile -> expert list, then scatter with
    // atomicAdd on the cursors. Mind the barriers between the steps.
}
