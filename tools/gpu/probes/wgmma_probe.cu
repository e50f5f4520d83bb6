// wgmma_probe.cu -- the first look at Hopper's warpgroup MMA before chapter 4 builds on it: one
// warpgroup (128 threads) computes D[64][N] = A[64][16] . B[N][16]^T with
// `wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16`, both operands read from shared memory
// through matrix descriptors (no swizzle), for N = 8 and 16, and the result is compared with the
// exact product computed here on the host. A measuring tool for the GPU machine, built there:
//
//     nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o /tmp/wgmma_probe \
//         tools/gpu/probes/wgmma_probe.cu
//     /tmp/wgmma_probe
//
// What it settles, each as a count of wrong outputs (0 is the answer):
//   - the descriptor's two byte offsets for a K-major operand without swizzle: which one steps
//     between the 8x8 core matrices along K and which along M (or N). Both readings are run;
//     exactly one should give 0 wrong outputs;
//   - the accumulator layout: thread t of the warpgroup (warp w = t / 32, g = lane / 4,
//     q = lane % 4) holds, for each 8 columns j, D[16w + g][8j + 2q + {0, 1}] in d[4j + {0, 1}]
//     and D[16w + g + 8][8j + 2q + {0, 1}] in d[4j + {2, 3}]: mma.sync's m16n8 layout, one warp
//     per 16 rows.
// Small integer inputs make every product and sum exact, so any difference is a layout error,
// never rounding. Exit status: 0 when, for every N, one reading matches everywhere.
//
// The shared-memory layout (the "core matrix" layout of the PTX ISA's wgmma section): an operand
// of R rows (M or N) by 16 k is 8x8 core matrices, each 8 rows of 16 contiguous bytes; core
// matrix (r / 8, k / 8) starts at ((r / 8) * 2 + k / 8) * 128 bytes. So the core matrices are
// 128 bytes apart along K and 256 bytes apart along M (or N).
#include <cuda_bf16.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_check.h"

constexpr int M = 64, K = 16;
constexpr uint32_t K_STEP = 128, ROW_STEP = 256;  // bytes between core matrices along K, M/N

// Byte offset of element (r, k) of an operand in the core-matrix layout above.
__host__ __device__ inline uint32_t core_offset(int r, int k) {
    return (uint32_t)(((r / 8) * 2 + k / 8) * 128 + (r % 8) * 16 + (k % 8) * 2);
}

// A shared-memory matrix descriptor: start address, "leading dimension byte offset" (bits
// 16-29) and "stride dimension byte offset" (bits 32-45), each in 16-byte units; swizzle
// (bits 62-63) and base offset (bits 49-51) zero.
__device__ inline uint64_t descriptor(const void* smem, uint32_t leading, uint32_t stride) {
    const uint32_t addr = (uint32_t)__cvta_generic_to_shared(smem);
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((leading >> 4) & 0x3FFF) << 16) |
           ((uint64_t)((stride >> 4) & 0x3FFF) << 32);
}

template <int N>
__device__ inline void wgmma(float (&d)[N / 2], uint64_t da, uint64_t db);

template <>
__device__ inline void wgmma<8>(float (&d)[4], uint64_t da, uint64_t db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "l"(da), "l"(db), "r"(0)
        : "memory");
}

template <>
__device__ inline void wgmma<16>(float (&d)[8], uint64_t da, uint64_t db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, "
        "%8, %9, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
          "+f"(d[7])
        : "l"(da), "l"(db), "r"(0)
        : "memory");
}

