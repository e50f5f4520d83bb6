// CUDA-style kernels for the emulator self-test. Written as a .cu file would be (no host code);
// included after cuda_emu.h by selftest_emu.cpp.
#define FULL_MASK 0xffffffffu

__shared__ int ns_shared_block_id;   // namespace-scope __shared__

__device__ __forceinline__ unsigned linear_tid() {
    return threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y;
}
__device__ __forceinline__ unsigned long long linear_bid() {
    return blockIdx.x + (unsigned long long)blockIdx.y * gridDim.x + (unsigned long long)blockIdx.z * gridDim.x * gridDim.y;
}

// 13 ints per thread: threadIdx, blockIdx, blockDim, gridDim, activemask.
extern "C" __global__ void __launch_bounds__(1024) k_indices(int* __restrict__ out) {
    unsigned nt = blockDim.x * blockDim.y * blockDim.z;
    int* o = out + (linear_bid() * nt + linear_tid()) * 13;
    o[0] = threadIdx.x; o[1] = threadIdx.y; o[2] = threadIdx.z;
    o[3] = blockIdx.x; o[4] = blockIdx.y; o[5] = blockIdx.z;
    o[6] = blockDim.x; o[7] = blockDim.y; o[8] = blockDim.z;
    o[9] = gridDim.x; o[10] = gridDim.y; o[11] = gridDim.z;
    o[12] = (int)__activemask();
}

