// ch05_fused_router.cu — steps 2 and 3 of the router in one kernel: scores, rank keys, the
// top-k, the weights, their renormalisation and scaling, from [T, E] fp32 logits and an [E] fp32
// bias to ids [T, k] i32 and weights [T, k] f32.
//
// Chapter 1's chain runs these steps as six or seven kernels, each reading its input from global
// memory and writing its output back. Here one warp owns one token row: each lane loads its
// share of the row's logits once (expert lane, lane+32, ...), keeps the scores and rank keys in
// registers, and the warp selects in k rounds of argmax by a warp reduction (redux.sync) and a
// vote (fr_row, in ch05/router_row.cuh, where chapter 8's routing stage includes it from). The
// row never goes back to memory; only the k ids and k weights are stored. For few
// rows, fused_router_block runs the same router with one block per row and a thread per expert
// (below): more instructions in all, a much shorter chain. For sigmoid rows,
// fused_router_screen_many_e{W} (many rows) and fused_router_screen_e{W} (a few, which widen a cut
// too close to call) rank on approximate keys and confirm with exact ones (below): the same bits,
// about two fifths of the instructions.
//
// Upstream: SGLang's fused router (`_router_triton_kernel` in a profile; the biased grouped
// top-k of sgl-kernel's moe_fused_gate and vLLM's grouped_topk kernels are the same idea in
// CUDA): one warp per row, the row in registers, k rounds of warp argmax, the weight read from
// the unbiased score, renormalised with a small epsilon, times the routed scaling factor.
//
// Differences:
// - One kernel for every family: softmax (Qwen3, Mixtral), sigmoid + bias (DeepSeek-V3, GLM-5,
//   Kimi), sqrt-softplus (DeepSeek-V4), with or without DeepSeek-V3's grouped selection, chosen by
//   arguments (the branches are uniform across the warp).
// - The rules are chapter 1's, exactly: a non-finite logit scores 0 and ranks -inf; equal keys go
//   to the lowest expert id (a renormalised softmax's key is its logit: next item); groups are
//   ranked by the sum of their two best keys; weights are s / (sum + 1e-20) * scale, the sum
//   taken in selection order.
// - A renormalised softmax without bias or groups is ranked by its logits, and only the k picks
//   are exponentiated (fr_by_logit): the row's sum cancels in the renormalisation.
// - Exponentials and logarithms come from common.cuh (moe_expf, moe_softplusf), and every sum
//   has a fixed order, so the emulator and the GPU give the same bits.
// - Launched as a programmatic dependent of the kernel that writes the logits (the tiny GEMM):
//   the bias loads go out before moe_grid_wait (common.cuh), the logits' after it.
// - Limits: E <= 1024 (32 experts per lane), k <= 32 (lane r keeps the r-th pick), at most 32
//   groups (lane g keeps group g's value). The host refuses larger sizes with a typed error.
#include "common.cuh"

// Phase marks in fused_router_block for tools/gpu/probes/ch05_router_phases.cu, which defines
// them to read the SM's clock; everywhere else they are nothing.
#ifndef FR_PROBE
#define FR_PROBE(n)
#define FR_PROBE_DEP(n, v)
#endif

#include "ch05/router_row.cuh"

// The screened router (fr_screen, fused_router_screened) is in ch05/router_screen.cuh.
#include "ch05/router_screen.cuh"

