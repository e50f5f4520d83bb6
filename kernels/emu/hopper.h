// hopper.h -- Hopper's asynchronous machinery on the emulator: the emulated side of
// kernels/wgmma.cuh and kernels/tma.cuh (warpgroup MMA, mbarriers, the tensor memory
// accelerator, named barriers, the proxy fences, clusters), included by cuda_emu.h after mma.h. On the GPU
// each name is one or two PTX instructions; here each is a call into the runtime
// (emu_tensor.cpp), which keeps the state the hardware keeps:
//
//   * the shared window: `__cvta_generic_to_shared` gives the byte offset of an address in the
//     block's dynamic shared memory (which starts on 1024 bytes, so the 128-byte swizzle, a
//     function of the address bits, is the GPU's); a matrix descriptor holds that offset as the
//     GPU's holds its shared address, and is decoded field by field as the hardware decodes it.
//     Static __shared__ variables are outside the window (the kernels pass barriers by pointer);
//   * an mbarrier is its 8 bytes of shared memory: the expected arrivals (bits 0-19), the
//     arrivals still pending in the current phase (20-39), the transaction count in bytes (40-60,
//     signed) and the phase's parity (63). A waiting thread yields until the phase flips;
//   * a TMA copy lands at issue (the box read from global memory, zeros past the tensor, written
//     in the 128-byte swizzle) and then counts its bytes on the mbarrier, as the copy engine
//     does when it finishes;
//   * a wgmma is queued by the thread that issues it and executed when a wait_group lets it
//     finish (as late as the GPU may finish it): until then its accumulators hold the poison NaN
//     EMU_WGMMA_POISON, so a read before the wait sees NaN and a write before it is an error.
//     Each thread computes its own accumulators (rows 16w + g (+8), columns 8j + 2q (+1)) with
//     tc_model.h's dot product, one k-step of 16 at a time: mma.sync's rule.
#ifndef MOE_EMU_HOPPER_H
#define MOE_EMU_HOPPER_H

// The tensor map the emulator's TMA reads: what the host encodes for a kernel on the emulator in
// place of CUDA's opaque 128-byte CUtensorMap (kernels/src/emu: a row-major 2-D matrix, boxes in
// the 128-byte swizzle). Every field little-endian, as the host writes 16 u64.
struct emu_tensor_map {
    unsigned long long magic;      // EMU_TENSOR_MAP_MAGIC
    unsigned long long base;       // address of element (row 0, column 0)
    unsigned long long rows;       // the matrix's rows (dimension 1)
    unsigned long long cols;       // its columns (dimension 0, contiguous)
    unsigned long long row_bytes;  // bytes from one row to the next
    unsigned long long box_rows;   // a box: box_rows x box_cols elements
    unsigned long long box_cols;
    unsigned long long elem_bytes;  // 2 (bf16)
    unsigned long long swizzle;     // 128: the 128-byte swizzle; 0: none
    unsigned long long reserved[7];
};
static_assert(sizeof(emu_tensor_map) == 128, "a tensor map is 128 bytes, as CUDA's");
#define EMU_TENSOR_MAP_MAGIC 0x50414d524f534e54ull  // "TNSORMAP"

// A wgmma's accumulators while it is in flight (a quiet NaN with a recognisable payload).
#define EMU_WGMMA_POISON 0x7fc0ffeeu

// The runtime (emu_tensor.cpp).
size_t emu_cvta_shared(const void* p, int line, const char* file);
void emu_mbar_init(unsigned long long* bar, unsigned count, int line, const char* file);
void emu_mbar_arrive(unsigned long long* bar, unsigned tx_bytes, int line, const char* file);
void emu_mbar_wait(unsigned long long* bar, unsigned parity, int line, const char* file);
void emu_tma_load_2d(void* dst, const void* map, int c0, int c1, unsigned long long* bar, int line,
                     const char* file);
void emu_wgmma_bf16(int n, float* d, unsigned long long a, unsigned long long b, int line, const char* file);
void emu_wgmma_commit(int line, const char* file);
void emu_wgmma_wait(int newest, int line, const char* file);
void emu_named_barrier(unsigned id, unsigned count, int line, const char* file);
unsigned emu_cluster_rank();
void emu_cluster_sync(int line, const char* file);
void emu_mbar_arrive_cluster(unsigned long long* bar, unsigned rank, int line, const char* file);
void emu_tma_load_2d_multicast(void* dst, const void* map, int c0, int c1, unsigned long long* bar, unsigned mask,
                               int line, const char* file);

#define __cvta_generic_to_shared(p) emu_cvta_shared((p), __LINE__, __FILE__)

