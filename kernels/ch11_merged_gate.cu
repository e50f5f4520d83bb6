// ch11_merged_gate.cu — the top-k by radix select, and the kernel behind a gate merged into the
// GEMM in front of the experts (Kimi K3's shapes: 896 experts, k = 16, a 3,584-row projection).
//
// Radix select. Chapter 5's router finds the k largest rank keys of a row in k rounds of warp
// argmax: k dependent rounds, each a reduction over the whole row. Here the keys become unsigned
// numbers in the same order (rs_order), each with the expert's id below it, and the k-th largest
// such number is found digit by digit from the top: a histogram of the leading 8 bits of every
// candidate, a scan from the highest bin down to the bin that holds the cut (the k-th largest),
// then the same over the next 8 bits of only the numbers in that bin, until the bin holding the
// cut holds exactly as many numbers as are still missing. Every number above the cut is
// selected; the k selected are then put in chapter 5's order (the larger key first, of equal keys
// the lower id) by counting, and their weights computed as chapter 5 computes them.
//
// The merged gate. The GEMM in front writes one fp32 row of E logits then P projection columns
// per token ([T, E + P], the stacked weight's rows: the gate's first). merged_gate (or, from
// RADIX_HALF_FROM_ROWS rows, merged_gate_half) runs one block per row: its threads cast the
// row's P projection columns to bf16 ([T, P], what the experts read) and radix-select k of the E
// logits, in one launch.
//
// Upstream: SGLang's fused front for Kimi K3 (the router article, section 7: one GEMM over the
// stacked gate and projection weights with fp32 output, then one kernel that selects 16 of 896
// by radix select and casts the projection's columns to bf16).
//
// Differences:
// - The ids and weights are chapter 5's fused router's (kernels/ch05_fused_router.cu), bit for
//   bit, on both backends, for every family (softmax, sigmoid + bias, sqrt-softplus, grouped):
//   the same score arithmetic (common.cuh's moe_sigmoidf, moe_softplusf, moe_expf, written
//   again here element by element), the same keys, the same order, the weights' sum taken in
//   selection order plus 1e-20, then scaled. A full softmax (not renormalised, or with a bias
//   or groups) sums its exponentials in chapter 5's warp order (rs_softmax_stats) so that the
//   scores too are the same bits.
// - Ties at the cut need no rule of their own: the expert's id sits below the key in the number
//   that is selected (rs_pack), so every number of a row is distinct and a larger number is a
//   larger key or an equal key with a lower id.
// - The histograms are integer counts in shared memory (integer atomics: the counts, and so
//   the result, do not depend on the order of arrival; no float atomics anywhere). A row's
//   numbers share their leading bits, so many lanes of a warp add one to the same bin; the
//   hardware counts those as one atomic (ATOMS.POPC.INC), and nothing in the kernel groups them.
// - After the first pass a thread revisits only its experts whose numbers still share the prefix
//   (a mask of its slots), and compares 32-bit keys until only the id's bits are left.
// - One warp scans each pass's histogram and hands the cut to the others through shared memory
//   (two barriers a pass in the block forms); three histograms in turn let a pass clear the one
//   two passes on without a third.
// - Limits: E <= 1024 (ids fit 10 bits; a row's keys fit shared memory), k <= 32 (one warp
//   orders the picks), at most 32 groups. The host refuses larger sizes with a typed error.
// - The merged kernels need E and P multiples of 4 (16-byte loads of the fp32 row); the host
//   checks.
#include "common.cuh"

