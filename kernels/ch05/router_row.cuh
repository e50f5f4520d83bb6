// ch05/router_row.cuh — the one-warp row router of kernels/ch05_fused_router.cu (fr_row and
// the helpers it is built from: scores and rank keys, the ordered key, the grouped selection,
// the k rounds of warp argmax, the weights), in a header so that later chapters' kernels route
// a row with the very same instructions (chapter 8's routing stage) instead of a copy. The
// kernel file's comment describes the design; chapter 5's page walks through it.
#pragma once
#include "common.cuh"

#define FR_ROWS_PER_BLOCK 4  // token rows, one warp each, of one block
#define FR_MAX_EXPERTS 1024  // 32 experts per lane
#define FR_MAX_K 32          // lane r keeps the r-th selected expert
#define FR_MAX_GROUPS 32     // lane g keeps group g's value
#define FR_SCORING_SOFTMAX 0  // the `scoring` argument
#define FR_SCORING_SIGMOID 1
#define FR_SCORING_SQRT_SOFTPLUS 2

// The order of every selection: a larger key first, equal keys to the lower id. A candidate id
// of -1 means "none" and loses to any real one.
__device__ __forceinline__ bool fr_better(float a, int ia, float b, int ib) {
    if (ia < 0) return false;
    if (ib < 0) return true;
    return a > b || (a == b && ia < ib);
}

// The warp's best (key, id, score) of the 32 lanes' candidates: a xor tree, so every lane ends
// with the same winner (fr_better is a total order over distinct ids).
__device__ __forceinline__ void fr_warp_best(float& key, int& id, float& score) {
    for (int off = 16; off > 0; off >>= 1) {
        const float ok = __shfl_xor_sync(MOE_FULL_MASK, key, off);
        const int oi = __shfl_xor_sync(MOE_FULL_MASK, id, off);
        const float os = __shfl_xor_sync(MOE_FULL_MASK, score, off);
        if (fr_better(ok, oi, key, id)) {
            key = ok;
            id = oi;
            score = os;
        }
    }
}

// ANCHOR: by_logit
// A softmax whose weights are renormalised over the picks needs no softmax over the row: the
// exponential is increasing, so the k largest probabilities are the k largest logits, and
// p_r / (p_0 + ... + p_(k-1)) = e_r / (e_0 + ... + e_(k-1)) with e_r = exp(l_r - l_0), the row's
// sum cancelling. So without a bias (a key p + b is not in the logits' order) and without groups
// (a group's value is a sum of probabilities), the row is ranked by its logits and only the k
// picks are exponentiated. The order is the logits' exactly, where two probabilities that round
// to the same float would have tied (and gone to the lower id).
__device__ __forceinline__ bool fr_by_logit(int scoring, bool has_bias, int n_group,
                                            int renormalize) {
    return scoring == FR_SCORING_SOFTMAX && renormalize && !has_bias && n_group <= 1;
}

// Lane r < k holds pick r's id and logit (-inf when not finite); returns e_r = exp(l_r - l_0),
// l_0 pick 0's logit (the row's largest), and 0 for a non-finite logit or no pick (id -1), as
// the softmax gives a non-finite logit 0. fr_store_weights then divides by their sum.
__device__ __forceinline__ float fr_pick_exp(int my_id, float my_logit) {
    const float l0 = __shfl_sync(MOE_FULL_MASK, my_logit, 0);
    const float e = moe_expf(my_logit - l0);
    return (my_id >= 0 && my_logit > -__int_as_float(0x7f800000)) ? e : 0.0f;
}
// ANCHOR_END: by_logit

