// ch04/decode.cuh — the decode path and the grouped decode path: a few tokens, no tile.
// Included by ch04_fused_moe.cu.
//
// THE DECODE PATH. With few tokens a 16-row tile holds one or two real rows: the tensor cores idle
// and the time is reading the weights. (The host picks the path by shape: chapters/ch04-fused-moe/
// src/choose.rs, decode while T·k ≤ 4·E unless the measured table says otherwise.) These kernels read each pair's expert rows once, 16 bytes
// (8 bf16) per lane per load, and never build a tile, so they need no chapter 3 layout: a block
// is one pair (row of the grid's x) times a slice of columns (the grid's y); a warp owns whole
// columns, one after another. For one column, lane l of the warp sums chunks l, l + 32, l + 64,
// ... of 8 consecutive K values (in order inside a chunk, fmaf into one fp32 partial sum), and a
// butterfly of shuffles (xor 16, 8, 4, 2, 1) adds the 32 partial sums. That order depends only on
// K: not on the block size, the warps per block or the columns per warp (decode_* take those from
// the launch), so every geometry gives the same bits; the scalar loads used when K is not a
// multiple of 8 do the same arithmetic in the same order; so do the weight loads without an L1
// line (the `_na` twins of decode_gemm1_*, decode_gemm2 and decode_gemm2_sum: dec_load8_stream).
//   decode_gemm1_swiglu: act[p, n] for the pair of block x and the columns n of its warps; the
//     shared expert's T rows follow the T·k pairs in the same grid (x = T·k + t), and the block of
//     each shared row with y = 0 also computes Qwen2-MoE's gate logit (gate_logit_warp, the same
//     sum as fused_gate_logit). decode_gemm1_gateup: the same without SwiGLU (gate|up in bf16).
//   decode_gemm2_sum: the sum over k fused into the down projection: a block is one token t and a
//     slice of H; for each column, the warp computes the k pairs' dot products DECODE_PAIRS at a
//     time (their loads in flight together, their sums in one butterfly, dec_warp_sums, whose
//     additions are exactly dec_warp_sum's), and adds weight·dot to one fp32 accumulator, j in
//     order, then the shared expert's (σ(logit)·)dot. No [T·k, H] buffer, no combine launch.
//   decode_gemm2: the unfused down projection (y [T·k, H], and the shared expert's [T, H]) for
//     fused_combine, to show what the fusion saves.
//
// THE GROUPED DECODE PATH. The decode kernels read an expert's rows once per pair: an expert
// chosen by n pairs is read n times (at 64 tokens of Qwen3-30B-A3B, 512 pairs over about 127
// experts, four times on average). The grouped kernels take chapter 3's layout with BLOCK_M =
// DECODE_GROUP (8; any of 16..128 works too) and run one block per tile and column slice: the
// block compacts its tile's real pairs (a ballot per 32 slots; placeholders and garbage left
// out), and for each of its columns a warp loads each 16-byte chunk of the expert's rows once and
// multiplies it into up to DECODE_GROUP pairs' rows (x[p / k], or act[p]), one fp32 sum per
// (pair, row) (dec_lane_dots_group); a tile of more real pairs takes another pass of 8 over the
// weight rows just read (from L1 or L2). Every (pair, column) sum is the decode kernels' own: the same lane, the same
// chunks in the same order, the same fmaf, the same butterfly (dec_warp_sums, whose additions
// are dec_warp_sum's), the same roundings; so the grouped path gives the decode path's bits, in
// every fusion, geometry and BLOCK_M. The shared expert's tokens come in tiles after the routed
// tiles (tokens in order), and its gate logit with them.
//   decode_grouped_gemm1_swiglu (decode_grouped_gemm1_gateup: no SwiGLU): act by tile.
//   decode_grouped_gemm2: y = weight·dot rounded in fp32, by tile, exactly decode_gemm2's y; then
//     fused_combine sums over k as decode_gemm2_sum would (the same additions in the same order:
//     see Roundings). The sum over k cannot move into a tile of one expert's pairs, so this path
//     is one launch longer and writes and reads y [T·k, H] f32 (at 64 tokens of Qwen3, 4 MB each
//     way, against about 1.2 GB of weights). With Fusion::SwiGluSumK the host runs
//     decode_gemm2_sum after the grouped GEMM 1 instead: no y and no combine, but w2 read once
//     per pair again (a third of the weights).
//   Costs beyond the decode path's: fused_to_bf16 (x in bf16: each x row is read once per pair
//   and column, from L1, and bf16 halves those bytes), chapter 3's one or two launches, and a
//   combine; a tile of one real pair does the decode kernels' work plus a barrier. Not picked by
//   the host's rule until measured on the GPU (chapters/ch04-fused-moe/src/choose.rs).
//
// Run one: `tools/bench/run ch04-tune --configs w4_c1_na_swiglu` (a GPU; the decode geometries'
// names), or chapter 4's tests on the emulator (`cargo test -p ch04-fused-moe --test layer`).
#pragma once

