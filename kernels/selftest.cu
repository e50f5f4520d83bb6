// selftest.cu — one kernel per emulated CUDA feature, so the runtime can prove that the
// emulator and the GPU agree bit for bit (kernels/tests/selftest.rs runs each on both and also
// checks each against an independent computation in Rust).
//
// Upstream: none; this is the book's own check of its two backends.
#include "common.cuh"
#include "mma.cuh"

// Built-in indices in 3-D grids and blocks. out[g*4 + 0..3] for the global linear thread g:
// block index, thread index, block size and grid size, each packed as x + 10 y + 100 z.
extern "C" __global__ void selftest_indices(int* __restrict__ out) {
    const int block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const int thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const int g = block * (blockDim.x * blockDim.y * blockDim.z) + thread;
    out[g * 4 + 0] = blockIdx.x + 10 * blockIdx.y + 100 * blockIdx.z;
    out[g * 4 + 1] = threadIdx.x + 10 * threadIdx.y + 100 * threadIdx.z;
    out[g * 4 + 2] = blockDim.x + 10 * blockDim.y + 100 * blockDim.z;
    out[g * 4 + 3] = gridDim.x + 10 * gridDim.y + 100 * gridDim.z;
}

// Static and dynamic shared memory and __syncthreads: each block of 256 threads sums its 256
// inputs with a fixed tree, through a static array and a dynamic one (256 floats), and writes
// out[block] = the sum and out[gridDim.x + block] = the block index read back from shared
// memory after the barrier (a block seeing another block's shared memory would show here).
extern "C" __global__ void __launch_bounds__(256) selftest_block_sum(const float* __restrict__ x,
                                                                     float* __restrict__ out) {
    __shared__ float tree[256];
    __shared__ int owner;
    DYNAMIC_SHARED(float, copy);
    const int i = blockIdx.x * 256 + threadIdx.x;
    copy[threadIdx.x] = x[i];
    if (threadIdx.x == 0) owner = blockIdx.x;
    __syncthreads();
    tree[threadIdx.x] = copy[255 - threadIdx.x];
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if (threadIdx.x < s) tree[threadIdx.x] = tree[threadIdx.x] + tree[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        out[blockIdx.x] = tree[0];
        out[gridDim.x + blockIdx.x] = (float)owner;
    }
}

// Warp intrinsics. Block of 64 threads (two warps); x[64] ints; out[tid*16 + j].
extern "C" __global__ void selftest_warp(const int* __restrict__ x, int* __restrict__ out) {
    const int tid = threadIdx.x, lane = tid & 31;
    const int v = x[tid];
    int* o = out + tid * 16;
    o[0] = __shfl_sync(MOE_FULL_MASK, v, (lane * 7) % 32);
    o[1] = __shfl_up_sync(MOE_FULL_MASK, v, 3);
    o[2] = __shfl_down_sync(MOE_FULL_MASK, v, 5);
    o[3] = __shfl_xor_sync(MOE_FULL_MASK, v, 9);
    o[4] = __shfl_sync(MOE_FULL_MASK, v, 3, 16);
    o[5] = __shfl_down_sync(MOE_FULL_MASK, v, 2, 8);
    o[6] = (int)__ballot_sync(MOE_FULL_MASK, v & 1);
    o[7] = __any_sync(MOE_FULL_MASK, v > 90) + 2 * __all_sync(MOE_FULL_MASK, v >= 0);
    // A float through shuffles: a warp sum with a fixed xor tree.
    float f = (float)v * 0.1f;
    for (int off = 16; off > 0; off >>= 1) f += __shfl_xor_sync(MOE_FULL_MASK, f, off);
    o[8] = __float_as_int(f);
    // Half of the warp exchanges among itself; the other half is not involved.
    if (lane < 16) o[9] = __shfl_xor_sync(0x0000ffffu, v, 1);
    else o[9] = -1;
    __syncwarp();
    // 64-bit shuffle.
    const long long wide = ((long long)v << 33) | lane;
    const long long got = __shfl_sync(MOE_FULL_MASK, wide, 31 - lane);
    o[10] = (int)(got >> 33);
    o[11] = (int)(got & 0xffffffff);
    // Warp reductions (redux.sync): unsigned and signed order differ for v - 50 < 0.
    o[12] = (int)__reduce_max_sync(MOE_FULL_MASK, (unsigned)(v - 50));
    o[13] = __reduce_min_sync(MOE_FULL_MASK, v - 50);
    o[14] = (int)__reduce_add_sync(MOE_FULL_MASK, (unsigned)v * 2654435761u);  // wraps
    if (lane < 16) o[15] = (int)__reduce_xor_sync(0x0000ffffu, (unsigned)v << (lane & 7));
    else o[15] = __reduce_max_sync(0xffff0000u, v - 50) + 1000 * (int)__reduce_or_sync(0xffff0000u, 1u << (v & 7));
}

