// ch08_icache.cu -- is chapter 8's one-block stage slow at few rows because of its work or
// because of where its instructions come from? The kernel holds every scoring family's route,
// thousands of instructions more than a launch runs. The same body (stage_one_block, unchanged)
// in a wrapper kernel that runs it `reps` times in one launch (a loop the compiler keeps as a
// loop, so the second time round executes the very same instruction addresses), with the phase
// marks of the last time round kept: reps = 1 is ch08_stage_phases.cu's measurement, and with
// reps = 2 or 3 the SM's instruction caches hold the path the first time round fetched. Then once
// with the configuration as literals, the other families' code compiled out. Data caches warm in
// all (the logits in the L2). Also prints on how many SMs the 1-block launches landed. Built and
// run by tools/gpu/run's probes stage (ch08_icache.txt).
#include <set>
#include "cuda_check.h"
#include "phase_probe.h"

#define STAGE_PROBE(n) PHASE_MARK(n)
#include "../../../kernels/ch08_routing_stage.cu"
#include "stage_probe.h"

__device__ unsigned g_smid;  // the SM the last launch ran on

__device__ void note_smid() {
    if (threadIdx.x == 0) {
        unsigned s;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
        g_smid = s;
    }
}

// The stage `reps` times in one launch. LITERAL = -1: the configuration as the arguments give it
// (as the entry points take it); LITERAL = a scoring: the row's configuration as literals instead
// (k 8, E = 32 SLOTS: 128 softmax or 288 sigmoid + bias, no groups, renormalized, scale 1,
// BLOCK_M 16), so that the compiler drops every other family's code and unrolls what k and E fix.
template <int SLOTS, int LITERAL>
__global__ void __launch_bounds__(STAGE_THREADS) reps_kernel(
    int reps, const float* logits, const float* bias, int T, int E, int k, int scoring,
    int block_m, int capacity, int max_tiles, int* ids, float* weights, int* sorted_ids,
    int* expert_ids, int* num_post, int* counts, int* offsets) {
    constexpr bool lit = LITERAL >= 0;
#pragma unroll 1
    for (int r = 0; r < reps; ++r) {
        stage_one_block<SLOTS, STAGE_WARPS>(
            logits, bias, T, lit ? 32 * SLOTS : E, lit ? kStageK : k, lit ? LITERAL : scoring, 1,
            1, 1, 1.0f, lit ? kStageBlockM : block_m, capacity, max_tiles, ids, weights,
            sorted_ids, expert_ids, num_post, counts, offsets);
        __syncthreads();
    }
    note_smid();
}

int main() {
    const char* phase[] = {"",
                           "the wait",
                           "placeholders and zeros issued",
                           "1. route",
                           "barrier 1",
                           "2. ranks, barrier 2",
                           "3. counts, barrier 3",
                           "4. scan, barrier 4",
                           "5. scatter"};
    printf("stage_one_block run `reps` times in one launch; the last time round's phases, cycles "
           "(median of 50 launches)\n");
    for (const StageShape& sh : kStageShapes) {
        for (int T : {1, 16}) {
            StageCall c(T, sh.experts);  // one upload for the four variants
            for (int variant = 0; variant < 4; ++variant) {
                // 0..2: reps 1..3 on the arguments; 3: once on literals
                const bool literal = variant == 3;
                const int reps = variant < 3 ? variant + 1 : 1;
                std::vector<std::vector<long long>> at(9);
                std::set<unsigned> sms;
                for (int launch = 0; launch < 60; ++launch) {
                    phase_clear();
                    auto fn = c.E == 288
                                  ? (literal ? reps_kernel<9, FR_SCORING_SIGMOID> : reps_kernel<9, -1>)
                                  : (literal ? reps_kernel<4, FR_SCORING_SOFTMAX> : reps_kernel<4, -1>);
                    fn<<<1, STAGE_THREADS>>>(reps, c.logits, sh.bias ? c.bias : nullptr, T, c.E,
                                             kStageK, sh.scoring, kStageBlockM, c.capacity,
                                             c.max_tiles, c.ids, c.weights, c.sorted, c.experts,
                                             c.post, c.counts, c.offsets);
                    CHECK(cudaGetLastError());
                    CHECK(cudaDeviceSynchronize());
                    unsigned s = 0;
                    CHECK(cudaMemcpyFromSymbol(&s, g_smid, sizeof s));
                    sms.insert(s);
                    if (launch < 10) continue;
                    phase_collect(STAGE_WARPS, 8, [](int) { return STAGE_WARPS; }, at);
                }
                printf("\n%s, %d row%s, %s, reps %d (launches landed on %zu distinct SMs)\n",
                       sh.name, T, T == 1 ? "" : "s",
                       literal ? "configuration as literals" : "configuration as arguments", reps,
                       sms.size());
                phase_print(phase, 8, 32, at);
            }
        }
    }
    return 0;
}
