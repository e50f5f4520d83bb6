// ch01_router.cu — the five-line router as a chain of plain kernels.
//
// The model's reference code routes a batch in five lines of PyTorch:
//
//     logits  = hidden.float() @ gate_weight.float().t()
//     scores  = torch.sigmoid(logits)                       # or softmax, or sqrt(softplus)
//     ids     = torch.topk(scores + bias, k, dim=-1).indices
//     weights = scores.gather(1, ids)
//     weights = weights / (weights.sum(-1, keepdim=True) + 1e-20)
//
// Each kernel below is one of those operations, launched on its own, reading its input from
// global memory and writing its output back: GEMM, score, bias add, (group limit), top-k,
// gather, sum, divide. That is what eager PyTorch does, and it is the baseline every later
// chapter beats by fusing.
//
// Upstream: the naive path of every engine's model file (e.g. the DeepSeek-V3 / GLM MoEGate
// reference forward in Hugging Face transformers); the kernels are PyTorch's own (cuBLAS, the
// elementwise and top-k kernels).
//
// Differences:
// - fp32 throughout, with our own GEMM (one warp per expert and up to 8 rows, lanes striding
//   over the hidden dimension, a fixed shuffle tree), not cuBLAS: its summation order is fixed,
//   so the emulator and the GPU give the same bits.
// - Exponentials come from common.cuh (moe_expf), not expf, for the same reason.
// - Non-finite logits follow the book's rule: rank key -inf and score 0, so they are never
//   selected ahead of a finite logit and never produce a NaN weight. PyTorch would propagate
//   the NaN.
// - Ties at the cut go to the lowest expert id (torch.topk does not promise an order).
#include "common.cuh"

