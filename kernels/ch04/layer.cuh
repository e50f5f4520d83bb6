// ch04/layer.cuh — chapter 4's pieces that every path shares (included by ch04_fused_moe.cu,
// after its launch-geometry constants):
//   fused_warp_or       a value the compiler knows to be the same for the whole warp;
//   fused_row_address   base + row · row_bytes in one 32 × 32 → 64-bit multiply-add;
//   fused_tile_rows     a tile's rows: the gather of its pairs through chapter 3's sorted_ids;
//   fused_swiglu, fused_combine, fused_to_bf16, fused_fill_bf16: the elementwise kernels (the
//   unfused layer's SwiGLU, the sum over k, x rounded to bf16 once, weights made on the device).
#pragma once

// The OR of v over the warp (__reduce_or_sync, sm_80 on; every lane passes the same value
// on the emulator and older GPUs), in a register the compiler knows to be the same for the
// whole warp: a branch on it is not divergent (fused_warp_live, wg_live, ps_live).
__device__ __forceinline__ unsigned fused_warp_or(unsigned v) {
#if defined(MOE_EMU) || __CUDA_ARCH__ < 800
    return v;  // every lane passes the same value here
#else
    return __reduce_or_sync(MOE_FULL_MASK, v);
#endif
}

// base + row · row_bytes in one 32 × 32 → 64-bit multiply-add (mad.wide.u32). Written in PTX
// so that the compiler cannot hoist row · row_bytes, the same at every stage, out of the K loop:
// hoisted, each copy would hold a 64-bit product (two registers) and still cost a 64-bit add
// per stage, which is what the row index is there to avoid.
__device__ __forceinline__ const void* fused_row_address(const void* base, unsigned row, unsigned row_bytes) {
#ifdef MOE_EMU
    return static_cast<const char*>(base) + (size_t)row * row_bytes;
#else
    unsigned long long a;
    asm("mad.wide.u32 %0, %1, %2, %3;\n" : "=l"(a) : "r"(row), "r"(row_bytes), "l"(base));
    return reinterpret_cast<const void*>(a);
#endif
}

// The tile's rows: the pair of each slot (-1 for a placeholder), the A row it reads
// (pair / k: the token in GEMM 1; the pair itself in GEMM 2, k = 1), and whether each 16-row
// sub-tile holds a real pair. Returns the number of sub-tiles. Every thread calls it.
__device__ __forceinline__ int fused_tile_rows(const int* __restrict__ sorted_ids, int tile, int block_m, int P,
                                               int k, int* s_pair, int* s_arow, int* s_live) {
    const int subtiles = block_m / 16;
    for (int r = threadIdx.x; r < block_m; r += blockDim.x) {
        const int p = sorted_ids[(size_t)tile * block_m + r];
        const bool real = p >= 0 && p < P;
        s_pair[r] = real ? p : -1;
        s_arow[r] = real ? p / k : -1;
    }
    __syncthreads();
    if ((int)threadIdx.x < subtiles) {  // one thread per sub-tile: no two threads write one flag
        int live = 0;
        for (int r = 0; r < 16; ++r) live |= s_pair[threadIdx.x * 16 + r] >= 0;
        s_live[threadIdx.x] = live;
    }
    __syncthreads();
    return subtiles;
}

// act[r, n] = bf16(silu(g) · u), g = gateup[r, n], u = gateup[r, I + n]: the unfused layer's
// SwiGLU (upstream's silu_and_mul), the same arithmetic as GEMM 1's epilogue.
//   gateup [rows, 2I] bf16; act [rows, I] bf16. One thread per element, grid-stride.
extern "C" __global__ void fused_swiglu(const __nv_bfloat16* __restrict__ gateup, __nv_bfloat16* __restrict__ act,
                                        long long rows, int I) {
    const size_t n = (size_t)rows * I;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        const size_t r = e / I, c = e % I;
        const float gate = __bfloat162float(gateup[r * 2 * I + c]);
        const float up = __bfloat162float(gateup[r * 2 * I + I + c]);
        act[e] = __float2bfloat16((gate * moe_sigmoidf(gate)) * up);
    }
}