// A value as the layer multiplies it: bf16 exactly; f32 (the layer's input) rounded to bf16.
__device__ __forceinline__ float dec_value(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ float dec_value(const float* p) { return __bfloat162float(__float2bfloat16(*p)); }

// 8 bf16 values loaded as 16 bytes, as floats.
__device__ __forceinline__ void dec_unpack8(uint4 u, float v[8]) {
    const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // the lower address in the low half; bf16 -> f32 is a shift
        v[2 * i] = __uint_as_float(w[i] << 16);
        v[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}

// 8 consecutive values (16 bytes of bf16, 32 of f32; 16-byte aligned) as dec_value gives them.
__device__ __forceinline__ void dec_load8(const __nv_bfloat16* p, float v[8]) {
    dec_unpack8(*reinterpret_cast<const uint4*>(p), v);
}
__device__ __forceinline__ void dec_load8(const float* p, float v[8]) {
    const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
    const float f[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = __bfloat162float(__float2bfloat16(f[i]));
}

// ANCHOR: dec_load8_stream
// dec_load8 for weight rows that no other warp of the SM will read: `ld.global.nc.L1::no_allocate`,
// the read-only path without a place in the L1 (the line goes from the L2 to the registers). The
// decode kernels stream each weight row once. Whether that is faster depends on the batch (in a
// standalone harness on the H200, bench/results/h200/logs/ch04_decode_harness_experiment.log,
// faster at one token and slower at 8 GLM-like tokens), so the decode geometry chooses
// (DecodeGeometry's `_na`, the measured table per bucket). The same values as dec_load8, which is
// what the emulator runs.
__device__ __forceinline__ void dec_load8_stream(const __nv_bfloat16* p, float v[8]) {
#ifdef MOE_EMU
    dec_load8(p, v);
#else
    uint4 u;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w)
                 : "l"(p));
    dec_unpack8(u, v);
#endif
}
// A weight row's 8 values: streamed (NA) or as dec_load8 loads them.
template <bool NA>
__device__ __forceinline__ void dec_load8_w(const __nv_bfloat16* p, float v[8]) {
    if (NA)
        dec_load8_stream(p, v);
    else
        dec_load8(p, v);
}
// ANCHOR_END: dec_load8_stream

// ANCHOR: decode_dot
// This lane's partial sums of R dot products a · b[r] over K: chunks lane, lane + 32, ... of
// DECODE_CHUNK values, each chunk in order, fmaf into s[r]. vec (K % 8 == 0, rows 16-byte
// aligned): one 16-byte load per chunk and row (the rows b[r] streamed when NA: dec_load8_w); else
// one value at a time, in the same order, so the bits do not depend on which.
template <class AT, int R, bool NA = false>
__device__ __forceinline__ void dec_lane_dots(const AT* __restrict__ a, const __nv_bfloat16* const* b, int K,
                                              bool vec, float s[R]) {
    const int lane = threadIdx.x & 31;
    if (vec) {
#pragma unroll 4
        for (int c = lane * DECODE_CHUNK; c < K; c += 32 * DECODE_CHUNK) {
            float av[DECODE_CHUNK];
            dec_load8(a + c, av);
#pragma unroll
            for (int r = 0; r < R; ++r) {
                float bv[DECODE_CHUNK];
                dec_load8_w<NA>(b[r] + c, bv);
#pragma unroll
                for (int j = 0; j < DECODE_CHUNK; ++j) s[r] = fmaf(av[j], bv[j], s[r]);
            }
        }
    } else {
        for (int c = lane * DECODE_CHUNK; c < K; c += 32 * DECODE_CHUNK)
            for (int j = 0; j < DECODE_CHUNK && c + j < K; ++j) {
                const float av = dec_value(a + c + j);
#pragma unroll
                for (int r = 0; r < R; ++r) s[r] = fmaf(av, __bfloat162float(b[r][c + j]), s[r]);
            }
    }
}

// The same partial sums for R independent pairs of rows a[r] · b[r] (rows with live[r] false
// are skipped and their s[r] stays 0): the k pairs of one token in decode_gemm2_sum.
template <int R, bool NA = false>
__device__ __forceinline__ void dec_lane_dots_rows(const __nv_bfloat16* const* a, const __nv_bfloat16* const* b,
                                                   const bool* live, int K, bool vec, float s[R]) {
    const int lane = threadIdx.x & 31;
    if (vec) {
#pragma unroll 2
        for (int c = lane * DECODE_CHUNK; c < K; c += 32 * DECODE_CHUNK) {
#pragma unroll
            for (int r = 0; r < R; ++r) {
                if (!live[r]) continue;
                float av[DECODE_CHUNK], bv[DECODE_CHUNK];
                dec_load8(a[r] + c, av);
                dec_load8_w<NA>(b[r] + c, bv);
#pragma unroll
                for (int j = 0; j < DECODE_CHUNK; ++j) s[r] = fmaf(av[j], bv[j], s[r]);
            }
        }
    } else {
        for (int c = lane * DECODE_CHUNK; c < K; c += 32 * DECODE_CHUNK)
            for (int j = 0; j < DECODE_CHUNK && c + j < K; ++j)
#pragma unroll
                for (int r = 0; r < R; ++r)
                    if (live[r]) s[r] = fmaf(dec_value(a[r] + c + j), __bfloat162float(b[r][c + j]), s[r]);
    }
}

// The warp's sum of one value per lane: a fixed butterfly (xor 16, 8, 4, 2, 1). Both lanes of a
// pair add the same two numbers, so every lane ends with the same bits.
__device__ __forceinline__ float dec_warp_sum(float s) {
    for (int off = 16; off > 0; off >>= 1) s = s + __shfl_xor_sync(MOE_FULL_MASK, s, off);
    return s;
}

// R sums (R = 1, 2 or 4; 8 in the grouped kernels) in one butterfly, each with exactly
// dec_warp_sum's additions: at xor 16 (and 8 for R = 4, 8 and 4 for R = 8) a lane keeps the half
// of its values its lane bit selects and receives the other lanes' half, so it adds its own value
// and its partner's, in the order dec_warp_sum does, with half the shuffles; then the remaining
// xors down to 1 on the one value left. Lane 0 ends with all R sums in v[0..R) (the other lanes'
// v is scratch): 2(R − 1) + 5 − log2(R) shuffles instead of 5R.
template <int R>
__device__ __forceinline__ void dec_warp_sums(float v[R]) {
    const int lane = threadIdx.x & 31;
    int off = 16;
#pragma unroll
    for (int n = R; n > 1; n >>= 1, off >>= 1) {
        const bool upper = (lane & off) != 0;
#pragma unroll
        for (int i = 0; i < n / 2; ++i) {
            const float keep = upper ? v[n / 2 + i] : v[i], send = upper ? v[i] : v[n / 2 + i];
            v[i] = keep + __shfl_xor_sync(MOE_FULL_MASK, send, off);
        }
    }
    for (; off > 0; off >>= 1) v[0] = v[0] + __shfl_xor_sync(MOE_FULL_MASK, v[0], off);
    // Value j now sits in lanes whose bits 4 (3, 2) spell j: lane j·32/R among them.
    const float own = v[0];
#pragma unroll
    for (int j = 1; j < R; ++j) {
        const float t = __shfl_sync(MOE_FULL_MASK, own, j * (32 / R));
        if (lane == 0) v[j] = t;
    }
}
// ANCHOR_END: decode_dot

// logit = row · g in fp32 (Qwen2-MoE's shared-expert gate), by one warp: lane l sums columns l,
// l + 32, ... in order, then dec_warp_sum. The same bits from a bf16 row and from its f32 source.
template <class AT>
__device__ __forceinline__ float gate_logit_warp(const AT* __restrict__ row, const __nv_bfloat16* __restrict__ g,
                                                 int H) {
    const int lane = threadIdx.x & 31;
    float s = 0.0f;
    for (int c = lane; c < H; c += 32) s = fmaf(dec_value(row + c), __bfloat162float(g[c]), s);
    return dec_warp_sum(s);
}

// ANCHOR: decode_gemm1
// Block (x, y): row x of the grid is pair p = x < T·k (token p / k, expert ids[p]; an id outside
// 0..E: nothing), or the shared expert's token x - T·k; its warps own columns n = y·(warps ·
// cols_per_warp) + warp·cols_per_warp + c, c < cols_per_warp. For each: g = x[t] · w[n],
// u = x[t] · w[I + n] (two sums sharing the loads of x), then
//   SWIGLU: out[row, n] = bf16(silu(bf16(g)) · bf16(u)) [rows, I];
//   else:   out[row, n] = bf16(g), out[row, I + n] = bf16(u) [rows, 2I].
// The shared rows' block y = 0 also writes shared_logit[t] = x[t] · shared_gate (if not null).
template <bool SWIGLU, bool NA, class XT = float>
__device__ __forceinline__ void decode_gemm1_impl(const XT* __restrict__ x, const int* __restrict__ ids,
                                                  const __nv_bfloat16* __restrict__ w13,
                                                  const __nv_bfloat16* __restrict__ shared_w13,
                                                  const __nv_bfloat16* __restrict__ shared_gate,
                                                  float* __restrict__ shared_logit, __nv_bfloat16* __restrict__ out,
                                                  __nv_bfloat16* __restrict__ shared_out, int T, int k, int H, int I,
                                                  int E, int Is, int cols_per_warp) {
    const int P = T * k, row = blockIdx.x;
    int t, inter;
    const __nv_bfloat16* w;
    __nv_bfloat16* o;
    if (row < P) {
        const int e = ids[row];
        if (e < 0 || e >= E) return;  // the whole block
        t = row / k;
        inter = I;
        w = w13 + (size_t)e * 2 * (size_t)I * (size_t)H;  // 64-bit: E·2I·H can pass 2^31
        o = out + (size_t)row * (SWIGLU ? 1 : 2) * I;
    } else {
        t = row - P;
        inter = Is;
        w = shared_w13;
        o = shared_out + (size_t)t * (SWIGLU ? 1 : 2) * Is;
    }
    const XT* xr = x + (size_t)t * H;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const bool vec = H % DECODE_CHUNK == 0;
    for (int c = 0; c < cols_per_warp; ++c) {
        const int n = blockIdx.y * warps * cols_per_warp + warp * cols_per_warp + c;
        if (n >= inter) break;  // the same for the whole warp
        const __nv_bfloat16* rows[2] = {w + (size_t)n * H, w + (size_t)(inter + n) * H};
        float s[2] = {0.0f, 0.0f};
        dec_lane_dots<XT, 2, NA>(xr, rows, H, vec, s);
        dec_warp_sums<2>(s);  // lane 0: the gate's and the up projection's sums
        const float g = s[0], u = s[1];
        if (lane == 0) {
            if (SWIGLU) {
                const float gate = __bfloat162float(__float2bfloat16(g));
                const float up = __bfloat162float(__float2bfloat16(u));
                o[n] = __float2bfloat16((gate * moe_sigmoidf(gate)) * up);
            } else {
                o[n] = __float2bfloat16(g);
                o[inter + n] = __float2bfloat16(u);
            }
        }
    }
    if (row >= P && shared_gate && blockIdx.y == 0 && warp == 0) {
        const float logit = gate_logit_warp(xr, shared_gate, H);
        if (lane == 0) shared_logit[t] = logit;
    }
}
// ANCHOR_END: decode_gemm1

// Grid (T·k [+ T with a shared expert], ceil(max(I, Is) / (warps · cols_per_warp))), any multiple
// of 32 threads up to DECODE_MAX_THREADS. shared_w13 [2Is, H] or null (then no shared rows);
// shared_gate [H] or null; shared_logit [T] f32; act [T·k, I], shared_act [T, Is] bf16.
extern "C" __global__ void __launch_bounds__(DECODE_MAX_THREADS)
    decode_gemm1_swiglu(const float* x, const int* ids, const __nv_bfloat16* w13, const __nv_bfloat16* shared_w13,
                        const __nv_bfloat16* shared_gate, float* shared_logit, __nv_bfloat16* act,
                        __nv_bfloat16* shared_act, int T, int k, int H, int I, int E, int Is, int cols_per_warp) {
    moe_launch_dependents();  // the down projection, a dependent launch, may be scheduled now
    decode_gemm1_impl<true, false>(x, ids, w13, shared_w13, shared_gate, shared_logit, act, shared_act, T, k, H, I,
                                   E, Is, cols_per_warp);
}
// The same grid; gateup [T·k, 2I], shared_gateup [T, 2Is] bf16.
extern "C" __global__ void __launch_bounds__(DECODE_MAX_THREADS)
    decode_gemm1_gateup(const float* x, const int* ids, const __nv_bfloat16* w13, const __nv_bfloat16* shared_w13,
                        const __nv_bfloat16* shared_gate, float* shared_logit, __nv_bfloat16* gateup,
                        __nv_bfloat16* shared_gateup, int T, int k, int H, int I, int E, int Is, int cols_per_warp) {
    decode_gemm1_impl<false, false>(x, ids, w13, shared_w13, shared_gate, shared_logit, gateup, shared_gateup, T, k,
                                    H, I, E, Is, cols_per_warp);
}
// The `_na` twins of the decode kernels: the same arguments and bits, the weight rows streamed
// (dec_load8_stream). Separate entry points, not a run-time flag: the originals keep their code,
// and neither loop is compiled around the other's registers (with a flag decode_gemm2 took 40
// instead of 34).
extern "C" __global__ void __launch_bounds__(DECODE_MAX_THREADS)
    decode_gemm1_swiglu_na(const float* x, const int* ids, const __nv_bfloat16* w13, const __nv_bfloat16* shared_w13,
                           const __nv_bfloat16* shared_gate, float* shared_logit, __nv_bfloat16* act,
                           __nv_bfloat16* shared_act, int T, int k, int H, int I, int E, int Is, int cols_per_warp) {
    moe_launch_dependents();
    decode_gemm1_impl<true, true>(x, ids, w13, shared_w13, shared_gate, shared_logit, act, shared_act, T, k, H, I, E,
                                  Is, cols_per_warp);
}
extern "C" __global__ void __launch_bounds__(DECODE_MAX_THREADS)
    decode_gemm1_gateup_na(const float* x, const int* ids, const __nv_bfloat16* w13, const __nv_bfloat16* shared_w13,
                           const __nv_bfloat16* shared_gate, float* shared_logit, __nv_bfloat16* gateup,
                           __nv_bfloat16* shared_gateup, int T, int k, int H, int I, int E, int Is,
                           int cols_per_warp) {
    decode_gemm1_impl<false, true>(x, ids, w13, shared_w13, shared_gate, shared_logit, gateup, shared_gateup, T, k,
                                   H, I, E, Is, cols_per_warp);
}
// ANCHOR: decode_gemm1_bf16
// The four entry points above with x [T, H] already in bf16 (`_bf16`: what an engine's layer is
// handed, and what chapter 6's router reads too): the same values (dec_value and dec_load8 give a
// bf16 value and its f32 source's rounding alike), so the same bits, and no conversion launch.
#define DECODE_GEMM1_BF16(name, swiglu, na)                                                                        \
    extern "C" __global__ void __launch_bounds__(DECODE_MAX_THREADS)                                             \
        name(const __nv_bfloat16* x, const int* ids, const __nv_bfloat16* w13, const __nv_bfloat16* shared_w13,   \
             const __nv_bfloat16* shared_gate, float* shared_logit, __nv_bfloat16* out, __nv_bfloat16* shared_out, \
             int T, int k, int H, int I, int E, int Is, int cols_per_warp) {                                     \
        if (swiglu) moe_launch_dependents();                                                                     \
        decode_gemm1_impl<swiglu, na, __nv_bfloat16>(x, ids, w13, shared_w13, shared_gate, shared_logit, out,     \
                                                     shared_out, T, k, H, I, E, Is, cols_per_warp);              \
    }
DECODE_GEMM1_BF16(decode_gemm1_swiglu_bf16, true, false)
DECODE_GEMM1_BF16(decode_gemm1_gateup_bf16, false, false)
DECODE_GEMM1_BF16(decode_gemm1_swiglu_na_bf16, true, true)
DECODE_GEMM1_BF16(decode_gemm1_gateup_na_bf16, false, true)
#undef DECODE_GEMM1_BF16
// ANCHOR_END: decode_gemm1_bf16

// ANCHOR: decode_gemm2_sum
// out[t, n] = ((0 + w₀·d₀) + w₁·d₁) + ... (+ s), dⱼ = act[t·k + j] · w2[ids[t·k + j], n] over I,
// wⱼ = weight[t·k + j], j in order (a pair with an id outside 0..E adds nothing); s = shared_act[t]
// · shared_w2[n] over Is, times σ(shared_logit[t]) when that is not null. The sum over k of
// fused_combine, in the same order with the same roundings, inside the down projection.
//   act [T·k, I] bf16; ids [T·k] i32; weight [T·k] f32; w2 [E, H, I] bf16; shared_act [T, Is]
//   bf16 and shared_w2 [H, Is] bf16, or null; shared_logit [T] f32 or null; out [T, H] f32.
// Grid (T, ceil(H / (warps · cols_per_warp))), any multiple of 32 threads up to DECODE_MAX_THREADS.
template <bool NA>
__device__ __forceinline__ void decode_gemm2_sum_impl(const __nv_bfloat16* act, const int* __restrict__ ids,
                                                      const float* __restrict__ weight,
                                                      const __nv_bfloat16* __restrict__ w2,
                                                      const __nv_bfloat16* shared_act,
                                                      const __nv_bfloat16* __restrict__ shared_w2,
                                                      const float* shared_logit, float* __restrict__ out, int T,
                                                      int k, int H, int I, int E, int Is, int cols_per_warp) {
    const int t = blockIdx.x;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const bool vec = I % DECODE_CHUNK == 0, shared_vec = Is % DECODE_CHUNK == 0;
    // A dependent launch (LaunchConfig::dependent): this block may be scheduled while GEMM 1 still
    // runs, and waits here for its output. act (and the shared expert's act and logit) are read
    // through plain pointers, not const __restrict__ (see moe_grid_wait in common.cuh). It used to
    // ask the L2 for its w2 rows before the wait; without that, the layer took 3 to 6% less at 8
    // tokens of both shapes and at one GLM-like token, and the same at one Qwen3 token
    // (bench/results/h200/logs/ch04_tune_all_T1_T8_no_prefetch.csv beside ch04_tune_all.csv).
    moe_grid_wait();
    for (int c = 0; c < cols_per_warp; ++c) {
        const int n = blockIdx.y * warps * cols_per_warp + warp * cols_per_warp + c;
        if (n >= H) break;  // the same for the whole warp
        float acc = 0.0f;
        // DECODE_PAIRS pairs at a time: their loads in flight together, their sums in one
        // butterfly; added to acc one by one, j in order.
        for (int j0 = 0; j0 < k; j0 += DECODE_PAIRS) {
            const __nv_bfloat16* arow[DECODE_PAIRS];
            const __nv_bfloat16* wrow[DECODE_PAIRS];
            bool live[DECODE_PAIRS];
            float s[DECODE_PAIRS];
#pragma unroll
            for (int q = 0; q < DECODE_PAIRS; ++q) {
                const size_t p = (size_t)t * k + j0 + q;
                const int e = j0 + q < k ? ids[p] : -1;
                live[q] = e >= 0 && e < E;  // the same for the whole warp
                arow[q] = act + p * I;
                wrow[q] = live[q] ? w2 + ((size_t)e * H + n) * (size_t)I : nullptr;  // 64-bit: E·H·I can pass 2^31
                s[q] = 0.0f;
            }
            dec_lane_dots_rows<DECODE_PAIRS, NA>(arow, wrow, live, I, vec, s);
            dec_warp_sums<DECODE_PAIRS>(s);
#pragma unroll
            for (int q = 0; q < DECODE_PAIRS; ++q)
                if (live[q]) acc = acc + weight[(size_t)t * k + j0 + q] * s[q];  // lane 0's is the one kept
        }
        if (shared_act) {
            const __nv_bfloat16* row = shared_w2 + (size_t)n * Is;
            float s = 0.0f;
            dec_lane_dots<__nv_bfloat16, 1, NA>(shared_act + (size_t)t * Is, &row, Is, shared_vec, &s);
            float v = dec_warp_sum(s);
            if (shared_logit) v = v * moe_sigmoidf(shared_logit[t]);
            acc = acc + v;
        }
        if (lane == 0) out[(size_t)t * H + n] = acc;
    }
}
extern "C" __global__ void __launch_bounds__(DECODE_MAX_THREADS)
    decode_gemm2_sum(const __nv_bfloat16* act, const int* __restrict__ ids, const float* __restrict__ weight,
                     const __nv_bfloat16* __restrict__ w2, const __nv_bfloat16* shared_act,
                     const __nv_bfloat16* __restrict__ shared_w2, const float* shared_logit, float* __restrict__ out,
                     int T, int k, int H, int I, int E, int Is, int cols_per_warp) {
    decode_gemm2_sum_impl<false>(act, ids, weight, w2, shared_act, shared_w2, shared_logit, out, T, k, H, I, E, Is,
                                 cols_per_warp);
}
extern "C" __global__ void __launch_bounds__(DECODE_MAX_THREADS)
    decode_gemm2_sum_na(const __nv_bfloat16* act, const int* __restrict__ ids, const float* __restrict__ weight,
                        const __nv_bfloat16* __restrict__ w2, const __nv_bfloat16* shared_act,
                        const __nv_bfloat16* __restrict__ shared_w2, const float* shared_logit,
                        float* __restrict__ out, int T, int k, int H, int I, int E, int Is, int cols_per_warp) {
    decode_gemm2_sum_impl<true>(act, ids, weight, w2, shared_act, shared_w2, shared_logit, out, T, k, H, I, E, Is,
                                cols_per_warp);
}
// ANCHOR_END: decode_gemm2_sum

// The unfused down projection: y[p, n] = weight[p] · (act[p] · w2[ids[p], n]) for the pair of
// block row x < T·k (nothing for an id outside 0..E), shared_y[t, n] = shared_act[t] ·
// shared_w2[n] for the shared rows x = T·k + t; fused_combine then sums (the same bits as
// decode_gemm2_sum). y [T·k, H] f32, shared_y [T, H] f32 or null.
// Grid (T·k [+ T], ceil(H / (warps · cols_per_warp))), any multiple of 32 threads.
template <bool NA>
__device__ __forceinline__ void decode_gemm2_impl(const __nv_bfloat16* act, const int* __restrict__ ids,
                                                  const float* __restrict__ weight, const __nv_bfloat16* __restrict__ w2,
                                                  const __nv_bfloat16* shared_act,
                                                  const __nv_bfloat16* __restrict__ shared_w2, float* __restrict__ y,
                                                  float* __restrict__ shared_y, int T, int k, int H, int I, int E,
                                                  int Is, int cols_per_warp) {
    const int P = T * k, row = blockIdx.x;
    const __nv_bfloat16 *a, *w;
    float* o;
    int K;
    float scale = 1.0f;
    bool weighted = false;
    if (row < P) {
        const int e = ids[row];
        if (e < 0 || e >= E) return;  // the whole block
        a = act + (size_t)row * I;
        w = w2 + (size_t)e * H * (size_t)I;  // 64-bit: E·H·I can pass 2^31
        o = y + (size_t)row * H;
        K = I;
        scale = weight[row];
        weighted = true;
    } else {
        a = shared_act + (size_t)(row - P) * Is;
        w = shared_w2;
        o = shared_y + (size_t)(row - P) * H;
        K = Is;
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const bool vec = K % DECODE_CHUNK == 0;
    // A dependent launch, as decode_gemm2_sum: the wait for GEMM 1's act (act and shared_act:
    // plain pointers, see moe_grid_wait). Then let fused_combine, a dependent of this kernel, be
    // scheduled.
    moe_grid_wait();
    moe_launch_dependents();
    for (int c = 0; c < cols_per_warp; ++c) {
        const int n = blockIdx.y * warps * cols_per_warp + warp * cols_per_warp + c;
        if (n >= H) break;
        const __nv_bfloat16* row_n = w + (size_t)n * K;
        float s = 0.0f;
        dec_lane_dots<__nv_bfloat16, 1, NA>(a, &row_n, K, vec, &s);
        const float v = dec_warp_sum(s);
        if (lane == 0) o[n] = weighted ? scale * v : v;
    }
}

extern "C" __global__ void __launch_bounds__(DECODE_MAX_THREADS)
    decode_gemm2(const __nv_bfloat16* act, const int* __restrict__ ids, const float* __restrict__ weight,
                 const __nv_bfloat16* __restrict__ w2, const __nv_bfloat16* shared_act,
                 const __nv_bfloat16* __restrict__ shared_w2, float* __restrict__ y, float* __restrict__ shared_y,
                 int T, int k, int H, int I, int E, int Is, int cols_per_warp) {
    decode_gemm2_impl<false>(act, ids, weight, w2, shared_act, shared_w2, y, shared_y, T, k, H, I, E, Is,
                             cols_per_warp);
}
extern "C" __global__ void __launch_bounds__(DECODE_MAX_THREADS)
    decode_gemm2_na(const __nv_bfloat16* act, const int* __restrict__ ids, const float* __restrict__ weight,
                    const __nv_bfloat16* __restrict__ w2, const __nv_bfloat16* shared_act,
                    const __nv_bfloat16* __restrict__ shared_w2, float* __restrict__ y, float* __restrict__ shared_y,
                    int T, int k, int H, int I, int E, int Is, int cols_per_warp) {
    decode_gemm2_impl<true>(act, ids, weight, w2, shared_act, shared_w2, y, shared_y, T, k, H, I, E, Is,
                            cols_per_warp);
}

// ---------------------------------------------------------------------------------------------
// The grouped decode path: each expert's weights streamed once per group of its pairs.

// ANCHOR: decode_grouped_dot
// This lane's partial sums of NB·R dot products a[r] · b[q] over K, into s[q·R + r], for the
// first n ≤ R rows a[r] = A + arow[r]·K (the others are not read; their sums stay as they are)
// and NB rows b[q] of one expert: each chunk of each b[q] is loaded once, then multiplied into
// every a[r]. For each (r, q) the chunks, their order, the fmaf and its operands are
// dec_lane_dots's (a first): the same bits as one dec_lane_dots per row a[r], with the b rows
// read once instead of n times. (Row numbers rather than pointers: half the registers.)
template <int R, int NB>
__device__ __forceinline__ void dec_lane_dots_group(const __nv_bfloat16* __restrict__ A, const int* arow, int n,
                                                    const __nv_bfloat16* const* b, int K, bool vec,
                                                    float s[NB * R]) {
    const int lane = threadIdx.x & 31;
    if (vec) {
        for (int c = lane * DECODE_CHUNK; c < K; c += 32 * DECODE_CHUNK) {
            float bv[NB][DECODE_CHUNK];
#pragma unroll
            for (int q = 0; q < NB; ++q) dec_load8(b[q] + c, bv[q]);
#pragma unroll
            for (int r = 0; r < R; ++r) {
                if (r >= n) break;  // the same for the whole warp
                float av[DECODE_CHUNK];
                dec_load8(A + (size_t)arow[r] * K + c, av);  // 64-bit: p·I
#pragma unroll
                for (int q = 0; q < NB; ++q)
#pragma unroll
                    for (int j = 0; j < DECODE_CHUNK; ++j) s[q * R + r] = fmaf(av[j], bv[q][j], s[q * R + r]);
            }
        }
    } else {
        for (int c = lane * DECODE_CHUNK; c < K; c += 32 * DECODE_CHUNK)
            for (int j = 0; j < DECODE_CHUNK && c + j < K; ++j) {
                float bv[NB];
#pragma unroll
                for (int q = 0; q < NB; ++q) bv[q] = __bfloat162float(b[q][c + j]);
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    if (r >= n) break;
                    const float av = dec_value(A + (size_t)arow[r] * K + c + j);
#pragma unroll
                    for (int q = 0; q < NB; ++q) s[q * R + r] = fmaf(av, bv[q], s[q * R + r]);
                }
            }
    }
}

// The rows of a grouped block, in s_row[0..count) (count returned; every thread calls it): for a
// routed tile (tile < tiles), the real pairs p (0 ≤ p < P) among its block_m slots of
// sorted_ids, in slot order (placeholders and garbage left out); for a shared tile, the tokens
// (tile − tiles)·block_m + r below T. Warp 0 compacts them with a ballot per 32 slots.
__device__ __forceinline__ int dec_group_rows(const int* __restrict__ sorted_ids, int tile, int tiles,
                                              int block_m, int P, int T, int* s_row, int* s_count) {
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        int count = 0;
        for (int r0 = 0; r0 < block_m; r0 += 32) {
            const int r = r0 + lane;
            int row = -1;
            if (r < block_m) {
                if (tile < tiles) {
                    const int p = sorted_ids[(size_t)tile * block_m + r];  // 64-bit: tile·block_m
                    row = p >= 0 && p < P ? p : -1;
                } else {
                    const long long t = (long long)(tile - tiles) * block_m + r;
                    row = t < T ? (int)t : -1;
                }
            }
            const unsigned real = __ballot_sync(MOE_FULL_MASK, row >= 0);
            if (row >= 0) s_row[count + __popc(real & ((1u << lane) - 1u))] = row;
            count += __popc(real);
        }
        if (lane == 0) *s_count = count;
    }
    __syncthreads();
    return *s_count;
}
// ANCHOR_END: decode_grouped_dot