#define RS_MAX_EXPERTS 1024  // ids fit RS_ID_BITS bits; the row's keys fit shared memory
#define RS_MAX_K 32          // one warp orders the picks, a lane each
#define RS_MAX_GROUPS 32     // lane g of warp 0 keeps group g's value
#define RS_ID_BITS 10        // bits of the expert id below the key in a packed number
#define RS_DIGIT_BITS 8      // bits binned per pass
#define RS_BINS 256          // 1 << RS_DIGIT_BITS
static_assert(32 % RS_DIGIT_BITS == 0, "the key's passes end at the id's bits (rs_visit)");
#define RS_THREADS 256       // most threads of one block (one row)
#define RS_UNROLL 4          // experts a thread loads at once (RS_MAX_EXPERTS / RS_THREADS)
#define RS_HALF_THREADS 128  // radix_topk_half: a block of four warps per row
#define RS_HALF_UNROLL 8     // RS_MAX_EXPERTS / RS_HALF_THREADS
#define RS_MERGED_CASTERS 128  // the merged kernels' casting threads, after the selecting ones
#define RS_MERGED_CAST_UNROLL 8  // 16-byte loads a casting thread issues at once (7 at P = 3,584)
#define RS_WARP_ROWS 4         // radix_topk_warp: rows of one block, a warp each
#define RS_WARP_UNROLL 8       // logits a lane of radix_topk_warp loads at once
// The warp form's histograms: 3 as the block form's (a pass clears the one two passes on, with
// no barrier of its own), or 1 (cleared between passes, two warp barriers, the picks kept in
// its memory afterwards), which leaves the block 37,952 bytes of shared memory instead of
// 48,192, so that 6 blocks fit an SM instead of 4: the A/B of whether the warp form waits for
// want of warps (MOE_NVRTC_DEFINES=RS_WARP_HISTS=3 for the other). Timed on an H100 (3, 1, 3 in
// one call; the H200 results README has the run): with 1 the warp form took 0.81 of the time at
// 8,192 rows and 0.97 to 0.99 below. 1; CI runs the chapter's emulator tests with 3 too.
#ifndef RS_WARP_HISTS
#define RS_WARP_HISTS 1
#endif

#define RS_SCORING_SOFTMAX 0  // the `scoring` argument, as chapter 5's
#define RS_SCORING_SIGMOID 1
#define RS_SCORING_SQRT_SOFTPLUS 2

// ANCHOR: order
// A rank key as an unsigned number in the same order (the idea of chapter 5's fr_order, written
// again here): a negative float's bits reversed, a positive float's sign bit set; -0 counted as
// +0 (as == counts them). Keys are never NaN (a non-finite logit ranks -inf), and -inf maps to
// 0x007fffff, so 0 is free for "not a candidate".
__device__ __forceinline__ unsigned rs_order(float key) {
    const unsigned u = __float_as_uint(key + 0.0f);  // -0 + 0 = +0
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// The number radix select ranks: the ordered key in the high bits, and below it the id
// reversed (RS_MAX_EXPERTS - 1 - id), so that of two equal keys the lower id is the larger
// number. 42 bits; every expert of a row gets a distinct one.
__device__ __forceinline__ unsigned long long rs_pack(unsigned ordered, int id) {
    return ((unsigned long long)ordered << RS_ID_BITS) | (unsigned)(RS_MAX_EXPERTS - 1 - id);
}
__device__ __forceinline__ int rs_id(unsigned long long packed) {
    return RS_MAX_EXPERTS - 1 - (int)(packed & (RS_MAX_EXPERTS - 1));
}
// ANCHOR_END: order

// One logit of the row, fp32 or bf16 widened (exactly), read through the L2: the kernel may be a
// programmatic dependent of the GEMM that writes it (common.cuh, moe_grid_wait).
__device__ __forceinline__ float rs_load(const float* x, int e) { return __ldcg(x + e); }
__device__ __forceinline__ float rs_load(const __nv_bfloat16* x, int e) {
    const unsigned short u = __ldcg(reinterpret_cast<const unsigned short*>(x) + e);
    return __uint_as_float((unsigned)u << 16);
}

// A full softmax's row max and sum of exponentials, by warp 0, in chapter 5's order: lane l adds
// experts l, l + 32, l + 64, ... in turn, then the 32 lanes' sums meet in a xor tree. The max is
// exact in any order; the sum is not, so this order is what makes the scores the same bits.
// `x` holds the logits (-inf where not finite).
__device__ __forceinline__ void rs_softmax_stats(const float* x, int E, float* stats) {
    const int lane = threadIdx.x & 31;
    const float neg_inf = -__int_as_float(0x7f800000);
    float m = neg_inf;
    for (int e = lane; e < E; e += 32)
        if (x[e] > neg_inf) m = fmaxf(m, x[e]);
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(MOE_FULL_MASK, m, off));
    float sum = 0.0f;
    for (int e = lane; e < E; e += 32) {
        const bool finite = x[e] > neg_inf;
        const float ex = moe_expf((finite ? x[e] : 0.0f) - m);
        sum += finite ? ex : 0.0f;
    }
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_xor_sync(MOE_FULL_MASK, sum, off);
    if (lane == 0) {
        stats[0] = m;
        stats[1] = sum;
    }
}

