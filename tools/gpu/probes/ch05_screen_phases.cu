// ch05_screen_phases.cu -- where one row's time goes in chapter 5's screened row router for a few
// rows (fr_screen, as fused_router_screen_e288 and chapter 8's one block run it): the SM's cycle
// counter (clock64) read at fr_screen's phase boundaries, one GLM-like row (288 experts, sigmoid +
// bias, k = 8), one warp, caches warm, through the test entry point fused_router_screen_path_e288
// (the same routing, plus the path that decided the row: 1 the screen, 2 its cut widened).
//
// Three rows: a pseudo-random one (as chapter 8's probes make them: logits in [-2, 2), bias in
// [0, 0.1)), and two built as chapter 5's path test builds them (seven experts far ahead, the
// rest at most -1, bias 8, expert 40's 8 + 2^-15), one whose eighth pick (expert 10, logit 1) is
// clear of the rest, and one whose eighth is a near tie (experts 10 and 40, logit 0), so that its
// cut widens: the same instructions up to the cut, then the widened cut's rounds and ranking.
//
// fr_screen marks its phases with FR_SCREEN_PROBE(n) and FR_SCREEN_PROBE_DEP(n, v) (empty unless
// defined, as here, before the kernels are included); the _DEP form first stores v, so that the
// clock is read only once v exists (a warp issues in order). Times are cycles since the warp's
// mark 0, medians over 50 launches (10 more first, not counted); the marks' own stores are in
// them. Built and run by tools/gpu/run's probes stage (nvcc -O3 -arch=sm_90a --fmad=false, as
// NVRTC builds the kernel for the bench); writes ch05_screen_phases.txt.
#include "cuda_check.h"
#include "phase_probe.h"

#define FR_SCREEN_PROBE(n) PHASE_MARK(n)
#define FR_SCREEN_PROBE_DEP(n, v) PHASE_MARK_DEP(n, v)
#include "../../../kernels/ch05_fused_router.cu"

int main() {
    const int E = 288, k = 8;
    const char* phase[] = {"",
                           "the wait (griddepcontrol.wait; nothing to wait for here)",
                           "1. the logits loaded (L2), the approximate keys packed",
                           "2-3. the finite check, k rounds, the cut (and a widened cut's rounds)",
                           "4. the picks' logits and bias values from their lanes, exact sigmoids",
                           "   the picks ranked exactly (when any is unclear)",
                           "   the weights: renormalised, scaled, stored"};
    struct Row {
        const char* name;
        int kind;  // 0 pseudo-random, 1 the path test's clear eighth pick, 2 its near tie
    } rows[] = {{"a pseudo-random row (logits in [-2, 2), bias in [0, 0.1))", 0},
                {"the path test's row 0: the eighth pick clear", 1},
                {"the path test's row 1: a near tie at the cut, widened", 2}};
    int clock_khz = 0;
    CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
    printf("fr_screen through fused_router_screen_path_e288, one GLM-like row (288 experts, sigmoid "
           "+ bias), k = %d, one warp, caches warm; cycles since the warp's start (median of 50 "
           "launches; SM clock up to %d MHz)\n",
           k, clock_khz / 1000);
    float *d_logits, *d_bias, *d_weights;
    int *d_ids, *d_path;
    CHECK(cudaMalloc(&d_logits, E * sizeof(float)));
    CHECK(cudaMalloc(&d_bias, E * sizeof(float)));
    CHECK(cudaMalloc(&d_weights, k * sizeof(float)));
    CHECK(cudaMalloc(&d_ids, k * sizeof(int)));
    CHECK(cudaMalloc(&d_path, sizeof(int)));
    for (const Row& row : rows) {
        std::vector<float> logits(E), bias(E);
        if (row.kind == 0) {
            unsigned x = 12345u;
            for (int i = 0; i < E; ++i) {
                x = x * 1664525u + 1013904223u;
                logits[i] = (x >> 8) * (4.0f / 16777216.0f) - 2.0f;
                x = x * 1664525u + 1013904223u;
                bias[i] = (x >> 8) * (0.1f / 16777216.0f);
            }
        } else {
            for (int e = 0; e < E; ++e) {
                logits[e] = -1.0f - (e % 7) * 0.125f;
                bias[e] = 8.0f;
            }
            const int ahead[] = {200, 3, 90, 150, 260, 17, 100};
            for (int i = 0; i < 7; ++i) logits[ahead[i]] = 5.0f - 0.25f * i;
            bias[40] = 8.0f + 1.0f / 32768.0f;
            if (row.kind == 1) logits[10] = 1.0f;
            else logits[10] = logits[40] = 0.0f;
        }
        CHECK(cudaMemcpy(d_logits, logits.data(), E * sizeof(float), cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(d_bias, bias.data(), E * sizeof(float), cudaMemcpyHostToDevice));
        std::vector<std::vector<long long>> at(7);
        phase_launches(
            [&] {
                fused_router_screen_path_e288<<<1, 32>>>(d_logits, d_bias, d_ids, d_weights, d_path, 1,
                                                         E, k, FR_SCORING_SIGMOID, 1, 1, 1, 1.0f);
            },
            1, 6, [](int) { return 1; }, at);
        int path = -1;
        CHECK(cudaMemcpy(&path, d_path, sizeof path, cudaMemcpyDeviceToHost));
        printf("\n%s: path %d (1 the screen, 2 its cut widened, 0 the exact router)\n", row.name, path);
        phase_print(phase, 6, 72, at);
    }
    CHECK(cudaFree(d_logits));
    CHECK(cudaFree(d_bias));
    CHECK(cudaFree(d_weights));
    CHECK(cudaFree(d_ids));
    CHECK(cudaFree(d_path));
    return 0;
}