// One warpgroup. a: [64][16] row-major; b: [N][16] row-major (B^T, K-major like A);
// d: [64][N] row-major, written from each thread's registers by the layout in the header.
// `swap` = 0: leading offset = the step along K, stride offset = the step along M/N; 1: reversed.
template <int N>
__global__ void wgmma_tile(const __nv_bfloat16* a, const __nv_bfloat16* b, float* d, int swap) {
    // Room for the wrong reading too: read with the offsets swapped, B's second core matrix
    // along K sits 256 bytes in, past an N = 8 operand's 256 bytes (the first run on the H200
    // stopped there with an illegal address, after the right reading had matched).
    __shared__ __align__(128) unsigned char sa[2 * M * K * 2];
    __shared__ __align__(128) unsigned char sb[2 * (N < 16 ? 16 : N) * K * 2];
    const int t = threadIdx.x;
    for (int i = t; i < M * K; i += blockDim.x)
        *(__nv_bfloat16*)(sa + core_offset(i / K, i % K)) = a[i];
    for (int i = t; i < N * K; i += blockDim.x)
        *(__nv_bfloat16*)(sb + core_offset(i / K, i % K)) = b[i];
    __syncthreads();
    // The generic-proxy stores above, made visible to wgmma's reads (the async proxy).
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    const uint32_t lead = swap ? ROW_STEP : K_STEP, stride = swap ? K_STEP : ROW_STEP;
    const uint64_t da = descriptor(sa, lead, stride), db = descriptor(sb, lead, stride);
    float acc[N / 2];
    for (int i = 0; i < N / 2; ++i) acc[i] = 0.0f;
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    wgmma<N>(acc, da, db);
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    const int w = t / 32, lane = t % 32, g = lane / 4, q = lane % 4;
    for (int j = 0; j < N / 8; ++j)
        for (int h = 0; h < 2; ++h)
            for (int c = 0; c < 2; ++c)
                d[(16 * w + g + 8 * h) * N + 8 * j + 2 * q + c] = acc[4 * j + 2 * h + c];
}

// Runs both readings of the descriptor at N columns; returns how many matched everywhere.
template <int N>
int probe() {
    std::vector<__nv_bfloat16> ha(M * K), hb(N * K);
    std::vector<float> fa(M * K), fb(N * K), want(M * N, 0.0f), got(M * N);
    uint32_t s = 12345u + N;
    auto small = [&]() {  // an integer in [-3, 3]: exact in bf16, products and sums exact in fp32
        s = s * 1664525u + 1013904223u;
        return (float)((int)((s >> 16) % 7u) - 3);
    };
    for (int i = 0; i < M * K; ++i) ha[i] = __float2bfloat16(fa[i] = small());
    for (int i = 0; i < N * K; ++i) hb[i] = __float2bfloat16(fb[i] = small());
    for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n)
            for (int k = 0; k < K; ++k) want[m * N + n] += fa[m * K + k] * fb[n * K + k];
    __nv_bfloat16 *da, *db;
    float* dd;
    CHECK(cudaMalloc(&da, sizeof(__nv_bfloat16) * M * K));
    CHECK(cudaMalloc(&db, sizeof(__nv_bfloat16) * N * K));
    CHECK(cudaMalloc(&dd, sizeof(float) * M * N));
    CHECK(cudaMemcpy(da, ha.data(), sizeof(__nv_bfloat16) * M * K, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db, hb.data(), sizeof(__nv_bfloat16) * N * K, cudaMemcpyHostToDevice));
    int matched = 0;
    for (int swap = 0; swap < 2; ++swap) {
        CHECK(cudaMemset(dd, 0xFF, sizeof(float) * M * N));  // NaN: an unwritten output is wrong
        wgmma_tile<N><<<1, 128>>>(da, db, dd, swap);
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        CHECK(cudaMemcpy(got.data(), dd, sizeof(float) * M * N, cudaMemcpyDeviceToHost));
        int wrong = 0, shown = 0;
        for (int i = 0; i < M * N; ++i) {
            if (got[i] != want[i]) {
                if (shown++ < 4)
                    printf("    D[%d][%d] = %g, want %g\n", i / N, i % N, got[i], want[i]);
                ++wrong;
            }
        }
        printf("wgmma probe: m64n%dk16 bf16, leading offset = the step along %s, stride offset = "
               "the step along %s: %d of %d outputs wrong\n",
               N, swap ? "M/N" : "K", swap ? "K" : "M/N", wrong, M * N);
        matched += wrong == 0;
    }
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(dd));
    return matched;
}

int main() {
    cudaDeviceProp p;
    CHECK(cudaGetDeviceProperties(&p, 0));
    printf("wgmma probe on %s (sm_%d%d)\n", p.name, p.major, p.minor);
    if (p.major != 9) {
        printf("wgmma probe: wgmma needs sm_90a; this device is sm_%d%d\n", p.major, p.minor);
        return 2;
    }
    const int m8 = probe<8>(), m16 = probe<16>();
    const bool ok = m8 == 1 && m16 == 1;
    printf("wgmma probe: %s\n", ok ? "one reading of the descriptor matched at N = 8 and 16"
                                   : "no single reading matched: see the lines above");
    return ok ? 0 : 1;
}
