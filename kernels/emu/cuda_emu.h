// cuda_emu.h -- CPU stand-in for CUDA's built-ins (the "emu" backend).
//
// Included, after `#define MOE_EMU 1`, before a kernel .cu file which is then compiled by the host
// C++17 compiler and linked with ONE emu_runtime.o. Everything here is inline / a template / a
// declaration of something defined in emu_runtime.cpp, so several kernel wrappers may be linked
// into one binary. See README.md for the execution model, guarantees and limits.
//
// Key facts:
//   * one CUDA thread = one fiber; one block runs to completion on one worker OS thread;
//   * `__shared__` is `static thread_local`: a worker runs one block at a time, so a thread_local
//     static is private to the block in flight (two blocks on two workers never share it; the
//     blocks of a cluster run on one worker each, taking turns);
//   * __syncthreads / warp collectives are real rendez-vous points with CUDA's semantics; misuse
//     (divergent barriers, lanes exited before a full-mask shuffle, mismatched collectives, ...)
//     makes emu_launch return an error naming the block, line and threads.
#ifndef MOE_CUDA_EMU_H
#define MOE_CUDA_EMU_H

#if defined(__FAST_MATH__)
#error "cuda_emu.h: do not compile kernels with -ffast-math (use -ffp-contract=off, IEEE semantics)"
#endif

// System headers first: some libstdc++ headers use __attribute__((__noinline__)), which would
// break once __noinline__ is a macro (the same problem CUDA's own headers have).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <climits>
#include <cfloat>
#include <cmath>
#include <math.h>
#include <type_traits>
#include <utility>
#include <limits>
#include <new>
#include <memory>
#include <algorithm>
#include <atomic>
#include <cassert>

// ------------------------------------------------------------------------------------------------
// Qualifiers
// ------------------------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
// Clusters (chapter 4's version 9; hopper.h): a kernel declared with __cluster_dims__(X, Y, Z)
// (literal integers; Y and Z default to 1) lives in the section emu_cluster_XxYxZ, where
// emu_launch finds its shape (emu_tensor.cpp lists the shapes of up to 8 blocks).
#define EMU_CLUSTER_SECTION3(x, y, z) "emu_cluster_" #x "x" #y "x" #z
#define EMU_CLUSTER_SECTION2(x, y) EMU_CLUSTER_SECTION3(x, y, 1)
#define EMU_CLUSTER_SECTION1(x) EMU_CLUSTER_SECTION3(x, 1, 1)
#define EMU_CLUSTER_PICK(a, b, c, name, ...) name
#define __cluster_dims__(...)                                                                                        \
    __attribute__((section(EMU_CLUSTER_PICK(__VA_ARGS__, EMU_CLUSTER_SECTION3, EMU_CLUSTER_SECTION2,                \
                                            EMU_CLUSTER_SECTION1, none)(__VA_ARGS__))))
#define __align__(n) __attribute__((aligned(n)))
#define __builtin_align__(n) __attribute__((aligned(n)))
// __constant__ data is read-only on the device and shared by all blocks: internal linkage keeps
// several wrappers that include the same header from clashing.
#define __constant__ static
// Per-block storage: one worker OS thread runs all fibers of exactly one block at a time.
// Not zeroed between blocks (CUDA does not zero shared memory either).
#define __shared__ static thread_local
// (__restrict__ is a GCC/Clang keyword already.)

// ------------------------------------------------------------------------------------------------
// Vector types
// ------------------------------------------------------------------------------------------------
struct uint3 { unsigned int x, y, z; };
struct int3 { int x, y, z; };
struct float3 { float x, y, z; };
struct __attribute__((aligned(8))) int2 { int x, y; };
struct __attribute__((aligned(8))) uint2 { unsigned int x, y; };
struct __attribute__((aligned(8))) float2 { float x, y; };
struct __attribute__((aligned(16))) int4 { int x, y, z, w; };
struct __attribute__((aligned(16))) uint4 { unsigned int x, y, z, w; };
struct __attribute__((aligned(16))) float4 { float x, y, z, w; };
struct __attribute__((aligned(16))) double2 { double x, y; };
struct __attribute__((aligned(16))) longlong2 { long long x, y; };
struct __attribute__((aligned(16))) ulonglong2 { unsigned long long x, y; };
struct __attribute__((aligned(4))) uchar4 { unsigned char x, y, z, w; };
struct __attribute__((aligned(4))) char4 { signed char x, y, z, w; };
struct __attribute__((aligned(4))) short2 { short x, y; };
struct __attribute__((aligned(4))) ushort2 { unsigned short x, y; };

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

