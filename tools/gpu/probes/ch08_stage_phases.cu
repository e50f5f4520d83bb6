// ch08_stage_phases.cu -- where the time goes in chapter 8's one-block routing stage
// (stage_one_block): the SM's cycle counter (clock64) read at the kernel's phase boundaries, caches
// warm, at 1, 4 and 16 rows of the GLM-like row (288 experts, sigmoid + bias) and the Qwen3-like
// one (128 experts, softmax), k = 8, BLOCK_M 16 (chapter 3's rule at these sizes); at 24 and 32
// rows both the 16-warp block (a warp routes two rows in turn) and the 32-warp one the stage
// launches there (stage_one_block_wide_e{W}: a warp per row), one after the other.
//
// The kernel marks its phases with STAGE_PROBE(n) (empty unless defined, as here, before
// kernels/ch08_routing_stage.cu is included). Lane 0 of each warp records; a phase ends when the
// last warp is past it; times are cycles since the earliest warp's first mark, medians over 50
// launches (10 more first, not counted); the marks' own stores are in them. Cycles are the SM's
// clock, so the ratio between phases holds on any Hopper part; divide by the clock for time.
//
// Built and run by tools/gpu/run's probes stage (nvcc -O3 -arch=sm_90a --fmad=false, as NVRTC
// builds the kernel for the bench); writes ch08_stage_phases.txt.
#include "cuda_check.h"
#include "phase_probe.h"

#define STAGE_PROBE(n) PHASE_MARK(n)
#include "../../../kernels/ch08_routing_stage.cu"
#include "stage_probe.h"

typedef void (*StageFn)(const float*, const float*, int, int, int, int, int, int, int, float, int,
                        int, int, int*, float*, int*, int*, int*, int*, int*);

int main() {
    const StageFn fns[] = {stage_one_block_e288, stage_one_block_e128};  // kStageShapes' order
    const StageFn wide[] = {stage_one_block_wide_e288, stage_one_block_wide_e128};
    const char* phase[] = {"",
                           "the wait (griddepcontrol.wait; nothing to wait for here)",
                           "placeholders and zeros issued",
                           "1. route (the last routing warp done)",
                           "barrier 1",
                           "2. ranks by ballots, barrier 2",
                           "3. counts over the warps, barrier 3",
                           "4. scan over the experts, barrier 4",
                           "5. scatter and the tiles' experts"};
    // With STAGE_FEW_ROWS (and no more rows than BLOCK_M) the sort is stage_few_rows: one
    // barrier, marks 5 to 8 inside it.
    const char* phase_few[] = {"",
                               "the wait (after the marks' zeroing and a barrier)",
                               "placeholders and zeros issued",
                               "1. route, the picks marked (the last routing warp done)",
                               "barrier 1",
                               "2. the marks counted (two reduxes)",
                               "3. the experts' counts, first slots and tiles stored",
                               "4. the pairs' ids read, marks below scanned, ids stored",
                               "5. the pairs' slots stored"};
    const int row_counts[] = {1, 4, 16, 24, 32};
    int clock_khz = 0;
    CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
    printf("stage_one_block, k = %d, BLOCK_M %d, caches warm; cycles since the first warp's start "
           "(median of 50 launches; SM clock up to %d MHz)\n",
           kStageK, kStageBlockM, clock_khz / 1000);
    for (int s = 0; s < 2; ++s) {
        const StageShape& sh = kStageShapes[s];
        for (int T : row_counts) {
            for (int w = 0; w < (T > STAGE_WARPS ? 2 : 1); ++w) {  // w = 1: the 32-warp block
                const int warps = w ? STAGE_WIDE_WARPS : STAGE_WARPS;
                StageCall c(T, sh.experts);
                std::vector<std::vector<long long>> at(9);
                phase_launches(
                    [&] {
                        (w ? wide : fns)[s]<<<1, warps * 32>>>(
                            c.logits, sh.bias ? c.bias : nullptr, T, c.E, kStageK, sh.scoring, 1, 1,
                            1, 1.0f, kStageBlockM, c.capacity, c.max_tiles, c.ids, c.weights,
                            c.sorted, c.experts, c.post, c.counts, c.offsets);
                    },
                    warps, 8, [warps](int) { return warps; }, at);
                int post = 0;
                CHECK(cudaMemcpy(&post, c.post, sizeof post, cudaMemcpyDeviceToHost));
                printf("\n%s, %d row%s (%d pairs, padded total %d), %d warps\n", sh.name, T,
                       T == 1 ? "" : "s", c.P, post, warps);
                const bool few = STAGE_FEW_ROWS && T <= kStageBlockM && T <= 32;
                phase_print(few ? phase_few : phase, 8, 50, at);
            }
        }
    }
    return 0;
}
