// ch02_exercises.cu -- answers to the kernel of chapter 2's exercise 3 (the stub is
// kernels/ch02_exercises.cu). Built in place of the stub with `--features answers`.
//
// Upstream: none (an exercise; chapter 3 writes the real thing).
#include "common.cuh"

// Exercise 3: one thread per pair adds 1 to its expert's count. atomicAdd on an int is exact and
// its result does not depend on which thread arrives first, so the counts are the same every run
// (the emulator's atomics are real atomics too). Chapter 3 does better: a block counts into
// shared memory first, so the global counters see one add per block and expert, not per pair.
extern "C" __global__ void ex_count_pairs(const int* __restrict__ ids, int* __restrict__ counts, int P, int E) {
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= P) return;
    const int e = ids[p];
    if (e >= 0 && e < E) atomicAdd(&counts[e], 1);
}