static inline uint3 make_uint3(unsigned int x, unsigned int y, unsigned int z) { return uint3{x, y, z}; }
static inline int3 make_int3(int x, int y, int z) { return int3{x, y, z}; }
static inline float3 make_float3(float x, float y, float z) { return float3{x, y, z}; }
static inline int2 make_int2(int x, int y) { return int2{x, y}; }
static inline uint2 make_uint2(unsigned int x, unsigned int y) { return uint2{x, y}; }
static inline float2 make_float2(float x, float y) { return float2{x, y}; }
static inline int4 make_int4(int x, int y, int z, int w) { return int4{x, y, z, w}; }
static inline uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z, unsigned int w) { return uint4{x, y, z, w}; }
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
static inline double2 make_double2(double x, double y) { return double2{x, y}; }
static inline uchar4 make_uchar4(unsigned char x, unsigned char y, unsigned char z, unsigned char w) { return uchar4{x, y, z, w}; }
static inline char4 make_char4(signed char x, signed char y, signed char z, signed char w) { return char4{x, y, z, w}; }
static inline short2 make_short2(short x, short y) { return short2{x, y}; }
static inline ushort2 make_ushort2(unsigned short x, unsigned short y) { return ushort2{x, y}; }

// ------------------------------------------------------------------------------------------------
// Built-in variables. The runtime updates these thread-locals (of the worker OS thread) whenever
// it resumes a fiber / starts a block, so reading them costs one TLS load.
// ------------------------------------------------------------------------------------------------
extern __thread uint3 emu_tls_threadIdx;
extern __thread uint3 emu_tls_blockIdx;
extern __thread uint3 emu_tls_blockDim;
extern __thread uint3 emu_tls_gridDim;
extern __thread void* emu_tls_dyn_shared;

#define threadIdx (static_cast<const uint3&>(emu_tls_threadIdx))
#define blockIdx (static_cast<const uint3&>(emu_tls_blockIdx))
#define blockDim (static_cast<const dim3>(emu_tls_blockDim))
#define gridDim (static_cast<const dim3>(emu_tls_gridDim))
#define warpSize 32

// Dynamic shared memory: this block's buffer of `dynamic_shared_bytes`, 1024-byte aligned, filled
// with 0xFF bytes at block start. (The CUDA definition of DYNAMIC_SHARED lives in common.cuh.)
static inline void* emu_dynamic_shared() { return emu_tls_dyn_shared; }
#ifndef DYNAMIC_SHARED
#define DYNAMIC_SHARED(T, name) T* name = reinterpret_cast<T*>(emu_dynamic_shared())
#endif

// ------------------------------------------------------------------------------------------------
// Runtime entry points (emu_runtime.cpp). They park the calling fiber where CUDA would wait.
// ------------------------------------------------------------------------------------------------
enum emu_coll_op : int { EMU_OP_SHFL_IDX = 0, EMU_OP_SHFL_UP, EMU_OP_SHFL_DOWN, EMU_OP_SHFL_XOR,
                         EMU_OP_BALLOT, EMU_OP_ANY, EMU_OP_ALL, EMU_OP_SYNCWARP, EMU_OP_ACTIVEMASK,
                         // __reduce_*_sync (redux.sync); arg 1: the values are signed (min/max).
                         EMU_OP_REDUX_ADD, EMU_OP_REDUX_MIN, EMU_OP_REDUX_MAX, EMU_OP_REDUX_AND,
                         EMU_OP_REDUX_OR, EMU_OP_REDUX_XOR,
                         EMU_OP_MMA = 32, EMU_OP_LDMATRIX = 33 };
// Why a thread yields (emu_yield): an atomic, a fence, __nanosleep.
enum emu_yield_reason : int { EMU_YIELD_ATOMIC = 1, EMU_YIELD_FENCE = 2, EMU_YIELD_SLEEP = 3 };