// Atomics under contention: a 16-bin histogram of x (values 0..15), the maximum, and the or of
// all bits; every block adds into the same three places.
extern "C" __global__ void selftest_atomics(const int* __restrict__ x, int n, int* __restrict__ hist,
                                            int* __restrict__ max_out, unsigned* __restrict__ or_out) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    atomicAdd(&hist[x[i] & 15], 1);
    atomicMax(max_out, x[i]);
    atomicOr(or_out, 1u << (x[i] & 31));
}

// bf16 conversions: round to nearest even, and back.
extern "C" __global__ void selftest_bf16(const float* __restrict__ x, unsigned short* __restrict__ bits,
                                         float* __restrict__ back, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const __nv_bfloat16 b = __float2bfloat16(x[i]);
    bits[i] = __bfloat16_as_ushort(b);
    back[i] = __bfloat162float(b);
}

// The project's math: out[i*6 + j] = expf, logf(|x|), log1pf(|x|), sigmoid, softplus, fmaf(x,x,-1).
extern "C" __global__ void selftest_math(const float* __restrict__ x, float* __restrict__ out, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float v = x[i];
    float* o = out + (size_t)i * 6;
    o[0] = moe_expf(v);
    o[1] = moe_logf(fabsf(v));
    o[2] = moe_log1pf(fabsf(v));
    o[3] = moe_sigmoidf(v);
    o[4] = moe_softplusf(v);
    o[5] = fmaf(v, v, -1.0f);
}

// common.cuh's straight-line forms against the forms they stand in for, over count floats whose
// bit patterns are first, first + stride, ... (mod 2^32): bad[0] counts the x where
// moe_expf_flat(x) and moe_expf(x) differ in a bit, bad[1] those of moe_rcp_fast_ok's range where
// moe_rcp_rn_fast(x) and 1.0f / x do; first_bad[j] is the smallest such bit pattern (0xffffffff
// for none). Each thread takes every (gridDim.x · blockDim.x)-th float.
extern "C" __global__ void selftest_flat_math(unsigned first, unsigned long long count, unsigned stride,
                                              unsigned long long* __restrict__ bad,
                                              unsigned* __restrict__ first_bad) {
    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += step) {
        const unsigned bits = first + (unsigned)i * stride;
        const float x = __uint_as_float(bits);
        if (__float_as_uint(moe_expf_flat(x)) != __float_as_uint(moe_expf(x))) {
            atomicAdd(&bad[0], 1ull);
            atomicMin(&first_bad[0], bits);
        }
        if (moe_rcp_fast_ok(x) && __float_as_uint(moe_rcp_rn_fast(x)) != __float_as_uint(1.0f / x)) {
            atomicAdd(&bad[1], 1ull);
            atomicMin(&first_bad[1], bits);
        }
    }
}