// DeepSeek-V3's grouped selection, by warp 0: group g's value is the sum of its two best keys
// (its one key when groups have one expert), and the topk_group best groups stay, ties to the
// lower group id (chapter 5's rule). Returns the bit mask of the kept groups. `keyf` holds the
// float keys.
__device__ __forceinline__ unsigned rs_kept_groups(const float* keyf, int E, int n_group,
                                                   int topk_group) {
    const int lane = threadIdx.x & 31;
    const int per = E / n_group;
    const float neg_inf = -__int_as_float(0x7f800000);
    float v = neg_inf;
    if (lane < n_group) {
        float b1 = neg_inf, b2 = neg_inf;
        for (int e = lane * per; e < (lane + 1) * per; ++e) {
            const float key = keyf[e];
            if (key > b1) {
                b2 = b1;
                b1 = key;
            } else if (key > b2) {
                b2 = key;
            }
        }
        v = per >= 2 ? b1 + b2 : b1;
    }
    // A group's rank: the groups ahead of it (a larger value, or the same and a lower id).
    int rank = 0;
    for (int g = 0; g < n_group; ++g) {
        const float o = __shfl_sync(MOE_FULL_MASK, v, g);
        rank += (o > v || (o == v && g < lane)) ? 1 : 0;
    }
    return __ballot_sync(MOE_FULL_MASK, lane < n_group && rank < topk_group);
}