// ANCHOR: decode_grouped_gemm1
// decode_gemm1_impl's outputs, a block per tile of chapter 3's layout (BLOCK_M = block_m slots
// of one expert) instead of per pair: block (x, y) with x < tiles is routed tile x (nothing past
// num_post or for an expert outside 0..E), x ≥ tiles the shared expert's tokens (x − tiles)·
// block_m ... (+ block_m − 1); its warps own the columns decode_gemm1_impl's do. For each column
// n a warp loads the gate row n and the up row I + n chunk by chunk and multiplies each chunk
// into DECODE_GROUP of the tile's rows at once (dec_lane_dots_group: its pairs' x[p / k], bf16);
// a tile of more real rows takes more passes of DECODE_GROUP (the rows just read come from L1).
// The same sums, butterflies (dec_warp_sums, whose additions are dec_warp_sum's) and roundings
// per (pair, column) as decode_gemm1_impl: the same bits, whichever tile a pair sits in.
//   SWIGLU: out[p, n] = bf16(silu(bf16(g)) · bf16(u)) [P, I]; else gate|up [P, 2I].
// The shared tiles' blocks y = 0 also write shared_logit[t] (gate_logit_warp, one warp per token).
template <bool SWIGLU>
__device__ __forceinline__ void decode_grouped_gemm1_impl(
    const __nv_bfloat16* __restrict__ x, const int* __restrict__ sorted_ids, const int* __restrict__ expert_ids,
    const int* __restrict__ num_post, const __nv_bfloat16* __restrict__ w13,
    const __nv_bfloat16* __restrict__ shared_w13, const __nv_bfloat16* __restrict__ shared_gate,
    float* __restrict__ shared_logit, __nv_bfloat16* __restrict__ out, __nv_bfloat16* __restrict__ shared_out,
    int T, int k, int H, int I, int E, int Is, int cols_per_warp, int block_m, int tiles) {
    __shared__ int s_row[FUSED_MAX_BLOCK_M];
    __shared__ int s_count;
    const int tile = blockIdx.x;
    const bool routed = tile < tiles;
    int inter;
    const __nv_bfloat16* w;
    __nv_bfloat16* o;
    if (routed) {
        // The same decision for every thread of the block, before any barrier.
        if ((long long)tile * block_m >= (long long)*num_post) return;
        const int e = expert_ids[tile];
        if (e < 0 || e >= E) return;
        inter = I;
        w = w13 + (size_t)e * 2 * (size_t)I * (size_t)H;  // 64-bit: E·2I·H can pass 2^31
        o = out;
    } else {
        inter = Is;
        w = shared_w13;
        o = shared_out;
    }
    const int rows = dec_group_rows(sorted_ids, tile, tiles, block_m, T * k, T, s_row, &s_count);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const bool vec = H % DECODE_CHUNK == 0;
    const size_t stride = (size_t)(SWIGLU ? 1 : 2) * inter;
    for (int c = 0; c < cols_per_warp; ++c) {
        const int n = blockIdx.y * warps * cols_per_warp + warp * cols_per_warp + c;
        if (n >= inter) break;  // the same for the whole warp
        const __nv_bfloat16* wrow[2] = {w + (size_t)n * H, w + (size_t)(inter + n) * H};
        for (int g0 = 0; g0 < rows; g0 += DECODE_GROUP) {
            const int live = min(DECODE_GROUP, rows - g0);
            int xrow[DECODE_GROUP];  // the token of each row
#pragma unroll
            for (int r = 0; r < DECODE_GROUP; ++r) {
                const int row = s_row[g0 + min(r, live - 1)];
                xrow[r] = routed ? row / k : row;
            }
            float s[2 * DECODE_GROUP];  // [gate of rows 0..G) | up of rows 0..G)]
#pragma unroll
            for (int i = 0; i < 2 * DECODE_GROUP; ++i) s[i] = 0.0f;
            dec_lane_dots_group<DECODE_GROUP, 2>(x, xrow, live, wrow, H, vec, s);
            // Lane 0: every row's gate sum, then its up sum (two butterflies of 8: one of 16
            // would index s at run time, in local memory).
            dec_warp_sums<DECODE_GROUP>(s);
            dec_warp_sums<DECODE_GROUP>(s + DECODE_GROUP);
            if (lane == 0) {
#pragma unroll
                for (int r = 0; r < DECODE_GROUP; ++r) {
                    if (r >= live) break;
                    __nv_bfloat16* orow = o + (size_t)s_row[g0 + r] * stride;  // 64-bit: p·I, p·2I
                    const float g = s[r], u = s[DECODE_GROUP + r];
                    if (SWIGLU) {
                        const float gate = __bfloat162float(__float2bfloat16(g));
                        const float up = __bfloat162float(__float2bfloat16(u));
                        orow[n] = __float2bfloat16((gate * moe_sigmoidf(gate)) * up);
                    } else {
                        orow[n] = __float2bfloat16(g);
                        orow[inter + n] = __float2bfloat16(u);
                    }
                }
            }
        }
    }
    if (!routed && shared_gate && blockIdx.y == 0) {
        for (int r = warp; r < rows; r += warps) {  // the same for the whole warp
            const int t = s_row[r];
            const float logit = gate_logit_warp(x + (size_t)t * H, shared_gate, H);
            if (lane == 0) shared_logit[t] = logit;
        }
    }
}
// ANCHOR_END: decode_grouped_gemm1

