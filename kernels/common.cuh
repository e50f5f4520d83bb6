// common.cuh — what every kernel family of the book includes.
//
// One source, two compilers: NVRTC builds this for the GPU; the host C++ compiler builds it for
// the CPU emulator (MOE_EMU is defined, and kernels/emu/cuda_emu.h stands in for CUDA's
// built-ins). Both builds run with FMA contraction off, so `a * b + c` rounds twice everywhere
// and `fmaf(a, b, c)` rounds once everywhere.
//
// The exponentials and logarithms below are built only from correctly rounded IEEE operations
// (add, mul, fma, division, exact exponent scaling). CUDA's expf/logf and glibc's differ in the
// last bits (on this project's H200, expf disagreed with glibc on 1.27 M of 4.2 M inputs in
// [-20, 20]), so a kernel that called them would give different bits on the two backends.
// These give the same bits on both, at about 1 ulp of accuracy. (The two approximations below,
// moe_ex2_approx and moe_rcp_approx, do not; they may only screen, never give a result.)
#pragma once

#ifndef MOE_EMU
#include <cuda_bf16.h>
#endif

// Dynamic shared memory, the size given at launch: `DYNAMIC_SHARED(float, keys);`
#ifndef MOE_EMU
#define DYNAMIC_SHARED(T, name)                                   \
    extern __shared__ __align__(16) unsigned char name##_bytes_[]; \
    T* name = reinterpret_cast<T*>(name##_bytes_)
#endif

#define MOE_FULL_MASK 0xffffffffu

// ANCHOR: pdl
// Programmatic dependent launch (Hopper's griddepcontrol; the host's LaunchConfig::dependent in
// kernels/src/launch.rs). A kernel launched as dependent may start while the kernel ahead of it
// on the stream is still running; moe_grid_wait() returns once that kernel has finished and its
// writes are visible, so everything before the wait must touch only what no earlier kernel
// writes (weights, biases). moe_launch_dependents() lets the next kernel's blocks be scheduled
// now instead of when this kernel's blocks exit (they then park at their own wait). Neither
// changes a result. On a GPU before sm_90, without the launch attribute, and on the emulator
// (which runs kernels one after another, each to its end) both are no-ops.
//   What the earlier kernel wrote must not be read through a `const T* __restrict__` pointer:
// NVRTC then emits read-only loads (ld.global.nc), which ptxas treats as constant for the whole
// kernel and may schedule above the wait. It did, for chapter 5's router: ten of a lane's logit
// loads ran before ACQBULK (the wait in SASS) and read logits the tiny GEMM had not written yet
// (bench ch05 caught it at 32 GLM-like rows). Read such data with __ldcg (through the L2) or
// through a plain pointer.
__device__ __forceinline__ void moe_grid_wait() {
#if !defined(MOE_EMU) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void moe_launch_dependents() {
#if !defined(MOE_EMU) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
// ANCHOR_END: pdl

// 2^n for n in [-252, 254], exactly, through the exponent bits.
__device__ __forceinline__ float moe_pow2i(int n) {
    return __int_as_float((n + 127) << 23);
}

// x * 2^n without libm's ldexpf: two exact-exponent multiplications, so results that stay
// normal are exact, and both backends round subnormal results the same way (IEEE multiply).
__device__ __forceinline__ float moe_scale2(float x, int n) {
    n = n < -252 ? -252 : (n > 254 ? 254 : n);
    int half = n / 2;
    return (x * moe_pow2i(half)) * moe_pow2i(n - half);
}

// v, through an empty asm statement the compiler must keep where it is: what computes v then runs
// on every path, not only on those that use it (the compiler likes to turn a final select back
// into branches around the work). The emulator has no such pass to fight: there it is v.
__device__ __forceinline__ unsigned moe_computed(unsigned v) {
#ifndef MOE_EMU
    asm volatile("" : "+r"(v));
#endif
    return v;
}
__device__ __forceinline__ float moe_computed(float v) { return __uint_as_float(moe_computed(__float_as_uint(v))); }
__device__ __forceinline__ int moe_computed(int v) { return (int)moe_computed((unsigned)v); }

// ANCHOR: moe_expf
// e^x. Cody-Waite reduction x = n ln2 + r with |r| <= ln2/2, a degree-7 polynomial for e^r,
// then exact scaling by 2^n. Handles NaN, ±inf, overflow (inf) and underflow (0).
// The polynomial runs on x clamped into range (for x in range the clamp changes nothing, so
// neither do the bits) and the special cases are chosen at the end: early returns made each
// exponential a branch region of its own. moe_expf_clamped is the polynomial: e^x of x clamped
// into [-103.97208, 88.72284] (a NaN becomes -103.97208).
__device__ __forceinline__ float moe_expf_clamped(float x) {
    const float xc = fminf(fmaxf(x, -103.97208f), 88.72284f);
    const float log2e = 1.44269504088896341f;
    const float ln2_hi = 0.693145751953125f;       // 11 significant bits: n * ln2_hi is exact
    const float ln2_lo = 1.42860682030941723212e-6f;
    float n = rintf(xc * log2e);
    float r = fmaf(-n, ln2_hi, xc);
    r = fmaf(-n, ln2_lo, r);
    // e^r = 1 + r + r^2/2! + ... + r^7/7!  (Horner, one rounding per step)
    float p = 1.98412698e-4f;
    p = fmaf(p, r, 1.38888889e-3f);
    p = fmaf(p, r, 8.33333333e-3f);
    p = fmaf(p, r, 4.16666667e-2f);
    p = fmaf(p, r, 1.66666667e-1f);
    p = fmaf(p, r, 0.5f);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    return moe_computed(moe_scale2(p, (int)n));
}
__device__ __forceinline__ float moe_expf(float x) {
    const bool is_nan = x != x;
    const bool over = x > 88.72284f, under = x < -103.97208f;
    const float y = moe_expf_clamped(x);
    return is_nan ? x : (over ? __int_as_float(0x7f800000) : (under ? 0.0f : y));
}
// c ? a : b by masks, the mask hidden from the optimizer (moe_computed): the compiler cannot turn
// it back into a branch. The same bits on both backends.
__device__ __forceinline__ float moe_select_bits(bool c, float a, float b) {
    const unsigned m = moe_computed(0u - (unsigned)c);
    return __uint_as_float((__float_as_uint(a) & m) | (__float_as_uint(b) & ~m));
}
// moe_expf's bits, its last choice made by masks. moe_expf's choice is a select in the source,
// but CUDA's compiler makes a branch around it: a region that the next exponential's
// instructions do not cross, so a thread's exponentials run one after another. Here they
// interleave (chapter 4's SwiGLU epilogue: 64 a thread).
__device__ __forceinline__ float moe_expf_flat(float x) {
    const bool is_nan = x != x;
    const bool over = x > 88.72284f, under = x < -103.97208f;
    const float y = moe_expf_clamped(x);
    return moe_select_bits(is_nan, x, moe_select_bits(over, __int_as_float(0x7f800000), moe_select_bits(under, 0.0f, y)));
}
// ANCHOR_END: moe_expf

// ANCHOR: approx
// The GPU's fast approximations, for screening only: 2^x (ex2.approx.ftz.f32, one MUFU.EX2) and
// 1/x (rcp.approx.ftz.f32, one MUFU.RCP), each within a few ulp of the exact value (CUDA's
// programming guide gives 2 ulp for exp2f under fast math and 1 for __frcp-class reciprocals).
// Their bits are the hardware's own, not IEEE-specified, so the emulator cannot reproduce them:
// it computes them with glibc's exp2f and an IEEE division, which lie within the same bounds.
// A kernel may use them only to decide something that exact arithmetic then confirms (chapter
// 5's screened router), never for a result: that way the two backends still give the same bits.
__device__ __forceinline__ float moe_ex2_approx(float x) {
#ifdef MOE_EMU
    return exp2f(x);
#else
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#endif
}
__device__ __forceinline__ float moe_rcp_approx(float x) {
#ifdef MOE_EMU
    return 1.0f / x;
#else
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#endif
}
// ANCHOR_END: approx

// ANCHOR: rcp_fast
// 1/d rounded to nearest, as 1.0f / d gives it, for 2^-126 <= |d| < 2^126 only (moe_rcp_fast_ok):
// the three instructions CUDA's own division by d runs for such d (in its machine code, MUFU.RCP
// then one Newton step of two FMAs), without the test of d's exponent and the branch to the slow
// path for other d that the division wraps them in. That branch makes a region the next
// division's instructions do not cross; these interleave. The emulator divides: the same bits,
// which kernels/tests/selftest.rs checks on the GPU for every such d. Outside the range the
// result is not 1/d.
__device__ __forceinline__ bool moe_rcp_fast_ok(float d) {
    const float a = fabsf(d);
    return a >= __int_as_float(0x00800000) && a < __int_as_float(0x7e800000);  // [2^-126, 2^126); NaN: no
}
__device__ __forceinline__ float moe_rcp_rn_fast(float d) {
#ifdef MOE_EMU
    return 1.0f / d;
#else
    const float y = moe_rcp_approx(d);  // MUFU.RCP
    const float e = fmaf(d, y, -1.0f);  // d·y − 1
    return fmaf(y, -e, y);              // y − y·e
#endif
}
// ANCHOR_END: rcp_fast

// ln(x). x = m 2^e with m in [sqrt(1/2), sqrt(2)); ln(m) = 2 atanh(s), s = (m-1)/(m+1).
// Handles NaN, x < 0 (NaN), 0 (-inf), +inf and subnormal x.
__device__ __forceinline__ float moe_logf(float x) {
    if (x != x || x < 0.0f) return __int_as_float(0x7fc00000);
    if (x == 0.0f) return __int_as_float(0xff800000);
    if (x == __int_as_float(0x7f800000)) return x;
    int e = 0;
    if (x < 1.17549435e-38f) {  // subnormal: scale into the normal range first
        x = x * 16777216.0f;    // 2^24, exact
        e = -24;
    }
    int bits = __float_as_int(x);
    e += ((bits >> 23) & 0xff) - 127;
    float m = __int_as_float((bits & 0x007fffff) | 0x3f800000);  // [1, 2)
    if (m > 1.41421356f) {
        m = m * 0.5f;
        e += 1;
    }
    float s = (m - 1.0f) / (m + 1.0f);
    float s2 = s * s;
    // 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + s^7/7 + s^9/9 + s^11/11)
    float p = 0.0909090909f;
    p = fmaf(p, s2, 0.111111111f);
    p = fmaf(p, s2, 0.142857143f);
    p = fmaf(p, s2, 0.2f);
    p = fmaf(p, s2, 0.333333333f);
    float lnm = fmaf(2.0f * s * s2, p, 2.0f * s);
    const float ln2_hi = 0.693145751953125f;
    const float ln2_lo = 1.42860682030941723212e-6f;
    float fe = (float)e;
    return fmaf(fe, ln2_hi, fmaf(fe, ln2_lo, lnm));
}

// ln(1 + x), accurate for small x: ln(w) * x / (w - 1) with w = 1 + x corrects the rounding of w.
__device__ __forceinline__ float moe_log1pf(float x) {
    float w = 1.0f + x;
    if (w == 1.0f) return x;
    if (w == __int_as_float(0x7f800000)) return w;
    return moe_logf(w) * (x / (w - 1.0f));
}

// σ(x) = 1 / (1 + e^-x).
__device__ __forceinline__ float moe_sigmoidf(float x) {
    return 1.0f / (1.0f + moe_expf(-x));
}

// softplus(x) = ln(1 + e^x), written so that it neither overflows nor loses small values.
__device__ __forceinline__ float moe_softplusf(float x) {
    if (x > 20.0f) return x + moe_log1pf(moe_expf(-x));
    return moe_log1pf(moe_expf(x));
}

__device__ __forceinline__ bool moe_isfinite(float x) {
    return (__float_as_uint(x) & 0x7f800000u) != 0x7f800000u;
}