// ANCHOR: store_weights
// Lane r < k holds pick r's id and unbiased score: the weights are the scores over their sum
// (taken in selection order, from 0) plus 1e-20, times the routed scaling factor; chapter 5's
// fr_store_weights, rule for rule.
__device__ __forceinline__ void rs_store_weights(int* __restrict__ ids, float* __restrict__ weights,
                                                 int t, int k, int lane, int my_id, float my_score,
                                                 int renormalize, float scale) {
    float total = 0.0f;
    if (renormalize)
        for (int r = 0; r < k; ++r) total += __shfl_sync(MOE_FULL_MASK, my_score, r);
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

// ANCHOR: visit
// One slot's number (key o, expert e, slot j) in a pass after the first: counted into `hist` by
// its next `width` bits (below `next`) while it shares the prefix (its bits from `shift` up),
// else its slot leaves `cand`, into `higher` when the number is above the prefix. Compared as
// 32-bit keys while the digit lies in the key's bits; the id's bits only decide equal keys.
__device__ __forceinline__ void rs_visit(unsigned o, int e, int j, int shift, int next, int mask,
                                         unsigned long long prefix, int* hist, unsigned& cand,
                                         unsigned& higher) {
    unsigned long long hi;
    int digit;
    if (shift > RS_ID_BITS) {
        hi = o >> (shift - RS_ID_BITS);
        digit = (int)(o >> (next - RS_ID_BITS)) & mask;
    } else {
        const unsigned long long p = rs_pack(o, e);
        hi = p >> shift;
        digit = (int)(p >> next) & mask;
    }
    if (hi == prefix) {
        atomicAdd(&hist[digit], 1);
    } else {
        cand &= ~(1u << j);
        if (hi > prefix) higher |= 1u << j;
    }
}
// ANCHOR_END: visit

// The barrier of the threads that route one row: the block's, or (WARP) the warp's.
// GROUP (not WARP): the block's first GROUP threads, at barrier 1, while the others do other
// work (the merged kernels' cast).
template <bool WARP, int GROUP = 0>
__device__ __forceinline__ void rs_sync() {
    if constexpr (WARP) {
        __syncwarp();
    } else if constexpr (GROUP > 0) {
#ifdef MOE_EMU
        moe_named_barrier_sync<1, GROUP>();
#else
        asm volatile("bar.sync 1, %0;\n" ::"n"(GROUP) : "memory");
#endif
    } else {
        __syncthreads();
    }
}

// ANCHOR: radix_row
// Routes row t with the whole block (WARP: with the calling warp alone, each warp of the block
// a row of its own): `x` is the row's E logits (fp32 or bf16), `bias` [E] f32 or null; ids
// [T, k] i32 and weights [T, k] f32 out. Thread i of the group owns experts i, i + its size, ...
// Every thread of the group must call it (it holds the group's barriers); GROUP: the block's
// first GROUP threads route, at barrier 1 (the merged kernels). A thread loads U logits at once
// (the block: U * its threads >= E, one round; a warp: rounds of 32 U).
template <int U, bool WARP = false, int GROUP = 0, typename In>
__device__ __forceinline__ void rs_row(const In* x, const float* __restrict__ bias,
                                       int* __restrict__ ids, float* __restrict__ weights, int t,
                                       int E, int k, int scoring, int n_group, int topk_group,
                                       int renormalize, float scale) {
    constexpr int G = WARP ? RS_WARP_ROWS : 1;  // groups of a block, a row each
    __shared__ unsigned s_key_g[G][RS_MAX_EXPERTS];  // float key bits, then ordered (0: dropped)
    __shared__ float s_score_g[G][RS_MAX_EXPERTS];   // unbiased scores (by_logit: the logits)
    constexpr int H = WARP ? RS_WARP_HISTS : 3;      // histograms (RS_WARP_HISTS)
    static_assert(H == 1 || H == 3, "RS_WARP_HISTS is 1 or 3");
    __shared__ __align__(8) int s_hist_g[G][H][RS_BINS];  // pass i counts into s_hist[i % H]
    // The selected, in arrival order, then in selection order. With one histogram (H == 1)
    // they live in its memory, free once the passes are done (and cleared behind a barrier).
    constexpr int PICKS = H == 1 ? 1 : RS_MAX_K;
    __shared__ unsigned long long s_pick_g[G][PICKS];
    __shared__ unsigned long long s_sorted_g[G][PICKS];
    __shared__ float s_stats_g[G][2];
    __shared__ int s_picked_g[G];
    __shared__ unsigned s_kept_g[G];
    __shared__ int s_cut[3];  // the block forms: a pass's cut (bin, left, held), warp 0's answer
    const int thread = threadIdx.x, lane = thread & 31, group = WARP ? thread >> 5 : 0;
    const int tid = WARP ? lane : thread, nt = WARP ? 32 : (GROUP > 0 ? GROUP : blockDim.x);
    const int warp = WARP ? 0 : thread >> 5;  // the warp within the group
    unsigned* s_key = s_key_g[group];
    float* s_score = s_score_g[group];
    int(*s_hist)[RS_BINS] = s_hist_g[group];
    unsigned long long* s_pick =
        H == 1 ? reinterpret_cast<unsigned long long*>(s_hist[0]) : s_pick_g[group];
    unsigned long long* s_sorted = H == 1 ? s_pick + RS_MAX_K : s_sorted_g[group];
    float* s_stats = s_stats_g[group];
    int& s_picked = s_picked_g[group];
    unsigned& s_kept = s_kept_g[group];
    const float neg_inf = -__int_as_float(0x7f800000);
    const bool has_bias = bias != nullptr;
    const bool grouped = n_group > 1;
    // A renormalised softmax without bias or groups is ranked by its logits and only the picks
    // are exponentiated (chapter 5's fr_by_logit: the row's sum cancels).
    const bool by_logit = scoring == RS_SCORING_SOFTMAX && renormalize && !has_bias && !grouped;
    const bool full_softmax = scoring == RS_SCORING_SOFTMAX && !by_logit;
    // Without a full softmax or groups, step 1's key is the rank key: ordered at once.
    const bool direct = !full_softmax && !grouped;
    for (int b = tid; b < (H < 2 ? H : 2) * RS_BINS; b += nt) s_hist[b / RS_BINS][b % RS_BINS] = 0;
    if (tid == 0) s_picked = 0;
    rs_sync<WARP, GROUP>();  // the first histogram zeroed before step 1 counts into it
    moe_grid_wait();  // the logits are the kernel ahead's output

    // 1. Step 2, element by element: a non-finite logit scores 0 and ranks -inf. A thread's
    //    U logits and biases are all loaded before any is used (one wait, not one each).
    for (int e0 = tid; e0 < E; e0 += U * nt) {
        float v[U], bv[U];
#pragma unroll
        for (int i = 0; i < U; ++i) {
            const int e = e0 + i * nt;
            v[i] = e < E ? rs_load(x, e) : 0.0f;
            bv[i] = (has_bias && e < E) ? bias[e] : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < U; ++i) {
            const int e = e0 + i * nt;
            if (e >= E) break;
            const bool finite = moe_isfinite(v[i]);
            float s;
            if (scoring == RS_SCORING_SOFTMAX) {
                s = finite ? v[i] : neg_inf;  // the logit; a full softmax's score comes below
            } else if (scoring == RS_SCORING_SIGMOID) {
                s = finite ? moe_sigmoidf(v[i]) : 0.0f;
            } else {
                s = finite ? sqrtf(moe_softplusf(v[i])) : 0.0f;
            }
            s_score[e] = s;
            const float key = finite ? (has_bias ? s + bv[i] : s) : neg_inf;
            if (direct) {
                // The rank key, ordered, and counted at once into the first pass's histogram
                // by its top 8 bits (an ordered key is never 0).
                const unsigned o = rs_order(key);
                s_key[e] = o;
                atomicAdd(&s_hist[0][o >> (32 - RS_DIGIT_BITS)], 1);
            } else {
                s_key[e] = __float_as_uint(key);
            }
        }
    }
    rs_sync<WARP, GROUP>();
    if (full_softmax) {
        if (warp == 0) rs_softmax_stats(s_score, E, s_stats);
        rs_sync<WARP, GROUP>();
        const float m = s_stats[0], sum = s_stats[1];
        for (int e = tid; e < E; e += nt) {
            const float v = s_score[e];
            const bool finite = v > neg_inf;
            const float p = moe_expf((finite ? v : 0.0f) - m) / sum;
            const float s = (finite && sum > 0.0f) ? p : 0.0f;
            s_score[e] = s;
            const float b = has_bias ? bias[e] : 0.0f;
            s_key[e] = __float_as_uint(finite ? (has_bias ? s + b : s) : neg_inf);
        }
        rs_sync<WARP, GROUP>();
    }
    if (grouped) {
        if (warp == 0) {
            const unsigned kept = rs_kept_groups(reinterpret_cast<const float*>(s_key), E,
                                                 n_group, topk_group);
            if (lane == 0) s_kept = kept;
        }
        rs_sync<WARP, GROUP>();
    }
    if (!direct) {
        const int per = grouped ? E / n_group : E;
        const unsigned kept = grouped ? s_kept : 1u;
        for (int e = tid; e < E; e += nt)
            s_key[e] = (kept >> (e / per) & 1u) ? rs_order(__uint_as_float(s_key[e])) : 0u;
        rs_sync<WARP, GROUP>();
    }
    // Every expert of a kept group is a candidate (a key of -inf too): the host checked k <= it.
    const int candidates = grouped ? topk_group * (E / n_group) : E;
    const int want = min(k, candidates);

    // ANCHOR: passes
    // 2. The cut. `prefix` is the leading bits of the want-th largest number found so far, down
    //    to bit `shift`; `remaining` how many of those with that prefix are still to select.
    //    This thread's experts are e = tid + j * nt, slot j (at most 32 slots: E <= 1024 and
    //    nt >= 32): `cand` marks the slots whose numbers still share the prefix, `higher` those
    //    found above it on the way (selected, whatever the passes after find).
    unsigned long long prefix = 0;
    int shift = 32 + RS_ID_BITS;  // 42: no bit known yet
    int remaining = want;
    bool done = want == candidates;  // all of them: every number is at or above the cut
    unsigned cand = 0u, higher = 0u;
    for (int pass = 0; !done; ++pass) {
        const int width = shift < RS_DIGIT_BITS ? shift : RS_DIGIT_BITS;
        const int next = shift - width;
        const int mask = (1 << width) - 1;
        int* hist = s_hist[pass % H];
        // The histogram of the next `width` bits of the numbers that share the prefix. The lanes
        // of a warp that add one to the same bin are counted by the hardware as one atomic (the
        // compiler's ATOMS.POPC.INC), so no lane looks for its peers.
        if (pass == 0) {
            // Every number shares the empty prefix: its bin is its key's top 8 bits (counted
            // in step 1 already when the key was ordered there).
            if (direct) {
                const int n = tid < E ? (E - 1 - tid) / nt + 1 : 0;  // this thread's slots
                cand = n >= 32 ? ~0u : (1u << n) - 1u;
            } else {
                for (int j = 0, e = tid; e < E; ++j, e += nt) {
                    const unsigned o = s_key[e];
                    if (o == 0u) continue;
                    cand |= 1u << j;
                    atomicAdd(&hist[o >> (32 - RS_DIGIT_BITS)], 1);
                }
            }
        } else if (pass == 1) {
            // Most slots may still share the prefix: each one in turn.
            for (int j = 0, e = tid; e < E; ++j, e += nt)
                if ((cand >> j) & 1u)
                    rs_visit(s_key[e], e, j, shift, next, mask, prefix, hist, cand, higher);
        } else {
            // Few do: only those, lowest first.
            for (unsigned m = cand; m != 0u; m &= m - 1u) {
                const int j = __ffs(m) - 1, e = tid + j * nt;
                rs_visit(s_key[e], e, j, shift, next, mask, prefix, hist, cand, higher);
            }
        }
        rs_sync<WARP, GROUP>();
        // The bin holding the cut, found by one warp (warp 0 of a block; in the warp form, the
        // row's warp): lane l sums 8 bins from the top (bin 255 - 8l down), a scan over the
        // lanes gives the count above each lane's bins, and the lane whose bins reach
        // `remaining` finds the bin and hands it to the others. In a block, warp 0 passes it on
        // through shared memory, behind a second barrier: one warp scans, not every warp alike.
        const int bins = mask + 1;
        int bin = 0, left = 0, held = 0;  // the cut's bin, what is still missing, what it holds
        if (WARP || warp == 0) {
            int c[8], mine = 0;
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const int b = bins - 1 - (8 * lane + i);
                c[i] = b >= 0 ? hist[b] : 0;
                mine += c[i];
            }
            int incl = mine;  // inclusive scan over the lanes, from the top bins down
            for (int off = 1; off < 32; off <<= 1) {
                const int o = __shfl_up_sync(MOE_FULL_MASK, incl, off);
                if (lane >= off) incl += o;
            }
            int above = incl - mine;
            const bool holds = above < remaining && remaining <= incl;
            const unsigned holder = __ballot_sync(MOE_FULL_MASK, holds);
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                if (above + c[i] >= remaining) {
                    bin = bins - 1 - (8 * lane + i);
                    left = remaining - above;
                    held = c[i];
                    break;
                }
                above += c[i];
            }
            const int src = __ffs(holder) - 1;
            bin = __shfl_sync(MOE_FULL_MASK, bin, src);
            left = __shfl_sync(MOE_FULL_MASK, left, src);
            held = __shfl_sync(MOE_FULL_MASK, held, src);
            if (!WARP && lane == 0) s_cut[0] = bin, s_cut[1] = left, s_cut[2] = held;
        }
        if (!WARP) {
            rs_sync<WARP, GROUP>();
            bin = s_cut[0], left = s_cut[1], held = s_cut[2];
        }
        prefix = (prefix << width) | (unsigned)bin;
        remaining = left;
        done = held == left;
        shift = next;
        // The histogram two passes on: its scanning warp read it last pass, before this pass's
        // barriers, and the next pass's barrier comes before anyone counts into it again.
        if (H == 3) {
            for (int b = tid; b < RS_BINS; b += nt) s_hist[(pass + 2) % 3][b] = 0;
        } else {  // one histogram: every thread has read it, then it is cleared for the next pass
            rs_sync<WARP, GROUP>();
            for (int b = tid; b < RS_BINS; b += nt) s_hist[0][b] = 0;
            rs_sync<WARP, GROUP>();
        }
    }
    // ANCHOR_END: passes

    // 3. The selected: every number whose leading bits are at or above the prefix (exactly
    //    `want` of them: those found above it, and those of the last candidates at or above
    //    it; with no pass, every candidate), in arrival order; then warp 0 puts them in
    //    selection order by counting (a number's place: how many selected numbers are larger).
    if (shift == 32 + RS_ID_BITS) {
        for (int e = tid; e < E; e += nt)
            if (s_key[e] != 0u) s_pick[atomicAdd(&s_picked, 1)] = rs_pack(s_key[e], e);
    } else {
        for (unsigned m = cand | higher; m != 0u; m &= m - 1u) {
            const int j = __ffs(m) - 1, e = tid + j * nt;
            const unsigned long long p = rs_pack(s_key[e], e);
            if ((p >> shift) >= prefix) s_pick[atomicAdd(&s_picked, 1)] = p;
        }
    }
    rs_sync<WARP, GROUP>();
    if (warp != 0) return;
    const unsigned long long mine = lane < want ? s_pick[lane] : 0ull;
    int place = 0;