// ---------------------------------------------------------------------------------------------
// ANCHOR: router_gemm
// logits[t, e] = sum_h hidden[t, h] * weight[e, h]
//   hidden [T, H] f32, weight [E, H] f32, logits [T, E] f32
// Grid: (ceil(E / epb), ceil(T / 8)); block: 128 threads = 4 warps. Block (bx, by) computes
// experts bx*epb .. bx*epb+epb-1 (epb = experts per block: 1 in router_gemm_f32, 4 in
// router_gemm_f32_x4) for rows by*8 .. by*8+7.
// - epb = 1 for a few rows: 288 experts x 4 warps are in flight, enough loads to cover the
//   latency of the cold gate weight.
// - epb = 4 for more rows: each hidden value a lane loads serves 4 experts, so the hidden rows
//   are read from L2 a quarter as often (at 96 rows, one expert per block would read them
//   288 times: 450 MB).
// The hidden dimension is dealt out in 16-byte words (when H % 4 == 0; floats otherwise):
// word j goes to warp (j / 32) % 4, lane j % 32. Each lane accumulates its words in order with
// fmaf; each warp adds its 32 lanes with a fixed xor tree; thread q*8+r adds the 4 warps' sums
// for expert q, row r in warp order. The order does not depend on epb, so both settings give
// the same bits, on every backend.
#define GEMM_ROWS 8   // rows of one block of the few-row GEMM
#define GEMM_WARPS 4  // warps of one block of the few-row GEMM (the hidden dimension is split 4 ways)
#define GEMM_X4_FROM_ROWS 9  // above 8 rows, 4 experts share a block (router_gemm_f32_x4)
#define GEMM_TILED_FROM_ROWS 1024  // from 1,024 rows on, the tiled GEMM (router_gemm_f32_tiled)
// EPB is a template parameter, so that the one-expert kernel keeps only 8 accumulators in
// registers (more blocks fit on an SM) and the four-expert kernel 32.
template <int GEMM_MAX_EPB>
__device__ __forceinline__ void gemm_few_rows(const float* __restrict__ hidden,
                                              const float* __restrict__ weight,
                                              float* __restrict__ logits, int T, int H, int E) {
    const int epb = GEMM_MAX_EPB;
    __shared__ float partial[GEMM_WARPS][GEMM_MAX_EPB][GEMM_ROWS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int e0 = blockIdx.x * epb;
    const int experts = min(epb, E - e0);
    const int t0 = blockIdx.y * GEMM_ROWS;
    const int rows = min(GEMM_ROWS, T - t0);
    float acc[GEMM_MAX_EPB][GEMM_ROWS];
#pragma unroll
    for (int q = 0; q < GEMM_MAX_EPB; ++q)
#pragma unroll
        for (int r = 0; r < GEMM_ROWS; ++r) acc[q][r] = 0.0f;
    const float* x = hidden + (size_t)t0 * H;
    if ((H & 3) == 0) {
        const int H4 = H >> 2;
        for (int j = threadIdx.x; j < H4; j += 32 * GEMM_WARPS) {
            float4 xv[GEMM_ROWS];
#pragma unroll
            for (int r = 0; r < GEMM_ROWS; ++r)
                if (r < rows) xv[r] = reinterpret_cast<const float4*>(x + (size_t)r * H)[j];
#pragma unroll
            for (int q = 0; q < GEMM_MAX_EPB; ++q) {
                if (q >= experts) break;
                const float4 wv = reinterpret_cast<const float4*>(weight + (size_t)(e0 + q) * H)[j];
#pragma unroll
                for (int r = 0; r < GEMM_ROWS; ++r) {
                    if (r < rows) {
                        acc[q][r] = fmaf(xv[r].x, wv.x, acc[q][r]);
                        acc[q][r] = fmaf(xv[r].y, wv.y, acc[q][r]);
                        acc[q][r] = fmaf(xv[r].z, wv.z, acc[q][r]);
                        acc[q][r] = fmaf(xv[r].w, wv.w, acc[q][r]);
                    }
                }
            }
        }
    } else {
        for (int h = threadIdx.x; h < H; h += 32 * GEMM_WARPS) {
#pragma unroll
            for (int q = 0; q < GEMM_MAX_EPB; ++q) {
                if (q >= experts) break;
                const float wv = weight[(size_t)(e0 + q) * H + h];
#pragma unroll
                for (int r = 0; r < GEMM_ROWS; ++r)
                    if (r < rows) acc[q][r] = fmaf(x[(size_t)r * H + h], wv, acc[q][r]);
            }
        }
    }
#pragma unroll
    for (int q = 0; q < GEMM_MAX_EPB; ++q) {
#pragma unroll
        for (int r = 0; r < GEMM_ROWS; ++r) {
            float v = acc[q][r];
            for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(MOE_FULL_MASK, v, off);
            if (lane == 0) partial[warp][q][r] = v;
        }
    }
    __syncthreads();
    const int q = threadIdx.x / GEMM_ROWS, r = threadIdx.x % GEMM_ROWS;
    if (q < experts && r < rows) {
        float v = partial[0][q][r];
        for (int w = 1; w < GEMM_WARPS; ++w) v += partial[w][q][r];
        logits[(size_t)(t0 + r) * E + e0 + q] = v;
    }
}

extern "C" __global__ void __launch_bounds__(32 * GEMM_WARPS) router_gemm_f32(const float* __restrict__ hidden,
                                                                  const float* __restrict__ weight,
                                                                  float* __restrict__ logits,
                                                                  int T, int H, int E) {
    gemm_few_rows<1>(hidden, weight, logits, T, H, E);
}

extern "C" __global__ void __launch_bounds__(32 * GEMM_WARPS) router_gemm_f32_x4(const float* __restrict__ hidden,
                                                                     const float* __restrict__ weight,
                                                                     float* __restrict__ logits,
                                                                     int T, int H, int E) {
    gemm_few_rows<4>(hidden, weight, logits, T, H, E);
}
// ANCHOR_END: router_gemm

// ANCHOR: router_gemm_tiled
// The same product for many rows (the wrapper picks it from 1024 rows on): the kernel above
// reads each hidden row once per expert from L2, which at thousands of rows makes it
// L2-bandwidth-bound. Here a block computes a 64-row x 64-expert tile of the logits, staging
// 16-wide slices of both operands in shared memory, so each loaded value is used 64 times.
// Grid: (ceil(E / 64), ceil(T / 64)); block: 256 threads, each owning 4 rows x 4 experts.
// Each output is one fmaf chain over h = 0, 1, ..., H-1 in order: deterministic, and the same
// bits on both backends (but not the same bits as the few-row kernel: which kernel a batch
// meets decides the last bits of its logits, the effect chapter 9 measures).
#define GEMM_TILE 64  // rows and experts of one tile of the tiled GEMM
#define GEMM_TILE_K 16  // the hidden slice staged in shared memory per step
#define GEMM_TILED_THREADS 256  // threads of one tile: 16 x 16, each owning 4 rows x 4 experts
extern "C" __global__ void __launch_bounds__(GEMM_TILED_THREADS) router_gemm_f32_tiled(const float* __restrict__ hidden,
                                                                        const float* __restrict__ weight,
                                                                        float* __restrict__ logits,
                                                                        int T, int H, int E) {
    __shared__ float xs[GEMM_TILE_K][GEMM_TILE + 4];  // [k][row]: hidden slice, transposed
    __shared__ float ws[GEMM_TILE_K][GEMM_TILE + 4];  // [k][expert]: weight slice, transposed
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int t0 = blockIdx.y * GEMM_TILE, e0 = blockIdx.x * GEMM_TILE;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
    // Loading: thread l fetches 4 consecutive k of row (l / 4) of each operand's tile.
    const int lr = threadIdx.x >> 2, lk = (threadIdx.x & 3) * 4;
    for (int k0 = 0; k0 < H; k0 += GEMM_TILE_K) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int k = k0 + lk + q;
            const int t = t0 + lr, e = e0 + lr;
            xs[lk + q][lr] = (t < T && k < H) ? hidden[(size_t)t * H + k] : 0.0f;
            ws[lk + q][lr] = (e < E && k < H) ? weight[(size_t)e * H + k] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < GEMM_TILE_K; ++kk) {
            if (k0 + kk >= H) break;  // zero padding would add -0.0 + 0 = +0.0 to a -0.0 sum
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = xs[kk][ty * 4 + i];
#pragma unroll
            for (int j = 0; j < 4; ++j) b[j] = ws[kk][tx * 4 + j];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int t = t0 + ty * 4 + i;
        if (t >= T) continue;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int e = e0 + tx * 4 + j;
            if (e < E) logits[(size_t)t * E + e] = acc[i][j];
        }
    }
}
// ANCHOR_END: router_gemm_tiled