void emu_syncthreads(int line, const char* file);
int emu_syncthreads_count(int pred, int line, const char* file);   // __syncthreads_count/and/or
int emu_syncthreads_and(int pred, int line, const char* file);
int emu_syncthreads_or(int pred, int line, const char* file);
unsigned long long emu_warp_collective(int op, unsigned mask, unsigned long long value, unsigned size,
                                       int arg, int width, int line, const char* file);
unsigned emu_activemask(int line, const char* file);
[[noreturn]] void emu_kernel_fail(const char* what, int line, const char* file);
// Lets the other threads of the block run (a thread polling a flag must not starve its setter).
void emu_yield(int reason);
// Tensor-core fragments (mma.h): a full-warp collective whose operands travel by pointer.
void emu_tensor_collective(int op, void* payload, int line, const char* file);
// Counts atomics on this worker thread; every 32nd yields.
extern __thread unsigned emu_tls_polls;
static inline void emu_atomic_poll() {
    if (__builtin_expect((++emu_tls_polls & 31u) == 0, 0)) emu_yield(EMU_YIELD_ATOMIC);
}

#define __syncthreads() emu_syncthreads(__LINE__, __FILE__)
#define __syncthreads_count(p) emu_syncthreads_count((p) ? 1 : 0, __LINE__, __FILE__)
#define __syncthreads_and(p) emu_syncthreads_and((p) ? 1 : 0, __LINE__, __FILE__)
#define __syncthreads_or(p) emu_syncthreads_or((p) ? 1 : 0, __LINE__, __FILE__)

namespace emu {
template <class T>
inline T shfl(int op, unsigned mask, T v, int arg, int width, int line, const char* file) {
    static_assert(std::is_trivially_copyable<T>::value, "shuffle of a non-trivially-copyable type");
    static_assert(sizeof(T) <= 8, "shuffle of a type larger than 8 bytes");
    unsigned long long bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    bits = emu_warp_collective(op, mask, bits, sizeof(T), arg, width, line, file);
    T r;
    std::memcpy(&r, &bits, sizeof(T));
    return r;
}
template <class T> inline T shfl_idx(int line, const char* f, unsigned mask, T v, int src, int width = 32) { return shfl(EMU_OP_SHFL_IDX, mask, v, src, width, line, f); }
template <class T> inline T shfl_up(int line, const char* f, unsigned mask, T v, unsigned d, int width = 32) { return shfl(EMU_OP_SHFL_UP, mask, v, (int)d, width, line, f); }
template <class T> inline T shfl_down(int line, const char* f, unsigned mask, T v, unsigned d, int width = 32) { return shfl(EMU_OP_SHFL_DOWN, mask, v, (int)d, width, line, f); }
template <class T> inline T shfl_xor(int line, const char* f, unsigned mask, T v, int lm, int width = 32) { return shfl(EMU_OP_SHFL_XOR, mask, v, lm, width, line, f); }
inline unsigned ballot(int line, const char* f, unsigned mask, int p) { return (unsigned)emu_warp_collective(EMU_OP_BALLOT, mask, p ? 1u : 0u, 4, 0, 32, line, f); }
inline int any(int line, const char* f, unsigned mask, int p) { return (int)emu_warp_collective(EMU_OP_ANY, mask, p ? 1u : 0u, 4, 0, 32, line, f); }
inline int all(int line, const char* f, unsigned mask, int p) { return (int)emu_warp_collective(EMU_OP_ALL, mask, p ? 1u : 0u, 4, 0, 32, line, f); }
// __reduce_*_sync: every lane of the mask gets the reduction of the mask's values (sm_80+).
inline unsigned redux(int op, int line, const char* f, unsigned mask, unsigned v) { return (unsigned)emu_warp_collective(op, mask, v, 4, 0, 32, line, f); }
inline int redux(int op, int line, const char* f, unsigned mask, int v) { return (int)(unsigned)emu_warp_collective(op, mask, (unsigned)v, 4, 1, 32, line, f); }
struct syncwarp_at {   // __syncwarp() and __syncwarp(mask) without GNU comma elision
    int line;
    const char* file;
    void operator()(unsigned mask = 0xffffffffu) const { (void)emu_warp_collective(EMU_OP_SYNCWARP, mask, 0, 4, 0, 32, line, file); }
};
}  // namespace emu

