// mma.cuh -- tensor cores, the way the book's kernels use them: the warp-wide mma.sync of an
// m16n8k16 tile (bf16 A and B, fp32 C and D) and ldmatrix, which loads fragments from shared
// memory. One set of names on both backends: on the GPU each is one PTX instruction (below); on
// the emulator, kernels/emu/mma.h runs it as a warp collective with a bit-exact model of the
// H100/H200 tensor core (kernels/emu/tc_model.h).
//
// Fragment layout (PTX ISA, "Matrix Fragments for mma.m16n8k16"): lane l, g = l / 4, t = l % 4,
// holds A rows g and g + 8, columns 2t, 2t + 1 (a[0], a[1]) and 2t + 8, 2t + 9 (a[2], a[3]),
// two bf16 per register, the lower column in the low half; B column g, rows 2t, 2t + 1 (b[0])
// and 2t + 8, 2t + 9 (b[1]); C and D rows g (c[0], c[1]) and g + 8 (c[2], c[3]), columns 2t,
// 2t + 1.
#pragma once
#include "common.cuh"

#ifndef MOE_EMU
// ANCHOR: mma_api
// d = a b + c for one 16 x 8 x 16 tile; every lane of the warp calls it with its fragments.
__device__ __forceinline__ void moe_mma_m16n8k16_bf16(float d[4], const unsigned a[4], const unsigned b[2],
                                                      const float c[4]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%11,%12,%13};\n"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
          "f"(c[3]));
}

// Four 8 x 8 bf16 matrices from shared memory: lanes 8i .. 8i + 7 give the addresses of the 8
// rows (16 bytes each, 16-byte aligned) of matrix i; register i of lane l receives row l / 4,
// columns 2(l % 4) and 2(l % 4) + 1 of matrix i (.trans: the transposed matrix's).
__device__ __forceinline__ void moe_ldmatrix_x4(unsigned r[4], const void* row) {
    const unsigned addr = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
// ANCHOR_END: mma_api
__device__ __forceinline__ void moe_ldmatrix_x4_trans(unsigned r[4], const void* row) {
    const unsigned addr = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void moe_ldmatrix_x2(unsigned r[2], const void* row) {
    const unsigned addr = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}
__device__ __forceinline__ void moe_ldmatrix_x2_trans(unsigned r[2], const void* row) {
    const unsigned addr = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(addr));
}
__device__ __forceinline__ void moe_ldmatrix_x1(unsigned r[1], const void* row) {
    const unsigned addr = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(addr));
}
__device__ __forceinline__ void moe_ldmatrix_x1_trans(unsigned r[1], const void* row) {
    const unsigned addr = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(addr));
}

// ANCHOR: cp_async
// Asynchronous copies, global to shared, 16 bytes each (sm_80 and later): the thread issues the
// copy and goes on; the data lands in shared memory later. `full` false writes 16 zero bytes and
// reads nothing (the copy's source size is 0: `src` must still be a valid address). Copies are
// grouped by commit; moe_cp_async_wait(n) waits until at most the newest n committed groups of
// this thread are still in flight. Other threads see the data only after a barrier.
// Before sm_80 there is no cp.async: the copy is a plain load and store, done at once, and
// commit and wait do nothing (still correct: a barrier comes before any other thread reads).
__device__ __forceinline__ void moe_cp_async16(void* dst, const void* src, bool full) {
#if __CUDA_ARCH__ >= 800
    const unsigned addr = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(src), "r"(full ? 16 : 0)
                 : "memory");
#else
    *reinterpret_cast<uint4*>(dst) = full ? *reinterpret_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
#endif
}
__device__ __forceinline__ void moe_cp_async_commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void moe_cp_async_wait_n() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}
#define moe_cp_async_wait(n) moe_cp_async_wait_n<(n)>()
// ANCHOR_END: cp_async
#endif  // !MOE_EMU: on the emulator, kernels/emu/mma.h defines the same names
