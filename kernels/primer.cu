// primer.cu — the GPU primer's kernels (book/src/gpu-primer.md), one idea each, run by
// `cargo run --example primer` on the emulator or the GPU.
//
// Upstream: none; these are the smallest kernels that show each word of the primer. The PDL pair
// follows the pattern of chapter 5's router (weights before the wait, the earlier kernel's
// output after it).
//
// Differences: none of these is tuned. The two copies and the bank probe exist to be timed
// against each other; the sums use a fixed tree, so both backends give the same integers.
#include "common.cuh"

#define BLOCK_SUM_THREADS 256  // threads of primer_block_sum's block (its shared array's length)
#define BANK_WORDS 1024        // primer_banks' shared array: 32 rows of 32 four-byte words
#define BANK_ROUNDS 4096       // reads per thread in primer_banks

// ANCHOR: whoami
// Every thread writes who it is: out[4 g + 0..3] = its block, its warp in the block, its lane in
// the warp, and its global index g. One-dimensional grid and block.
extern "C" __global__ void primer_whoami(int* __restrict__ out) {
    const int g = blockIdx.x * blockDim.x + threadIdx.x;
    out[4 * g + 0] = blockIdx.x;
    out[4 * g + 1] = threadIdx.x / warpSize;  // warpSize is 32
    out[4 * g + 2] = threadIdx.x % warpSize;
    out[4 * g + 3] = g;
}
// ANCHOR_END: whoami

// ANCHOR: warp_sum
// Each warp adds its 32 values without memory: at each step every lane adds the value of the
// lane whose index differs in one bit (16, 8, 4, 2, 1 apart). After five steps all 32 lanes
// hold the warp's sum. out[i] = the sum of x over thread i's warp.
extern "C" __global__ void primer_warp_sum(const int* __restrict__ x, int* __restrict__ out) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = x[i];
    for (int offset = 16; offset > 0; offset /= 2)
        v += __shfl_xor_sync(MOE_FULL_MASK, v, offset);
    out[i] = v;
}
// ANCHOR_END: warp_sum

// ANCHOR: block_sum
// Each block adds its BLOCK_SUM_THREADS values through shared memory: a halving tree, with a
// barrier between steps so no thread reads a partial sum before its owner wrote it.
// out[b] = the sum of x[b * BLOCK_SUM_THREADS ..][.. BLOCK_SUM_THREADS].
extern "C" __global__ void __launch_bounds__(BLOCK_SUM_THREADS)
    primer_block_sum(const int* __restrict__ x, int* __restrict__ out) {
    __shared__ int partial[BLOCK_SUM_THREADS];  // one per thread, visible to the whole block
    partial[threadIdx.x] = x[blockIdx.x * BLOCK_SUM_THREADS + threadIdx.x];
    __syncthreads();
    for (int half = BLOCK_SUM_THREADS / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}
// ANCHOR_END: block_sum

// ANCHOR: banks
// Shared memory's 32 banks: word w lives in bank w % 32. Each thread reads BANK_ROUNDS words,
// lane l at word (l * stride + r) % BANK_WORDS in round r. With stride 1 the 32 lanes of a warp
// read 32 different banks (one step); with stride 32 they all read bank r % 32 (32 steps, one
// after another). Every word holds 1, so out[thread] = BANK_ROUNDS either way.
extern "C" __global__ void __launch_bounds__(256) primer_banks(int stride, int* __restrict__ out) {
    __shared__ int words[BANK_WORDS];
    for (int w = threadIdx.x; w < BANK_WORDS; w += blockDim.x) words[w] = 1;
    __syncthreads();
    const int lane = threadIdx.x % warpSize;
    int sum = 0;
    for (int r = 0; r < BANK_ROUNDS; ++r) sum += words[(lane * stride + r) % BANK_WORDS];
    out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}
// ANCHOR_END: banks

// ANCHOR: copies
// Coalesced: thread i copies element i, then i + (all threads of the grid), and so on (a
// grid-stride loop, so any grid covers any n). The 32 lanes of a warp touch 32 neighbouring
// floats: one 128-byte line per load.
extern "C" __global__ void primer_copy_coalesced(const float* __restrict__ in,
                                                 float* __restrict__ out, long long n) {
    const long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step)
        out[i] = in[i];
}

// Strided: the same n elements (n a multiple of 32), each copied once, in another order. Seen as
// 32 rows of n / 32, thread i copies row i % 32, column i / 32: the 32 lanes of a warp touch 32
// different rows, n / 32 floats apart, so each load needs 32 lines for 32 useful floats.
extern "C" __global__ void primer_copy_strided(const float* __restrict__ in,
                                               float* __restrict__ out, long long n) {
    const long long step = (long long)gridDim.x * blockDim.x;
    const long long row_len = n / 32;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += step) {
        const long long j = (i % 32) * row_len + i / 32;
        out[j] = in[j];
    }
}
// ANCHOR_END: copies

// ANCHOR: launches
// Does nothing: what one launch costs.
extern "C" __global__ void primer_empty() {}

// x[i] = i + 1. Lets the next kernel on the stream start its blocks at once (they wait at their
// own moe_grid_wait for this kernel's writes).
extern "C" __global__ void primer_produce(float* x, int n) {
    moe_launch_dependents();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = (float)(i + 1);
}

// y[i] = w[i] * x[i]. w is written by no kernel, so it is read before the wait; x is
// primer_produce's output, read after it (through the L2 with __ldcg: a read-only load could be
// moved above the wait, see common.cuh).
extern "C" __global__ void primer_consume(const float* __restrict__ w, const float* x,
                                          float* __restrict__ y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const float wi = i < n ? w[i] : 0.0f;
    moe_grid_wait();
    if (i < n) y[i] = wi * __ldcg(&x[i]);
}
// ANCHOR_END: launches