// __activemask() in divergent code: the lanes that took the branch (and a shuffle with that mask).
extern "C" __global__ void k_activemask(int* out) {
    unsigned lane = threadIdx.x % 32;
    int r = 0xdead;
    if (lane % 3 == 0) {
        unsigned m = __activemask();
        unsigned first = __ffs((int)m) - 1;
        r = (__shfl_sync(m, (int)m, (int)first) == (int)m) ? (int)m : -1;
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = r;
}

// Static shared memory is private to a block: write the block id, sync, spin, read back.
extern "C" __global__ void k_shared_private(int* bad, int spin) {
    __shared__ int s[256];
    __shared__ __align__(16) float f4[4];
    unsigned t = threadIdx.x;
    int id = (int)blockIdx.x;
    s[t] = id * 1000 + (int)t;
    if (t == 0) { ns_shared_block_id = id; f4[0] = (float)id; }
    __syncthreads();
    volatile int sink = 0;
    for (int i = 0; i < spin; ++i) sink = sink + i;   // keep the block in flight
    __syncthreads();
    unsigned u = (t + 1) % blockDim.x;
    int e = 0;
    if (s[u] != id * 1000 + (int)u) e |= 1;
    if (ns_shared_block_id != id) e |= 2;
    if (f4[0] != (float)id) e |= 4;
    if (((unsigned long)f4 & 15) != 0) e |= 8;
    if (e) atomicOr(bad, e);
}

// Dynamic shared memory: size honoured, fresh 0xFF fill per block, 16-byte aligned.
extern "C" __global__ void k_dynamic_shared(int* bad, int nbytes) {
    DYNAMIC_SHARED(unsigned char, buf);
    unsigned t = threadIdx.x;
    int e = 0;
    if (((unsigned long)buf & 15) != 0) e |= 1;
    for (int i = (int)t; i < nbytes; i += blockDim.x)
        if (buf[i] != 0xFF) e |= 2;
    float* fb = reinterpret_cast<float*>(buf);
    int* ib = reinterpret_cast<int*>(buf);
    if (nbytes >= 8) {
        if (!isnan(fb[0])) e |= 4;
        if (ib[1] != -1) e |= 8;
    }
    __syncthreads();
    for (int i = (int)t; i < nbytes; i += blockDim.x) buf[i] = (unsigned char)(i * 7 + blockIdx.x);
    __syncthreads();
    for (int i = (int)t; i < nbytes; i += blockDim.x)
        if (buf[(i + 1) % nbytes] != (unsigned char)(((i + 1) % nbytes) * 7 + blockIdx.x)) e |= 16;
    if (e) atomicOr(bad, e);
}

// Tree reduction through shared memory (float, exact order reproduced on the host).
extern "C" __global__ void __launch_bounds__(256) k_tree_reduce(const float* __restrict__ in, float* out, int n) {
    __shared__ float s[256];
    unsigned t = threadIdx.x;
    unsigned i = blockIdx.x * blockDim.x + t;
    s[t] = i < (unsigned)n ? in[i] : 0.0f;
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (t < stride) s[t] = s[t] + s[t + stride];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}

// Shuffles: lanes whose bit is in `mask` (restricted to existing lanes) take part.
template <class T>
__device__ void shfl_body(const T* in, T* out, int op, int arg, int width, unsigned mask) {
    unsigned t = linear_tid();
    unsigned lane = t % 32;
    unsigned nt = blockDim.x * blockDim.y * blockDim.z;
    unsigned warp_first = t - lane;
    unsigned nlanes = nt - warp_first < 32 ? nt - warp_first : 32;
    unsigned exist = nlanes == 32 ? FULL_MASK : ((1u << nlanes) - 1u);
    unsigned m = mask & exist;
    unsigned g = (unsigned)linear_bid() * nt + t;
    T v = in[g];
    if (!(m >> lane & 1u)) return;
    T r;
    switch (op) {
        case 0: r = width == 32 ? __shfl_sync(m, v, arg) : __shfl_sync(m, v, arg, width); break;
        case 1: r = width == 32 ? __shfl_up_sync(m, v, (unsigned)arg) : __shfl_up_sync(m, v, (unsigned)arg, width); break;
        case 2: r = width == 32 ? __shfl_down_sync(m, v, (unsigned)arg) : __shfl_down_sync(m, v, (unsigned)arg, width); break;
        default: r = width == 32 ? __shfl_xor_sync(m, v, arg) : __shfl_xor_sync(m, v, arg, width); break;
    }
    out[g] = r;
}
extern "C" __global__ void k_shfl_i32(const int* in, int* out, int op, int arg, int width, unsigned mask) { shfl_body(in, out, op, arg, width, mask); }
extern "C" __global__ void k_shfl_f32(const float* in, float* out, int op, int arg, int width, unsigned mask) { shfl_body(in, out, op, arg, width, mask); }
extern "C" __global__ void k_shfl_f64(const double* in, double* out, int op, int arg, int width, unsigned mask) { shfl_body(in, out, op, arg, width, mask); }
extern "C" __global__ void k_shfl_u64(const unsigned long long* in, unsigned long long* out, int op, int arg, int width, unsigned mask) { shfl_body(in, out, op, arg, width, mask); }

// Warp vote + __syncwarp + __syncthreads_count/and/or. 8 ints per thread.
extern "C" __global__ void k_vote(const int* pred, int* out, unsigned pmask) {
    __shared__ int xs[64];
    unsigned t = threadIdx.x, lane = t % 32;
    int p = pred[blockIdx.x * blockDim.x + t];
    int* o = out + (blockIdx.x * blockDim.x + t) * 8;
    o[0] = (int)__ballot_sync(FULL_MASK, p);
    o[1] = __any_sync(FULL_MASK, p);
    o[2] = __all_sync(FULL_MASK, p);
    if (pmask >> lane & 1u) {
        o[3] = (int)__ballot_sync(pmask, p);
        o[4] = __all_sync(pmask, p) * 2 + __any_sync(pmask, p);
    }
    xs[t] = (int)(t * 3 + 1);
    __syncwarp();
    o[5] = xs[(t & ~31u) + (31 - lane)];
    __syncwarp(FULL_MASK);
    o[6] = __syncthreads_count(p);
    o[7] = __syncthreads_and(p) * 2 + __syncthreads_or(p);
}

// Atomics under contention.
extern "C" __global__ void k_atomics(const unsigned* keys, int n, unsigned* hist, float* fhist,
                                     unsigned long long* total, double* dsum, int* imax, int* imin,
                                     unsigned* cas_counter, int* sub_counter, unsigned* bits) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (unsigned)n) return;
    unsigned k = keys[i];
    atomicAdd(&hist[k % 64], 1u);
    atomicAdd(&fhist[k % 64], 1.0f);
    atomicAdd(total, (unsigned long long)k);
    atomicAdd(dsum, 0.5);
    atomicMax(imax, (int)(k % 100000) - 50000);
    atomicMin(imin, (int)(k % 100000) - 50000);
    unsigned old = *(volatile unsigned*)cas_counter, assumed;
    do { assumed = old; old = atomicCAS(cas_counter, assumed, assumed + 1); } while (old != assumed);
    atomicSub(sub_counter, 2);
    atomicOr(&bits[(k >> 5) % 4], 1u << (k & 31));
}

