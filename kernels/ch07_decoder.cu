// ch07_decoder.cu — the parts of a decode step that are not the MoE layer, as plain kernels: the
// embedding, RMSNorm with the residual add, q and k's per-head norm with the rotary embedding and
// the KV cache's append, grouped-query attention over the cache, the dense MLP's SiLU, the argmax.
// The linear layers (q, k and v in one weight, o, the dense MLP, the LM head) are chapter 5's tiny
// GEMM (kernels/ch05_tiny_gemm.cu): a decode step's linear layer is the router's matrix-vector
// product at another size.
//
// None of these is tuned: one block per row (or per (row, head)), fixed-order reductions, fp32
// arithmetic throughout. What they are for is a decode step that runs on the device from the
// token ids to the next token ids, so that the time of chapter 6's MoE layers can be read as a
// share of a whole step. Every sum has one fixed order (strided per thread, then a xor tree in the
// warp, then the warps in order), so the bits are the same on the GPU and on the emulator.
//
// Upstream: the engines' fused equivalents (vLLM's fused_add_rms_norm and rotary_embedding,
// SGLang's; FlashAttention / FlashInfer for the decode attention over a paged KV cache).
//
// Differences:
// - The KV cache is fp32, one contiguous [B, CAP, KVH * D] array per layer (engines: bf16 or fp8,
//   paged).
// - Attention keeps every score of a head in shared memory (DEC_MAX_CTX positions at most) and
//   reads each key and value once per query head, not once per KV head: a plain kernel, not a
//   FlashAttention one.
// - The rotary angles come from a table the host computes ([CAP, R / 2] cos and sin, as
//   transformers computes them in fp32), not from sinf and cosf on the device.
#include "common.cuh"

#define DEC_THREADS 256     // threads of the row kernels (norm, embedding, SiLU, argmax)
#define DEC_HEAD_THREADS 128  // threads of the per-head kernels (q/k prep, attention)
#define DEC_MAX_HEAD_DIM 256  // the largest head dimension the per-head kernels hold
#define DEC_MAX_CTX 4096      // the most positions attention holds scores for

// The sum of v over the block, in a fixed order: a xor tree in each warp, then the warps' sums in
// warp order. Every thread gets the result. `scratch` holds one float per warp.
__device__ __forceinline__ float dec_block_sum(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(MOE_FULL_MASK, v, off);
    __syncthreads();  // scratch may still be read by an earlier call
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float s = scratch[0];
    for (int w = 1; w < warps; ++w) s += scratch[w];
    return s;
}

// The largest v over the block (same order as dec_block_sum).
__device__ __forceinline__ float dec_block_max(float v, float* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(MOE_FULL_MASK, v, off));
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    float s = scratch[0];
    for (int w = 1; w < warps; ++w) s = fmaxf(s, scratch[w]);
    return s;
}

// x[b, :] = table[tokens[b], :] widened to fp32.
//   table [V, H] bf16, tokens [B] i32, x [B, H] f32. Grid: B; block: DEC_THREADS.
extern "C" __global__ void __launch_bounds__(DEC_THREADS) dec_embed(const __nv_bfloat16* __restrict__ table,
                                                                  const int* __restrict__ tokens,
                                                                  float* __restrict__ x, int H) {
    const int b = blockIdx.x;
    const __nv_bfloat16* row = table + (size_t)tokens[b] * H;
    for (int i = threadIdx.x; i < H; i += DEC_THREADS) x[(size_t)b * H + i] = __bfloat162float(row[i]);
}

// ANCHOR: add_rms_norm
// The residual add and the RMSNorm after it: when `add`, x[b] += delta[b] (+ bias); then
// out[b] = bf16(w ⊙ x[b] / sqrt(mean(x[b]²) + eps)), the next linear layer's input.
//   x [B, H] f32 (updated in place), delta [B, H] f32, bias [H] f32 (or all zeros), w [H] f32,
//   out [B, H] bf16. Grid: B; block: DEC_THREADS.
extern "C" __global__ void __launch_bounds__(DEC_THREADS) dec_add_rms_norm(float* __restrict__ x,
                                                                         const float* __restrict__ delta,
                                                                         const float* __restrict__ bias,
                                                                         const float* __restrict__ w,
                                                                         __nv_bfloat16* __restrict__ out,
                                                                         int H, float eps, int add) {
    __shared__ float scratch[DEC_THREADS / 32];
    float* xr = x + (size_t)blockIdx.x * H;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < H; i += DEC_THREADS) {
        float v = xr[i];
        if (add) {
            v = v + (delta[(size_t)blockIdx.x * H + i] + bias[i]);
            xr[i] = v;
        }
        ss = fmaf(v, v, ss);
    }
    const float r = 1.0f / sqrtf(dec_block_sum(ss, scratch) / (float)H + eps);
    for (int i = threadIdx.x; i < H; i += DEC_THREADS)
        out[(size_t)blockIdx.x * H + i] = __float2bfloat16(w[i] * (xr[i] * r));
}
// ANCHOR_END: add_rms_norm

