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
// fused_router_screen_many_e{W} (many rows) and fused_router_screen_e{W} (a few, with a second
// screen) rank on approximate keys and confirm with exact ones (below): the same bits, about
// two fifths of the instructions.
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

// ANCHOR: screened
// The one-warp router for many sigmoid rows, screened. At 8192 GLM-like rows the exact kernel
// above issues some 1,300 instructions a row, a third of them the 288 exact sigmoids (each an
// exponential of ~25 instructions and a correctly rounded division) and another third the rounds
// and their ties. Here:
//   1. every expert gets an approximate key, sigma~(x) + (b - c) with
//      sigma~(x) = rcp~(1 + ex2~(-x log2 e)) (two MUFU instructions; common.cuh) and c the bias of
//      expert 0 (any constant would do: it keeps the keys near zero, where a float is finest),
//      as an ordered number (fr_order_fast) whose low bits are replaced by the expert's id, so
//      that every key of the row is distinct and a round needs no tie test and no vote;
//   2. each lane keeps its three best packed keys, and k rounds of one redux.sync each take the
//      warp's k best (the lane holding the round's key sees it by itself; a lane that wins a
//      third time takes its next three);
//   3. the cut is checked: if the k-th approximate key is not clear of the (k+1)-th by more than
//      the approximations' error (fr_clear), the warp routes the row with fr_row, exactly; in
//      the few-row kernels (fr_screen's SECOND) it first screens the row once more with c moved
//      to the k-th key's value, where the keys at the cut are near 0 and their id bits cost
//      little precision, and goes to fr_row only if the cut is still too close;
//   4. lane r computes pick r's exact score (fr_scores' arithmetic, the same bits); if two picks
//      lie too close to trust their order, the picks are ordered by their exact keys (chapter
//      1's order: the larger key, then the lower id).
// So the approximations only ever decide which exact numbers to compute: the ids and weights are
// fr_row's, bit for bit, on both backends (the emulator's approximations are other numbers, and
// may send other rows to the exact path, with the same result). Rows with a non-finite logit or
// bias, other scorings, grouped selection and k >= E take fr_row directly.

// sigma~(x) + b, the screen's key: within 2^-20 of fr_scores' sigma(x) + b before the add's
// rounding (both sigmoids within about 2^-22 of the true value).
__device__ __forceinline__ float fr_approx_key(float x, float b) {
    return moe_rcp_approx(1.0f + moe_ex2_approx(x * -1.44269504f)) + b;
}

// A float as an unsigned number with the same order (a negative float's bits reversed, a
// positive float's sign bit set): fr_order without its care for -0, which a screen can do without.
__device__ __forceinline__ unsigned fr_order_fast(float a) {
    const unsigned u = __float_as_uint(a);
    return u ^ ((unsigned)((int)u >> 31) | 0x80000000u);
}

// The float a packed key stands for, its id bits cleared (which lowers the ordered number, so
// the float too): the inverse of fr_order_fast.
__device__ __forceinline__ float fr_unpack(unsigned p, unsigned id_mask) {
    const unsigned u = p & ~id_mask;
    return __uint_as_float((u & 0x80000000u) ? (u ^ 0x80000000u) : ~u);
}

// Are the exact keys behind packed approximate keys hi > lo surely in that order, and distinct?
// With M the larger magnitude of the two unpacked values: an approximate key a lies in
// [f, f + q), f = fr_unpack, q = 2^ID_BITS ulp(a) <= 2^(ID_BITS - 23) M (the id bits); a sits
// within e = 2^-20 + 2^-24 (3M + |c| + 2) of the exact key minus c (the sigmoids' difference,
// measured on the GPU at 2^-22.4 by the test screen_approximation_is_within_its_bound, plus the
// roundings of b - c, of the approximate sum and of the exact one). The keys are in order when
// the gap exceeds q + 2e; the margin, 2^(ID_BITS - 22) M + 2^-21 |c| + 2^-17, is q plus at least
// twice 2e.
__device__ __forceinline__ bool fr_clear(unsigned hi, unsigned lo, unsigned id_mask, float rel,
                                         float c) {
    const float a = fr_unpack(hi, id_mask), b = fr_unpack(lo, id_mask);
    return a - b > fmaxf(fabsf(a), fabsf(b)) * rel + fabsf(c) * 0x1p-21f + 0x1p-17f;
}