// Grid (tiles [+ ceil(T / block_m) shared tiles], ceil(max(I, Is) / (warps · cols_per_warp))),
// any multiple of 32 threads up to DECODE_MAX_THREADS. x [T, H] bf16 (fused_to_bf16's); the
// layout as fused_gemm1_swiglu reads it, block_m ≤ FUSED_MAX_BLOCK_M, tiles = its max_tiles;
// the rest as decode_gemm1_swiglu (act [T·k, I], shared_act [T, Is] bf16).
extern "C" __global__ void __launch_bounds__(DECODE_GROUP_MAX_THREADS)
    decode_grouped_gemm1_swiglu(const __nv_bfloat16* x, const int* sorted_ids, const int* expert_ids,
                                const int* num_post, const __nv_bfloat16* w13, const __nv_bfloat16* shared_w13,
                                const __nv_bfloat16* shared_gate, float* shared_logit, __nv_bfloat16* act,
                                __nv_bfloat16* shared_act, int T, int k, int H, int I, int E, int Is,
                                int cols_per_warp, int block_m, int tiles) {
    moe_launch_dependents();  // as decode_gemm1_swiglu
    decode_grouped_gemm1_impl<true>(x, sorted_ids, expert_ids, num_post, w13, shared_w13, shared_gate, shared_logit,
                                    act, shared_act, T, k, H, I, E, Is, cols_per_warp, block_m, tiles);
}
// The same grid; gateup [T·k, 2I], shared_gateup [T, 2Is] bf16.
extern "C" __global__ void __launch_bounds__(DECODE_GROUP_MAX_THREADS)
    decode_grouped_gemm1_gateup(const __nv_bfloat16* x, const int* sorted_ids, const int* expert_ids,
                                const int* num_post, const __nv_bfloat16* w13, const __nv_bfloat16* shared_w13,
                                const __nv_bfloat16* shared_gate, float* shared_logit, __nv_bfloat16* gateup,
                                __nv_bfloat16* shared_gateup, int T, int k, int H, int I, int E, int Is,
                                int cols_per_warp, int block_m, int tiles) {
    decode_grouped_gemm1_impl<false>(x, sorted_ids, expert_ids, num_post, w13, shared_w13, shared_gate,
                                     shared_logit, gateup, shared_gateup, T, k, H, I, E, Is, cols_per_warp, block_m,
                                     tiles);
}

