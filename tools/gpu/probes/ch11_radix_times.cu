// ch11_radix_times.cu -- chapter 11's radix select kernels timed alone, L2 flushed before each
// launch, at Kimi K3's row (896 experts, k = 16, sigmoid + bias), so that a build of the kernel
// file with experiment switches (-D...) can be set beside the source's in one GPU call, and
// Nsight Compute pointed at one launch of each kernel (`--one`).
//
//   ch11_radix_times NAME [--one KERNEL ROWS]
//
// Prints, per kernel and row count: NAME, kernel, rows, threads a block, the cold median, p10 and
// p90 of 25 launches (cudaEvent, microseconds), and a checksum of the ids' and weights' bits (the
// same in every build that keeps the bits). Inputs: logits uniform in [-1, 1) (as the bench's
// `patterned`), bias uniform in Kimi K3's range (-0.76, 0.15). merged_gate also casts a row of
// 3,584 projection columns.
//
// Built on the GPU machine from the repository's root as NVRTC builds the kernels for the bench,
//   nvcc -O3 -std=c++17 -arch=sm_90a --fmad=false -I kernels -o rt tools/gpu/probes/ch11_radix_times.cu
// and, for the kernel file as it was at another commit (saved as OLD.cu beside a copy of common.cuh),
//   nvcc ... '-DRS_PROBE_KERNEL="OLD.cu"' -o rt_old tools/gpu/probes/ch11_radix_times.cu
// (the path relative to this file); then `rt new` and `rt_old old`, one after the other.
#include "cuda_check.h"

#ifdef RS_PROBE_KERNEL  // another version of the kernel file, to time beside this one
#include RS_PROBE_KERNEL
#else
#include "../../../kernels/ch11_merged_gate.cu"
#endif

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

static const int kE = 896, kK = 16, kP = 3584;

