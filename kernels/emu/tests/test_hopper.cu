// test_hopper.cu -- CUDA-style kernels for hopper_emu.cpp: Hopper's wgmma, mbarriers, TMA and
// named barriers through the names kernels/wgmma.cuh and kernels/tma.cuh give them (on the
// emulator: kernels/emu/hopper.h), and the misuses the emulator reports.

// k_cluster_late sleeps on the host (these kernels run on the emulator only).
#include <chrono>
#include <thread>

// The operands' shared-memory layouts of chapter 4's kernels (kernels/ch04/hopper.cuh): K-major
// tiles of KS k-steps of 16. Flat: 8 x 16-byte core matrices, 128 bytes apart along K, 16·K
// along the rows. Swizzled (K = 64): row r's 128 bytes at 128·r, chunk c at c ^ (r % 8).
#define HT_KS 4
#define HT_K (16 * HT_KS)
__device__ inline unsigned ht_offset(int r, int k, bool swz) {
    if (swz) return 128u * r + 16u * ((unsigned)(k / 8) ^ (unsigned)(r % 8)) + 2u * (k % 8);
    return (unsigned)(r / 8) * 16u * HT_K + (unsigned)(k / 8) * 128u + (unsigned)(r % 8) * 16u + 2u * (k % 8);
}

// D [64][128] = C + A [64][K] . B [128][K]^T by one warpgroup, four wgmma chained in one group.
// The operands are written with plain stores (the generic proxy), so a proxy fence must come
// between the stores and the wgmma: FENCE 0, after the stores (right); 1, none.
template <int FENCE>
__device__ void ht_wgmma(const unsigned short* A, const unsigned short* B, const float* C, float* D, int swz) {
    DYNAMIC_SHARED(unsigned char, smem);
    unsigned char* sa = smem;
    unsigned char* sb = smem + 64 * HT_K * 2;
    const int t = threadIdx.x;
    for (int i = t; i < 64 * HT_K; i += 128) *(unsigned short*)(sa + ht_offset(i / HT_K, i % HT_K, swz)) = A[i];
    for (int i = t; i < 128 * HT_K; i += 128) *(unsigned short*)(sb + ht_offset(i / HT_K, i % HT_K, swz)) = B[i];
    __syncthreads();
    if (FENCE == 0) moe_fence_proxy_async();
    const unsigned lead = swz ? 16 : 128, stride = swz ? 1024 : 16 * HT_K;
    const unsigned long long layout = swz ? 1ull << 62 : 0ull;
    const unsigned long long da = moe_wgmma_desc(sa, lead, stride) | layout;
    const unsigned long long db = moe_wgmma_desc(sb, lead, stride) | layout;
    const int w = t / 32, g = (t % 32) / 4, q = t % 4;
    float acc[64];
    for (int j = 0; j < 16; ++j)
        for (int h = 0; h < 2; ++h)
            for (int e = 0; e < 2; ++e) acc[4 * j + 2 * h + e] = C[(16 * w + g + 8 * h) * 128 + 8 * j + 2 * q + e];
    moe_wgmma_fence();
    for (int kk = 0; kk < HT_KS; ++kk) moe_wgmma_bf16<128>(acc, da + (swz ? 2 : 16) * kk, db + (swz ? 2 : 16) * kk);
    moe_wgmma_commit();
    moe_wgmma_wait<0>();
    for (int j = 0; j < 16; ++j)
        for (int h = 0; h < 2; ++h)
            for (int e = 0; e < 2; ++e) D[(16 * w + g + 8 * h) * 128 + 8 * j + 2 * q + e] = acc[4 * j + 2 * h + e];
}
__global__ void k_wgmma(const unsigned short* A, const unsigned short* B, const float* C, float* D, int swz) {
    ht_wgmma<0>(A, B, C, D, swz);
}
__global__ void k_err_no_proxy_fence(const unsigned short* A, const unsigned short* B, const float* C, float* D,
                                     int swz) {
    ht_wgmma<1>(A, B, C, D, swz);
}

