// ch05_tiny_gemm.cu — the router's logits for a few rows: [T, E] fp32 from bf16 hidden states and
// a bf16 gate weight, in one launch whose time is mostly the cold read of the gate weight.
//
// A router's GEMM at decode sizes is a matrix-vector product in disguise: T (1 to 16) rows of
// H numbers against E rows of H numbers. A tiled GEMM (cuBLAS) plans for reuse that is not
// there, splits the sum over H across blocks and adds the parts in a second kernel. Here each
// block owns two experts' rows of the gate weight and streams them once, in 16-byte loads, while
// every thread keeps the T x 2 partial sums of its slice of H in registers.
//
// Upstream: SGLang's tiny GEMM for the router (`tiny_n_gemm_kernel` / `tiny_k_gemm_kernel` in a
// profile; sgl-kernel's dsv3 router GEMM), which writes fp32 logits from bf16 inputs for up to
// 16 rows and chains to the top-k kernel with programmatic dependent launch.
//
// Differences:
// - Programmatic dependent launch one way only: this kernel lets the router kernel after it start
//   early (moe_launch_dependents, common.cuh), but is itself a plain launch, since the hidden
//   states it reads come from the layer before. Its gate-weight loads are issued first, so a
//   wait (moe_grid_wait) would go between them and the hidden states' loads.
// - The block's reduction is a fixed tree (warp xor shuffles, then the 8 warps' sums in warp
//   order), so the bits do not depend on the batch: a row's logits are the same whether it is
//   routed alone or with 8191 others, on the emulator and on the GPU.
// - Any T: above TINY_ROWS rows, more blocks along y. The host runs it up to 7 rows; from 8 on,
//   tiny_gemm_tc (below) computes the same logits on tensor cores, in another order.
// - H must be a multiple of 8 (whole 16-byte slices); the host refuses other sizes.
#include "common.cuh"
#include "mma.cuh"

#include "ch05/tiny_gemm.cuh"

// One entry point per block height; the host picks the smallest that holds min(T, 16) rows.
extern "C" __global__ void __launch_bounds__(TINY_THREADS) tiny_gemm_r1(const __nv_bfloat16* __restrict__ hidden,
                                                                        const __nv_bfloat16* __restrict__ gate,
                                                                        float* __restrict__ logits, int T, int H, int E) {
    tiny_gemm<1>(hidden, gate, logits, T, H, E);
}
extern "C" __global__ void __launch_bounds__(TINY_THREADS) tiny_gemm_r2(const __nv_bfloat16* __restrict__ hidden,
                                                                        const __nv_bfloat16* __restrict__ gate,
                                                                        float* __restrict__ logits, int T, int H, int E) {
    tiny_gemm<2>(hidden, gate, logits, T, H, E);
}
extern "C" __global__ void __launch_bounds__(TINY_THREADS) tiny_gemm_r4(const __nv_bfloat16* __restrict__ hidden,
                                                                        const __nv_bfloat16* __restrict__ gate,
                                                                        float* __restrict__ logits, int T, int H, int E) {
    tiny_gemm<4>(hidden, gate, logits, T, H, E);
}
extern "C" __global__ void __launch_bounds__(TINY_THREADS) tiny_gemm_r8(const __nv_bfloat16* __restrict__ hidden,
                                                                        const __nv_bfloat16* __restrict__ gate,
                                                                        float* __restrict__ logits, int T, int H, int E) {
    tiny_gemm<8>(hidden, gate, logits, T, H, E);
}
// Two blocks per SM: 144 blocks (288 experts) in one wave of 132 SMs, not one and a bit.
extern "C" __global__ void __launch_bounds__(TINY_THREADS, 2) tiny_gemm_r16(const __nv_bfloat16* __restrict__ hidden,
                                                                         const __nv_bfloat16* __restrict__ gate,
                                                                         float* __restrict__ logits, int T, int H, int E) {
    tiny_gemm<16>(hidden, gate, logits, T, H, E);
}

// ANCHOR: tiny_gemm_tc
// The same logits on tensor cores, for more rows (the host's choice from TC_FROM_ROWS on): one
// mma.sync.m16n8k16 takes 16 experts' gate rows as A (M = experts) and 8 tokens' hidden rows as
// B (N = tokens), bf16 in, fp32 accumulators. The CUDA-core kernel above issues one fmaf per
// product; here one instruction does 16 x 8 x 16 = 2,048 of them.
//   hidden [T, H] bf16, gate [E, H] bf16, logits [T, E] fp32; H % 8 == 0
// Grid: (ceil(E / 16), ceil(T / 16)); block: 8 warps. Block (bx, by) computes experts
// 16bx .. 16bx+15 for tokens 16by .. 16by+15 (two n-tiles of 8). H goes in chunks of 32: warp w
// takes chunks w, w + 8, w + 16, ... in that order, then the 8 warps' tiles are added in warp
// order. Within a chunk, lane (g = lane / 4, q = lane % 4) loads 16 bytes, k = 32c + 8q .. + 7,
// of gate rows g and g + 8 and of its token rows g, and gives them to two mma steps: the
// fragment's k slots 2q, 2q + 1 and 2q + 8, 2q + 9 (mma.cuh) hold k = 32c + 8q + 4s + 0..3 in
// step s. A and B use the same assignment, so each product pairs the right k; the sum runs in
// that order. An element of the result depends only on its own row and column, so a row's
// logits are the same bits in any batch this kernel computes (not those of the kernel above).
#define TC_WARPS 8     // warps per block, each a share of H's chunks
#define TC_EXPERTS 16  // gate rows per block: the mma's M
#define TC_TILES 2     // n-tiles of 8 tokens per block
#ifndef TC_UNROLL
#define TC_UNROLL 4    // chunks a warp loads before it multiplies: 8 KB in flight per warp
#endif
// The host runs this kernel from this many rows on. Alone, the two kernels cross between 8 and 12
// GLM-like rows and between 6 and 8 Qwen3-like rows; in the pair, timed with each form (bench ch05's
// pair_fma and pair_tc, bench/results/h200/logs/ch05_pair_forms.csv), the CUDA-core form is ahead
// at 6 rows at both shapes, the tensor-core form at 8 GLM-like rows (11.6 us cold against 12.5)
// and 0.1 us behind at 8 Qwen3-like rows, and ahead at 12 at both.
#define TC_FROM_ROWS 8