// CUDA's argument lists (default width = warpSize); macros so that __LINE__ is the caller's line.
#define __shfl_sync(...) emu::shfl_idx(__LINE__, __FILE__, __VA_ARGS__)
#define __shfl_up_sync(...) emu::shfl_up(__LINE__, __FILE__, __VA_ARGS__)
#define __shfl_down_sync(...) emu::shfl_down(__LINE__, __FILE__, __VA_ARGS__)
#define __shfl_xor_sync(...) emu::shfl_xor(__LINE__, __FILE__, __VA_ARGS__)
#define __ballot_sync(mask, p) emu::ballot(__LINE__, __FILE__, (mask), (p) ? 1 : 0)
#define __any_sync(mask, p) emu::any(__LINE__, __FILE__, (mask), (p) ? 1 : 0)
#define __all_sync(mask, p) emu::all(__LINE__, __FILE__, (mask), (p) ? 1 : 0)
#define __reduce_add_sync(mask, v) emu::redux(EMU_OP_REDUX_ADD, __LINE__, __FILE__, (mask), (v))
#define __reduce_min_sync(mask, v) emu::redux(EMU_OP_REDUX_MIN, __LINE__, __FILE__, (mask), (v))
#define __reduce_max_sync(mask, v) emu::redux(EMU_OP_REDUX_MAX, __LINE__, __FILE__, (mask), (v))
#define __reduce_and_sync(mask, v) emu::redux(EMU_OP_REDUX_AND, __LINE__, __FILE__, (mask), (unsigned)(v))
#define __reduce_or_sync(mask, v) emu::redux(EMU_OP_REDUX_OR, __LINE__, __FILE__, (mask), (unsigned)(v))
#define __reduce_xor_sync(mask, v) emu::redux(EMU_OP_REDUX_XOR, __LINE__, __FILE__, (mask), (unsigned)(v))
#define __syncwarp(...) (emu::syncwarp_at{__LINE__, __FILE__}(__VA_ARGS__))
#define __activemask() emu_activemask(__LINE__, __FILE__)

// Device-side assert: reported as a launch error instead of aborting the process.
#undef assert
#ifdef NDEBUG
#define assert(e) ((void)0)
#else
#define assert(e) ((e) ? (void)0 : emu_kernel_fail("assert(" #e ") failed", __LINE__, __FILE__))
#endif
#define __trap() emu_kernel_fail("__trap() called", __LINE__, __FILE__)

// ------------------------------------------------------------------------------------------------
// Memory fences and atomics (real atomics: blocks run concurrently on several OS threads).
// ------------------------------------------------------------------------------------------------
// A fence is where a waiting thread re-reads a flag: it also lets the other threads run.
static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); emu_yield(EMU_YIELD_FENCE); }
static inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); emu_yield(EMU_YIELD_FENCE); }
static inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); emu_yield(EMU_YIELD_FENCE); }
static inline void __nanosleep(unsigned) { emu_yield(EMU_YIELD_SLEEP); }

// Overload sets follow CUDA's (sm_70+): add/and/or/xor/exch/CAS/max/min for int, unsigned and
// unsigned long long; sub/inc/dec for 32-bit; max/min for long long; add for float and double.
// Every atomic is a polling point (emu_atomic_poll): a thread that spins on one lets the others run.
#define EMU_ATOMIC_RMW_(T, name, builtin) \
    static inline T name(T* p, T v) { T r = builtin(p, v, __ATOMIC_SEQ_CST); emu_atomic_poll(); return r; }