// ANCHOR: block_router
// The same router for few rows: one block per token row, one thread per expert (blockDim =
// 32 * ceil(E / 32), at most 1024), without grouped selection. At a few rows one warp's chain is
// the time (over a thousand dependent instructions for a GLM-like row); here a thread scores one
// expert, and the selection is two rank counts instead of k rounds:
//   1. every warp ranks its 32 experts by 32 shuffles and compares (no chain: each compare waits
//      only for its shuffle), and its k best go to shared memory;
//   2. each of those ceil(E / 32) * k candidates counts the candidates better than itself (a loop
//      over shared memory, every thread reading the same word; where they fit one warp, warp 0
//      counts them by shuffles), and the one with count r < k is pick r.
// The order is the one-warp kernel's (a larger key, then the lower id), and so are the scores and
// the sums (a softmax's sum taken lane by lane over the experts lane, lane + 32, ..., then the
// same xor tree; the picks' sum in selection order): the two forms give the same ids and
// weights, bit for bit.
//   logits [T, E] f32, bias [E] f32 or null, ids [T, k] i32, weights [T, k] f32
extern "C" __global__ void __launch_bounds__(FR_MAX_EXPERTS) fused_router_block(
    const float* __restrict__ logits, const float* __restrict__ bias, int* __restrict__ ids,
    float* __restrict__ weights, int T, int E, int k, int scoring, int renormalize, float scale) {
    __shared__ float fb_max[32];                             // the warps' maxima (softmax)
    __shared__ float fb_sum;                                 // the row's sum (softmax)
    __shared__ float fb_exp[FR_MAX_EXPERTS];                 // the exponentials (softmax)
    __shared__ unsigned long long fb_cand[FR_MAX_EXPERTS];   // ordered key << 32 | ~id; 0: none
    __shared__ float fb_cand_score[FR_MAX_EXPERTS];
    __shared__ int fb_id[FR_MAX_K];                          // pick r
    __shared__ float fb_score[FR_MAX_K];
    const int t = blockIdx.x, e = threadIdx.x, lane = e & 31, warp = e >> 5;
    const int warps = blockDim.x >> 5;
    if (t >= T) return;  // the whole block leaves
    const float neg_inf = -__int_as_float(0x7f800000);
    const bool real = e < E, has_bias = bias != nullptr;
    // The bias before the wait (no kernel writes it), through the L2 (__ldcg): ptxas moved a
    // read-only load of it (ld.global.nc) below the wait, where a cold bias then took its trip to
    // memory only after the logits were ready.
    FR_PROBE(0);
    const float b = (has_bias && real) ? __ldcg(&bias[e]) : 0.0f;
    if (e < k) {
        fb_id[e] = -1;  // a pick nobody takes (k > the experts left): id -1, score 0
        fb_score[e] = 0.0f;
    }
    moe_grid_wait();
    FR_PROBE(1);
    float s = real ? __ldcg(&logits[(size_t)t * E + e]) : __int_as_float(0x7fc00000);
    const bool finite = moe_isfinite(s);
    FR_PROBE_DEP(2, finite);
    const bool by_logit = fr_by_logit(scoring, has_bias, 1, renormalize);
    s = finite ? s : (by_logit ? neg_inf : 0.0f);
    if (scoring == FR_SCORING_SOFTMAX && !by_logit) {
        float m = finite ? s : neg_inf;
        for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(MOE_FULL_MASK, m, off));
        if (lane == 0) fb_max[warp] = m;
        __syncthreads();
        for (int w = 0; w < warps; ++w) m = fmaxf(m, fb_max[w]);  // exact in any order
        const float ex = moe_expf(s - m);
        fb_exp[e] = finite ? ex : 0.0f;
        __syncthreads();
        if (warp == 0) {  // the one-warp kernel's order: lane l adds experts l, l + 32, ...
            float sum = 0.0f;
            for (int w = 0; w < warps; ++w) sum += fb_exp[lane + 32 * w];
            for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(MOE_FULL_MASK, sum, off);
            if (lane == 0) fb_sum = sum;
        }
        __syncthreads();
        const float sum = fb_sum;
        const float p = fb_exp[e] / sum;
        s = (finite && sum > 0.0f) ? p : 0.0f;
    } else if (scoring == FR_SCORING_SIGMOID) {
        const float p = moe_sigmoidf(s);
        s = finite ? p : 0.0f;
    } else if (scoring != FR_SCORING_SOFTMAX) {
        const float p = sqrtf(moe_softplusf(s));
        s = finite ? p : 0.0f;
    }  // else ranked by the logit (fr_by_logit): s is the logit, or -inf
    const float key = finite ? (has_bias ? s + b : s) : neg_inf;
    const unsigned u = real ? fr_order(key) : 0u;  // 0: no expert
    FR_PROBE_DEP(3, u);
    // 1. The expert's rank in its warp: the lanes ahead of it (a larger key, or the same key and
    //    a lower lane, so a lower id). The ranks are 0..31, each once, so the warp's first k
    //    candidate slots are all written (0 where the warp has fewer experts).
    //    Four counters, so that the 32 additions are four short chains, not one long one.
    int part[4] = {0, 0, 0, 0};