// Operations the emulator implements itself, at their edges, where a host C cast would differ
// from the GPU: float -> integer conversions (saturating; NaN -> 0, or LLONG_MIN for 64-bit
// results) into out[i*10 + j] as
// __float2int_rn/rz/rd/ru, __float2uint_rn/rz, then the low and high words of __float2ll_rz and
// __float2ll_rn; and a float atomicAdd of add[i] into cells[i] (the GPU flushes subnormal inputs
// and results of atom.add.f32 to zero).
extern "C" __global__ void selftest_convert(const float* __restrict__ x, unsigned* __restrict__ out,
                                            float* __restrict__ cells, const float* __restrict__ add,
                                            int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float v = x[i];
    unsigned* o = out + (size_t)i * 10;
    o[0] = (unsigned)__float2int_rn(v);
    o[1] = (unsigned)__float2int_rz(v);
    o[2] = (unsigned)__float2int_rd(v);
    o[3] = (unsigned)__float2int_ru(v);
    o[4] = __float2uint_rn(v);
    o[5] = __float2uint_rz(v);
    const unsigned long long lz = (unsigned long long)__float2ll_rz(v);
    const unsigned long long ln = (unsigned long long)__float2ll_rn(v);
    o[6] = (unsigned)(lz & 0xffffffffull);
    o[7] = (unsigned)(lz >> 32);
    o[8] = (unsigned)(ln & 0xffffffffull);
    o[9] = (unsigned)(ln >> 32);
    atomicAdd(&cells[i], add[i]);
}

// Emulator-only: threads 16.. return before the barrier that threads 0..15 wait at. On a GPU
// this is undefined behaviour (compute-sanitizer's synccheck reports it); the emulator must stop
// the launch with a message instead of hanging. Never launched on the GPU.
// ANCHOR: bad_barrier
extern "C" __global__ void selftest_bad_barrier(int* __restrict__ out) {
    if (threadIdx.x >= 16) return;
    __syncthreads();
    out[threadIdx.x] = 1;
}
// ANCHOR_END: bad_barrier

// Tensor cores: one m16n8k16 mma per tile, one warp per tile. a: [tiles][16][16] bf16 bits
// (m, k); b: [tiles][8][16] (n, k), the columns of B; c and d: [tiles][16][8] (m, n). The lanes
// gather their fragments in the documented layout (kernels/mma.cuh).
// ANCHOR: selftest_mma
extern "C" __global__ void selftest_mma(const unsigned short* __restrict__ a, const unsigned short* __restrict__ b,
                                        const float* __restrict__ c, float* __restrict__ d, int tiles) {
    const int tile = blockIdx.x;
    if (tile >= tiles) return;
    const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
    const unsigned short* A = a + (size_t)tile * 256;
    const unsigned short* B = b + (size_t)tile * 128;
    const float* C = c + (size_t)tile * 128;
    float* D = d + (size_t)tile * 128;
    auto pair = [](const unsigned short* p) { return (unsigned)p[0] | ((unsigned)p[1] << 16); };
    const unsigned ra[4] = {pair(A + g * 16 + 2 * t), pair(A + (g + 8) * 16 + 2 * t), pair(A + g * 16 + 2 * t + 8),
                            pair(A + (g + 8) * 16 + 2 * t + 8)};
    const unsigned rb[2] = {pair(B + g * 16 + 2 * t), pair(B + g * 16 + 2 * t + 8)};
    const float rc[4] = {C[g * 8 + 2 * t], C[g * 8 + 2 * t + 1], C[(g + 8) * 8 + 2 * t], C[(g + 8) * 8 + 2 * t + 1]};
    float rd[4];
    moe_mma_m16n8k16_bf16(rd, ra, rb, rc);
    D[g * 8 + 2 * t] = rd[0];
    D[g * 8 + 2 * t + 1] = rd[1];
    D[(g + 8) * 8 + 2 * t] = rd[2];
    D[(g + 8) * 8 + 2 * t + 1] = rd[3];
}
// ANCHOR_END: selftest_mma

