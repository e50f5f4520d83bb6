// floor.cu — probes for the floor of every measurement: what a launch costs, and what one cold
// read of N bytes costs, timed by the same harness as the kernel they stand beside.
//
// Upstream: the router article measures the same two things on a B300 (an empty kernel, and a
// kernel in which every thread loads 16 bytes of the gate weight once).
//
// Differences: floor_read strides over the buffer so one launch shape serves any size; the
// result is folded into a value written only when impossible, so the compiler cannot drop the
// loads, and nothing is written in practice. The same kernel, over a buffer four times the L2,
// is the harness's L2 flush.
#include "common.cuh"

// ANCHOR: floor_probes
// Does nothing. Launched as one block of 32 threads.
extern "C" __global__ void floor_empty() {}

// Reads n16 16-byte words once (grid-stride). sink is written only if the xor of everything
// read equals `never`, which the caller picks so that it does not happen.
extern "C" __global__ void __launch_bounds__(512) floor_read(const uint4* __restrict__ data,
                                                             unsigned long long n16,
                                                             unsigned never,
                                                             unsigned* __restrict__ sink) {
    unsigned acc = 0;
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n16;
         i += stride) {
        const uint4 v = data[i];
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == never) sink[0] = acc;
}
// ANCHOR_END: floor_probes

// Writes n16 16-byte words. The harness flushes the L2 between cold samples by *reading* a
// buffer several times the L2 with floor_read; this writing flush is kept to measure, once, what
// a flush that leaves dirty lines would add to a cold time (their write-back).
extern "C" __global__ void __launch_bounds__(512) floor_flush_write(uint4* __restrict__ data,
                                                              unsigned long long n16,
                                                              unsigned salt) {
    const unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n16;
         i += stride)
        data[i] = make_uint4(salt, (unsigned)i, salt ^ 0x9e3779b9u, (unsigned)(i >> 32));
}