// Two phases of one mbarrier, each a TMA box of `map` at (c0, c1 + 64·phase) into shared memory
// (the 128-byte swizzle), copied back unswizzled into out [2][box_rows][64] by every thread.
__global__ void k_tma(const void* map, int c0, int c1, unsigned short* out, int box_rows) {
    DYNAMIC_SHARED(unsigned char, smem);
    __shared__ __align__(8) unsigned long long bar;
    if (threadIdx.x == 0) {
        moe_mbar_init(&bar, 1);
        moe_mbar_init_fence();
    }
    __syncthreads();
    for (int phase = 0; phase < 2; ++phase) {
        if (threadIdx.x == 0) {
            moe_mbar_arrive_expect_tx(&bar, (unsigned)box_rows * 128u);
            moe_tma_load_2d(smem, map, c0, c1 + 64 * phase, &bar);
        }
        moe_mbar_wait(&bar, (unsigned)phase);
        for (int i = threadIdx.x; i < box_rows * 64; i += blockDim.x) {
            const int r = i / 64, c = i % 64;
            out[phase * box_rows * 64 + i] = *(unsigned short*)(smem + 128 * r + 16 * ((c / 8) ^ (r % 8)) + 2 * (c % 8));
        }
        __syncthreads();  // every thread has read the box before the next one lands
    }
}

// A producer warp and a consumer warp passing `n` values through one slot guarded by two
// mbarriers (full: 1 arrival; empty: 32), and both warps meeting at named barrier 1 at the end.
__global__ void k_pipeline(int* out, int n) {
    __shared__ __align__(8) unsigned long long full, empty;
    __shared__ int slot;
    if (threadIdx.x == 0) {
        moe_mbar_init(&full, 1);
        moe_mbar_init(&empty, 32);
    }
    __syncthreads();
    const bool producer = threadIdx.x < 32;
    for (int i = 0; i < n; ++i) {
        if (producer) {
            if (i > 0) moe_mbar_wait(&empty, (unsigned)(i - 1) & 1u);
            if (threadIdx.x == 0) {
                slot = 7 * i + 1;
                moe_mbar_arrive(&full);
            }
        } else {
            moe_mbar_wait(&full, (unsigned)i & 1u);
            if (threadIdx.x == 32) out[i] = slot;
            __syncwarp();
            moe_mbar_arrive(&empty);
        }
    }
    moe_named_barrier_sync<1, 64>();
    if (threadIdx.x == 0) out[n] = 1;
}

// elect.sync and setmaxnreg: per warp, the elected lane of all 32 lanes (out[2w]) and of the odd
// lanes alone (out[2w + 1]), each elected exactly once (count[w]: 2); setmaxnreg up and down is
// accepted on the way.
__global__ void k_elect(int* out, int* count) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    moe_setmaxnreg<240, true>();
    if (moe_elect_one()) {
        out[2 * warp] = lane;
        atomicAdd(&count[warp], 1);
    }
    __syncwarp();
    if (lane & 1) {
        if (moe_elect_one()) {
            out[2 * warp + 1] = lane;
            atomicAdd(&count[warp], 1);
        }
    }
    __syncwarp();
    moe_setmaxnreg<40, false>();
}

