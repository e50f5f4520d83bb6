// adversarial.cu -- kernels that break CUDA's rules on purpose, or lean on its less common
// guarantees, for the emulator's own tests (kernels/tests/emulator.rs): faults that must become
// typed errors instead of killing the process, spin-waits that must complete, deadlocks that
// must be reported, barriers misused through helper functions, and legal patterns that must
// not be reported. Most are launched on the emulator only; the spin-waits and the legal
// patterns also run on the GPU, where sm_70's independent thread scheduling makes them valid.
//
// Upstream: none (the emulator's test suite).
#include "common.cuh"

// out[i] = num[i] / den[i]; a zero divisor traps on x86 (the GPU returns an unspecified value).
extern "C" __global__ void adv_divide(const int* __restrict__ num, const int* __restrict__ den,
                                      int* __restrict__ out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = num[i] / den[i];
}

// out[i + offset] = 1 for i < n: offset n writes just past the end, a huge one far away.
extern "C" __global__ void adv_write(float* __restrict__ out, int n, long long offset) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i + offset] = 1.0f;
}

// out[i] = in[i + offset] for i < n.
extern "C" __global__ void adv_read(const float* __restrict__ in, float* __restrict__ out, int n,
                                    long long offset) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i + offset];
}

// Recursion with a kilobyte per frame: `depth` 1000 needs about 1 MiB of stack per thread.
__device__ __noinline__ int adv_deep(int depth) {
    volatile char pad[1024];
    pad[depth & 1023] = (char)depth;
    if (depth == 0) return pad[0];
    return adv_deep(depth - 1) + pad[depth & 1023];
}
extern "C" __global__ void adv_recurse(int depth, int* __restrict__ out) {
    out[threadIdx.x] = adv_deep(depth);
}

// Thread 0 waits until thread `setter` sets *flag, reading it through a volatile pointer; then
// writes out[0] = 1. Thread 0 runs first on the emulator, so without preemption it would spin
// forever.
extern "C" __global__ void adv_spin_volatile(int* flag, int* __restrict__ out, int setter) {
    if (threadIdx.x == 0) {
        while (*(volatile int*)flag == 0) {
        }
        out[0] = 1;
    } else if ((int)threadIdx.x == setter) {
        *(volatile int*)flag = 1;
    }
}

// The same wait, polling with an atomic.
extern "C" __global__ void adv_spin_atomic(int* flag, int* __restrict__ out, int setter) {
    if (threadIdx.x == 0) {
        while (atomicAdd(flag, 0) == 0) {
        }
        out[0] = 1;
    } else if ((int)threadIdx.x == setter) {
        atomicExch(flag, 1);
    }
}

// A wait that never ends: nobody sets the flag (emulator only; a GPU would hang). `how`: 0 polls
// with an atomic and __nanosleep, 1 with a volatile load.
extern "C" __global__ void adv_spin_forever(int* flag, int how) {
    if (threadIdx.x != 0) return;
    if (how == 0) {
        while (atomicAdd(flag, 0) == 0) __nanosleep(100);
    } else {
        while (*(volatile int*)flag == 0) {
        }
    }
}

// A __syncthreads inside a helper that the two halves of the block call from different branches:
// the same source line, reached through two call sites (undefined behaviour on a GPU).
__device__ __noinline__ void adv_sync_helper(int* s) {
    __syncthreads();
    s[threadIdx.x] += 1;
}
__device__ __forceinline__ void adv_sync_helper_inlined(int* s) {
    __syncthreads();
    s[threadIdx.x] += 1;
}
extern "C" __global__ void adv_helper_barrier(int* __restrict__ out, int inlined) {
    __shared__ int s[64];
    s[threadIdx.x] = 0;
    __syncthreads();
    if (threadIdx.x < 32) {
        s[threadIdx.x] = 1;
        if (inlined) adv_sync_helper_inlined(s);
        else adv_sync_helper(s);
    } else {
        if (inlined) adv_sync_helper_inlined(s);
        else adv_sync_helper(s);
        s[threadIdx.x] *= 2;
    }
    out[threadIdx.x] = s[threadIdx.x];
}

// Legal patterns the barrier checks must accept: branches that rejoin before a barrier, a barrier
// in an unrolled loop, and the helper above called by every thread from one place. 64 threads;
// out[t] is a function of t only.
extern "C" __global__ void adv_barriers_legit(int* __restrict__ out) {
    __shared__ int s[64];
    const int t = threadIdx.x;
    int v = t;
    if (t & 1) v = 3 * v;
    else v = v + 7;
    s[t] = v;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int next = s[(t + 1) & 63];
        __syncthreads();
        s[t] += next;
        __syncthreads();
    }
    adv_sync_helper(s);
    out[t] = s[t];
}

// __syncwarp after half of the warp returned: legal (exited lanes count as arrived).
extern "C" __global__ void adv_syncwarp_after_exit(int* __restrict__ out) {
    if (threadIdx.x >= 16) return;
    out[threadIdx.x] = (int)threadIdx.x + 1;
    __syncwarp();
    out[16 + threadIdx.x] = out[threadIdx.x ^ 1];
}
