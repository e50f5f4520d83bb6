// tma.cuh -- Hopper's tensor memory accelerator (sm_90a only), the way chapter 4's version 7 uses
// it: one thread asks the copy engine for a whole 2-D box of a tensor (here 64 rows x 64 bf16 of
// a weight matrix, 8 KiB), the engine writes it into shared memory in wgmma's 128-byte swizzled
// layout and counts its bytes on an mbarrier; the threads that need the box wait on that
// barrier. No thread computes an address or issues a 16-byte copy for it: where version 6's
// 128 threads issue 1024 cp.async (8 each) for a 64-column slice of 128 rows of B, version 7's
// one thread issues two bulk copies.
//
// The box's shape, the tensor's sizes and strides and the swizzle live in a 128-byte "tensor
// map" the host encodes once per weight tensor (cuTensorMapEncodeTiled, kernels/src/cuda) and
// copies into global memory; the kernel gets its address. Boxes that reach past the tensor's
// edge (K not a multiple of 64, the last rows) are filled with zeros by the engine, and still
// count their whole size on the barrier.
//
// An mbarrier (8 bytes of shared memory) completes a phase when its expected arrivals have
// arrived AND the bytes announced with expect_tx have landed; threads wait for a phase by its
// parity (0, 1, 0, ... as the barrier is reused).
#pragma once
#include "wgmma.cuh"

// The emulator's twins of every name below: kernels/emu/hopper.h.
#if defined(MOE_WGMMA) && !defined(MOE_EMU)
// ANCHOR: tma_api
__device__ __forceinline__ unsigned moe_smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

// A barrier of `count` arrivals per phase (one thread initializes it; then
// moe_mbar_init_fence and a block barrier before anyone uses it).
__device__ __forceinline__ void moe_mbar_init(unsigned long long* bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(moe_smem_addr(bar)), "r"(count) : "memory");
}
// Makes the initialized barriers visible to the copy engine (the async proxy).
__device__ __forceinline__ void moe_mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

// One arrival that also announces `bytes` more to land before the phase completes.
__device__ __forceinline__ void moe_mbar_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(moe_smem_addr(bar)), "r"(bytes)
                 : "memory");
}

// Waits until the phase of parity `parity` has completed. CLUSTER (version 9): a phase the other
// block of a cluster helped complete (its arrivals, moe_mbar_arrive_cluster), waited for with
// acquire at the cluster's scope.
#define MOE_MBAR_TRY_WAIT(sem) \
    "{\n.reg .pred p;\nmbarrier.try_wait.parity" sem ".shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
template <bool CLUSTER = false>
__device__ __forceinline__ void moe_mbar_wait(unsigned long long* bar, unsigned parity) {
    const unsigned a = moe_smem_addr(bar);
    unsigned done;
    do {
        if (CLUSTER)
            asm volatile(MOE_MBAR_TRY_WAIT(".acquire.cluster") : "=r"(done) : "r"(a), "r"(parity) : "memory");
        else
            asm volatile(MOE_MBAR_TRY_WAIT("") : "=r"(done) : "r"(a), "r"(parity) : "memory");
    } while (!done);
}

// The box of `map` whose first element is (column c0, row c1) into shared memory at `dst`
// (1024-byte aligned for the 128-byte swizzle), its bytes counted on `bar`.
__device__ __forceinline__ void moe_tma_load_2d(void* dst, const void* map, int c0, int c1, unsigned long long* bar) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
            moe_smem_addr(dst)),
        "l"(map), "r"(c0), "r"(c1), "r"(moe_smem_addr(bar))
        : "memory");
}
// ANCHOR_END: tma_api

// ANCHOR: mbar_more
// Version 8's two more arrivals. A plain one (a consumer thread done with a buffer):
__device__ __forceinline__ void moe_mbar_arrive(unsigned long long* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(moe_smem_addr(bar)) : "memory");
}
// And one the hardware makes on this thread's behalf once every cp.async it issued before has
// landed (noinc: it counts against the arrivals the barrier was initialized with).
__device__ __forceinline__ void moe_cp_async_mbar_arrive(unsigned long long* bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(moe_smem_addr(bar)) : "memory");
}
// ANCHOR_END: mbar_more
// A barrier of COUNT threads (whole warps) numbered ID (1 to 15; 0 is __syncthreads'): version
// 11's producer warpgroup meets at one.
template <unsigned ID, unsigned COUNT>
__device__ __forceinline__ void moe_named_barrier_sync() {
    asm volatile("bar.sync %0, %1;\n" ::"n"(ID), "n"(COUNT) : "memory");
}
// ANCHOR: cluster_api
// Version 9: two blocks of a cluster (__cluster_dims__(2, 1, 1): blocks 2j and 2j + 1 run at
// the same time on two SMs of one GPC, and each can reach the other's shared memory).
// This block's rank in its cluster (0 or 1).
__device__ __forceinline__ unsigned moe_cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
// Every thread of both blocks: what each did before it (barrier inits, arrivals on the other's
// barriers) is done and visible to the other after it.
__device__ __forceinline__ void moe_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
// One arrival on the barrier at the same place in block `rank`'s shared memory (this block's
// own, or the other's). The default semantics (release at the block's scope), as CUTLASS's
// ClusterBarrier::arrive: what the arrival must follow is the consumer's wgmma reads of the
// buffer, complete at its wgmma wait; .release.cluster made ptxas put a MEMBAR.ALL.GPU before
// every arrival.
__device__ __forceinline__ void moe_mbar_arrive_cluster(unsigned long long* bar, unsigned rank) {
    unsigned remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(moe_smem_addr(bar)), "r"(rank));
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
}
// moe_tma_load_2d for both blocks at once: the engine reads the box once and writes it at `dst`
// in the shared memory of every block in `mask` (bit r: rank r), counting its bytes on the
// barrier at `bar`'s place in each of them.
__device__ __forceinline__ void moe_tma_load_2d_multicast(void* dst, const void* map, int c0, int c1,
                                                          unsigned long long* bar, unsigned short mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, "
        "{%2, %3}], [%4], %5;\n" ::"r"(moe_smem_addr(dst)),
        "l"(map), "r"(c0), "r"(c1), "r"(moe_smem_addr(bar)), "h"(mask)
        : "memory");
}
// ANCHOR_END: cluster_api
#endif  // sm_90a (the emulator: kernels/emu/hopper.h)