#pragma unroll
    for (int i = 0; i < 32; ++i) {
        const unsigned o = __shfl_sync(MOE_FULL_MASK, u, i);
        part[i & 3] += (o > u || (o == u && i < lane)) ? 1 : 0;
    }
    const int rank = (part[0] + part[1]) + (part[2] + part[3]);
    FR_PROBE_DEP(4, rank);
    if (rank < k) {
        fb_cand[warp * k + rank] = u ? ((unsigned long long)u << 32) | (unsigned)(~e) : 0ull;
        fb_cand_score[warp * k + rank] = s;
    }
    __syncthreads();
    FR_PROBE(5);
    // 2. The candidate's rank among all: the candidates with a larger packed number (a larger
    //    key, or the same key and a lower id). Distinct experts pack to distinct numbers.
    const int candidates = warps * k;  // k <= 32: at most one per thread
    if (candidates <= 32) {
        // One warp's worth (128 experts and k = 8, say): warp 0 ranks them as step 1 ranked its
        // experts, by shuffles, and the other warps are done; no second barrier.
        if (warp != 0) return;
        const unsigned long long mine = lane < candidates ? fb_cand[lane] : 0ull;
        const unsigned hi = (unsigned)(mine >> 32), lo = (unsigned)mine;
        int c[4] = {0, 0, 0, 0};
#pragma unroll
        for (int i = 0; i < 32; ++i) {
            const unsigned oh = __shfl_sync(MOE_FULL_MASK, hi, i);
            const unsigned ol = __shfl_sync(MOE_FULL_MASK, lo, i);
            c[i & 3] += (oh > hi || (oh == hi && ol > lo)) ? 1 : 0;
        }
        const int r = (c[0] + c[1]) + (c[2] + c[3]);
        if (mine != 0ull && r < k) {
            fb_id[r] = (int)~lo;
            fb_score[r] = fb_cand_score[lane];
        }
        FR_PROBE_DEP(6, r);
        __syncwarp();
    } else {
        if (e < candidates) {
            const unsigned long long mine = fb_cand[e];
            int c[4] = {0, 0, 0, 0};  // four counters, as above, and a tail for the last few
            int j = 0;
#pragma unroll 2
            for (; j + 4 <= candidates; j += 4) {
#pragma unroll
                for (int q = 0; q < 4; ++q) c[q] += fb_cand[j + q] > mine ? 1 : 0;
            }
            for (; j < candidates; ++j) c[0] += fb_cand[j] > mine ? 1 : 0;
            const int r = (c[0] + c[1]) + (c[2] + c[3]);
            if (mine != 0ull && r < k) {
                fb_id[r] = (int)~(unsigned)mine;
                fb_score[r] = fb_cand_score[e];
            }
            FR_PROBE_DEP(6, r);
        }
        __syncthreads();
        if (warp != 0) return;
    }
    FR_PROBE(7);
    // The weights, by warp 0, lane r holding pick r: the one-warp kernel's fr_store_weights (the
    // sum in selection order, plus 1e-20, then scaled).
    const int my_id = lane < k ? fb_id[lane] : -1;
    float my_score = lane < k ? fb_score[lane] : 0.0f;
    if (by_logit) my_score = fr_pick_exp(my_id, my_score);
    fr_store_weights(ids, weights, t, k, lane, my_id, my_score, renormalize, scale);
    FR_PROBE_DEP(8, __float_as_uint(my_score));
}
// ANCHOR_END: block_router