// kernels/wgmma.cuh's names. The descriptor is the GPU's, bit for bit (the same code).
static inline unsigned long long moe_wgmma_desc(const void* smem, unsigned lead, unsigned stride,
                                                int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
    const unsigned addr = (unsigned)emu_cvta_shared(smem, line, file);
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)((lead >> 4) & 0x3FFF) << 16) |
           ((unsigned long long)((stride >> 4) & 0x3FFF) << 32);
}
// The warpgroup's register writes are the thread's own memory writes here: nothing to order.
static inline void moe_wgmma_fence() {}
static inline void moe_wgmma_commit(int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
    emu_wgmma_commit(line, file);
}
template <int N>
static inline void moe_wgmma_wait(int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
    emu_wgmma_wait(N, line, file);
}
// fence.proxy.async: what this block's threads wrote to shared memory through the generic proxy
// (plain stores, cp.async) before it is visible to the async proxy (wgmma, TMA). The emulator
// counts the block's fences: a wgmma that reads a chunk a generic write changed with no fence in
// between is an error (emu_tensor.cpp, check_proxy).
void emu_fence_proxy_async();
static inline void moe_fence_proxy_async() { emu_fence_proxy_async(); }
// elect.sync: the lowest active lane of the warp is the one elected, as on the GPU.
static inline bool moe_elect_one() {
    const unsigned active = __activemask();
    return (int)(threadIdx.x & 31) == __ffs((int)active) - 1;
}
// setmaxnreg: accepted, no effect (the emulator's threads have no register file to share); the
// count is checked as the GPU's assembler checks it.
template <int N, bool INC>
static inline void moe_setmaxnreg() {
    static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg: a multiple of 8 from 24 to 256");
}
template <int N>
static inline void moe_wgmma_bf16(float (&d)[N / 2], unsigned long long a, unsigned long long b,
                                  int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
    static_assert(N % 8 == 0 && N >= 8 && N <= 256, "wgmma m64nNk16: N a multiple of 8 up to 256");
    emu_wgmma_bf16(N, d, a, b, line, file);
}

// kernels/tma.cuh's names.
static inline unsigned moe_smem_addr(const void* p, int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
    return (unsigned)emu_cvta_shared(p, line, file);
}
static inline void moe_mbar_init(unsigned long long* bar, unsigned count, int line = __builtin_LINE(),
                                 const char* file = __builtin_FILE()) {
    emu_mbar_init(bar, count, line, file);
}
static inline void moe_mbar_init_fence() {}
static inline void moe_mbar_arrive_expect_tx(unsigned long long* bar, unsigned bytes, int line = __builtin_LINE(),
                                             const char* file = __builtin_FILE()) {
    emu_mbar_arrive(bar, bytes, line, file);
}
template <bool CLUSTER = false>
static inline void moe_mbar_wait(unsigned long long* bar, unsigned parity, int line = __builtin_LINE(),
                                 const char* file = __builtin_FILE()) {
    emu_mbar_wait(bar, parity, line, file);
}
static inline void moe_tma_load_2d(void* dst, const void* map, int c0, int c1, unsigned long long* bar,
                                   int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
    emu_tma_load_2d(dst, map, c0, c1, bar, line, file);
}
static inline void moe_mbar_arrive(unsigned long long* bar, int line = __builtin_LINE(),
                                   const char* file = __builtin_FILE()) {
    emu_mbar_arrive(bar, 0, line, file);
}
// The arrival the GPU makes once this thread's earlier cp.async have landed: here they land now
// (every copy the thread issued, committed or not), then the thread arrives.
static inline void moe_cp_async_mbar_arrive(unsigned long long* bar, int line = __builtin_LINE(),
                                            const char* file = __builtin_FILE()) {
    emu_cp_async_queue& q = emu_cp_async_mine(line, file);
    for (const emu_cp_async_copy& c : q.pending) std::memcpy(c.dst, c.bytes, 16);
    q.pending.clear();
    for (size_t& e : q.group_end) e = 0;
    emu_mbar_arrive(bar, 0, line, file);
}
// `bar.sync ID, COUNT`: a barrier of COUNT threads (whole warps) other than __syncthreads' 0.
template <unsigned ID, unsigned COUNT>
static inline void moe_named_barrier_sync(int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
    emu_named_barrier(ID, COUNT, line, file);
}
// Clusters (version 9): the blocks of a cluster (__cluster_dims__) run together, one worker OS
// thread each, taking turns pass by pass; another block's shared memory is reached at the same
// offset of its dynamic shared memory, or of its copy of a static __shared__ variable.
// %cluster_ctarank: the block's linear index in its cluster.
static inline unsigned moe_cluster_rank() { return emu_cluster_rank(); }
// barrier.cluster.arrive.release + wait.acquire: every thread of the cluster that has not exited.
static inline void moe_cluster_sync(int line = __builtin_LINE(), const char* file = __builtin_FILE()) {
    emu_cluster_sync(line, file);
}
// mapa + mbarrier.arrive.shared::cluster: one arrival on the barrier at bar's place in block `rank`.
static inline void moe_mbar_arrive_cluster(unsigned long long* bar, unsigned rank, int line = __builtin_LINE(),
                                           const char* file = __builtin_FILE()) {
    emu_mbar_arrive_cluster(bar, rank, line, file);
}
// The box written into every block of `mask` and counted on each one's barrier.
static inline void moe_tma_load_2d_multicast(void* dst, const void* map, int c0, int c1, unsigned long long* bar,
                                             unsigned short mask, int line = __builtin_LINE(),
                                             const char* file = __builtin_FILE()) {
    emu_tma_load_2d_multicast(dst, map, c0, c1, bar, mask, line, file);
}

#endif  // MOE_EMU_HOPPER_H