// ANCHOR: qkv
// One head of one row of the fused q, k, v projection's output: add the bias; for a q or k head,
// RMSNorm over the head (when qk_norm) and the rotary embedding on its first R dimensions
// (transformers' rotate-half pairing: i with i + R/2); then q to `q`, k and v to the cache at
// position `pos`.
//   qkv [B, (NH + 2 KVH) D] f32, bias [(NH + 2 KVH) D] f32, qn, kn [D] f32, cos, sin [CAP, R/2],
//   q [B, NH D] f32, kc, vc [B, CAP, KVH D] f32.
// Grid: (NH + 2 KVH, B); block: DEC_HEAD_THREADS. Head h < NH is a q head, NH <= h < NH + KVH a
// k head, the rest v heads.
extern "C" __global__ void __launch_bounds__(DEC_HEAD_THREADS) dec_qkv(const float* __restrict__ qkv,
                                                                     const float* __restrict__ bias,
                                                                     const float* __restrict__ qn,
                                                                     const float* __restrict__ kn,
                                                                     const float* __restrict__ cos_t,
                                                                     const float* __restrict__ sin_t,
                                                                     float* __restrict__ q, float* __restrict__ kc,
                                                                     float* __restrict__ vc, int pos, int NH, int KVH,
                                                                     int D, int R, int CAP, float eps, int qk_norm) {
    __shared__ float head[DEC_MAX_HEAD_DIM];
    __shared__ float scratch[DEC_HEAD_THREADS / 32];
    const int h = blockIdx.x, b = blockIdx.y, width = (NH + 2 * KVH) * D;
    const bool is_q = h < NH, is_k = !is_q && h < NH + KVH;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < D; i += DEC_HEAD_THREADS) {
        const float v = qkv[(size_t)b * width + h * D + i] + bias[h * D + i];
        head[i] = v;
        ss = fmaf(v, v, ss);
    }
    const float total = dec_block_sum(ss, scratch);  // also the barrier after the loads
    if ((is_q || is_k) && qk_norm) {
        const float r = 1.0f / sqrtf(total / (float)D + eps);
        const float* nw = is_q ? qn : kn;
        for (int i = threadIdx.x; i < D; i += DEC_HEAD_THREADS) head[i] = nw[i] * (head[i] * r);
        __syncthreads();
    }
    if (is_q || is_k) {
        const int half = R / 2;
        const float* c = cos_t + (size_t)pos * half;
        const float* s = sin_t + (size_t)pos * half;
        // Each thread rotates its pairs from the values before any rotation, then all write.
        float a[DEC_MAX_HEAD_DIM / (2 * DEC_HEAD_THREADS) + 1], bb[DEC_MAX_HEAD_DIM / (2 * DEC_HEAD_THREADS) + 1];
        int n = 0;
        for (int i = threadIdx.x; i < half; i += DEC_HEAD_THREADS, ++n) {
            const float x0 = head[i], x1 = head[i + half];
            a[n] = x0 * c[i] - x1 * s[i];
            bb[n] = x1 * c[i] + x0 * s[i];
        }
        __syncthreads();
        n = 0;
        for (int i = threadIdx.x; i < half; i += DEC_HEAD_THREADS, ++n) {
            head[i] = a[n];
            head[i + half] = bb[n];
        }
        __syncthreads();
    }
    float* dst;
    if (is_q) {
        dst = q + (size_t)b * NH * D + h * D;
    } else {
        const int kvh = is_k ? h - NH : h - NH - KVH;
        dst = (is_k ? kc : vc) + ((size_t)b * CAP + pos) * KVH * D + kvh * D;
    }
    for (int i = threadIdx.x; i < D; i += DEC_HEAD_THREADS) dst[i] = head[i];
}
// ANCHOR_END: qkv