// Speed: one warp per row, ~80 xor shuffles and a few barriers per thread.
extern "C" __global__ void __launch_bounds__(32) k_speed(const float* __restrict__ x, float* out, int cols) {
    __shared__ float red[32];
    unsigned lane = threadIdx.x;
    const float* row = x + (size_t)blockIdx.x * cols;
    float acc = 0.0f;
    for (int c = (int)lane; c < cols; c += 32) acc += row[c];
    for (int rep = 0; rep < 16; ++rep) {
        for (int o = 16; o > 0; o >>= 1) acc = fmaxf(acc, __shfl_xor_sync(FULL_MASK, acc, o));
    }
    red[lane] = acc;
    __syncthreads();
    float v = red[(lane + 1) % 32];
    __syncthreads();
    red[lane] = v;
    __syncthreads();
    if (lane == 0) out[blockIdx.x] = red[0];
}

// ---- error paths ----
extern "C" __global__ void k_err_barrier_exit(int* out) {
    if (threadIdx.x >= 40) return;
    __syncthreads();
    out[threadIdx.x] = 1;
}
extern "C" __global__ void k_err_barrier_divergent(int* out) {
    if (threadIdx.x < 32) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    out[threadIdx.x] = 1;
}
extern "C" __global__ void k_err_shfl_exited(int* out) {
    unsigned lane = threadIdx.x % 32;
    if (lane == 31) return;
    out[threadIdx.x] = __shfl_xor_sync(FULL_MASK, (int)lane, 1);
}
extern "C" __global__ void k_err_shfl_exited_first(int* out) {
    unsigned lane = threadIdx.x % 32;
    if (lane == 0) return;
    out[threadIdx.x] = __shfl_down_sync(FULL_MASK, (int)lane, 1);
}
extern "C" __global__ void k_err_mismatch(int* out) {
    unsigned lane = threadIdx.x % 32;
    if (lane & 1) out[threadIdx.x] = (int)__ballot_sync(FULL_MASK, 1);
    else out[threadIdx.x] = __shfl_sync(FULL_MASK, 5, 0);
}
extern "C" __global__ void k_err_not_in_mask(int* out) {
    unsigned lane = threadIdx.x % 32;
    out[threadIdx.x] = __shfl_sync(0x0000ffffu, (int)lane, 0);   // lanes 16..31 are not in their own mask
}
extern "C" __global__ void k_err_src_outside(int* out) {
    unsigned lane = threadIdx.x % 32;
    if (lane < 16) out[threadIdx.x] = __shfl_sync(0x0000ffffu, (int)lane, 20);
}
extern "C" __global__ void k_err_deadlock(int* out) {
    unsigned lane = threadIdx.x % 32;
    if (lane < 16) __syncthreads();
    else out[threadIdx.x] = __shfl_xor_sync(FULL_MASK, 1, 1);
    __syncthreads();
}
extern "C" __global__ void k_err_partial_warp_mask(int* out) {
    out[threadIdx.x] = __shfl_xor_sync(FULL_MASK, 1, 1);   // block of 40 threads: warp 1 has 8 lanes
}
extern "C" __global__ void k_err_assert(int* out, int bad_block) {
    assert(blockIdx.x != (unsigned)bad_block);
    out[blockIdx.x] = 1;
}
extern "C" __global__ void k_ok(int* out) {
    out[blockIdx.x * blockDim.x + threadIdx.x] = (int)(blockIdx.x * 100 + threadIdx.x);
}
