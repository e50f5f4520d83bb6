// ch05/router_screen.cuh — chapter 5's screened one-warp router (kernels/ch05_fused_router.cu's
// fused_router_screen* kernels): approximate rank keys first, the exact ones only for the picks
// and for the rows whose cut is too close to trust, the same bits as fr_row. In a header, as
// ch05/router_row.cuh is, so that chapter 8's routing stage and chapter 9's one launch route a
// row with the very same instructions (fr_row_screened) instead of a copy.
#pragma once
#include "common.cuh"
#include "ch05/router_row.cuh"

// Phase marks in fr_screen for tools/gpu/probes/ch05_screen_phases.cu, which defines them to read
// the SM's clock (the _DEP form once v exists); everywhere else they are nothing.
#ifndef FR_SCREEN_PROBE
#define FR_SCREEN_PROBE(n)
#define FR_SCREEN_PROBE_DEP(n, v)
#endif

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
//      the approximations' error (fr_clear), the cut widens (in the few-row kernels, fr_screen's
//      WIDEN): more rounds take every key not clear below the k-th, so that the n picks (n <= 32,
//      one a lane) surely hold the k best exact keys; a row whose n would pass 32, or any such row
//      in the many-row kernels, goes to fr_row, exactly;
//   4. lane r computes pick r's exact score (fr_scores' arithmetic, the same bits) from the pick's
//      logit, which the few-row kernels take from the lane that loaded it (shuffles) and the
//      many-row ones load again (so as not to hold the row in registers through the rounds); if
//      two picks lie too close to trust their order, or the cut was widened, the picks are ranked
//      by their exact keys (chapter 1's order: the larger key, then the lower id) and the first k
//      kept.
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
// clear of the key after them (bit k-1: the cut, pick k against the best key left). WIDEN: a cut
// too close to call widens the picks (step 3b): the rounds go on while the best key left is not
// clear below pick k - 1, so that lanes 0 to n - 1 hold every expert that may belong to the k
// best (n returned; 33: more than a warp holds). Without it n is k.
template <int SLOTS, int K, bool WIDEN = false>
__device__ __forceinline__ unsigned fr_select(const unsigned* pk, int k, int lane, float shift,
                                              unsigned& mine, int& n) {
    unsigned h0, h1, h2;
    fr_top3<SLOTS>(pk, 0xffffffffu, h0, h1, h2);
    mine = 0u;
    int wins = 0;
    // One round: the warp's best key left (`top`) to lane `round`; the holder moves its next key
    // up, by selects, not a branch (every round has a holder, so a branch would cost the warp
    // its jump and its reconvergence every round); its third win takes its next three, below it.
    auto take = [&](int round, unsigned top) {
        mine = lane == round ? top : mine;
        const bool won = h0 == top;
        h0 = won ? h1 : h0;
        h1 = won ? h2 : h1;
        h2 = won ? 0u : h2;
        wins += won ? 1 : 0;
        if (wins == 3) {
            wins = 0;
            fr_top3<SLOTS>(pk, top, h0, h1, h2);
        }
    };
#pragma unroll(K ? K : 2)
    for (int round = 0; round < k; ++round) take(round, __reduce_max_sync(MOE_FULL_MASK, h0));
    unsigned rest = __reduce_max_sync(MOE_FULL_MASK, h0);
    const unsigned after = __shfl_down_sync(MOE_FULL_MASK, mine, 1);
    const bool clear =
        lane >= k ||
        fr_clear(mine, lane == k - 1 ? rest : after, fr_id_mask<SLOTS>(), fr_id_rel<SLOTS>(), shift);
    const unsigned unclear = __ballot_sync(MOE_FULL_MASK, !clear);
    n = k;
    if (WIDEN && (unclear >> (k - 1) & 1u)) {
        // 3b. Every key not clear below pick k - 1 joins the picks (all lanes agree on `rest`
        //     and `cut`: a uniform loop). A key clear below it is clear below every pick too
        //     (fr_clear's margin grows more slowly than the gap), so the k best exact keys are
        //     among the n.
        const unsigned cut = __shfl_sync(MOE_FULL_MASK, mine, k - 1);
        while (rest != 0u && !fr_clear(cut, rest, fr_id_mask<SLOTS>(), fr_id_rel<SLOTS>(), shift)) {
            if (n == 32) return (n = 33, unclear);  // a warp's lanes are full: the exact router
            take(n++, rest);
            rest = __reduce_max_sync(MOE_FULL_MASK, h0);
        }
    }
    return unclear;
}