// One entry point per row width: up to 128, 256, 288, 320, 384, 512 and 1024 experts (4, 8, 9, 10,
// 12, 16, 32 per lane; every slot is scored, so the narrowest that holds the row is the fastest).
extern "C" __global__ void __launch_bounds__(32 * FR_ROWS_PER_BLOCK) fused_router_e128(
    const float* __restrict__ logits, const float* __restrict__ bias, int* __restrict__ ids,
    float* __restrict__ weights, int T, int E, int k, int scoring, int n_group, int topk_group,
    int renormalize, float scale) {
    fused_router<4>(logits, bias, ids, weights, T, E, k, scoring, n_group, topk_group, renormalize, scale);
}
extern "C" __global__ void __launch_bounds__(32 * FR_ROWS_PER_BLOCK) fused_router_e256(
    const float* __restrict__ logits, const float* __restrict__ bias, int* __restrict__ ids,
    float* __restrict__ weights, int T, int E, int k, int scoring, int n_group, int topk_group,
    int renormalize, float scale) {
    fused_router<8>(logits, bias, ids, weights, T, E, k, scoring, n_group, topk_group, renormalize, scale);
}
extern "C" __global__ void __launch_bounds__(32 * FR_ROWS_PER_BLOCK) fused_router_e288(
    const float* __restrict__ logits, const float* __restrict__ bias, int* __restrict__ ids,
    float* __restrict__ weights, int T, int E, int k, int scoring, int n_group, int topk_group,
    int renormalize, float scale) {
    fused_router<9>(logits, bias, ids, weights, T, E, k, scoring, n_group, topk_group, renormalize, scale);
}
extern "C" __global__ void __launch_bounds__(32 * FR_ROWS_PER_BLOCK) fused_router_e320(
    const float* __restrict__ logits, const float* __restrict__ bias, int* __restrict__ ids,
    float* __restrict__ weights, int T, int E, int k, int scoring, int n_group, int topk_group,
    int renormalize, float scale) {
    fused_router<10>(logits, bias, ids, weights, T, E, k, scoring, n_group, topk_group, renormalize, scale);
}
extern "C" __global__ void __launch_bounds__(32 * FR_ROWS_PER_BLOCK) fused_router_e384(
    const float* __restrict__ logits, const float* __restrict__ bias, int* __restrict__ ids,
    float* __restrict__ weights, int T, int E, int k, int scoring, int n_group, int topk_group,
    int renormalize, float scale) {
    fused_router<12>(logits, bias, ids, weights, T, E, k, scoring, n_group, topk_group, renormalize, scale);
}
extern "C" __global__ void __launch_bounds__(32 * FR_ROWS_PER_BLOCK) fused_router_e512(
    const float* __restrict__ logits, const float* __restrict__ bias, int* __restrict__ ids,
    float* __restrict__ weights, int T, int E, int k, int scoring, int n_group, int topk_group,
    int renormalize, float scale) {
    fused_router<16>(logits, bias, ids, weights, T, E, k, scoring, n_group, topk_group, renormalize, scale);
}
extern "C" __global__ void __launch_bounds__(32 * FR_ROWS_PER_BLOCK) fused_router_e1024(
    const float* __restrict__ logits, const float* __restrict__ bias, int* __restrict__ ids,
    float* __restrict__ weights, int T, int E, int k, int scoring, int n_group, int topk_group,
    int renormalize, float scale) {
    fused_router<32>(logits, bias, ids, weights, T, E, k, scoring, n_group, topk_group, renormalize, scale);
}