// ---------------------------------------------------------------------------------------------
// The one-thread-per-element kernels below (scores, bias add, gather, sums, divide, scale) take
// any block size; the host launches them with this one.
#define ELEMENTWISE_THREADS 256  // threads per block of the one-thread-per-element kernels

// ANCHOR: router_scores
// scores = sigmoid(logits), elementwise over n = T*E values; a non-finite logit scores 0.
extern "C" __global__ void router_sigmoid(const float* __restrict__ logits, float* __restrict__ scores,
                                          int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float x = logits[i];
    scores[i] = moe_isfinite(x) ? moe_sigmoidf(x) : 0.0f;
}

// scores = sqrt(softplus(logits)) (DeepSeek-V4), elementwise; a non-finite logit scores 0.
extern "C" __global__ void router_sqrt_softplus(const float* __restrict__ logits,
                                                float* __restrict__ scores, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float x = logits[i];
    scores[i] = moe_isfinite(x) ? sqrtf(moe_softplusf(x)) : 0.0f;
}
// ANCHOR_END: router_scores

// ANCHOR: router_softmax
// scores[t, :] = softmax over the finite logits of row t; non-finite logits score 0, and a row
// with no finite logit scores 0 everywhere. One block per row: a max reduction, then a sum
// reduction, both as fixed shared-memory trees.
#define SOFTMAX_THREADS 256  // threads of one softmax block (one row)
extern "C" __global__ void __launch_bounds__(SOFTMAX_THREADS) router_softmax(const float* __restrict__ logits,
                                                                 float* __restrict__ scores, int T,
                                                                 int E) {
    __shared__ float red[SOFTMAX_THREADS];
    const int t = blockIdx.x;
    const float* x = logits + (size_t)t * E;
    float m = -__int_as_float(0x7f800000);
    for (int e = threadIdx.x; e < E; e += blockDim.x)
        if (moe_isfinite(x[e])) m = fmaxf(m, x[e]);
    red[threadIdx.x] = m;
    __syncthreads();
    for (int s = SOFTMAX_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    const float row_max = red[0];
    __syncthreads();
    float sum = 0.0f;
    for (int e = threadIdx.x; e < E; e += blockDim.x)
        if (moe_isfinite(x[e])) sum += moe_expf(x[e] - row_max);
    red[threadIdx.x] = sum;
    __syncthreads();
    for (int s = SOFTMAX_THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    const float total = red[0];
    for (int e = threadIdx.x; e < E; e += blockDim.x)
        scores[(size_t)t * E + e] =
            (moe_isfinite(x[e]) && total > 0.0f) ? moe_expf(x[e] - row_max) / total : 0.0f;
}
// ANCHOR_END: router_softmax

// ---------------------------------------------------------------------------------------------
// ANCHOR: router_bias_add
// keys[t, e] = scores[t, e] + bias[e]: the rank key selects, the unbiased score weighs.
extern "C" __global__ void router_bias_add(const float* __restrict__ scores,
                                           const float* __restrict__ bias, float* __restrict__ keys,
                                           int T, int E) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= T * E) return;
    keys[i] = scores[i] + bias[i % E];
}
// ANCHOR_END: router_bias_add

