// ch05_router_phases.cu -- where one row's time goes in chapter 5's fused_router_block: the SM's
// cycle counter (clock64) read at the kernel's phase boundaries, one row, caches warm, for the
// GLM-like row (288 experts, sigmoid + bias) and the Qwen3-like one (128 experts, softmax), k = 8.
//
// The kernel marks its phases with FR_PROBE(n) and FR_PROBE_DEP(n, v) (empty unless defined, as
// here, before kernels/ch05_fused_router.cu is included). FR_PROBE_DEP first stores v, so that the
// clock is read only once v exists (a warp issues in order: the store waits for v, the read after
// it waits for the store's issue). Lane 0 of each warp records; a phase ends when the last warp
// that does the phase's work is past it (a warp that skips a probe leaves it 0; for the weights
// only warp 0, which holds the k picks, counts). The
// times are cycles since the earliest warp's first probe, medians over 50 launches (10 more first,
// not counted); the probes' own stores are in them.
//
// Built and run by tools/gpu/run's probes stage (nvcc -O3 -arch=sm_90a --fmad=false, as NVRTC
// builds the kernel for the bench); writes ch05_router_phases.txt.
#include "cuda_check.h"
#include "phase_probe.h"

#define FR_PROBE(n) PHASE_MARK(n)
#define FR_PROBE_DEP(n, v) PHASE_MARK_DEP(n, v)
#include "../../../kernels/ch05_fused_router.cu"

int main() {
    struct Shape {
        const char* name;
        int experts, scoring;
        bool bias;
    } shapes[] = {{"GLM-like: 288 experts, sigmoid + bias", 288, FR_SCORING_SIGMOID, true},
                  {"Qwen3-like: 128 experts, softmax", 128, FR_SCORING_SOFTMAX, false}};
    const char* phase[] = {"",
                           "the wait (griddepcontrol.wait; nothing to wait for here)",
                           "the row's logit loaded (L2)",
                           "score and rank key",
                           "1. rank in the warp (32 shuffles)",
                           "barrier",
                           "2. rank among the candidates (<= 32 of them: warp 0, shuffles)",
                           "barrier (<= 32 candidates: warp 0's __syncwarp)",
                           "the weights, stored (warp 0)"};
    const int k = 8;
    int clock_khz = 0;
    CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
    printf("fused_router_block, one row, k = %d, caches warm; cycles since the first warp's start "
           "(median of 50 launches; SM clock up to %d MHz)\n",
           k, clock_khz / 1000);
    for (const Shape& sh : shapes) {
        const int E = sh.experts, threads = 32 * ((E + 31) / 32), warps = threads / 32;
        std::vector<float> logits(E), bias(E);
        unsigned x = 12345u;  // a fixed pseudo-random row: logits in [-2, 2), bias in [0, 0.1)
        for (int i = 0; i < E; ++i) {
            x = x * 1664525u + 1013904223u;
            logits[i] = (x >> 8) * (4.0f / 16777216.0f) - 2.0f;
            x = x * 1664525u + 1013904223u;
            bias[i] = (x >> 8) * (0.1f / 16777216.0f);
        }
        float *d_logits, *d_bias, *d_weights;
        int* d_ids;
        CHECK(cudaMalloc(&d_logits, E * sizeof(float)));
        CHECK(cudaMalloc(&d_bias, E * sizeof(float)));
        CHECK(cudaMalloc(&d_weights, k * sizeof(float)));
        CHECK(cudaMalloc(&d_ids, k * sizeof(int)));
        CHECK(cudaMemcpy(d_logits, logits.data(), E * sizeof(float), cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(d_bias, bias.data(), E * sizeof(float), cudaMemcpyHostToDevice));
        std::vector<std::vector<long long>> at(9);
        phase_launches(
            [&] {
                fused_router_block<<<1, threads>>>(d_logits, sh.bias ? d_bias : nullptr, d_ids,
                                                   d_weights, 1, E, k, sh.scoring, 1, 1.0f);
            },
            warps, 8, [&](int n) { return n == 8 ? 1 : warps; }, at);
        printf("\n%s (%d threads)\n", sh.name, threads);
        phase_print(phase, 8, 58, at);
        CHECK(cudaFree(d_logits));
        CHECK(cudaFree(d_bias));
        CHECK(cudaFree(d_weights));
        CHECK(cudaFree(d_ids));
    }
    return 0;
}