// A lane's three largest packed keys below `below` (0 where there are fewer).
template <int SLOTS>
__device__ __forceinline__ void fr_top3(const unsigned* pk, unsigned below, unsigned& h0,
                                        unsigned& h1, unsigned& h2) {
    h0 = h1 = h2 = 0u;
#pragma unroll
    for (int j = 0; j < SLOTS; ++j) {
        const unsigned v = pk[j] < below ? pk[j] : 0u;
        h2 = max(h2, min(h1, v));
        h1 = max(h1, min(h0, v));
        h0 = max(h0, v);
    }
}

// The screen's ID_BITS low bits of a packed key hold the expert's id: 9 (ids up to 511) or 10
// (up to 1023). fr_id_mask: those bits; fr_id_rel: their share of a key's magnitude in
// fr_clear's margin, 2^(ID_BITS - 22).
template <int SLOTS>
__device__ __forceinline__ constexpr unsigned fr_id_mask() {
    return (1u << (SLOTS <= 16 ? 9 : 10)) - 1u;
}
template <int SLOTS>
__device__ __forceinline__ constexpr float fr_id_rel() {
    return SLOTS <= 16 ? 0x1p-13f : 0x1p-12f;
}

// The packed approximate keys of one row, sigma~(x) + (b - shift), in lane l's slots j
// (expert l + 32 j): ordered numbers whose low ID_BITS bits are the expert's id. Slots past E
// (when !FULL) get 0, below every real key (at least fr_order_fast(-FLT_MAX)).
template <int SLOTS, bool FULL>
__device__ __forceinline__ void fr_pack_keys(const float* s, const float* b, float shift, int lane,
                                             int E, unsigned* pk) {
    constexpr unsigned id_mask = fr_id_mask<SLOTS>();
#pragma unroll
    for (int j = 0; j < SLOTS; ++j) {
        const unsigned o = fr_order_fast(fr_approx_key(s[j], b[j] - shift));
        pk[j] = (FULL || lane + 32 * j < E) ? (o & ~id_mask) | (unsigned)(lane + 32 * j) : 0u;
    }
}

// k rounds over a row's packed keys (step 2 below) and the clearance of each pick from the next
// (step 3): lane r gets round r's key in `mine`; the result is a ballot of the picks r < k not
// clear of the key after them (bit k-1: the cut, pick k against the best key left).
template <int SLOTS, int K>
__device__ __forceinline__ unsigned fr_select(const unsigned* pk, int k, int lane, float shift,
                                              unsigned& mine) {
    unsigned h0, h1, h2;
    fr_top3<SLOTS>(pk, 0xffffffffu, h0, h1, h2);
    mine = 0u;
    int wins = 0;
#pragma unroll(K ? K : 2)
    for (int round = 0; round < k; ++round) {
        const unsigned top = __reduce_max_sync(MOE_FULL_MASK, h0);
        mine = lane == round ? top : mine;
        // The holder moves its next key up: selects, not a branch (every round has a holder,
        // so a branch would cost the warp its jump and its reconvergence every round).
        const bool won = h0 == top;
        h0 = won ? h1 : h0;
        h1 = won ? h2 : h1;
        h2 = won ? 0u : h2;
        wins += won ? 1 : 0;
        if (wins == 3) {  // its third win: its next three, below this pick
            wins = 0;
            fr_top3<SLOTS>(pk, top, h0, h1, h2);
        }
    }
    const unsigned rest = __reduce_max_sync(MOE_FULL_MASK, h0);
    const unsigned after = __shfl_down_sync(MOE_FULL_MASK, mine, 1);
    const bool clear =
        lane >= k ||
        fr_clear(mine, lane == k - 1 ? rest : after, fr_id_mask<SLOTS>(), fr_id_rel<SLOTS>(), shift);
    return __ballot_sync(MOE_FULL_MASK, !clear);
}

