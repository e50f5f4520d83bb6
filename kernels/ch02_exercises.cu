// ch02_exercises.cu -- the kernel of chapter 2's exercise 3, as a stub for you to write. The
// tests in chapters/ch02-grouped/tests/exercises.rs fail until you do; `tools/steps exercises 2`
// runs them. The answer is in kernels/answers/ch02_exercises.cu (read it after trying).
//
// Upstream: none (an exercise; chapter 3 writes the real thing).
#include "common.cuh"

// Exercise 3: how many (token, expert) pairs each expert received, on the device.
// ids [P] i32 (the routing's ids, flattened), counts [E] i32 (zeroed by the host). Pairs with
// an id outside 0..E are not counted. Launched with one thread per pair, 256 per block. Integer
// atomics are allowed: an integer sum does not depend on the order of its terms.
extern "C" __global__ void ex_count_pairs(const int* __restrict__ ids, int* __restrict__ counts, int P, int E) {
    // TODO(exercise 3)
}
