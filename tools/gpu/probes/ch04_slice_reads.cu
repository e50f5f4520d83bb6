// ch04_slice_reads.cu -- does reading the weights a slice of K at a time, as chapter 4's tiles do,
// cost DRAM bandwidth against reading them in address order? At the layer's memory-bound sizes
// (64 and 512 tokens, the GLM-like shape's 4096) the tiled GEMMs run 1.03 to 1.3 times the floor
// probe, which reads its bytes in address order. A tile reads each of its weight rows BK = 64
// columns (128 bytes) at a time, so the DRAM sees one 128-byte line from each of 256 rows, rows
// 4 or 8 KB apart, and only later the row's next line. This probe reads one weight matrix of the
// layer's size with no arithmetic, three ways:
//   order      each block a contiguous 32 KB at a time (the floor probe's pattern);
//   slices W   items of 256 rows (GEMM 1's two-warpgroup tile: 128 gate and 128 up rows), a
//              block's items b, b + grid, ...; each item its rows W bytes at a time, W = 128 (the
//              tiles' BK 64), 256 (BK 128) and 512, all of an item's rows before its next slice.
// Every pattern keeps 32 KB a block in flight (8 loads of 16 bytes a thread), 4 blocks of 256
// threads per multiprocessor: at most one slice of an item at a time (the 128-byte pattern one,
// the 256- and 512-byte patterns a half and a quarter), where the tiles keep up to STAGES
// slices of their rows in flight. (So the probe overstates what the tiles lose: asking the L2 for
// four slices of B at once, as the 512-byte pattern reads, made every tuned tile slower; chapter
// 4's "What did not pay".) Shapes: Qwen3-30B-A3B's GEMM 1 weights (128 experts x 1536 rows x
// 2048 bf16) and the GLM-like shape's (288 x 2048 x 4096). Median of 20 timed runs after 3 warm
// ones (the matrix is 16 or 100 times the L2, so every run reads DRAM).
// Built and run by tools/gpu/run's probes stage; writes ch04_slice_reads.txt.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>
#include "cuda_check.h"

constexpr int THREADS = 256, LOADS = 8, ITEM_ROWS = 256;

__device__ unsigned long long g_sink;

__device__ __forceinline__ void fold(uint4& acc, const uint4& v) {
    acc.x ^= v.x;
    acc.y ^= v.y;
    acc.z ^= v.z;
    acc.w ^= v.w;
}

__device__ __forceinline__ void keep(const uint4& acc) {
    if ((acc.x ^ acc.y ^ acc.z ^ acc.w) == 0x9e3779b9u) atomicAdd(&g_sink, 1ull);
}

// Contiguous chunks of THREADS * LOADS * 16 bytes (32 KB), chunk b, b + grid, ...
__global__ void __launch_bounds__(THREADS) read_order(const uint4* __restrict__ p, size_t n16) {
    uint4 acc = {0, 0, 0, 0};
    const size_t chunk = (size_t)THREADS * LOADS;
    for (size_t c = blockIdx.x; c * chunk < n16; c += gridDim.x) {
        uint4 v[LOADS];
#pragma unroll
        for (int j = 0; j < LOADS; ++j) {
            const size_t i = c * chunk + threadIdx.x + (size_t)j * THREADS;
            v[j] = i < n16 ? __ldcs(p + i) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int j = 0; j < LOADS; ++j) fold(acc, v[j]);
    }
    keep(acc);
}

// Items of ITEM_ROWS rows of row_bytes each; an item's rows WIDTH bytes at a time.
template <int WIDTH>
__global__ void __launch_bounds__(THREADS) read_slices(const uint4* __restrict__ p, size_t rows, size_t row_bytes) {
    constexpr int PER_ROW = WIDTH / 16;                       // 16-byte loads of one row's slice
    constexpr int SLICE = ITEM_ROWS * PER_ROW;                // loads in one slice of an item
    constexpr int ROUNDS = SLICE / (THREADS * LOADS);         // batches of LOADS loads a thread
    static_assert(SLICE % (THREADS * LOADS) == 0, "a slice is whole batches");
    const size_t row16 = row_bytes / 16, items = rows / ITEM_ROWS, slices = row_bytes / WIDTH;
    uint4 acc = {0, 0, 0, 0};
    for (size_t item = blockIdx.x; item < items; item += gridDim.x) {
        const uint4* base = p + item * ITEM_ROWS * row16;
        for (size_t s = 0; s < slices; ++s) {
#pragma unroll
            for (int r = 0; r < ROUNDS; ++r) {
                uint4 v[LOADS];
#pragma unroll
                for (int j = 0; j < LOADS; ++j) {
                    const int c = (int)threadIdx.x + (j + r * LOADS) * THREADS;  // 8 threads a 128-byte line
                    v[j] = __ldcs(base + (size_t)(c / PER_ROW) * row16 + s * PER_ROW + c % PER_ROW);
                }
#pragma unroll
                for (int j = 0; j < LOADS; ++j) fold(acc, v[j]);
            }
        }
    }
    keep(acc);
}

template <class F>
static float median_us(F launch) {
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    for (int i = 0; i < 3; ++i) launch();
    std::vector<float> t;
    for (int i = 0; i < 20; ++i) {
        CHECK(cudaEventRecord(a));
        launch();
        CHECK(cudaEventRecord(b));
        CHECK(cudaEventSynchronize(b));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms * 1000.0f);
    }
    CHECK(cudaGetLastError());
    std::sort(t.begin(), t.end());
    CHECK(cudaEventDestroy(a));
    CHECK(cudaEventDestroy(b));
    return t[t.size() / 2];
}

int main() {
    int dev = 0, sms = 0;
    CHECK(cudaGetDevice(&dev));
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, dev));
    printf("ch04_slice_reads on %s (%d SMs): grid %d blocks of %d threads, %d KB a block in flight\n",
           prop.name, sms, 4 * sms, THREADS, THREADS * LOADS * 16 / 1024);
    struct Shape {
        const char* name;
        size_t rows, row_bytes;
    } shapes[] = {{"qwen3 GEMM 1 weights (128 x 1536 rows of 2048 bf16)", 128 * 1536, 2048 * 2},
                  {"glm GEMM 1 weights (288 x 2048 rows of 4096 bf16)", 288 * 2048, 4096 * 2}};
    for (const Shape& s : shapes) {
        const size_t bytes = s.rows * s.row_bytes, n16 = bytes / 16;
        uint4* p = nullptr;
        CHECK(cudaMalloc(&p, bytes));
        CHECK(cudaMemset(p, 0x5a, bytes));
        const int grid = 4 * sms;
        const float order = median_us([&] { read_order<<<grid, THREADS>>>(p, n16); });
        const float w128 = median_us([&] { read_slices<128><<<grid, THREADS>>>(p, s.rows, s.row_bytes); });
        const float w256 = median_us([&] { read_slices<256><<<grid, THREADS>>>(p, s.rows, s.row_bytes); });
        const float w512 = median_us([&] { read_slices<512><<<grid, THREADS>>>(p, s.rows, s.row_bytes); });
        auto line = [&](const char* what, float us) {
            printf("  %-26s %9.1f us  %7.1f GB/s  %.3f of order's time\n", what, us, bytes / (us * 1e3), us / order);
        };
        printf("%s: %.0f MB\n", s.name, bytes / 1e6);
        line("order", order);
        line("slices of 128 B (BK 64)", w128);
        line("slices of 256 B (BK 128)", w256);
        line("slices of 512 B (BK 256)", w512);
        CHECK(cudaFree(p));
    }
    return 0;
}