// ANCHOR: scores
// Step 2 for one lane's SLOTS experts (expert lane + 32*j in slot j; a slot past E holds a NaN):
// the logits become scores, in place, and the rank keys, score + b[j] with a bias (b: the lane's
// bias values, loaded by the caller). A non-finite logit gets score 0, key -inf. Ranked by the
// logit (by_logit: fr_by_logit), a softmax's score is the logit itself (-inf when not finite).
// Every slot is computed from a finite stand-in (0 for a non-finite logit) and the result then
// chosen: no branch between one slot's arithmetic and the next, so the compiler interleaves the
// slots' independent chains (an exponential is ~25 instructions, most in one chain; one warp
// alone, at a few rows, would otherwise wait on each chain in turn).
template <int SLOTS>
__device__ __forceinline__ void fr_scores(float* s, float* key, const float* b, bool has_bias,
                                          int scoring, bool by_logit) {
    const float neg_inf = -__int_as_float(0x7f800000);
    bool finite[SLOTS];
#pragma unroll
    for (int j = 0; j < SLOTS; ++j) {
        finite[j] = moe_isfinite(s[j]);
        s[j] = finite[j] ? s[j] : 0.0f;
    }
    if (scoring == FR_SCORING_SOFTMAX && by_logit) {
        // Ranked by the logit (fr_by_logit): the score is the logit itself, -inf when it is not
        // finite; the picks' exponentials come after the rounds (fr_pick_exp).
#pragma unroll
        for (int j = 0; j < SLOTS; ++j) s[j] = finite[j] ? s[j] : neg_inf;
    } else if (scoring == FR_SCORING_SOFTMAX) {
        // Softmax over the finite logits: the row's max and the sum of exponentials, each a
        // lane's serial pass then a xor tree (max is exact in any order; the sum's order is fixed).
        float m = neg_inf;
#pragma unroll
        for (int j = 0; j < SLOTS; ++j)
            if (finite[j]) m = fmaxf(m, s[j]);
        for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(MOE_FULL_MASK, m, off));
#pragma unroll
        for (int j = 0; j < SLOTS; ++j) {
            const float e = moe_expf(s[j] - m);
            s[j] = finite[j] ? e : 0.0f;
        }
        float sum = 0.0f;  // + 0 for a non-finite logit or a slot past E: the sum's bits stay
#pragma unroll
        for (int j = 0; j < SLOTS; ++j) sum += s[j];
        for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(MOE_FULL_MASK, sum, off);
#pragma unroll
        for (int j = 0; j < SLOTS; ++j) {
            const float p = s[j] / sum;
            s[j] = (finite[j] && sum > 0.0f) ? p : 0.0f;
        }
    } else if (scoring == FR_SCORING_SIGMOID) {
#pragma unroll
        for (int j = 0; j < SLOTS; ++j) {
            const float p = moe_sigmoidf(s[j]);
            s[j] = finite[j] ? p : 0.0f;
        }
    } else {
#pragma unroll
        for (int j = 0; j < SLOTS; ++j) {
            const float p = sqrtf(moe_softplusf(s[j]));
            s[j] = finite[j] ? p : 0.0f;
        }
    }
    // The rank key: score + bias selects; the unbiased score stays the weight.
#pragma unroll
    for (int j = 0; j < SLOTS; ++j) key[j] = finite[j] ? (has_bias ? s[j] + b[j] : s[j]) : neg_inf;
}
// ANCHOR_END: scores