// The second screen of a row whose cut the first could not call: the id bits cost up to 2^9 ulp
// of keys near 1, so the keys again less `shift`, the k-th key's value, are near 0 at the cut,
// where a float is finest, and the rounds again. Returns the ballot of unclear picks and this
// lane's pick (fr_select's). Out of line, with its own loads (from the L1 or the L2 by now): the
// 2% of rows that need it must not keep the first screen's logits in registers through every
// row's rounds (inlined, the compiler kept them). Even so, at 8192 rows the kernel with it took
// some 5% longer than without it in a same-run A/B (inlined, some 3% across runs), so only the
// few-row kernels have it (fr_screen's SECOND).
template <int SLOTS, bool FULL, int K>
__device__ __noinline__ uint2 fr_screen_again(const float* __restrict__ xl,
                                              const float* __restrict__ bias, int lane, int E,
                                              int k, float shift) {
    float b[SLOTS], s[SLOTS];
#pragma unroll
    for (int j = 0; j < SLOTS; ++j) {
        const bool in = FULL || lane + 32 * j < E;
        b[j] = (bias != nullptr && in) ? bias[lane + 32 * j] : 0.0f;
        s[j] = in ? __ldcg(xl + 32 * j) : 0.0f;
    }
    unsigned pk[SLOTS], mine;
    fr_pack_keys<SLOTS, FULL>(s, b, shift, lane, E, pk);
    const unsigned unclear = fr_select<SLOTS, K>(pk, k, lane, shift, mine);
    return make_uint2(unclear, mine);
}

// Routes row t of a sigmoid config without groups, 1 <= k < E: 1 when the first screen decided
// the row, 2 when the second did, 0 (nothing stored) when the row needs the exact router.
// FULL: E = 32 * SLOTS, every slot an expert (288 experts in e288), so that no load or key needs
// a test. K: k known when compiled (8, the common case: the rounds and the weights' sum
// unroll), or 0 for k from the argument. SECOND: whether a cut too close to
// call is screened again (fr_screen_again) before the exact router; only the kernels for a few
// rows do (fused_router_screen_e{W}), since at many rows its mere presence cost the kernel some
// 5% (the many-row kernels, fused_router_screen_many_e{W}, leave it out).
template <int SLOTS, bool FULL, int K, bool SECOND>
__device__ __forceinline__ int fr_screen(const float* __restrict__ logits,
                                          const float* __restrict__ bias, int* __restrict__ ids,
                                          float* __restrict__ weights, int t, int E, int k_arg,
                                          int renormalize, float scale) {
    const int k = K ? K : k_arg;
    constexpr unsigned ID_MASK = fr_id_mask<SLOTS>();
    const int lane = threadIdx.x & 31;
    const float* x = logits + (size_t)t * E;
    const bool has_bias = bias != nullptr;
    // The bias before the wait, as fr_row; c = the bias of expert 0.
    const float c = has_bias ? bias[0] : 0.0f;
    float b[SLOTS], s[SLOTS];
#pragma unroll
    for (int j = 0; j < SLOTS; ++j)
        b[j] = (has_bias && (FULL || lane + 32 * j < E)) ? bias[lane + 32 * j] : 0.0f;
    moe_grid_wait();
    const float* xl = x + lane;
#pragma unroll
    for (int j = 0; j < SLOTS; ++j) s[j] = (FULL || lane + 32 * j < E) ? __ldcg(xl + 32 * j) : 0.0f;
    // 1. The packed approximate keys. x * 0 is 0 for a finite x and NaN for an infinite or NaN
    //    one, so `bad` stays 0 exactly when every logit and bias value of the row is finite.
    unsigned pk[SLOTS];
    fr_pack_keys<SLOTS, FULL>(s, b, c, lane, E, pk);
    float bad = 0.0f;
#pragma unroll
    for (int j = 0; j < SLOTS; ++j) bad = fmaf(s[j], 0.0f, fmaf(b[j], 0.0f, bad));
    if (!__all_sync(MOE_FULL_MASK, bad == 0.0f)) return 0;  // chapter 1's rules: exactly
    // 2. and 3. k rounds of one redux.sync each (the round's id is in its key's low bits, and the
    //    lane holding it is the one whose best key it is), then the cut and the picks' order.
    unsigned mine;  // lane r: round r's packed key
    unsigned unclear = fr_select<SLOTS, K>(pk, k, lane, c, mine);
    int screen = 1;
    if (unclear >> (k - 1) & 1u) {
        if (!SECOND) return 0;  // the many-row kernels: no second screen, the exact router
        // 3b. The cut is too close to call at this precision: screen once more, centred on the
        //     k-th key's value (fr_screen_again).
        const float shift = c + __shfl_sync(MOE_FULL_MASK, fr_unpack(mine, ID_MASK), k - 1);
        const uint2 again = fr_screen_again<SLOTS, FULL, K>(xl, bias, lane, E, k, shift);
        unclear = again.x;
        mine = again.y;
        if (unclear >> (k - 1) & 1u) return 0;  // still too close: the exact router
        screen = 2;
    }
    // 4. The picks' exact scores: fr_scores' arithmetic on the same logit.
    int my_id = lane < k ? (int)(mine & ID_MASK) : -1;
    float my_score = 0.0f;
    if (lane < k) my_score = moe_sigmoidf(__ldcg(&x[my_id]));
    if (unclear) {  // two picks too close to order by their approximations: rank them exactly
        const float key = (lane < k && has_bias) ? my_score + bias[my_id] : my_score;
        const unsigned ko = fr_order(key);
        int rank = 0;
        for (int j = 0; j < k; ++j) {
            const unsigned oj = __shfl_sync(MOE_FULL_MASK, ko, j);
            const int ij = __shfl_sync(MOE_FULL_MASK, my_id, j);
            rank += (oj > ko || (oj == ko && ij < my_id)) ? 1 : 0;
        }
        int src = 0;  // the lane holding the pick of rank `lane`
        for (int j = 0; j < k; ++j)
            if (__shfl_sync(MOE_FULL_MASK, rank, j) == lane) src = j;
        my_id = __shfl_sync(MOE_FULL_MASK, my_id, src);
        my_score = __shfl_sync(MOE_FULL_MASK, my_score, src);
    }
    fr_store_weights(ids, weights, t, k, lane, my_id, my_score, renormalize, scale);
    return screen;
}