// The order of rank keys used by every selection in this file. A NaN key means "never select"
// (an expert of a dropped group) and ranks below everything; a non-finite logit has already
// been turned into key -inf by the caller. Equal keys: the lower expert id wins.
__device__ __forceinline__ bool key_better(float a, int ia, float b, int ib) {
    const bool a_nan = a != a, b_nan = b != b;
    if (a_nan || b_nan) return !a_nan || (b_nan && ia < ib);
    return a > b || (a == b && ia < ib);
}

// The key a selection sees for expert e of row t: -inf when the logit is not finite.
__device__ __forceinline__ float effective_key(const float* keys, const float* logits, size_t i) {
    return moe_isfinite(logits[i]) ? keys[i] : -__int_as_float(0x7f800000);
}

// ANCHOR: router_group_limit
// DeepSeek-V3's grouped selection, step one: experts form n_group contiguous groups; a group's
// value is the sum of its two best keys (its one key if groups have one expert); the
// topk_group best groups stay, the keys of the others become NaN ("never select").
// One thread per row; per-group work is serial, as in a plain PyTorch implementation.
#define GROUP_LIMIT_THREADS 128  // threads per block (one per row)
#define GROUP_LIMIT_MAX_GROUPS 64  // the kept groups live in one 64-bit mask
extern "C" __global__ void router_group_limit(const float* __restrict__ keys,
                                              const float* __restrict__ logits,
                                              float* __restrict__ masked, int T, int E, int n_group,
                                              int topk_group) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    const int per = E / n_group;
    const size_t row = (size_t)t * E;
    unsigned long long kept = 0;  // bit g set: group g stays (n_group <= GROUP_LIMIT_MAX_GROUPS, checked on the host)
    for (int round = 0; round < topk_group; ++round) {
        int best_g = -1;
        float best_v = 0.0f;
        for (int g = 0; g < n_group; ++g) {
            if (kept >> g & 1ull) continue;
            float b1 = -__int_as_float(0x7f800000), b2 = b1;
            for (int j = 0; j < per; ++j) {
                const float v = effective_key(keys, logits, row + g * per + j);
                if (v > b1) { b2 = b1; b1 = v; } else if (v > b2) { b2 = v; }
            }
            const float value = per >= 2 ? b1 + b2 : b1;
            if (best_g < 0 || key_better(value, g, best_v, best_g)) { best_g = g; best_v = value; }
        }
        kept |= 1ull << best_g;
    }
    for (int e = 0; e < E; ++e)
        masked[row + e] = (kept >> (e / per) & 1ull) ? keys[row + e] : __int_as_float(0x7fc00000);
}
// ANCHOR_END: router_group_limit