#pragma unroll 8
    for (int j = 0; j < want; ++j) place += s_pick[j] > mine ? 1 : 0;
    if (lane < want) s_sorted[place] = mine;
    __syncwarp();
    const int my_id = lane < want ? rs_id(s_sorted[lane]) : -1;
    float my_score = my_id >= 0 ? s_score[my_id] : 0.0f;
    if (by_logit) {
        // e_r = exp(l_r - l_0), l_0 the first pick's logit; 0 for a non-finite logit or no pick.
        const float l0 = __shfl_sync(MOE_FULL_MASK, my_score, 0);
        const float ex = moe_expf(my_score - l0);
        my_score = (my_id >= 0 && my_score > neg_inf) ? ex : 0.0f;
    }
    rs_store_weights(ids, weights, t, k, lane, my_id, my_score, renormalize, scale);
}
// ANCHOR_END: radix_row

// ANCHOR: radix_topk
// The entry points' one body: row t of logits [T, ld] routed by a block of its own (the block
// forms: grid T) or (WARP) by a warp of its own (grid ceil(T / RS_WARP_ROWS)), U logits a thread
// at once. Logits [T, ld] f32 or bf16 (row t's E logits at t * ld; bf16: the bf16-output
// variant's, each widened back to fp32 exactly before it is scored), bias [E] f32 or null; ids
// [T, k] i32 and weights [T, k] f32 out. The same arguments as chapter 5's fused router but the
// stride.
template <int U, bool WARP, typename In>
__device__ __forceinline__ void rs_entry(const In* logits, int ld, const float* __restrict__ bias,
                                         int* __restrict__ ids, float* __restrict__ weights, int T,
                                         int E, int k, int scoring, int n_group, int topk_group,
                                         int renormalize, float scale) {
    const int t = WARP ? blockIdx.x * RS_WARP_ROWS + (threadIdx.x >> 5) : blockIdx.x;
    // WARP: the whole warp leaves, so no barrier of the block is ever waited for.
    if (t >= T) return;
    rs_row<U, WARP>(logits + (size_t)t * ld, bias, ids, weights, t, E, k, scoring, n_group,
                    topk_group, renormalize, scale);
}

