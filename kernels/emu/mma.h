// mma.h -- tensor-core fragments on the emulator: the emulated side of kernels/mma.cuh, included
// by cuda_emu.h. On the GPU the same names are one PTX instruction each (mma.sync.aligned.
// m16n8k16.row.col.f32.bf16.bf16.f32, ldmatrix.sync.aligned.m8n8.x{1,2,4}[.trans].shared.b16);
// here each is a collective of the whole warp: every lane hands over its fragment registers,
// the runtime assembles the tiles in the PTX ISA's documented layout, computes, and hands each
// lane its part (emu_tensor.cpp). The mma's arithmetic follows tc_model.h, the H100/H200 tensor
// core's, bit for bit.
#ifndef MOE_EMU_MMA_H
#define MOE_EMU_MMA_H

#include <vector>

// One lane's operands of an mma: pointers to its registers (on its stack while it waits).
struct emu_mma_operands {
    const unsigned* a;  // [4]: 8 bf16 of A
    const unsigned* b;  // [2]: 4 bf16 of B
    const float* c;     // [4]
    float* d;           // [4] (may be c)
};

// One lane's part of an ldmatrix: the 16-byte row its address points to (read by the lane itself,
// so a bad address faults in that thread), and where its registers go.
struct emu_ldmatrix_operands {
    int num;    // matrices: 1, 2 or 4
    int trans;  // .trans
    unsigned short row[8];
    unsigned* out;  // [num]
};

static inline void emu_mma_m16n8k16_bf16(float* d, const unsigned* a, const unsigned* b, const float* c, int line,
                                         const char* file) {
    emu_mma_operands o{a, b, c, d};
    emu_tensor_collective(EMU_OP_MMA, &o, line, file);
}

static inline void emu_ldmatrix(int num, int trans, unsigned* out, const void* row, int line, const char* file) {
    emu_ldmatrix_operands o;
    o.num = num;
    o.trans = trans;
    o.out = out;
    // Lanes 0..8*num-1 give one row address each (the others' are ignored, as on the GPU).
    if ((int)(threadIdx.x & 31) < 8 * num) {
        if ((uintptr_t)row & 15) emu_kernel_fail("moe_ldmatrix: a row address that is not 16-byte aligned", line, file);
        std::memcpy(o.row, row, 16);
    } else {
        std::memset(o.row, 0, 16);
    }
    emu_tensor_collective(EMU_OP_LDMATRIX, &o, line, file);
}

// The names kernels call (kernels/mma.cuh documents them); macros so that errors name the line.
#define moe_mma_m16n8k16_bf16(d, a, b, c) emu_mma_m16n8k16_bf16((d), (a), (b), (c), __LINE__, __FILE__)
#define moe_ldmatrix_x1(r, row) emu_ldmatrix(1, 0, (r), (row), __LINE__, __FILE__)
#define moe_ldmatrix_x2(r, row) emu_ldmatrix(2, 0, (r), (row), __LINE__, __FILE__)
#define moe_ldmatrix_x4(r, row) emu_ldmatrix(4, 0, (r), (row), __LINE__, __FILE__)
#define moe_ldmatrix_x1_trans(r, row) emu_ldmatrix(1, 1, (r), (row), __LINE__, __FILE__)
#define moe_ldmatrix_x2_trans(r, row) emu_ldmatrix(2, 1, (r), (row), __LINE__, __FILE__)
#define moe_ldmatrix_x4_trans(r, row) emu_ldmatrix(4, 1, (r), (row), __LINE__, __FILE__)

// ------------------------------------------------------------------------------------------------
// cp.async (kernels/mma.cuh documents the names). Each thread's copies wait in its own queue, in
// commit groups, and land in shared memory only when moe_cp_async_wait lets them: as late as the
// GPU may land them. A kernel that reads a stage before waiting for it reads what was there
// before (the 0xFF fill of dynamic shared memory), not the data, on the emulator too. The source
// is read at issue, as the GPU may; a kernel must not write a source while its copy is in flight.
// ------------------------------------------------------------------------------------------------
struct emu_cp_async_copy {
    void* dst;
    unsigned char bytes[16];
};
struct emu_cp_async_queue {
    unsigned block = ~0u;                       // the block whose copies these are
    std::vector<emu_cp_async_copy> pending;     // issued, oldest first
    std::vector<size_t> group_end;              // pending[..group_end[g]] closes committed group g
};
static inline emu_cp_async_queue& emu_cp_async_mine(int line, const char* file) {
    static thread_local emu_cp_async_queue queues[1024];  // a worker runs one block at a time
    const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    emu_cp_async_queue& q = queues[tid];
    if (q.block != block) {
        if (!q.pending.empty())
            emu_kernel_fail("cp.async: a thread of an earlier block left copies it never waited for", line, file);
        q.block = block;
        q.group_end.clear();
    }
    return q;
}
static inline void emu_cp_async16(void* dst, const void* src, bool full, int line, const char* file) {
    if ((uintptr_t)dst & 15) emu_kernel_fail("moe_cp_async16: a shared address that is not 16-byte aligned", line, file);
    emu_cp_async_copy c{dst, {}};
    if (full) {
        if ((uintptr_t)src & 15) emu_kernel_fail("moe_cp_async16: a global address that is not 16-byte aligned", line, file);
        std::memcpy(c.bytes, src, 16);
    }
    emu_cp_async_mine(line, file).pending.push_back(c);
}
static inline void emu_cp_async_commit(int line, const char* file) {
    emu_cp_async_queue& q = emu_cp_async_mine(line, file);
    q.group_end.push_back(q.pending.size());
}
// Lands every committed group but the newest `newest` ones; copies not yet committed stay.
static inline void emu_cp_async_wait(int newest, int line, const char* file) {
    emu_cp_async_queue& q = emu_cp_async_mine(line, file);
    const size_t groups = q.group_end.size();
    if (groups <= (size_t)newest) return;
    const size_t land = q.group_end[groups - 1 - newest];
    for (size_t i = 0; i < land; ++i) std::memcpy(q.pending[i].dst, q.pending[i].bytes, 16);
    q.pending.erase(q.pending.begin(), q.pending.begin() + land);
    q.group_end.erase(q.group_end.begin(), q.group_end.begin() + (groups - newest));
    for (size_t& e : q.group_end) e -= land;
}
#define moe_cp_async16(dst, src, full) emu_cp_async16((dst), (src), (full), __LINE__, __FILE__)
#define moe_cp_async_commit() emu_cp_async_commit(__LINE__, __FILE__)
#define moe_cp_async_wait(n) emu_cp_async_wait((n), __LINE__, __FILE__)

#endif  // MOE_EMU_MMA_H