// fr_screen's exact ranking: lanes 0 to n - 1 hold the picks (my_id, my_score; n >= k = K when K
// is given), with exact keys ko; afterwards lane r holds the pick of rank r (the larger key, then
// the lower id). The few-row kernels give K: the first K keys and ids are fetched together and
// then compared, and the ranks likewise (a loop of shuffle-then-compare waits out each shuffle's
// latency in turn); the picks past K (a widened cut's) one at a time. The many-row kernels give
// 0, every pick one at a time: the code their runs timed.
template <int K>
__device__ __forceinline__ void fr_rank_picks(unsigned ko, int n, int lane, int& my_id,
                                              float& my_score) {
    constexpr int F = K > 0 ? K : 1;
    const int id = my_id;
    int rank = 0;
    int j0 = 0;
    if (K > 0) {
        unsigned oj[F];
        int ij[F];
#pragma unroll
        for (int j = 0; j < F; ++j) {
            oj[j] = __shfl_sync(MOE_FULL_MASK, ko, j);
            ij[j] = __shfl_sync(MOE_FULL_MASK, id, j);
        }
#pragma unroll
        for (int j = 0; j < F; ++j) rank += (oj[j] > ko || (oj[j] == ko && ij[j] < id)) ? 1 : 0;
        j0 = K;
    }
    for (int j = j0; j < n; ++j) {
        const unsigned o = __shfl_sync(MOE_FULL_MASK, ko, j);
        const int i = __shfl_sync(MOE_FULL_MASK, id, j);
        rank += (o > ko || (o == ko && i < id)) ? 1 : 0;
    }
    int src = 0;  // the lane holding the pick of rank `lane`
    if (K > 0) {
        int rj[F];
#pragma unroll
        for (int j = 0; j < F; ++j) rj[j] = __shfl_sync(MOE_FULL_MASK, rank, j);
#pragma unroll
        for (int j = 0; j < F; ++j) src = rj[j] == lane ? j : src;
    }
    for (int j = j0; j < n; ++j)
        if (__shfl_sync(MOE_FULL_MASK, rank, j) == lane) src = j;
    my_id = __shfl_sync(MOE_FULL_MASK, id, src);
    my_score = __shfl_sync(MOE_FULL_MASK, my_score, src);
}

// Routes row t of a sigmoid config without groups, 1 <= k < E: 1 when the screen decided the
// row, 2 when it decided it with its cut widened, 0 (nothing stored) when the row needs the exact
// router.
// FULL: E = 32 * SLOTS, every slot an expert (288 experts in e288), so that no load or key needs
// a test. K: k known when compiled (8, the common case: the rounds and the weights' sum
// unroll), or 0 for k from the argument. WIDEN: whether a cut too close to call widens (step 3)
// rather than go to the exact router; only the kernels for a few rows widen
// (fused_router_screen_e{W}, chapter 8's stage_one_block_e{W} and chapter 9's one launch). The
// many-row kernels (fused_router_screen_many_e{W}, chapter 8's stage_route_count_e{W}) keep the
// code their runs timed: in the design before this one, merely having a second-screen branch
// cost the 8192-row kernel some 5% in a same-run A/B.
template <int SLOTS, bool FULL, int K, bool WIDEN>
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
    FR_SCREEN_PROBE(0);
    moe_grid_wait();
    FR_SCREEN_PROBE(1);
    const float* xl = x + lane;
#pragma unroll
    for (int j = 0; j < SLOTS; ++j) s[j] = (FULL || lane + 32 * j < E) ? __ldcg(xl + 32 * j) : 0.0f;
    // 1. The packed approximate keys. x * 0 is 0 for a finite x and NaN for an infinite or NaN
    //    one, so `bad` stays 0 exactly when every logit and bias value of the row is finite.
    unsigned pk[SLOTS];
    fr_pack_keys<SLOTS, FULL>(s, b, c, lane, E, pk);
    FR_SCREEN_PROBE_DEP(2, pk[SLOTS - 1]);
    float bad = 0.0f;