// A form's two entry points, NAME on fp32 logits and NAME_BF16 on bf16 ones, in blocks of at
// most THREADS threads.
#define RS_ENTRY(NAME, IN, THREADS, U, WARP)                                                       \
    extern "C" __global__ void __launch_bounds__(THREADS)                                          \
        NAME(const IN* logits, int ld, const float* __restrict__ bias, int* __restrict__ ids,      \
             float* __restrict__ weights, int T, int E, int k, int scoring, int n_group,           \
             int topk_group, int renormalize, float scale) {                                       \
        rs_entry<U, WARP>(logits, ld, bias, ids, weights, T, E, k, scoring, n_group, topk_group,   \
                          renormalize, scale);                                                     \
    }
#define RS_ENTRIES(NAME, NAME_BF16, THREADS, U, WARP)                                              \
    RS_ENTRY(NAME, float, THREADS, U, WARP)                                                        \
    RS_ENTRY(NAME_BF16, __nv_bfloat16, THREADS, U, WARP)

// Eight warps per row (grid T, blocks of min(256, 32 ceil(E / 32)) threads).
RS_ENTRIES(radix_topk, radix_topk_bf16, RS_THREADS, RS_UNROLL, false)
// ANCHOR_END: radix_topk

// ANCHOR: radix_topk_warp
// A warp per row (grid ceil(T / RS_WARP_ROWS), RS_WARP_ROWS warps): the warp's barrier, not the
// block's, and no other warp waiting while one scans. Each warp has its own shared arrays
// (rs_row's groups).
RS_ENTRIES(radix_topk_warp, radix_topk_warp_bf16, RS_WARP_ROWS * 32, RS_WARP_UNROLL, true)
// ANCHOR_END: radix_topk_warp

