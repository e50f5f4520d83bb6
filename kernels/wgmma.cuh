// wgmma.cuh -- Hopper's warpgroup MMA (sm_90a only), the way chapter 4's version 4 uses it: a
// warpgroup of four warps (128 threads) multiplies a 64 x 16 slice of A by a 16 x N slice of B
// into fp32 accumulators held in its registers, both operands read straight from shared memory
// through 64-bit matrix descriptors, asynchronously: the instruction is issued, the warps go on,
// and a wait says when the accumulators may be read. Measured first by tools/gpu/probes/
// wgmma_probe.cu (bench/results/h200/logs/wgmma_probe_57452a9.txt).
//
// Shared-memory layout, no swizzle, both operands K-major (A [64][K], B [N][K], rows of K
// contiguous): "core matrices" of 8 rows x 16 bytes (8 bf16 of K), each 128 contiguous bytes.
// The descriptor holds the start address, the byte step between core matrices along K (the
// "leading" offset) and the step between core matrices along M or N (the "stride" offset), each
// in 16-byte units; the probe settled which is which.
//
// Accumulators (the probe again): thread t of the warpgroup, warp w = t / 32, g = lane / 4,
// q = lane % 4, holds for each 8 columns j: D[16w + g][8j + 2q + {0, 1}] in d[4j + {0, 1}] and
// D[16w + g + 8][8j + 2q + {0, 1}] in d[4j + {2, 3}]: mma.sync's m16n8 layout, one warp per 16
// rows, N / 8 fragments side by side.
//
// MOE_WGMMA is defined where these instructions exist: NVRTC compiling for sm_90a, and the
// emulator, whose twins of every name below and in tma.cuh (kernels/emu/hopper.h, included by
// its cuda_emu.h) run them on the CPU. Other GPUs never see them (the host never picks version
// 4 there).
#pragma once
#include "common.cuh"

#if defined(MOE_EMU)
#define MOE_WGMMA 1
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MOE_WGMMA 1

// ANCHOR: wgmma_api
// A descriptor for a K-major operand at `smem` (16-byte aligned): `lead` bytes between core
// matrices along K, `stride` bytes between them along M (or N); its layout bits (62-63) zero,
// the flat layout (version 5 ORs in 1 << 62, the 128-byte swizzle).
__device__ __forceinline__ unsigned long long moe_wgmma_desc(const void* smem, unsigned lead, unsigned stride) {
    const unsigned addr = (unsigned)__cvta_generic_to_shared(smem);
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)((lead >> 4) & 0x3FFF) << 16) |
           ((unsigned long long)((stride >> 4) & 0x3FFF) << 32);
}

// Orders this warpgroup's earlier register writes (the accumulators) before its next wgmma.
__device__ __forceinline__ void moe_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
// Closes the group of wgmma issued since the last commit.
__device__ __forceinline__ void moe_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most N committed groups are still running; then their accumulators may be read.
template <int N>
__device__ __forceinline__ void moe_wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// ANCHOR_END: wgmma_api
// Makes this thread's shared-memory writes through the generic proxy (st.shared, cp.async)
// visible to the async proxy, through which wgmma reads its operands.
__device__ __forceinline__ void moe_fence_proxy_async() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// True in one lane of the calling warp's active lanes, the same one for all of them (the lowest,
// elect.sync): "one thread issues it" without naming a lane by number. No kernel of the book
// needs it yet (each names lane 0 or thread 0 itself); the emulator has its twin.
__device__ __forceinline__ bool moe_elect_one() {
    unsigned e;
    asm volatile("{\n.reg .pred p;\nelect.sync _|p, %1;\nselp.u32 %0, 1, 0, p;\n}\n" : "=r"(e) : "r"(__activemask()));
    return e != 0;
}
// Moves this warpgroup's register budget to N a thread (a multiple of 8, 24 to 256), up (INC) or
// down: what warp-specialized kernels do to give a producer's registers to its consumers. Every
// thread of the warpgroup runs it. The emulator accepts it and changes nothing (it has no
// register file to share).
template <int N, bool INC>
__device__ __forceinline__ void moe_setmaxnreg() {
    static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg: a multiple of 8 from 24 to 256");
    if (INC)
        asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
    else
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}

// d += a . b for one 64 x N x 16 step: a, b descriptors; d this thread's N / 2 accumulators
// (the predicate, scale-d, is 1: accumulate; then a and b unscaled, neither transposed).
// (The "memory" clobber is left out on purpose: the accumulators are the asm's operands, and
// the fence and waits above carry the ordering against shared memory.)
template <int N>
__device__ __forceinline__ void moe_wgmma_bf16(float (&d)[N / 2], unsigned long long a, unsigned long long b);

// The accumulator operands and their place-holders in the instruction: 64 at a time
// (MOE_WG_D64(i): "+f"(d[i]) ... "+f"(d[i + 63])). The place-holders are numbered by hand: the
// preprocessor cannot count into a string.
#define MOE_WG_D8(i)                                                                                      \
    "+f"(d[(i)]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3]), "+f"(d[(i) + 4]), "+f"(d[(i) + 5]), \
        "+f"(d[(i) + 6]), "+f"(d[(i) + 7])
#define MOE_WG_D64(i)                                                                                     \
    MOE_WG_D8(i), MOE_WG_D8((i) + 8), MOE_WG_D8((i) + 16), MOE_WG_D8((i) + 24), MOE_WG_D8((i) + 32),      \
        MOE_WG_D8((i) + 40), MOE_WG_D8((i) + 48), MOE_WG_D8((i) + 56)
#define MOE_WG_REGS_0_63                                                                                  \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                              \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                    \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                    \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define MOE_WG_REGS_64_127                                                                                \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "                    \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "                    \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "         \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

template <>
__device__ __forceinline__ void moe_wgmma_bf16<128>(float (&d)[64], unsigned long long a, unsigned long long b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" MOE_WG_REGS_0_63 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : MOE_WG_D64(0)
        : "l"(a), "l"(b), "r"(1));
}

template <>
__device__ __forceinline__ void moe_wgmma_bf16<256>(float (&d)[128], unsigned long long a, unsigned long long b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" MOE_WG_REGS_0_63 ", " MOE_WG_REGS_64_127
        "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
        : MOE_WG_D64(0), MOE_WG_D64(64)
        : "l"(a), "l"(b), "r"(1));
}
#endif  // sm_90a (the emulator: kernels/emu/hopper.h)
