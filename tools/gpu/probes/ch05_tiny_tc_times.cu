// ch05_tiny_tc_times.cu -- chapter 5's tensor-core tiny GEMM (tiny_gemm_tc) timed alone, L2
// flushed before each launch, at chapter 5's two gate shapes (Qwen3-30B-A3B's: H 2048, E 128; the
// GLM-like: H 4096, E 288) and the row counts where the layer runs it, so that a build of the
// kernel file with another TC_UNROLL (-DTC_UNROLL=N: chunks a warp loads before it multiplies)
// can be set beside the source's in one GPU call.
//
//   ch05_tiny_tc_times NAME
//
// Prints, per shape and row count: NAME, the shape, rows, blocks, the cold median, p10 and p90
// of 25 launches (cudaEvent, microseconds, the launch's own latency included), and a checksum of
// the logits' bits (the same in every build that keeps the bits: TC_UNROLL changes only when a
// warp's loads go out, not the order of its sums). Inputs: hidden rows and gate rows uniform in
// [-1, 1), rounded to bf16.
//
// Built on the GPU machine from the repository's root as NVRTC builds the kernels for the bench,
//   nvcc -O3 -std=c++17 -arch=sm_90a --fmad=false -I kernels -o tt tools/gpu/probes/ch05_tiny_tc_times.cu
//   nvcc ... -DTC_UNROLL=8 -o tt8 tools/gpu/probes/ch05_tiny_tc_times.cu
// then `tt u4` and `tt8 u8`, one after the other.
#include "cuda_check.h"

#include "../../../kernels/ch05_tiny_gemm.cu"

#include <algorithm>
#include <cstdlib>
#include <vector>

struct Shape {
    const char* name;
    int H, E;
};

int main(int argc, char** argv) {
    const char* name = argc > 1 ? argv[1] : "build";
    const Shape shapes[] = {{"qwen3_h2048_e128", 2048, 128}, {"glm_h4096_e288", 4096, 288}};
    const int rows_list[] = {8, 12, 16, 32, 64, 96, 128, 256};
    const int max_rows = 256;
    const size_t flush_bytes = 96u << 20;
    void* flush;
    CHECK(cudaMalloc(&flush, flush_bytes));
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    unsigned x = 12345u;
    auto next = [&x]() {
        x = x * 1664525u + 1013904223u;
        return (x >> 8) * (1.0f / 16777216.0f);  // [0, 1)
    };
    for (const Shape& s : shapes) {
        std::vector<__nv_bfloat16> hid((size_t)max_rows * s.H), gate((size_t)s.E * s.H);
        for (auto& v : hid) v = __float2bfloat16(2.0f * next() - 1.0f);
        for (auto& v : gate) v = __float2bfloat16(2.0f * next() - 1.0f);
        __nv_bfloat16 *dh, *dg;
        float* dl;
        CHECK(cudaMalloc(&dh, hid.size() * 2));
        CHECK(cudaMalloc(&dg, gate.size() * 2));
        CHECK(cudaMalloc(&dl, (size_t)max_rows * s.E * 4));
        CHECK(cudaMemcpy(dh, hid.data(), hid.size() * 2, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(dg, gate.data(), gate.size() * 2, cudaMemcpyHostToDevice));
        for (int T : rows_list) {
            const dim3 grid((s.E + TC_EXPERTS - 1) / TC_EXPERTS, (T + 8 * TC_TILES - 1) / (8 * TC_TILES));
            std::vector<float> us;
            for (int i = 0; i < 30; ++i) {
                CHECK(cudaMemsetAsync(flush, i, flush_bytes));
                CHECK(cudaEventRecord(e0));
                tiny_gemm_tc<<<grid, 32 * TC_WARPS>>>(dh, dg, dl, T, s.H, s.E);
                CHECK(cudaGetLastError());
                CHECK(cudaEventRecord(e1));
                CHECK(cudaEventSynchronize(e1));
                float ms = 0;
                CHECK(cudaEventElapsedTime(&ms, e0, e1));
                if (i >= 5) us.push_back(ms * 1000.0f);
            }
            std::vector<unsigned> l((size_t)T * s.E);
            CHECK(cudaMemcpy(l.data(), dl, l.size() * 4, cudaMemcpyDeviceToHost));
            unsigned long long h = 1469598103934665603ull;
            for (unsigned v : l) h = (h ^ v) * 1099511628211ull;
            std::sort(us.begin(), us.end());
            printf("%s %s rows %d blocks %u cold_us %.2f p10 %.2f p90 %.2f sum %016llx\n", name, s.name, T,
                   grid.x * grid.y, us[us.size() / 2], us[us.size() / 10], us[us.size() * 9 / 10], h);
        }
        cudaFree(dh), cudaFree(dg), cudaFree(dl);
    }
    cudaFree(flush);
    return 0;
}