// ANCHOR: radix_topk_half
// Four warps per row (grid T, RS_HALF_THREADS threads): between the two forms above, for batches
// of rows too many for the block form's eight warps a row (seven of them idle while warp 0
// scans, all at each barrier) and too few to keep the GPU busy at a warp a row.
RS_ENTRIES(radix_topk_half, radix_topk_half_bf16, RS_HALF_THREADS, RS_HALF_UNROLL, false)
// ANCHOR_END: radix_topk_half

// Four fp32 as four bf16 (round to nearest even), packed for one 8-byte store.
__device__ __forceinline__ uint2 rs_bf16x4(float4 v) {
    const unsigned a = __bfloat16_as_ushort(__float2bfloat16_rn(v.x));
    const unsigned b = __bfloat16_as_ushort(__float2bfloat16_rn(v.y));
    const unsigned c = __bfloat16_as_ushort(__float2bfloat16_rn(v.z));
    const unsigned d = __bfloat16_as_ushort(__float2bfloat16_rn(v.w));
    return make_uint2(a | (b << 16), c | (d << 16));
}

// The merged kernels' other work: the cast of a row's n = P / 4 groups of four projection
// columns by the threads i0 = 0 .. stride - 1 of the casting warps, U 16-byte loads a thread
// issued at once (then any left, a load at a time).
template <int U>
__device__ __forceinline__ void rs_cast_row(const float4* src, uint2* dst, int n, int i0,
                                            int stride) {
    float4 v[U];
#pragma unroll
    for (int i = 0; i < U; ++i) {
        const int j = i0 + i * stride;
        if (j < n) v[i] = __ldcg(src + j);
    }
#pragma unroll
    for (int i = 0; i < U; ++i) {
        const int j = i0 + i * stride;
        if (j < n) dst[j] = rs_bf16x4(v[i]);
    }
    for (int j = i0 + U * stride; j < n; j += stride) dst[j] = rs_bf16x4(__ldcg(src + j));
}

