// stage_probe.h -- what chapter 8's two probes of the one-block stage share (ch08_stage_phases.cu,
// ch08_icache.cu): the two row shapes, k = 8 and BLOCK_M 16, and one call's inputs and outputs on
// the device. Include it after kernels/ch08_routing_stage.cu.
#pragma once
#include <algorithm>
#include <vector>
#include "cuda_check.h"

struct StageShape {
    const char* name;
    int experts, scoring;
    bool bias;
};
static const StageShape kStageShapes[] = {
    {"GLM-like: 288 experts, sigmoid + bias", 288, FR_SCORING_SIGMOID, true},
    {"Qwen3-like: 128 experts, softmax", 128, FR_SCORING_SOFTMAX, false}};
static const int kStageK = 8, kStageBlockM = 16;  // chapter 3's rule at these sizes

// T rows of E experts: fixed pseudo-random logits in [-2, 2) and bias in [0, 0.1), uploaded, and
// every output buffer sized as chapter 3 sizes it for T * k pairs.
struct StageCall {
    int T, E, P, capacity, max_tiles;
    float *logits, *bias, *weights;
    int *ids, *sorted, *experts, *post, *counts, *offsets;
    StageCall(int T_, int E_) : T(T_), E(E_), P(T_ * kStageK) {
        capacity = P + std::min(P, E) * (kStageBlockM - 1);
        max_tiles = capacity / kStageBlockM;
        std::vector<float> l(T * E), b(E);
        unsigned x = 12345u;
        for (int i = 0; i < T * E; ++i) {
            x = x * 1664525u + 1013904223u;
            l[i] = (x >> 8) * (4.0f / 16777216.0f) - 2.0f;
        }
        for (int i = 0; i < E; ++i) {
            x = x * 1664525u + 1013904223u;
            b[i] = (x >> 8) * (0.1f / 16777216.0f);
        }
        CHECK(cudaMalloc(&logits, T * E * sizeof(float)));
        CHECK(cudaMalloc(&bias, E * sizeof(float)));
        CHECK(cudaMalloc(&weights, P * sizeof(float)));
        CHECK(cudaMalloc(&ids, P * sizeof(int)));
        CHECK(cudaMalloc(&sorted, capacity * sizeof(int)));
        CHECK(cudaMalloc(&experts, max_tiles * sizeof(int)));
        CHECK(cudaMalloc(&post, sizeof(int)));
        CHECK(cudaMalloc(&counts, E * sizeof(int)));
        CHECK(cudaMalloc(&offsets, (E + 1) * sizeof(int)));
        CHECK(cudaMemcpy(logits, l.data(), T * E * sizeof(float), cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(bias, b.data(), E * sizeof(float), cudaMemcpyHostToDevice));
    }
    ~StageCall() {
        for (void* p : {(void*)logits, (void*)bias, (void*)weights, (void*)ids, (void*)sorted,
                        (void*)experts, (void*)post, (void*)counts, (void*)offsets})
            CHECK(cudaFree(p));
    }
    StageCall(const StageCall&) = delete;
    StageCall& operator=(const StageCall&) = delete;
};