// ANCHOR: decode_grouped_gemm2
// decode_gemm2's outputs, a block per tile: y[p, n] = weight[p] · (act[p] · w2[e, n]) over I for
// the real pairs p of routed tile x (its expert e), shared_y[t, n] = shared_act[t] · shared_w2[n]
// over Is for the tokens of shared tile x − tiles. Each chunk of w2 row n is loaded once per
// DECODE_GROUP rows; per (pair, column) the sums, the butterfly and the rounding of weight·dot
// are decode_gemm2's, so fused_combine then gives decode_gemm2_sum's bits. (The sum over k cannot
// move in here: a tile holds pairs of one expert, never the k pairs of one token.)
//   act [T·k, I] bf16; weight [T·k] f32; w2 [E, H, I] bf16; shared_act [T, Is], shared_w2 [H, Is]
//   bf16 or null; y [T·k, H] f32; shared_y [T, H] f32 or null.
// Grid (tiles [+ ceil(T / block_m)], ceil(H / (warps · cols_per_warp))), any multiple of 32
// threads up to DECODE_MAX_THREADS.
extern "C" __global__ void __launch_bounds__(DECODE_GROUP_MAX_THREADS)
    decode_grouped_gemm2(const __nv_bfloat16* __restrict__ act, const int* __restrict__ sorted_ids,
                         const int* __restrict__ expert_ids, const int* __restrict__ num_post,
                         const float* __restrict__ weight, const __nv_bfloat16* __restrict__ w2,
                         const __nv_bfloat16* __restrict__ shared_act, const __nv_bfloat16* __restrict__ shared_w2,
                         float* __restrict__ y, float* __restrict__ shared_y, int T, int k, int H, int I, int E,
                         int Is, int cols_per_warp, int block_m, int tiles) {
    __shared__ int s_row[FUSED_MAX_BLOCK_M];
    __shared__ int s_count;
    const int tile = blockIdx.x;
    const bool routed = tile < tiles;
    const __nv_bfloat16 *a0, *w;
    float* o;
    int K;
    if (routed) {
        if ((long long)tile * block_m >= (long long)*num_post) return;
        const int e = expert_ids[tile];
        if (e < 0 || e >= E) return;
        a0 = act;
        w = w2 + (size_t)e * H * (size_t)I;  // 64-bit: E·H·I can pass 2^31
        o = y;
        K = I;
    } else {
        a0 = shared_act;
        w = shared_w2;
        o = shared_y;
        K = Is;
    }
    const int rows = dec_group_rows(sorted_ids, tile, tiles, block_m, T * k, T, s_row, &s_count);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    const bool vec = K % DECODE_CHUNK == 0;
    for (int c = 0; c < cols_per_warp; ++c) {
        const int n = blockIdx.y * warps * cols_per_warp + warp * cols_per_warp + c;
        if (n >= H) break;  // the same for the whole warp
        const __nv_bfloat16* wrow = w + (size_t)n * K;
        for (int g0 = 0; g0 < rows; g0 += DECODE_GROUP) {
            const int live = min(DECODE_GROUP, rows - g0);
            int arow[DECODE_GROUP];
#pragma unroll
            for (int r = 0; r < DECODE_GROUP; ++r) arow[r] = s_row[g0 + min(r, live - 1)];
            float s[DECODE_GROUP];
#pragma unroll
            for (int i = 0; i < DECODE_GROUP; ++i) s[i] = 0.0f;
            dec_lane_dots_group<DECODE_GROUP, 1>(a0, arow, live, &wrow, K, vec, s);
            dec_warp_sums<DECODE_GROUP>(s);
            if (lane == 0) {
#pragma unroll
                for (int r = 0; r < DECODE_GROUP; ++r) {
                    if (r >= live) break;
                    const int p = s_row[g0 + r];
                    o[(size_t)p * H + n] = routed ? weight[p] * s[r] : s[r];  // 64-bit: p·H
                }
            }
        }
    }
}
// ANCHOR_END: decode_grouped_gemm2

// logit[t] = x[t] · g in fp32 (Qwen2-MoE's shared-expert gate), one warp per token
// (gate_logit_warp).
//   x [T, H] bf16; g [H] bf16; logit [T] f32. Grid ceil(T / FUSED_WARPS), FUSED_THREADS threads.
extern "C" __global__ void __launch_bounds__(FUSED_THREADS)
    fused_gate_logit(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ g,
                     float* __restrict__ logit, int T, int H) {
    const int t = blockIdx.x * FUSED_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (t >= T) return;  // the whole warp leaves together
    const float s = gate_logit_warp(x + (size_t)t * H, g, H);
    if (lane == 0) logit[t] = s;
}
