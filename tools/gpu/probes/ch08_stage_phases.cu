// ch08_stage_phases.cu -- where the time goes in chapter 8's one-block routing stage
// (stage_one_block): the SM's cycle counter (clock64) read at the kernel's phase boundaries, caches
// warm, at 1, 4 and 16 rows of the GLM-like row (288 experts, sigmoid + bias) and the Qwen3-like
// one (128 experts, softmax), k = 8, BLOCK_M 16 (chapter 3's rule at these sizes).
//
// The kernel marks its phases with STAGE_PROBE(n) (empty unless defined, as here, before
// kernels/ch08_routing_stage.cu is included). Lane 0 of each warp records; a phase ends when the
// last warp is past it; times are cycles since the earliest warp's first mark, medians over 50
// launches (10 more first, not counted); the marks' own stores are in them. Cycles are the SM's
// clock, so the ratio between phases holds on any Hopper part; divide by the clock for time.
//
// Built and run by tools/gpu/run's probes stage (nvcc -O3 -arch=sm_90a --fmad=false, as NVRTC
// builds the kernel for the bench); writes ch08_stage_phases.txt.
#include <algorithm>
#include "cuda_check.h"
#include "phase_probe.h"

#define STAGE_PROBE(n) PHASE_MARK(n)
#include "../../../kernels/ch08_routing_stage.cu"

typedef void (*StageFn)(const float*, const float*, int, int, int, int, int, int, int, float, int,
                        int, int, int*, float*, int*, int*, int*, int*, int*);

int main() {
    struct Shape {
        const char* name;
        int experts, scoring;
        bool bias;
        StageFn fn;
    } shapes[] = {{"GLM-like: 288 experts, sigmoid + bias", 288, FR_SCORING_SIGMOID, true,
                   stage_one_block_e288},
                  {"Qwen3-like: 128 experts, softmax", 128, FR_SCORING_SOFTMAX, false,
                   stage_one_block_e128}};
    const char* phase[] = {"",
                           "the wait (griddepcontrol.wait; nothing to wait for here)",
                           "placeholders and zeros issued",
                           "1. route (the last routing warp done)",
                           "barrier 1",
                           "2. ranks by ballots, barrier 2",
                           "3. counts over the warps, barrier 3",
                           "4. scan over the experts, barrier 4",
                           "5. scatter and the tiles' experts"};
    const int k = 8, block_m = 16, row_counts[] = {1, 4, 16};
    int clock_khz = 0;
    CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
    printf("stage_one_block, k = %d, BLOCK_M %d, caches warm; cycles since the first warp's start "
           "(median of 50 launches; SM clock up to %d MHz)\n",
           k, block_m, clock_khz / 1000);
    for (const Shape& sh : shapes) {
        for (int T : row_counts) {
            const int E = sh.experts, P = T * k;
            const int capacity = P + std::min(P, E) * (block_m - 1), max_tiles = capacity / block_m;
            std::vector<float> logits(T * E), bias(E);
            unsigned x = 12345u;  // fixed pseudo-random rows: logits in [-2, 2), bias in [0, 0.1)
            for (int i = 0; i < T * E; ++i) {
                x = x * 1664525u + 1013904223u;
                logits[i] = (x >> 8) * (4.0f / 16777216.0f) - 2.0f;
            }
            for (int i = 0; i < E; ++i) {
                x = x * 1664525u + 1013904223u;
                bias[i] = (x >> 8) * (0.1f / 16777216.0f);
            }
            float *d_logits, *d_bias, *d_weights;
            int *d_ids, *d_sorted, *d_experts, *d_post, *d_counts, *d_offsets;
            CHECK(cudaMalloc(&d_logits, T * E * sizeof(float)));
            CHECK(cudaMalloc(&d_bias, E * sizeof(float)));
            CHECK(cudaMalloc(&d_weights, P * sizeof(float)));
            CHECK(cudaMalloc(&d_ids, P * sizeof(int)));
            CHECK(cudaMalloc(&d_sorted, capacity * sizeof(int)));
            CHECK(cudaMalloc(&d_experts, max_tiles * sizeof(int)));
            CHECK(cudaMalloc(&d_post, sizeof(int)));
            CHECK(cudaMalloc(&d_counts, E * sizeof(int)));
            CHECK(cudaMalloc(&d_offsets, (E + 1) * sizeof(int)));
            CHECK(cudaMemcpy(d_logits, logits.data(), T * E * sizeof(float), cudaMemcpyHostToDevice));
            CHECK(cudaMemcpy(d_bias, bias.data(), E * sizeof(float), cudaMemcpyHostToDevice));
            std::vector<std::vector<long long>> at(9);
            for (int launch = 0; launch < 60; ++launch) {
                phase_clear();
                sh.fn<<<1, STAGE_THREADS>>>(d_logits, sh.bias ? d_bias : nullptr, T, E, k, sh.scoring,
                                            1, 1, 1, 1.0f, block_m, capacity, max_tiles, d_ids,
                                            d_weights, d_sorted, d_experts, d_post, d_counts,
                                            d_offsets);
                CHECK(cudaGetLastError());
                CHECK(cudaDeviceSynchronize());
                if (launch < 10) continue;
                phase_collect(STAGE_WARPS, 8, [](int) { return STAGE_WARPS; }, at);
            }
            int post = 0;
            CHECK(cudaMemcpy(&post, d_post, sizeof post, cudaMemcpyDeviceToHost));
            printf("\n%s, %d row%s (%d pairs, padded total %d)\n", sh.name, T, T == 1 ? "" : "s", P,
                   post);
            phase_print(phase, 8, 50, at);
            CHECK(cudaFree(d_logits));
            CHECK(cudaFree(d_bias));
            CHECK(cudaFree(d_weights));
            CHECK(cudaFree(d_ids));
            CHECK(cudaFree(d_sorted));
            CHECK(cudaFree(d_experts));
            CHECK(cudaFree(d_post));
            CHECK(cudaFree(d_counts));
            CHECK(cudaFree(d_offsets));
        }
    }
    return 0;
}