// ANCHOR: ordered_key
// A key as an unsigned number with the same order: the float's bits made monotone (a negative
// float's bits reversed, a positive float's sign bit set; -0 taken as +0, as == does). Keys are
// never NaN (finite scores plus a finite bias, or -inf), and the smallest real key, -inf, maps to
// 0x007fffff, so 0 is free to mean "no candidate".
__device__ __forceinline__ unsigned fr_order(float key) {
    const unsigned u = __float_as_uint(key + 0.0f);  // -0 + 0 = +0
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
// ANCHOR_END: ordered_key

// ANCHOR: top2
// A lane's two best slots of its ordered keys, leaving out the slots in `taken`: their keys (0
// when there is none) and slots. One pass in slot order, each slot moving in only past a
// strictly smaller key, so that of equal keys the lower slot (the lower expert id) stays ahead:
// two compares and six selects a slot (ptxas makes some of them min/max), once, where a tree for
// the best alone costs three instructions a slot and would have to run again after every pick.
template <int SLOTS>
__device__ __forceinline__ void fr_top2(const unsigned* ok, unsigned taken, unsigned& b1k, int& b1j,
                                        unsigned& b2k, int& b2j) {
    b1k = 0u;
    b2k = 0u;
    b1j = 0;
    b2j = 0;
#pragma unroll
    for (int j = 0; j < SLOTS; ++j) {
        const unsigned v = (taken >> j & 1u) ? 0u : ok[j];
        const bool first = v > b1k, second = v > b2k;
        b2k = first ? b1k : (second ? v : b2k);
        b2j = first ? b1j : (second ? j : b2j);
        b1k = first ? v : b1k;
        b1j = first ? j : b1j;
    }
}
// ANCHOR_END: top2

// ANCHOR: groups
// DeepSeek-V3's grouped selection: experts form n_group contiguous groups of E / n_group; a
// group's value is the sum of its two best keys (its one key when groups have one expert); the
// topk_group best groups stay (ties to the lower group id). Returns the lane's slots that lie
// in a dropped group, as a bit mask. Lane g holds group g's value (n_group <= 32). Only the
// first `slots` slots hold experts (as in fr_scores).
template <int SLOTS>
__device__ __forceinline__ unsigned fr_dropped_slots(const float* key, int E, int slots, int n_group,
                                                     int topk_group) {
    const int lane = threadIdx.x & 31;
    const int per = E / n_group;
    const float neg_inf = -__int_as_float(0x7f800000);
    // Each slot's group, divided once (-1 past E) rather than once per group.
    int group[SLOTS];
#pragma unroll
    for (int j = 0; j < SLOTS; ++j) {
        const int e = lane + 32 * j;
        group[j] = (j < slots && e < E) ? e / per : -1;
    }
    float mine = neg_inf;  // this lane's group's value
    for (int g = 0; g < n_group; ++g) {
        float b1 = neg_inf, b2 = neg_inf;  // the lane's two best keys in group g
#pragma unroll
        for (int j = 0; j < SLOTS; ++j) {
            if (group[j] == g) {
                if (key[j] > b1) {
                    b2 = b1;
                    b1 = key[j];
                } else if (key[j] > b2) {
                    b2 = key[j];
                }
            }
        }
        // The two best of the warp: merge the lanes' pairs (the two largest of four values).
        for (int off = 16; off > 0; off >>= 1) {
            const float o1 = __shfl_xor_sync(MOE_FULL_MASK, b1, off);
            const float o2 = __shfl_xor_sync(MOE_FULL_MASK, b2, off);
            b2 = fmaxf(fminf(b1, o1), fmaxf(b2, o2));
            b1 = fmaxf(b1, o1);
        }
        if (lane == g) mine = per >= 2 ? b1 + b2 : b1;
    }
    unsigned kept = 0;
    for (int round = 0; round < topk_group; ++round) {
        float v = mine, unused = 0.0f;
        int g = (lane < n_group && !(kept >> lane & 1u)) ? lane : -1;
        fr_warp_best(v, g, unused);
        kept |= 1u << g;
    }
    unsigned dropped = 0;
#pragma unroll
    for (int j = 0; j < SLOTS; ++j)
        if (group[j] >= 0 && !(kept >> group[j] & 1u)) dropped |= 1u << j;
    return dropped;
}
// ANCHOR_END: groups

// ANCHOR: store_weights
// Lane r < k holds pick r's id and unbiased score: the weights are the scores divided by their
// sum (taken in selection order, as chapter 1's router_row_sum does) plus 1e-20, then scaled;
// lane r stores pick r. Only those lanes divide: a lane with a score of 0 would send the whole
// warp through the division's slow path (its FCHK test fails on a zero numerator), some forty
// instructions a row for nothing. The first eight scores are fetched together, then added in
// order: a loop of shuffle-then-add waited out each shuffle's latency in turn.
__device__ __forceinline__ void fr_store_weights(int* __restrict__ ids,
                                                 float* __restrict__ weights, int t, int k,
                                                 int lane, int my_id, float my_score,
                                                 int renormalize, float scale) {
    float total = 0.0f;
    if (renormalize) {
        float first[8];
#pragma unroll
        for (int r = 0; r < 8; ++r) first[r] = __shfl_sync(MOE_FULL_MASK, my_score, r);
#pragma unroll
        for (int r = 0; r < 8; ++r)
            if (r < k) total += first[r];
        for (int r = 8; r < k; ++r) total += __shfl_sync(MOE_FULL_MASK, my_score, r);
    }
    if (lane < k) {
        float w = my_score;
        if (renormalize) {
            w = my_score / (total + 1e-20f) * scale;
        } else if (scale != 1.0f) {
            w = my_score * scale;
        }
        ids[(size_t)t * k + lane] = my_id;
        weights[(size_t)t * k + lane] = w;
    }
}
// ANCHOR_END: store_weights

// ANCHOR: fused_router
// One warp per token row, FR_ROWS_PER_BLOCK rows per block; grid ceil(T / FR_ROWS_PER_BLOCK).
// SLOTS = experts per lane (E <= 32 * SLOTS), a template parameter so that the row stays in
// registers (the unrolled loops index the arrays with constants).
//   logits [T, E] f32, bias [E] f32 or null, ids [T, k] i32, weights [T, k] f32
// fr_row routes row t (the calling warp's); fused_router finds the warp's row.
template <int SLOTS>
__device__ __forceinline__ void fr_row(const float* __restrict__ logits,
                                       const float* __restrict__ bias, int* __restrict__ ids,
                                       float* __restrict__ weights, int t, int E, int k,
                                       int scoring, int n_group, int topk_group, int renormalize,
                                       float scale) {
    const int lane = threadIdx.x & 31;
    const float* x = logits + (size_t)t * E;
    // The lanes' slots that hold experts: E = 300 fills 10 slots of fused_router_e320, 12 lanes
    // only the tenth.
    // The loads stop there; scores and the picks' score shuffles cover all SLOTS (a past-E slot
    // scores 0), so no branch separates one slot's work from the next.
    const int slots = (E + 31) / 32;
    float s[SLOTS], key[SLOTS], b[SLOTS];
    unsigned used = 0;  // bit j: slot j is past E or in a dropped group
    // The bias first: no kernel writes it, so its loads go out before the wait for the logits
    // (the kernel is launched as a dependent of the tiny GEMM: LaunchConfig::dependent).
    const bool has_bias = bias != nullptr;
#pragma unroll
    for (int j = 0; j < SLOTS; ++j) {
        const int e = lane + 32 * j;
        b[j] = (has_bias && j < slots && e < E) ? bias[e] : 0.0f;
        key[j] = -__int_as_float(0x7f800000);
        if (e >= E) used |= 1u << j;
    }
    moe_grid_wait();  // the logits are the kernel ahead's output
#pragma unroll
    for (int j = 0; j < SLOTS; ++j) {
        const int e = lane + 32 * j;
        // A slot past E holds a NaN: non-finite, it scores 0 and adds nothing to a softmax.
        // __ldcg, not a read-only load: see moe_grid_wait in common.cuh.
        s[j] = (j < slots && e < E) ? __ldcg(&x[e]) : __int_as_float(0x7fc00000);
    }
    const bool by_logit = fr_by_logit(scoring, has_bias, n_group, renormalize);
    fr_scores<SLOTS>(s, key, b, has_bias, scoring, by_logit);
    if (n_group > 1) used |= fr_dropped_slots<SLOTS>(key, E, slots, n_group, topk_group);

    // k rounds of argmax. A round: the warp's largest of the lanes' best free keys
    // (__reduce_max_sync, one redux.sync instruction) and the lane holding it (a vote; on a tie
    // between lanes, the lowest id among them, __reduce_min_sync). Lane r keeps round r's expert;
    // the lane that holds it moves its second-best up. A lane that wins again after that (its
    // second win, and its fourth) takes a new pass over its slots, in a branch the other lanes
    // skip: with random keys some lane wins twice in 57% of GLM-like rows (8 picks among 32 lanes),
    // so about every other row takes one pass; four wins come in about one row in a thousand.
    // ANCHOR: rounds
    unsigned ok[SLOTS];  // the ordered keys; 0 = past E or in a dropped group
#pragma unroll
    for (int j = 0; j < SLOTS; ++j) ok[j] = (used >> j & 1u) ? 0u : fr_order(key[j]);
    unsigned b1k, b2k;  // the lane's best and second-best free slot: keys and slots
    int b1j, b2j;
    fr_top2<SLOTS>(ok, 0u, b1k, b1j, b2k, b2j);
    unsigned taken = 0;  // the lane's slots picked so far
    bool have_b2 = true;  // b2 is still the lane's second best (false once it moved up)
    int my_id = -1;
    for (int round = 0; round < k; ++round) {
        // The warp's largest key: one redux.sync.
        const unsigned top = __reduce_max_sync(MOE_FULL_MASK, b1k);
        // The lanes holding it: one vote. When one lane holds it (keys of distinct experts
        // rarely tie) that lane is the holder, known to every lane from the vote alone; on a tie,
        // the lowest id among the holders, one more redux.
        const unsigned holders = __ballot_sync(MOE_FULL_MASK, top != 0u && b1k == top);
        int holder = __ffs(holders) - 1;  // -1: nothing left (k > the experts still free)
        if (__popc(holders) > 1) {
            const unsigned mine = (holders >> lane & 1u) ? (unsigned)(lane + 32 * b1j) : 0xffffffffu;
            holder = (int)(__reduce_min_sync(MOE_FULL_MASK, mine) & 31u);
        }
        // The holder's slot: a shuffle that the next round does not wait for.
        const int slot = __shfl_sync(MOE_FULL_MASK, b1j, holder < 0 ? 0 : holder);
        if (lane == holder) {
            taken |= 1u << b1j;
            if (have_b2) {
                b1k = b2k;
                b1j = b2j;
                have_b2 = false;
            } else {
                fr_top2<SLOTS>(ok, taken, b1k, b1j, b2k, b2j);
                have_b2 = true;
            }
        }
        if (lane == round) my_id = holder < 0 ? -1 : holder + 32 * slot;
    }
    // Lane r's score: the owner's register, one shuffle per slot (the same bits step 2 made).
    const int owner = my_id & 31, my_slot = my_id >> 5;  // -1: lane 31, slot -1, matches none
    float my_score = 0.0f;
#pragma unroll
    for (int j = 0; j < SLOTS; ++j) {  // every slot (past E a score of 0): no branch between them
        const float v = __shfl_sync(MOE_FULL_MASK, s[j], owner);
        if (j == my_slot) my_score = v;
    }
    // ANCHOR_END: rounds

    if (by_logit) my_score = fr_pick_exp(my_id, my_score);
    fr_store_weights(ids, weights, t, k, lane, my_id, my_score, renormalize, scale);
}

template <int SLOTS>
__device__ __forceinline__ void fused_router(const float* __restrict__ logits,
                                             const float* __restrict__ bias, int* __restrict__ ids,
                                             float* __restrict__ weights, int T, int E, int k,
                                             int scoring, int n_group, int topk_group,
                                             int renormalize, float scale) {
    const int t = blockIdx.x * FR_ROWS_PER_BLOCK + (threadIdx.x >> 5);
    if (t >= T) return;  // the whole warp leaves; nothing waits for the other warps
    fr_row<SLOTS>(logits, bias, ids, weights, t, E, k, scoring, n_group, topk_group, renormalize,
                  scale);
}
// ANCHOR_END: fused_router