// Misuses.
// A phase that never completes: two arrivals expected, one made.
__global__ void k_err_mbar_deadlock(int*) {
    __shared__ __align__(8) unsigned long long bar;
    if (threadIdx.x == 0) moe_mbar_init(&bar, 2);
    __syncthreads();
    if (threadIdx.x == 0) moe_mbar_arrive(&bar);
    moe_mbar_wait(&bar, 0);
}
// More bytes announced than the box holds (extra > 0), or fewer (extra < 0).
__global__ void k_err_tx(const void* map, int extra) {
    DYNAMIC_SHARED(unsigned char, smem);
    __shared__ __align__(8) unsigned long long bar;
    if (threadIdx.x == 0) moe_mbar_init(&bar, 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        moe_mbar_arrive_expect_tx(&bar, (unsigned)(64 * 128 + extra));
        moe_tma_load_2d(smem, map, 0, 0, &bar);
    }
    moe_mbar_wait(&bar, 0);
}
// A box that runs past the block's dynamic shared memory.
__global__ void k_err_tma_outside(const void* map) {
    DYNAMIC_SHARED(unsigned char, smem);
    __shared__ __align__(8) unsigned long long bar;
    if (threadIdx.x == 0) {
        moe_mbar_init(&bar, 1);
        moe_mbar_arrive_expect_tx(&bar, 64 * 128);
        moe_tma_load_2d(smem + 1024, map, 0, 0, &bar);
    }
}
// Shared memory's flat 64 x 16 A and 128 x 16 B, all ones, fenced for wgmma.
__device__ void ht_ones(unsigned char* smem) {
    for (int i = threadIdx.x; i < 64 * 16 + 128 * 16; i += 128) ((unsigned short*)smem)[i] = 0x3f80;  // 1.0
    __syncthreads();
    moe_fence_proxy_async();
}
// acc = 0, then one committed group of a wgmma m64n128k16 on ht_ones' layout at smem.
__device__ void ht_issue(unsigned char* smem, float (&acc)[64]) {
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
    moe_wgmma_fence();
    moe_wgmma_bf16<128>(acc, moe_wgmma_desc(smem, 128, 256), moe_wgmma_desc(smem + 2048, 128, 256));
    moe_wgmma_commit();
}
// The accumulators written (WRITE) or read (else: the value is stored to out) between a wgmma
// and its wait.
template <bool WRITE>
__device__ void ht_early(float* out) {
    DYNAMIC_SHARED(unsigned char, smem);
    ht_ones(smem);
    float acc[64];
    ht_issue(smem, acc);
    if (WRITE) acc[0] = 1.0f;
    else out[threadIdx.x] = acc[0];
    moe_wgmma_wait<0>();
    if (!WRITE) out[128 + threadIdx.x] = acc[0];
}
__global__ void k_err_acc_write(float* out) { ht_early<true>(out); }
// The operands (a flat 64 x 16 A and 128 x 16 B of `src`, 6 KiB) copied in with cp.async, which
// writes through the generic proxy too: FENCE, a proxy fence after the copies landed (right), or
// none. out[t]: thread t's first accumulator (16 for ones).
template <bool FENCE>
__device__ void ht_cp_async(const unsigned short* src, float* out) {
    DYNAMIC_SHARED(unsigned char, smem);
    for (int c = threadIdx.x; c < (64 + 128) * 16 * 2 / 16; c += 128) moe_cp_async16(smem + 16 * c, src + 8 * c, true);
    moe_cp_async_commit();
    moe_cp_async_wait(0);
    __syncthreads();
    if (FENCE) moe_fence_proxy_async();
    float acc[64];
    ht_issue(smem, acc);
    moe_wgmma_wait<0>();
    out[threadIdx.x] = acc[0];
}
__global__ void k_cp_async_fenced(const unsigned short* src, float* out) { ht_cp_async<true>(src, out); }
__global__ void k_err_cp_async_no_fence(const unsigned short* src, float* out) { ht_cp_async<false>(src, out); }
// A operand overwritten (and fenced) between the wgmma and its wait: the wgmma may still read it.
__global__ void k_err_overwrite_in_flight(float* out) {
    DYNAMIC_SHARED(unsigned char, smem);
    ht_ones(smem);
    float acc[64];
    ht_issue(smem, acc);
    if (threadIdx.x == 0) ((unsigned short*)smem)[0] = 0x4000;  // 2.0 into A while the wgmma runs
    moe_fence_proxy_async();
    moe_wgmma_wait<0>();
    out[threadIdx.x] = acc[0];
}
__global__ void k_acc_read_early(float* out) { ht_early<false>(out); }
// A descriptor of static shared memory, which has no shared-window address here.
__global__ void k_err_static_desc(float* out) {
    __shared__ __align__(128) unsigned short s[64 * 16];
    out[0] = (float)moe_wgmma_desc(s, 128, 256);
}
// A wgmma in a block of 64 threads (half a warpgroup).
__global__ void k_err_half_warpgroup(float* out) { ht_early<false>(out); }
// Clusters of two blocks (blocks 2j and 2j + 1). Each block: its rank into out[4 b]; an mbarrier
// of one arrival that the other block completes (mapa + a remote arrival) after a cluster
// barrier; then one box each, multicast to both blocks (rank r's box at (c0, c1 + 64 r) into
// half r of both blocks' shared memory, counted on both blocks' barrier `full`); every block
// copies both halves, unswizzled, to boxes [b][2][64][64]; a cluster barrier before leaving.
__global__ void __cluster_dims__(2, 1, 1) k_cluster(const void* map, int c0, int c1, int* out,
                                                   unsigned short* boxes) {
    DYNAMIC_SHARED(unsigned char, smem);
    __shared__ __align__(8) unsigned long long ping, full;
    const unsigned rank = moe_cluster_rank();
    if (threadIdx.x == 0) {
        moe_mbar_init(&ping, 1);
        moe_mbar_init(&full, 1);
        moe_mbar_init_fence();
    }
    __syncthreads();
    moe_cluster_sync();  // both blocks' barriers exist before either reaches the other's
    if (threadIdx.x == 0) {
        moe_mbar_arrive_cluster(&ping, rank ^ 1u);
        moe_mbar_arrive_expect_tx(&full, 2 * 64 * 128);
        moe_tma_load_2d_multicast(smem + rank * 64 * 128, map, c0, c1 + 64 * (int)rank, &full, (unsigned short)0x3);
    }
    moe_mbar_wait<true>(&ping, 0);
    moe_mbar_wait(&full, 0);
    const unsigned b = blockIdx.x;
    if (threadIdx.x == 0) out[4 * b] = (int)rank, out[4 * b + 1] = 1;
    for (int i = threadIdx.x; i < 2 * 64 * 64; i += blockDim.x) {
        const int r = (i / 64) % 64, c = i % 64, h = i / (64 * 64);
        boxes[b * 2 * 64 * 64 + i] =
            *(unsigned short*)(smem + h * 64 * 128 + 128 * r + 16 * ((c / 8) ^ (r % 8)) + 2 * (c % 8));
    }
    moe_cluster_sync();  // neither block leaves while the other can still reach it
}
// Clusters of 2 x 2 blocks: each block's rank (x first) into out[2 b], then a ring of arrivals
// (rank r on rank r + 1's barrier) between two cluster barriers; out[2 b + 1] = 1 once its own
// barrier completed.
__global__ void __cluster_dims__(2, 2, 1) k_cluster_ring(int* out) {
    __shared__ __align__(8) unsigned long long bar;
    const unsigned rank = moe_cluster_rank();
    const unsigned b = blockIdx.x + gridDim.x * blockIdx.y;
    if (threadIdx.x == 0) moe_mbar_init(&bar, 1);
    __syncthreads();
    moe_cluster_sync();
    if (threadIdx.x == 0) moe_mbar_arrive_cluster(&bar, (rank + 1) % 4);
    moe_mbar_wait<true>(&bar, 0);
    if (threadIdx.x == 0) out[2 * b] = (int)rank, out[2 * b + 1] = 1;
    moe_cluster_sync();
}
// Two clusters of two that end far apart: cluster `slow`'s blocks hold their thread 0 for `ms`
// milliseconds of host time (an emulator-only kernel: the sleep stands for a long tile) before
// barrier.cluster; the other cluster passes at once. On the emulator with two groups of
// workers, the group that runs the quick cluster is done long before the other group reaches its
// barrier: nothing the runtime frees when one group is done may be what another still uses.
__global__ void __cluster_dims__(2, 1, 1) k_cluster_late(int* out, int slow, int ms) {
    const unsigned rank = moe_cluster_rank();
    if ((int)blockIdx.x / 2 == slow && threadIdx.x == 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    moe_cluster_sync();
    if (threadIdx.x == 0) out[blockIdx.x] = (int)rank + 1;
    moe_cluster_sync();
}
// The same shape with no cluster: every block is a cluster of one (rank 0).
__global__ void k_no_cluster(int* out) {
    moe_cluster_sync();
    out[blockIdx.x] = (int)moe_cluster_rank();
}
// Misuses. A multicast to ranks 0 to 2 (mask 0x7) in a cluster of two.
__global__ void __cluster_dims__(2, 1, 1) k_err_multicast(const void* map) {
    DYNAMIC_SHARED(unsigned char, smem);
    __shared__ __align__(8) unsigned long long full;
    if (threadIdx.x == 0) {
        moe_mbar_init(&full, 1);
        moe_mbar_arrive_expect_tx(&full, 64 * 128);
        moe_tma_load_2d_multicast(smem, map, 0, 0, &full, (unsigned short)0x7);
    }
}
// An arrival on rank 2's barrier in a cluster of two.
__global__ void __cluster_dims__(2, 1, 1) k_err_remote_rank(int*) {
    __shared__ __align__(8) unsigned long long bar;
    if (threadIdx.x == 0) {
        moe_mbar_init(&bar, 1);
        moe_mbar_arrive_cluster(&bar, 2);
    }
}
// Rank 1 waits for an arrival rank 0 makes only after a cluster barrier that rank 1 never
// reaches: the cluster hangs.
__global__ void __cluster_dims__(2, 1, 1) k_err_cluster_deadlock(int*) {
    __shared__ __align__(8) unsigned long long bar;
    if (threadIdx.x == 0) moe_mbar_init(&bar, 1);
    __syncthreads();
    if (moe_cluster_rank() == 0) {
        moe_cluster_sync();
        if (threadIdx.x == 0) moe_mbar_arrive_cluster(&bar, 1);
    } else {
        moe_mbar_wait<true>(&bar, 0);
    }
}
// Rank 1 leaves at once; rank 0 then arrives on its barrier (no cluster barrier before leaving).
__global__ void __cluster_dims__(2, 1, 1) k_err_exited_partner(int*) {
    __shared__ __align__(8) unsigned long long bar;
    if (threadIdx.x == 0) moe_mbar_init(&bar, 1);
    if (moe_cluster_rank() == 1) return;
    moe_cluster_sync();  // met: rank 1's threads have exited
    if (threadIdx.x == 0) moe_mbar_arrive_cluster(&bar, 1);
}