#pragma unroll
    for (int j = 0; j < SLOTS; ++j) bad = fmaf(s[j], 0.0f, fmaf(b[j], 0.0f, bad));
    if (!__all_sync(MOE_FULL_MASK, bad == 0.0f)) return 0;  // chapter 1's rules: exactly
    // 2. and 3. k rounds of one redux.sync each (the round's id is in its key's low bits, and the
    //    lane holding it is the one whose best key it is), then the cut and the picks' order.
    unsigned mine;  // lane r: round r's packed key
    int n;          // the picks to score exactly: k, or more where the cut was widened
    const unsigned unclear = fr_select<SLOTS, K, WIDEN>(pk, k, lane, c, mine, n);
    FR_SCREEN_PROBE_DEP(3, mine);
    int screen = 1;
    if (!WIDEN) {
        // The many-row kernels do not widen (fr_select left n at k, so their loops unroll as
        // before): a cut too close to call goes to the exact router.
        if (unclear >> (k - 1) & 1u) return 0;
    } else {
        if (n > 32) return 0;  // more picks near the cut than a warp has lanes: the exact router
        if (n > k) screen = 2;
    }
    // 4. The picks' exact scores: fr_scores' arithmetic on the same logit (lanes k to n - 1:
    //    the keys a widened cut let in, scored at the same time).
    int my_id = lane < n ? (int)(mine & ID_MASK) : -1;
    float my_score = 0.0f, my_bias = 0.0f;
    if (WIDEN) {
        // The few-row kernels: the pick's logit and bias value from lane id % 32's slot id / 32,
        // every slot's pair fetched together, rather than from the L2 again (at a few rows its
        // round trip is the longest wait of this step). The many-row kernels load them again, so
        // as not to keep the row in registers through the rounds.
        const int from = my_id & 31, slot = my_id >> 5;
        float xv = 0.0f;
#pragma unroll
        for (int j = 0; j < SLOTS; ++j) {
            const float xj = __shfl_sync(MOE_FULL_MASK, s[j], from);
            const float bj = __shfl_sync(MOE_FULL_MASK, b[j], from);
            xv = slot == j ? xj : xv;
            my_bias = slot == j ? bj : my_bias;
        }
        if (lane < n) my_score = moe_sigmoidf(xv);
    } else {
        if (lane < n) my_score = moe_sigmoidf(__ldcg(&x[my_id]));
    }
    FR_SCREEN_PROBE_DEP(4, __float_as_uint(my_score));
    if (unclear) {  // picks too close to order, or to cut, by their approximations: rank them
                    // exactly (chapter 1's order), and lanes 0 to k - 1 take the k best (the
                    // few-row kernels fetch the first K picks' shuffles together)
        const float key = WIDEN ? (lane < n ? my_score + my_bias : my_score)
                                : ((lane < n && has_bias) ? my_score + bias[my_id] : my_score);
        fr_rank_picks<WIDEN ? K : 0>(fr_order(key), n, lane, my_id, my_score);
    }
    FR_SCREEN_PROBE_DEP(5, my_id);
    fr_store_weights(ids, weights, t, k, lane, my_id, my_score, renormalize, scale);
    FR_SCREEN_PROBE(6);
    return screen;
}

// One row, t, by the warp that calls it: screened where the row allows it (sigmoid scoring, no
// grouped selection, k < E), else, or where the screen cannot decide the row, fr_row. Returns
// the fr_screen result that decided the row, 0 for the exact router. WIDEN: the few-row form's
// widened cut (fr_screen). Chapter 8's routing stage and chapter 9's one launch route their
// rows with it.
template <int SLOTS, bool WIDEN>
__device__ __forceinline__ int fr_row_screened(const float* __restrict__ logits,
                                               const float* __restrict__ bias,
                                               int* __restrict__ ids, float* __restrict__ weights,
                                               int t, int E, int k, int scoring, int n_group,
                                               int topk_group, int renormalize, float scale) {
    const bool screenable = scoring == FR_SCORING_SIGMOID && n_group <= 1 && k >= 1 && k < E;
    int screen = 0;
    if (screenable) {
        if (E == 32 * SLOTS && k == 8)
            screen = fr_screen<SLOTS, true, 8, WIDEN>(logits, bias, ids, weights, t, E, k, renormalize, scale);
        else if (E == 32 * SLOTS)
            screen = fr_screen<SLOTS, true, 0, WIDEN>(logits, bias, ids, weights, t, E, k, renormalize, scale);
        else
            screen = fr_screen<SLOTS, false, 0, WIDEN>(logits, bias, ids, weights, t, E, k, renormalize, scale);
    }
    if (!screen)
        fr_row<SLOTS>(logits, bias, ids, weights, t, E, k, scoring, n_group, topk_group,
                      renormalize, scale);
    return screen;
}

// path (the test kernel's; null in the others): lane 0 stores the fr_screen result that decided
// the row, 0 for the exact router.
template <int SLOTS, bool WIDEN>
__device__ __forceinline__ void fused_router_screened(const float* __restrict__ logits,
                                                      const float* __restrict__ bias,
                                                      int* __restrict__ ids,
                                                      float* __restrict__ weights, int T, int E,
                                                      int k, int scoring, int n_group,
                                                      int topk_group, int renormalize,
                                                      float scale, int* __restrict__ path = nullptr) {
    const int t = blockIdx.x * FR_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (t >= T) return;
    const int screen = fr_row_screened<SLOTS, WIDEN>(logits, bias, ids, weights, t, E, k, scoring,
                                                      n_group, topk_group, renormalize, scale);
    if (path != nullptr && (threadIdx.x & 31) == 0) path[t] = screen;
}
// ANCHOR_END: screened