// ldmatrix: src is four 8 x 8 bf16 matrices ([4][8][8] bits), staged in shared memory; lane l
// gives the address of row l % 8 of matrix l / 8. out[l * 14 + ...] = the registers of x4 (4),
// x4.trans (4), x2 (2), x2.trans (2), x1 (1), x1.trans (1).
extern "C" __global__ void selftest_ldmatrix(const unsigned short* __restrict__ src, unsigned* __restrict__ out) {
    __shared__ __align__(16) unsigned short tile[4][8][8];
    const int lane = threadIdx.x;
    for (int i = lane; i < 256; i += 32) (&tile[0][0][0])[i] = src[i];
    __syncwarp();
    const void* row = &tile[lane / 8][lane % 8][0];
    unsigned r[14];
    moe_ldmatrix_x4(r, row);
    moe_ldmatrix_x4_trans(r + 4, row);
    moe_ldmatrix_x2(r + 8, row);
    moe_ldmatrix_x2_trans(r + 10, row);
    moe_ldmatrix_x1(r + 12, row);
    moe_ldmatrix_x1_trans(r + 13, row);
    for (int i = 0; i < 14; ++i) out[lane * 14 + i] = r[i];
}

// cp.async (mma.cuh), one block of 32 threads: thread l copies x[4l .. 4l + 3] into its 16-byte
// slot of dynamic shared memory (thread 31 with `full` false: zeros), commits, waits, and after a
// barrier writes its neighbour's slot to out[4l .. 4l + 3].
extern "C" __global__ void selftest_cp_async(const int* __restrict__ x, int* __restrict__ out) {
    DYNAMIC_SHARED(int, slots);
    const int l = threadIdx.x, nb = (l + 1) % 32;
    moe_cp_async16(&slots[4 * l], &x[4 * l], l != 31);
    moe_cp_async_commit();
    moe_cp_async_wait(0);
    __syncthreads();
    for (int j = 0; j < 4; ++j) out[4 * l + j] = slots[4 * nb + j];
}

// The same copies, read back too early (the emulator's test only: on the GPU this read races
// with the copy): out[4l ..] before the wait, out[128 + 4l ..] after it. Two groups: the older one
// lands at wait(1), the newer one only at wait(0).
extern "C" __global__ void selftest_cp_async_unwaited(const int* __restrict__ x, int* __restrict__ out) {
    DYNAMIC_SHARED(int, slots);
    const int l = threadIdx.x;
    moe_cp_async16(&slots[4 * l], &x[4 * l], true);
    moe_cp_async_commit();
    moe_cp_async16(&slots[128 + 4 * l], &x[4 * l], true);
    moe_cp_async_commit();
    for (int j = 0; j < 4; ++j) out[4 * l + j] = slots[4 * l + j];
    moe_cp_async_wait(1);
    for (int j = 0; j < 4; ++j) out[128 + 4 * l + j] = slots[4 * l + j];
    for (int j = 0; j < 4; ++j) out[256 + 4 * l + j] = slots[128 + 4 * l + j];
    moe_cp_async_wait(0);
    for (int j = 0; j < 4; ++j) out[384 + 4 * l + j] = slots[128 + 4 * l + j];
}

// Programmatic dependent launch (common.cuh's moe_grid_wait / moe_launch_dependents; the host's
// LaunchConfig::dependent). The producer lets its dependent start at once, then sleeps a while
// before it writes buf[i] = i + 1 (one element per thread); the consumer, launched as its
// dependent, copies buf to out after its wait and also records, before the wait, how many
// producer blocks had finished (early[0], the largest count its blocks saw; -1 not touched).
// With a working wait, out = i + 1 whatever the overlap. (buf is a plain pointer, not const
// __restrict__: see moe_grid_wait in common.cuh.)
extern "C" __global__ void selftest_pdl_producer(int* __restrict__ buf, int* __restrict__ finished, int n) {
    moe_launch_dependents();
    for (int i = 0; i < 20; ++i) __nanosleep(1000);
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) buf[i] = i + 1;
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(finished, 1);
    }
}
extern "C" __global__ void selftest_pdl_consumer(const int* buf, const int* finished, int* __restrict__ out,
                                                 int* __restrict__ early, int n) {
    if (threadIdx.x == 0) atomicMax(early, *(const volatile int*)finished);
    moe_grid_wait();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = buf[i];
}