// ---------------------------------------------------------------------------------------------
// ANCHOR: router_topk
// ids[t, 0..k) = the k best experts of row t, best first, by key_better.
// One warp per row, 4 rows per block of 128 threads. The warp copies its row's keys into
// dynamic shared memory ([4][E] keys, then [4][E] "used" flags) and runs k rounds of argmax:
// each lane scans its strided share (expert lane, lane+32, ...), then the 32 candidates meet in
// a shuffle tree. key_better is a total order (ties go to the lower id), so every lane ends a
// round with the same winner, whatever order the tree combined them in. No block barrier: the
// rows are independent, and __syncwarp orders the warp's own shared-memory writes.
#define TOPK_ROWS_PER_BLOCK 4  // rows, one warp each, of one top-k block
extern "C" __global__ void __launch_bounds__(32 * TOPK_ROWS_PER_BLOCK) router_topk(const float* __restrict__ keys,
                                                              const float* __restrict__ logits,
                                                              int* __restrict__ ids, int T, int E,
                                                              int k) {
    DYNAMIC_SHARED(float, smem);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int t = blockIdx.x * TOPK_ROWS_PER_BLOCK + warp;
    if (t >= T) return;  // the whole warp leaves; nothing below waits for the other warps
    float* row_keys = smem + (size_t)warp * E;
    unsigned char* used = reinterpret_cast<unsigned char*>(smem + (size_t)TOPK_ROWS_PER_BLOCK * E) + (size_t)warp * E;
    const size_t row = (size_t)t * E;
    for (int e = lane; e < E; e += 32) {
        row_keys[e] = effective_key(keys, logits, row + e);
        used[e] = 0;
    }
    __syncwarp();
    for (int round = 0; round < k; ++round) {
        float bk = 0.0f;
        int bi = -1;  // -1: this lane has no candidate left
        for (int e = lane; e < E; e += 32)
            if (!used[e] && (bi < 0 || key_better(row_keys[e], e, bk, bi))) { bk = row_keys[e]; bi = e; }
        for (int off = 16; off > 0; off >>= 1) {
            const float ok = __shfl_xor_sync(MOE_FULL_MASK, bk, off);
            const int oi = __shfl_xor_sync(MOE_FULL_MASK, bi, off);
            if (oi >= 0 && (bi < 0 || key_better(ok, oi, bk, bi))) { bk = ok; bi = oi; }
        }
        if (lane == 0) {
            ids[(size_t)t * k + round] = bi;
            used[bi] = 1;
        }
        __syncwarp();
    }
}
// ANCHOR_END: router_topk

// ---------------------------------------------------------------------------------------------
// ANCHOR: router_weights
// weights[t, j] = scores[t, ids[t, j]], elementwise over T*k.
extern "C" __global__ void router_gather(const float* __restrict__ scores, const int* __restrict__ ids,
                                         float* __restrict__ weights, int T, int E, int k) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= T * k) return;
    weights[i] = scores[(size_t)(i / k) * E + ids[i]];
}

// sums[t] = weights[t, 0] + ... + weights[t, k-1], in selection order. One thread per row.
extern "C" __global__ void router_row_sum(const float* __restrict__ weights, float* __restrict__ sums,
                                          int T, int k) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= T) return;
    float s = 0.0f;
    for (int j = 0; j < k; ++j) s += weights[(size_t)t * k + j];
    sums[t] = s;
}

// weights[t, j] = weights[t, j] / (sums[t] + 1e-20) * scale. The 1e-20 guards a zero sum.
extern "C" __global__ void router_divide(float* __restrict__ weights, const float* __restrict__ sums,
                                         int T, int k, float scale) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= T * k) return;
    weights[i] = weights[i] / (sums[i / k] + 1e-20f) * scale;
}

// weights *= scale, for routers that scale without renormalising.
extern "C" __global__ void router_scale(float* __restrict__ weights, int n, float scale) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    weights[i] = weights[i] * scale;
}
// ANCHOR_END: router_weights