// path (the test kernel's; null in the others): lane 0 stores the fr_screen result that decided
// the row, 0 for the exact router.
template <int SLOTS, bool SECOND>
__device__ __forceinline__ void fused_router_screened(const float* __restrict__ logits,
                                                      const float* __restrict__ bias,
                                                      int* __restrict__ ids,
                                                      float* __restrict__ weights, int T, int E,
                                                      int k, int scoring, int n_group,
                                                      int topk_group, int renormalize,
                                                      float scale, int* __restrict__ path = nullptr) {
    const int t = blockIdx.x * FR_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (t >= T) return;
    const bool screenable = scoring == FR_SCORING_SIGMOID && n_group <= 1 && k >= 1 && k < E;
    int screen = 0;
    if (screenable) {
        if (E == 32 * SLOTS && k == 8)
            screen = fr_screen<SLOTS, true, 8, SECOND>(logits, bias, ids, weights, t, E, k, renormalize, scale);
        else if (E == 32 * SLOTS)
            screen = fr_screen<SLOTS, true, 0, SECOND>(logits, bias, ids, weights, t, E, k, renormalize, scale);
        else
            screen = fr_screen<SLOTS, false, 0, SECOND>(logits, bias, ids, weights, t, E, k, renormalize, scale);
    }
    if (!screen)
        fr_row<SLOTS>(logits, bias, ids, weights, t, E, k, scoring, n_group, topk_group,
                      renormalize, scale);
    if (path != nullptr && (threadIdx.x & 31) == 0) path[t] = screen;
}
// ANCHOR_END: screened

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
// The same for many rows, without the second screen.
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
// path that decided it (path[t]: 1 the first screen, 2 the second, 0 the exact router).
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