#define EMU_ATOMIC_MINMAX_(T)                                                                     \
    static inline T atomicMax(T* p, T v) {                                                        \
        T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);                                             \
        while (old < v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {} \
        emu_atomic_poll();                                                                        \
        return old;                                                                               \
    }                                                                                             \
    static inline T atomicMin(T* p, T v) {                                                        \
        T old = __atomic_load_n(p, __ATOMIC_SEQ_CST);                                             \
        while (old > v && !__atomic_compare_exchange_n(p, &old, v, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {} \
        emu_atomic_poll();                                                                        \
        return old;                                                                               \
    }
#define EMU_ATOMIC_INT_OPS_(T)                                                                     \
    EMU_ATOMIC_RMW_(T, atomicAdd, __atomic_fetch_add)                                             \
    EMU_ATOMIC_RMW_(T, atomicAnd, __atomic_fetch_and)                                             \
    EMU_ATOMIC_RMW_(T, atomicOr, __atomic_fetch_or)                                               \
    EMU_ATOMIC_RMW_(T, atomicXor, __atomic_fetch_xor)                                             \
    EMU_ATOMIC_RMW_(T, atomicExch, __atomic_exchange_n)                                           \
    static inline T atomicCAS(T* p, T cmp, T v) {                                                 \
        __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);       \
        emu_atomic_poll();                                                                        \
        return cmp;                                                                               \
    }                                                                                             \
    EMU_ATOMIC_MINMAX_(T)
EMU_ATOMIC_INT_OPS_(int)
EMU_ATOMIC_INT_OPS_(unsigned int)
EMU_ATOMIC_INT_OPS_(unsigned long long)
EMU_ATOMIC_MINMAX_(long long)
EMU_ATOMIC_RMW_(int, atomicSub, __atomic_fetch_sub)
EMU_ATOMIC_RMW_(unsigned int, atomicSub, __atomic_fetch_sub)
#undef EMU_ATOMIC_INT_OPS_
#undef EMU_ATOMIC_MINMAX_
#undef EMU_ATOMIC_RMW_

namespace emu {
template <class F, class U, class Op>
inline F atomic_float_rmw(F* p, Op op) {
    static_assert(sizeof(F) == sizeof(U), "size");
    U* up = reinterpret_cast<U*>(p);
    U old = __atomic_load_n(up, __ATOMIC_SEQ_CST);
    for (;;) {
        F of;
        std::memcpy(&of, &old, sizeof(F));
        F nf = op(of);
        U nu;
        std::memcpy(&nu, &nf, sizeof(F));
        if (__atomic_compare_exchange_n(up, &old, nu, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
            emu_atomic_poll();
            return of;
        }
    }
}
// atom.add.f32 flushes subnormal inputs and results to sign-preserving zero (PTX ISA); so does
// the emulator, where the host would keep them.
static inline float ftz(float x) {
    unsigned u;
    std::memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) == 0) u &= 0x80000000u;
    std::memcpy(&x, &u, 4);
    return x;
}
}  // namespace emu
static inline float atomicAdd(float* p, float v) {
    return emu::atomic_float_rmw<float, unsigned int>(p, [v](float o) { return emu::ftz(emu::ftz(o) + emu::ftz(v)); });
}
static inline double atomicAdd(double* p, double v) {
    return emu::atomic_float_rmw<double, unsigned long long>(p, [v](double o) { return o + v; });
}
static inline float atomicExch(float* p, float v) {
    unsigned int u;
    std::memcpy(&u, &v, 4);
    u = __atomic_exchange_n(reinterpret_cast<unsigned int*>(p), u, __ATOMIC_SEQ_CST);
    emu_atomic_poll();
    float r;
    std::memcpy(&r, &u, 4);
    return r;
}
static inline unsigned int atomicInc(unsigned int* p, unsigned int v) {
    unsigned int old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (!__atomic_compare_exchange_n(p, &old, (old >= v) ? 0u : old + 1u, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
    emu_atomic_poll();
    return old;
}
static inline unsigned int atomicDec(unsigned int* p, unsigned int v) {
    unsigned int old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    while (!__atomic_compare_exchange_n(p, &old, (old == 0u || old > v) ? v : old - 1u, true, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
    emu_atomic_poll();
    return old;
}

// ------------------------------------------------------------------------------------------------
// Math and bit intrinsics (IEEE, round-to-nearest; compile with -ffp-contract=off)
// ------------------------------------------------------------------------------------------------
static inline float __uint_as_float(unsigned int u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline unsigned int __float_as_uint(float f) { unsigned int u; std::memcpy(&u, &f, 4); return u; }
static inline float __int_as_float(int u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline int __float_as_int(float f) { int u; std::memcpy(&u, &f, 4); return u; }
static inline double __longlong_as_double(long long u) { double f; std::memcpy(&f, &u, 8); return f; }
static inline long long __double_as_longlong(double f) { long long u; std::memcpy(&u, &f, 8); return u; }

static inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
static inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fsqrt_rn(float a) { return std::sqrt(a); }
static inline float __frcp_rn(float a) { return 1.0f / a; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline float __int2float_rn(int i) { return (float)i; }
static inline float __uint2float_rn(unsigned int i) { return (float)i; }
// cvt.rni.s32.f32 / cvt.rzi.s32.f32: saturating, NaN -> 0.
static inline int __float2int_rn(float f) {
    if (f != f) return 0;
    float r = std::nearbyint(f);
    if (r >= 2147483648.0f) return INT_MAX;
    if (r < -2147483648.0f) return INT_MIN;
    return (int)r;
}
static inline int __float2int_rz(float f) {
    if (f != f) return 0;
    if (f >= 2147483648.0f) return INT_MAX;
    if (f < -2147483648.0f) return INT_MIN;
    return (int)f;
}
// The other conversions a kernel may meet, with the GPU's rules (saturate; NaN -> 0, but
// LLONG_MIN for the 64-bit ones). A plain C
// cast `(int)f` is the host's instead: x86 gives INT_MIN for NaN and out-of-range values, where
// the GPU saturates; kernels that may convert such values use these intrinsics.
static inline int __float2int_rd(float f) { return __float2int_rz(std::floor(f)); }
static inline int __float2int_ru(float f) { return __float2int_rz(std::ceil(f)); }
static inline unsigned int __float2uint_rz(float f) {
    if (f != f || f <= 0.0f) return 0u;
    if (f >= 4294967296.0f) return 0xffffffffu;
    return (unsigned int)f;
}
static inline unsigned int __float2uint_rn(float f) { return __float2uint_rz(std::nearbyint(f)); }
static inline long long __float2ll_rz(float f) {
    // Measured on the H200: a NaN converts to 0 for 32-bit results but to LLONG_MIN
    // (0x8000000000000000) for 64-bit ones (kernels/tests/selftest.rs, selftest_convert).
    if (f != f) return LLONG_MIN;
    if (f >= 9223372036854775808.0f) return LLONG_MAX;
    if (f < -9223372036854775808.0f) return LLONG_MIN;
    return (long long)f;
}
static inline long long __float2ll_rn(float f) { return __float2ll_rz(std::nearbyint(f)); }
static inline float __saturatef(float x) { return x != x ? 0.0f : (x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x)); }
#define CUDART_INF_F __builtin_huge_valf()
#define CUDART_NAN_F __builtin_nanf("")
#ifndef INFINITY
#define INFINITY __builtin_huge_valf()
#endif
#ifndef NAN
#define NAN __builtin_nanf("")
#endif

static inline int __popc(unsigned int x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
static inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
static inline unsigned int __brev(unsigned int x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0F0F0F0Fu) | ((x & 0x0F0F0F0Fu) << 4);
    x = ((x >> 8) & 0x00FF00FFu) | ((x & 0x00FF00FFu) << 8);
    return (x >> 16) | (x << 16);
}
static inline unsigned long long __brevll(unsigned long long x) {
    return ((unsigned long long)__brev((unsigned)x) << 32) | __brev((unsigned)(x >> 32));
}
static inline unsigned int __byte_perm(unsigned int x, unsigned int y, unsigned int s) {
    unsigned long long v = ((unsigned long long)y << 32) | x;
    unsigned int r = 0;
    for (int i = 0; i < 4; ++i) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
    return r;
}
template <class T>
static inline T __ldg(const T* p) { return *p; }
template <class T>
static inline T __ldcg(const T* p) { return *p; }  // L2 only, on the GPU: no cache to bypass here

// min/max overloads as CUDA's math_functions.h has them (integer and floating point).
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
static inline unsigned int max(unsigned int a, unsigned int b) { return a > b ? a : b; }
static inline unsigned int min(int a, unsigned int b) { return min((unsigned int)a, b); }
static inline unsigned int max(int a, unsigned int b) { return max((unsigned int)a, b); }
static inline unsigned int min(unsigned int a, int b) { return min(a, (unsigned int)b); }
static inline unsigned int max(unsigned int a, int b) { return max(a, (unsigned int)b); }
static inline long min(long a, long b) { return a < b ? a : b; }
static inline long max(long a, long b) { return a > b ? a : b; }
static inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
static inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
static inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
static inline unsigned long long min(long long a, unsigned long long b) { return min((unsigned long long)a, b); }
static inline unsigned long long max(long long a, unsigned long long b) { return max((unsigned long long)a, b); }
static inline unsigned long long min(unsigned long long a, long long b) { return min(a, (unsigned long long)b); }
static inline unsigned long long max(unsigned long long a, long long b) { return max(a, (unsigned long long)b); }
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }
static inline double min(float a, double b) { return fmin((double)a, b); }
static inline double max(float a, double b) { return fmax((double)a, b); }
static inline double min(double a, float b) { return fmin(a, (double)b); }
static inline double max(double a, float b) { return fmax(a, (double)b); }
// fminf/fmaxf/sqrtf/fabsf/ldexpf/frexpf/floorf/rintf/truncf/expf/... come from <math.h>/<cmath>;
// isnan/isinf/isfinite from <cmath> (brought into the global namespace by libstdc++'s <math.h>).
using std::isnan;
using std::isinf;
using std::isfinite;

// ------------------------------------------------------------------------------------------------
// bfloat16 (cuda_bf16.h subset). A plain 2-byte struct; no implicit conversions or operators, so a
// kernel that relies on sm_80 bf16 arithmetic operators fails to compile here instead of silently
// computing in float: use __bfloat162float / __float2bfloat16 explicitly.
// ------------------------------------------------------------------------------------------------
struct __attribute__((aligned(2))) __nv_bfloat16 { unsigned short __x; };
struct __attribute__((aligned(4))) __nv_bfloat162 { __nv_bfloat16 x, y; };
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;
struct __nv_bfloat16_raw { unsigned short x; };

static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { __nv_bfloat16 h; h.__x = u; return h; }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
// cvt.rn.bf16.f32: round to nearest even, NaN -> 0x7FFF, no flush of subnormals, overflow -> inf.
static inline __nv_bfloat16 __float2bfloat16_rn(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return __ushort_as_bfloat16(0x7FFF);
    u += 0x7FFFu + ((u >> 16) & 1u);
    return __ushort_as_bfloat16((unsigned short)(u >> 16));
}
static inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
// cvt.rz.bf16.f32: truncate, NaN -> 0x7FFF.
static inline __nv_bfloat16 __float2bfloat16_rz(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return __ushort_as_bfloat16(0x7FFF);
    return __ushort_as_bfloat16((unsigned short)(u >> 16));
}
static inline float __bfloat162float(__nv_bfloat16 h) { return __uint_as_float((unsigned int)h.__x << 16); }
static inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat162{a, b}; }
static inline __nv_bfloat162 __bfloat162bfloat162(__nv_bfloat16 a) { return __nv_bfloat162{a, a}; }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
    return __nv_bfloat162{__float2bfloat16_rn(a), __float2bfloat16_rn(b)};
}
static inline __nv_bfloat162 __float2bfloat162_rn(float a) { return __floats2bfloat162_rn(a, a); }
static inline __nv_bfloat162 __float22bfloat162_rn(float2 f) { return __floats2bfloat162_rn(f.x, f.y); }
static inline float __low2float(__nv_bfloat162 h) { return __bfloat162float(h.x); }
static inline float __high2float(__nv_bfloat162 h) { return __bfloat162float(h.y); }
static inline __nv_bfloat16 __low2bfloat16(__nv_bfloat162 h) { return h.x; }
static inline __nv_bfloat16 __high2bfloat16(__nv_bfloat162 h) { return h.y; }
static inline float2 __bfloat1622float2(__nv_bfloat162 h) { return float2{__low2float(h), __high2float(h)}; }

// Tensor-core fragments (mma.sync m16n8k16 bf16, ldmatrix) as warp collectives.
#include "mma.h"
// Hopper: wgmma, mbarriers, TMA, named barriers.
#include "hopper.h"

#endif  // MOE_CUDA_EMU_H