// ANCHOR: combine
// out[t, c] = Σ_{j < k} y[t·k + j, c], j in order (+ shared[t, c], times sigmoid(shared_gate[t])
// when the shared expert is gated): one thread per output element, a fixed order, no atomics.
//   y [T·k, H] f32, or bf16 when y_bf16 (already weighted; each value widened exactly to fp32
//   before it is added); shared [T, H] f32 or null; shared_gate [T] f32 (the logit) or null;
//   out [T, H] f32.
extern "C" __global__ void fused_combine(const void* y, int y_bf16, const float* shared, const float* shared_gate,
                                         float* __restrict__ out, int T, int H, int k) {
    // A dependent launch of the down projection (LaunchConfig::dependent): its inputs are that
    // kernel's output, read after the wait through plain pointers (see moe_grid_wait).
    moe_grid_wait();
    const float* yf = static_cast<const float*>(y);
    const __nv_bfloat16* yb = static_cast<const __nv_bfloat16*>(y);
    const size_t n = (size_t)T * H;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n; e += (size_t)gridDim.x * blockDim.x) {
        const size_t t = e / H, c = e % H;
        float acc = 0.0f;
        for (int j = 0; j < k; ++j) {
            const size_t i = (t * k + j) * H + c;
            acc = acc + (y_bf16 ? __bfloat162float(yb[i]) : yf[i]);
        }
        if (shared) {
            float s = shared[e];
            if (shared_gate) s = s * moe_sigmoidf(shared_gate[t]);
            acc = acc + s;
        }
        out[e] = acc;
    }
}
// ANCHOR_END: combine

// x [n] f32 -> xb [n] bf16, rounded to nearest even: the layer's input as the GEMMs read it.
// FUSED_TO_BF16_VALUES (8) values per thread and pass, two 16-byte loads and one 16-byte store,
// where both buffers are 16-byte aligned (they are, as allocated); the values past the last
// whole 8, or all of them when a buffer is not aligned, one at a time. Every value is rounded
// the same way on either path. (One value per thread, the kernel ran at about half the copy rate
// at 4096 tokens: 26.3 µs cold for Qwen3's 33.6 MB of x, 51.8 µs for GLM's 67 MB.)
extern "C" __global__ void fused_to_bf16(const float* __restrict__ x, __nv_bfloat16* __restrict__ xb, long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long first = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const bool aligned = ((reinterpret_cast<unsigned long long>(x) | reinterpret_cast<unsigned long long>(xb)) & 15) == 0;
    const long long groups = aligned ? n / FUSED_TO_BF16_VALUES : 0;
    for (long long i = first; i < groups; i += stride) {
        const float4 a = reinterpret_cast<const float4*>(x)[2 * i];
        const float4 b = reinterpret_cast<const float4*>(x)[2 * i + 1];
        const float v[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        unsigned w[4];
#pragma unroll
        for (int j = 0; j < 4; ++j)  // the lower address in the low half
            w[j] = (unsigned)__bfloat16_as_ushort(__float2bfloat16(v[2 * j])) |
                   ((unsigned)__bfloat16_as_ushort(__float2bfloat16(v[2 * j + 1])) << 16);
        reinterpret_cast<uint4*>(xb)[i] = make_uint4(w[0], w[1], w[2], w[3]);
    }
    for (long long i = groups * FUSED_TO_BF16_VALUES + first; i < n; i += stride) xb[i] = __float2bfloat16(x[i]);
}


// ANCHOR: fill
// out[i] = bf16(scale · u), u = 2·(h >> 40)·2⁻²⁴ − 1 in [-1, 1), h = splitmix64(seed + (offset +
// i + 1)·φ): deterministic weights made on the device, for layers too big to build on the host
// (the 2.4 G-element w13 of a GLM-sized layer). Every step is exact or one IEEE rounding, so the
// host's twin (ch04_fused_moe::fill) gives the same bits. Grid-stride, any grid.
extern "C" __global__ void fused_fill_bf16(__nv_bfloat16* __restrict__ out, long long n, long long offset,
                                           unsigned long long seed, float scale) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        unsigned long long z = seed + (unsigned long long)(offset + i + 1) * 0x9E3779B97F4A7C15ull;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        z = z ^ (z >> 31);
        const float u = (float)(unsigned)(z >> 40) * (1.0f / 16777216.0f);  // exact: 24 bits
        out[i] = __float2bfloat16((2.0f * u - 1.0f) * scale);
    }
}
// ANCHOR_END: fill