// The screened router (above), at the same widths.
extern "C" __global__ void __launch_bounds__(32 * FR_ROWS_PER_BLOCK) fused_router_screen_e128(
    const float* __restrict__ logits, const float* __restrict__ bias, int* __restrict__ ids,
    float* __restrict__ weights, int T, int E, int k, int scoring, int n_group, int topk_group,
    int renormalize, float scale) {
    fused_router_screened<4, true>(logits, bias, ids, weights, T, E, k, scoring, n_group,
                                    topk_group, renormalize, scale);
}
extern "C" __global__ void __launch_bounds__(32 * FR_ROWS_PER_BLOCK) fused_router_screen_e256(
    const float* __restrict__ logits, const float* __restrict__ bias, int* __restrict__ ids,
    float* __restrict__ weights, int T, int E, int k, int scoring, int n_group, int topk_group,
    int renormalize, float scale) {
    fused_router_screened<8, true>(logits, bias, ids, weights, T, E, k, scoring, n_group,
                                    topk_group, renormalize, scale);
}
extern "C" __global__ void __launch_bounds__(32 * FR_ROWS_PER_BLOCK) fused_router_screen_e288(
    const float* __restrict__ logits, const float* __restrict__ bias, int* __restrict__ ids,
    float* __restrict__ weights, int T, int E, int k, int scoring, int n_group, int topk_group,
    int renormalize, float scale) {
    fused_router_screened<9, true>(logits, bias, ids, weights, T, E, k, scoring, n_group,
                                    topk_group, renormalize, scale);
}
extern "C" __global__ void __launch_bounds__(32 * FR_ROWS_PER_BLOCK) fused_router_screen_e320(
    const float* __restrict__ logits, const float* __restrict__ bias, int* __restrict__ ids,
    float* __restrict__ weights, int T, int E, int k, int scoring, int n_group, int topk_group,
    int renormalize, float scale) {
    fused_router_screened<10, true>(logits, bias, ids, weights, T, E, k, scoring, n_group,
                                    topk_group, renormalize, scale);
}
extern "C" __global__ void __launch_bounds__(32 * FR_ROWS_PER_BLOCK) fused_router_screen_e384(
    const float* __restrict__ logits, const float* __restrict__ bias, int* __restrict__ ids,
    float* __restrict__ weights, int T, int E, int k, int scoring, int n_group, int topk_group,
    int renormalize, float scale) {
    fused_router_screened<12, true>(logits, bias, ids, weights, T, E, k, scoring, n_group,
                                    topk_group, renormalize, scale);
}
extern "C" __global__ void __launch_bounds__(32 * FR_ROWS_PER_BLOCK) fused_router_screen_e512(
    const float* __restrict__ logits, const float* __restrict__ bias, int* __restrict__ ids,
    float* __restrict__ weights, int T, int E, int k, int scoring, int n_group, int topk_group,
    int renormalize, float scale) {
    fused_router_screened<16, true>(logits, bias, ids, weights, T, E, k, scoring, n_group,
                                    topk_group, renormalize, scale);
}
extern "C" __global__ void __launch_bounds__(32 * FR_ROWS_PER_BLOCK) fused_router_screen_e1024(
    const float* __restrict__ logits, const float* __restrict__ bias, int* __restrict__ ids,
    float* __restrict__ weights, int T, int E, int k, int scoring, int n_group, int topk_group,
    int renormalize, float scale) {
    fused_router_screened<32, true>(logits, bias, ids, weights, T, E, k, scoring, n_group,
                                    topk_group, renormalize, scale);
}
// The same for many rows: a cut too close to call goes to the exact router (no widened cut).
extern "C" __global__ void __launch_bounds__(32 * FR_ROWS_PER_BLOCK) fused_router_screen_many_e128(
    const float* __restrict__ logits, const float* __restrict__ bias, int* __restrict__ ids,
    float* __restrict__ weights, int T, int E, int k, int scoring, int n_group, int topk_group,
    int renormalize, float scale) {
    fused_router_screened<4, false>(logits, bias, ids, weights, T, E, k, scoring, n_group,
                                    topk_group, renormalize, scale);
}
extern "C" __global__ void __launch_bounds__(32 * FR_ROWS_PER_BLOCK) fused_router_screen_many_e256(
    const float* __restrict__ logits, const float* __restrict__ bias, int* __restrict__ ids,
    float* __restrict__ weights, int T, int E, int k, int scoring, int n_group, int topk_group,
    int renormalize, float scale) {
    fused_router_screened<8, false>(logits, bias, ids, weights, T, E, k, scoring, n_group,
                                    topk_group, renormalize, scale);
}
extern "C" __global__ void __launch_bounds__(32 * FR_ROWS_PER_BLOCK) fused_router_screen_many_e288(
    const float* __restrict__ logits, const float* __restrict__ bias, int* __restrict__ ids,
    float* __restrict__ weights, int T, int E, int k, int scoring, int n_group, int topk_group,
    int renormalize, float scale) {
    fused_router_screened<9, false>(logits, bias, ids, weights, T, E, k, scoring, n_group,
                                    topk_group, renormalize, scale);
}
extern "C" __global__ void __launch_bounds__(32 * FR_ROWS_PER_BLOCK) fused_router_screen_many_e320(
    const float* __restrict__ logits, const float* __restrict__ bias, int* __restrict__ ids,
    float* __restrict__ weights, int T, int E, int k, int scoring, int n_group, int topk_group,
    int renormalize, float scale) {
    fused_router_screened<10, false>(logits, bias, ids, weights, T, E, k, scoring, n_group,
                                    topk_group, renormalize, scale);
}
extern "C" __global__ void __launch_bounds__(32 * FR_ROWS_PER_BLOCK) fused_router_screen_many_e384(
    const float* __restrict__ logits, const float* __restrict__ bias, int* __restrict__ ids,
    float* __restrict__ weights, int T, int E, int k, int scoring, int n_group, int topk_group,
    int renormalize, float scale) {
    fused_router_screened<12, false>(logits, bias, ids, weights, T, E, k, scoring, n_group,
                                    topk_group, renormalize, scale);
}
extern "C" __global__ void __launch_bounds__(32 * FR_ROWS_PER_BLOCK) fused_router_screen_many_e512(
    const float* __restrict__ logits, const float* __restrict__ bias, int* __restrict__ ids,
    float* __restrict__ weights, int T, int E, int k, int scoring, int n_group, int topk_group,
    int renormalize, float scale) {
    fused_router_screened<16, false>(logits, bias, ids, weights, T, E, k, scoring, n_group,
                                    topk_group, renormalize, scale);
}
extern "C" __global__ void __launch_bounds__(32 * FR_ROWS_PER_BLOCK) fused_router_screen_many_e1024(
    const float* __restrict__ logits, const float* __restrict__ bias, int* __restrict__ ids,
    float* __restrict__ weights, int T, int E, int k, int scoring, int n_group, int topk_group,
    int renormalize, float scale) {
    fused_router_screened<32, false>(logits, bias, ids, weights, T, E, k, scoring, n_group,
                                    topk_group, renormalize, scale);
}

// For the test of the screen's paths: fused_router_screen_e288's routing, and for each row the
// path that decided it (path[t]: 1 the screen, 2 the screen with its cut widened, 0 the exact
// router).
extern "C" __global__ void __launch_bounds__(32 * FR_ROWS_PER_BLOCK) fused_router_screen_path_e288(
    const float* __restrict__ logits, const float* __restrict__ bias, int* __restrict__ ids,
    float* __restrict__ weights, int* __restrict__ path, int T, int E, int k, int scoring,
    int n_group, int topk_group, int renormalize, float scale) {
    fused_router_screened<9, true>(logits, bias, ids, weights, T, E, k, scoring, n_group,
                                   topk_group, renormalize, scale, path);
}

// The screen's approximation against the exact score, for the test that checks fr_clear's error
// bound on the GPU's own MUFU results: for n logits x, approx[i] = fr_approx_key(x, 0) and
// exact[i] = fr_scores' sigmoid, one thread each.
extern "C" __global__ void fused_router_screen_error(const float* __restrict__ x,
                                                     float* __restrict__ approx,
                                                     float* __restrict__ exact, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    approx[i] = fr_approx_key(x[i], 0.0f);
    exact[i] = moe_sigmoidf(x[i]);
}