// ANCHOR: attention
// One query head of one row against the positions 0..n-1 of its KV head in the cache:
// softmax(q·kⱼ / √D) · v, written in bf16 for the output projection.
//   q [B, NH D] f32, kc, vc [B, CAP, KVH D] f32, out [B, NH D] bf16; n <= DEC_MAX_CTX.
// Grid: (NH, B); block: DEC_HEAD_THREADS. Warp w scores the positions w, w + 4, ... (lane l sums
// dimensions l, l + 32, ... of one key, in order, then a xor tree over the warp: the key's row is
// read in whole 128-byte lines); the block then finds the largest score and the sum of the
// exponentials; thread t sums dimension t (t + 128, ...) of the values over every position in
// order.
extern "C" __global__ void __launch_bounds__(DEC_HEAD_THREADS) dec_attention(const float* __restrict__ q,
                                                                           const float* __restrict__ kc,
                                                                           const float* __restrict__ vc,
                                                                           __nv_bfloat16* __restrict__ out, int n,
                                                                           int NH, int KVH, int D, int CAP) {
    __shared__ float qh[DEC_MAX_HEAD_DIM];
    __shared__ float p[DEC_MAX_CTX];
    __shared__ float scratch[DEC_HEAD_THREADS / 32];
    const int h = blockIdx.x, b = blockIdx.y, kvh = h / (NH / KVH), stride = KVH * D;
    const float scale = 1.0f / sqrtf((float)D);
    for (int i = threadIdx.x; i < D; i += DEC_HEAD_THREADS) qh[i] = q[(size_t)b * NH * D + h * D + i];
    __syncthreads();
    const float* keys = kc + (size_t)b * CAP * stride + kvh * D;
    const float* vals = vc + (size_t)b * CAP * stride + kvh * D;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = DEC_HEAD_THREADS / 32;
    float best = -__int_as_float(0x7f800000);
    for (int j = warp; j < n; j += warps) {
        const float* k = keys + (size_t)j * stride;
        float s = 0.0f;
        for (int i = lane; i < D; i += 32) s = fmaf(qh[i], k[i], s);
        for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(MOE_FULL_MASK, s, off);
        s = s * scale;
        if (lane == 0) p[j] = s;
        best = fmaxf(best, s);
    }
    best = dec_block_max(best, scratch);  // its barriers also publish p
    float sum = 0.0f;
    for (int j = threadIdx.x; j < n; j += DEC_HEAD_THREADS) {
        const float e = moe_expf(p[j] - best);
        p[j] = e;
        sum += e;
    }
    sum = dec_block_sum(sum, scratch);
    for (int i = threadIdx.x; i < D; i += DEC_HEAD_THREADS) {
        float acc = 0.0f;
        for (int j = 0; j < n; ++j) acc = fmaf(p[j] / sum, vals[(size_t)j * stride + i], acc);
        out[(size_t)b * NH * D + h * D + i] = __float2bfloat16(acc);
    }
}
// ANCHOR_END: attention

// The dense MLP's activation: out[b, i] = bf16(silu(gu[b, i]) · gu[b, I + i]) (gate rows first,
// then up rows, in the one fused weight).
//   gu [B, 2I] f32, out [B, I] bf16. Grid: B; block: DEC_THREADS.
extern "C" __global__ void __launch_bounds__(DEC_THREADS) dec_silu_mul(const float* __restrict__ gu,
                                                                     __nv_bfloat16* __restrict__ out, int I) {
    const float* row = gu + (size_t)blockIdx.x * 2 * I;
    for (int i = threadIdx.x; i < I; i += DEC_THREADS) {
        const float g = row[i];
        out[(size_t)blockIdx.x * I + i] = __float2bfloat16(g / (1.0f + moe_expf(-g)) * row[I + i]);
    }
}

// The greedy choice: tokens[b] = the lowest index of the largest logits[b, :] (a NaN is never
// chosen over a number), as torch.argmax.
//   logits [B, V] f32, tokens [B] i32. Grid: B; block: DEC_THREADS.
extern "C" __global__ void __launch_bounds__(DEC_THREADS) dec_argmax(const float* __restrict__ logits,
                                                                   int* __restrict__ tokens, int V) {
    __shared__ float bv[DEC_THREADS];
    __shared__ int bi[DEC_THREADS];
    const float* row = logits + (size_t)blockIdx.x * V;
    float best = __int_as_float(0x7fc00000);  // NaN: loses to any number
    int at = V;
    for (int i = threadIdx.x; i < V; i += DEC_THREADS) {
        const float v = row[i];
        if (v > best || (best != best && v == v) || at == V) {
            best = v;
            at = i;
        }
    }
    bv[threadIdx.x] = best;
    bi[threadIdx.x] = at;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int t = 1; t < DEC_THREADS; ++t) {
            const float v = bv[t];
            const int i = bi[t];
            if (i == V) continue;
            if (v > best || (best != best && v == v) || (v == best && i < at) || at == V) {
                best = v;
                at = i;
            }
        }
        tokens[blockIdx.x] = at;
    }
}