// ANCHOR: merged_gate
// The kernels after the merged GEMM, one block per row (grid T, ROUTERS + RS_MERGED_CASTERS
// threads):
//   y [T, E + P] f32 (the stacked weight's output: E logits, then P projection columns),
//   bias [E] f32 or null -> ids [T, k] i32, weights [T, k] f32, proj [T, P] bf16.
// The block's first ROUTERS threads radix-select the row (a block form's warps, meeting at
// barrier 1), while its last four warps cast the row's P columns (16-byte loads, all issued at
// once, 8-byte stores, round to nearest even): the cast's memory traffic runs under the
// selection's arithmetic. E % 4 == 0 and P % 4 == 0 (the host checks).
template <int ROUTERS, int U>
__device__ __forceinline__ void rs_merged(const float* y, const float* __restrict__ bias,
                                          int* __restrict__ ids, float* __restrict__ weights,
                                          __nv_bfloat16* __restrict__ proj, int T, int E, int P,
                                          int k, int scoring, int n_group, int topk_group,
                                          int renormalize, float scale) {
    const int t = blockIdx.x;
    if (t >= T) return;
    const float* row = y + (size_t)t * (E + P);
    if (threadIdx.x < ROUTERS) {
        rs_row<U, false, ROUTERS>(row, bias, ids, weights, t, E, k, scoring, n_group, topk_group,
                                  renormalize, scale);
    } else {
        moe_grid_wait();  // the row is the GEMM ahead's output
        rs_cast_row<RS_MERGED_CAST_UNROLL>(reinterpret_cast<const float4*>(row + E),
                                           reinterpret_cast<uint2*>(proj + (size_t)t * P), P / 4,
                                           threadIdx.x - ROUTERS, RS_MERGED_CASTERS);
    }
}

// Below RADIX_HALF_FROM_ROWS rows: eight warps select, as radix_topk does (three blocks an SM).
extern "C" __global__ void __launch_bounds__(RS_THREADS + RS_MERGED_CASTERS, 3)
merged_gate(const float* y, const float* __restrict__ bias, int* __restrict__ ids,
            float* __restrict__ weights, __nv_bfloat16* __restrict__ proj, int T, int E, int P,
            int k, int scoring, int n_group, int topk_group, int renormalize, float scale) {
    rs_merged<RS_THREADS, RS_UNROLL>(y, bias, ids, weights, proj, T, E, P, k, scoring, n_group,
                                     topk_group, renormalize, scale);
}

// From RADIX_HALF_FROM_ROWS rows: four warps select, as radix_topk_half does. Five blocks an SM
// (the launch bounds: 48 registers a thread, a few bytes spilled): at 1,024 rows on an H100, 0.94
// of four blocks' time, against 0.96 for six and 1.08 for eight, which spill more
// (tools/gpu/probes/ch11_radix_times.cu and ptxas's report; the H100 results README has both).
extern "C" __global__ void __launch_bounds__(RS_HALF_THREADS + RS_MERGED_CASTERS, 5)
merged_gate_half(const float* y, const float* __restrict__ bias, int* __restrict__ ids,
                 float* __restrict__ weights, __nv_bfloat16* __restrict__ proj, int T, int E,
                 int P, int k, int scoring, int n_group, int topk_group, int renormalize,
                 float scale) {
    rs_merged<RS_HALF_THREADS, RS_HALF_UNROLL>(y, bias, ids, weights, proj, T, E, P, k, scoring,
                                               n_group, topk_group, renormalize, scale);
}
// ANCHOR_END: merged_gate

// The cast alone, [T, P] f32 at stride ld -> [T, P] bf16, one block per row: what a GEMM with
// fp32 output needs after it when nothing else is merged (the bench's two-step form).
extern "C" __global__ void __launch_bounds__(RS_THREADS)
cast_rows_bf16(const float* y, int ld, __nv_bfloat16* __restrict__ out, int T, int P) {
    const int t = blockIdx.x;
    if (t >= T) return;
    moe_grid_wait();
    for (int i = threadIdx.x; i < P; i += blockDim.x)
        out[(size_t)t * P + i] = __float2bfloat16_rn(__ldcg(y + (size_t)t * ld + i));
}