struct Buffers {
    float *logits, *bias, *weights, *y;
    int* ids;
    __nv_bfloat16* proj;
    void* flush;
    size_t flush_bytes = 96u << 20;
    Buffers(int T) {
        std::vector<float> l((size_t)T * kE), b(kE), yv((size_t)T * (kE + kP));
        unsigned x = 12345u;
        auto next = [&x]() {
            x = x * 1664525u + 1013904223u;
            return (x >> 8) * (1.0f / 16777216.0f);  // [0, 1)
        };
        for (auto& v : l) v = 2.0f * next() - 1.0f;
        for (auto& v : b) v = -0.76f + 0.91f * next();
        for (int t = 0; t < T; ++t)
            for (int j = 0; j < kE + kP; ++j) yv[(size_t)t * (kE + kP) + j] = j < kE ? l[(size_t)t * kE + j] : next();
        CHECK(cudaMalloc(&logits, l.size() * 4));
        CHECK(cudaMalloc(&y, yv.size() * 4));
        CHECK(cudaMalloc(&bias, kE * 4));
        CHECK(cudaMalloc(&weights, (size_t)T * kK * 4));
        CHECK(cudaMalloc(&ids, (size_t)T * kK * 4));
        CHECK(cudaMalloc(&proj, (size_t)T * kP * 2));
        CHECK(cudaMalloc(&flush, flush_bytes));
        CHECK(cudaMemcpy(logits, l.data(), l.size() * 4, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(y, yv.data(), yv.size() * 4, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(bias, b.data(), kE * 4, cudaMemcpyHostToDevice));
    }
    ~Buffers() {
        cudaFree(logits), cudaFree(y), cudaFree(bias), cudaFree(weights), cudaFree(ids), cudaFree(proj),
            cudaFree(flush);
    }
    unsigned long long checksum(int T) {
        std::vector<int> i((size_t)T * kK);
        std::vector<unsigned> w((size_t)T * kK);
        CHECK(cudaMemcpy(i.data(), ids, i.size() * 4, cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(w.data(), weights, w.size() * 4, cudaMemcpyDeviceToHost));
        unsigned long long h = 1469598103934665603ull;
        for (size_t n = 0; n < i.size(); ++n) h = (h ^ (unsigned)i[n]) * 1099511628211ull, h = (h ^ w[n]) * 1099511628211ull;
        return h;
    }
};

enum Kind { BLOCK, HALF, WARP, MERGED, MERGED_HALF };

static void launch(Kind kind, Buffers& b, int T, int threads) {
    // Kimi K3's router: sigmoid scores, the bias for ranking only, renormalised, no groups.
    if (kind == BLOCK)
        radix_topk<<<T, threads>>>(b.logits, kE, b.bias, b.ids, b.weights, T, kE, kK, RS_SCORING_SIGMOID, 1, 1, 1, 1.0f);
#ifdef RS_HALF_THREADS
    else if (kind == HALF)
        radix_topk_half<<<T, threads>>>(b.logits, kE, b.bias, b.ids, b.weights, T, kE, kK, RS_SCORING_SIGMOID, 1, 1, 1,
                                        1.0f);
#endif
    else if (kind == WARP)
        radix_topk_warp<<<(T + RS_WARP_ROWS - 1) / RS_WARP_ROWS, RS_WARP_ROWS * 32>>>(
            b.logits, kE, b.bias, b.ids, b.weights, T, kE, kK, RS_SCORING_SIGMOID, 1, 1, 1, 1.0f);
#ifdef RS_MERGED_CASTERS
    else if (kind == MERGED_HALF)
        merged_gate_half<<<T, threads>>>(b.y, b.bias, b.ids, b.weights, b.proj, T, kE, kP, kK, RS_SCORING_SIGMOID,
                                         1, 1, 1, 1.0f);
#endif
    else
        merged_gate<<<T, threads>>>(b.y, b.bias, b.ids, b.weights, b.proj, T, kE, kP, kK, RS_SCORING_SIGMOID, 1, 1,
                                    1, 1.0f);
    CHECK(cudaGetLastError());
}

int main(int argc, char** argv) {
    const char* name = argc > 1 ? argv[1] : "build";
    const bool one = argc > 4 && !strcmp(argv[2], "--one");
    struct Case {
        Kind kind;
        const char* kernel;
        int rows, threads;
    };
    std::vector<Case> cases;
    for (int rows : {1, 16, 96, 256, 512, 1024, 2048, 4096}) cases.push_back({BLOCK, "radix_topk", rows, RS_THREADS});
#ifdef RS_HALF_THREADS  // a kernel file with the half-block form
    for (int rows : {1, 16, 96, 256, 512, 1024, 2048, 4096}) cases.push_back({HALF, "radix_topk_half", rows, RS_HALF_THREADS});
#endif
    for (int rows : {1024, 2048, 4096, 8192}) cases.push_back({WARP, "radix_topk_warp", rows, RS_WARP_ROWS * 32});
#ifdef RS_MERGED_CASTERS  // a kernel file with the two merged kernels
    for (int rows : {1, 16, 1024}) cases.push_back({MERGED, "merged_gate", rows, RS_THREADS + RS_MERGED_CASTERS});
    for (int rows : {1, 16, 1024})
        cases.push_back({MERGED_HALF, "merged_gate_half", rows, RS_HALF_THREADS + RS_MERGED_CASTERS});
#else
    for (int rows : {1, 16, 1024}) cases.push_back({MERGED, "merged_gate", rows, RS_MERGED_THREADS});
#endif
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    for (const Case& c : cases) {
        if (one && (strcmp(argv[3], c.kernel) || atoi(argv[4]) != c.rows)) continue;
        Buffers b(c.rows);
        if (one) {  // one launch for a profiler, after one to load the module
            launch(c.kind, b, c.rows, c.threads);
            CHECK(cudaMemset(b.flush, 0, b.flush_bytes));
            launch(c.kind, b, c.rows, c.threads);
            CHECK(cudaDeviceSynchronize());
            continue;
        }
        std::vector<float> us;
        for (int i = 0; i < 30; ++i) {
            CHECK(cudaMemsetAsync(b.flush, i, b.flush_bytes));
            CHECK(cudaEventRecord(e0));
            launch(c.kind, b, c.rows, c.threads);
            CHECK(cudaEventRecord(e1));
            CHECK(cudaEventSynchronize(e1));
            float ms = 0;
            CHECK(cudaEventElapsedTime(&ms, e0, e1));
            if (i >= 5) us.push_back(ms * 1000.0f);
        }
        std::sort(us.begin(), us.end());
        printf("%s %s rows %d threads %d cold_us %.2f p10 %.2f p90 %.2f sum %016llx\n", name, c.kernel, c.rows,
               c.threads, us[us.size() / 2], us[us.size() / 10], us[us.size() * 9 / 10], b.checksum(c.rows));
    }
    return 0;
}