__device__ __forceinline__ uint4 tc_load16(const __nv_bfloat16* p, bool in) {
    return in ? *reinterpret_cast<const uint4*>(p) : make_uint4(0u, 0u, 0u, 0u);
}

extern "C" __global__ void __launch_bounds__(32 * TC_WARPS) tiny_gemm_tc(const __nv_bfloat16* __restrict__ hidden,
                                                                       const __nv_bfloat16* __restrict__ gate,
                                                                       float* __restrict__ logits, int T, int H, int E) {
    __shared__ float part[TC_WARPS][TC_TILES][32][4];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, q = lane & 3;
    const int e0 = blockIdx.x * TC_EXPERTS, t0 = blockIdx.y * (8 * TC_TILES);
    moe_launch_dependents();  // as tiny_gemm: the router's blocks may start now
    const int chunks = (H + 31) / 32;  // the last one partial when H % 32 != 0 (zeros past H)
    const __nv_bfloat16* ga = gate + (size_t)(e0 + g) * H;
    const __nv_bfloat16* gb = gate + (size_t)(e0 + g + 8) * H;
    const bool has_a = e0 + g < E, has_b = e0 + g + 8 < E;
    float acc[TC_TILES][4];
#pragma unroll
    for (int j = 0; j < TC_TILES; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) acc[j][r] = 0.0f;
    for (int c0 = warp; c0 < chunks; c0 += TC_WARPS * TC_UNROLL) {
        // Every load of TC_UNROLL chunks first (the gate's, then the tokens'), then the mma.
        uint4 a_lo[TC_UNROLL], a_hi[TC_UNROLL], bv[TC_UNROLL][TC_TILES];
#pragma unroll
        for (int u = 0; u < TC_UNROLL; ++u) {
            const int k = (c0 + u * TC_WARPS) * 32 + q * 8;
            const bool kin = c0 + u * TC_WARPS < chunks && k < H;
            a_lo[u] = tc_load16(ga + k, kin && has_a);
            a_hi[u] = tc_load16(gb + k, kin && has_b);
        }
#pragma unroll
        for (int u = 0; u < TC_UNROLL; ++u) {
            const int k = (c0 + u * TC_WARPS) * 32 + q * 8;
            const bool kin = c0 + u * TC_WARPS < chunks && k < H;
#pragma unroll
            for (int j = 0; j < TC_TILES; ++j) {
                const int t = t0 + 8 * j + g;
                bv[u][j] = tc_load16(hidden + (size_t)t * H + k, kin && t < T);
            }
        }
#pragma unroll
        for (int u = 0; u < TC_UNROLL; ++u) {
            if (c0 + u * TC_WARPS >= chunks) break;  // the same for the whole warp
            const unsigned s0[4] = {a_lo[u].x, a_hi[u].x, a_lo[u].y, a_hi[u].y};  // k 8q + 0..3
            const unsigned s1[4] = {a_lo[u].z, a_hi[u].z, a_lo[u].w, a_hi[u].w};  // k 8q + 4..7
#pragma unroll
            for (int j = 0; j < TC_TILES; ++j) {
                const unsigned b0[2] = {bv[u][j].x, bv[u][j].y};
                const unsigned b1[2] = {bv[u][j].z, bv[u][j].w};
                moe_mma_m16n8k16_bf16(acc[j], s0, b0, acc[j]);
                moe_mma_m16n8k16_bf16(acc[j], s1, b1, acc[j]);
            }
        }
    }
    // The warps' tiles, added in warp order: thread i adds one element of the 16 x 16 result.
#pragma unroll
    for (int j = 0; j < TC_TILES; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) part[warp][j][lane][r] = acc[j][r];
    __syncthreads();
    for (int o = threadIdx.x; o < TC_TILES * 32 * 4; o += 32 * TC_WARPS) {
        const int j = o >> 7, l = (o >> 2) & 31, r = o & 3;
        float v = part[0][j][l][r];
        for (int w = 1; w < TC_WARPS; ++w) v += part[w][j][l][r];
        // c[0], c[1]: expert row l / 4, tokens 2(l % 4) and + 1; c[2], c[3]: expert row + 8.
        const int e = e0 + (l >> 2) + (r >= 2 ? 8 : 0);
        const int t = t0 + 8 * j + 2 * (l & 3) + (r & 1);
        if (e < E && t < T) logits[(size_t)t * E + e] = v;
    }
}
// ANCHOR_END: tiny_gemm_tc
