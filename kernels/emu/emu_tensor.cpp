// emu_tensor.cpp -- tensor-core fragments as warp collectives. Every lane of the warp calls
// moe_mma_m16n8k16_bf16 (or moe_ldmatrix_*) with its own registers; when all 32 have arrived,
// this file assembles the whole tiles from the lanes' fragments in the layout the PTX ISA
// documents for mma.m16n8k16 and ldmatrix.m8n8, computes, and hands each lane its part.
// The arithmetic of one mma is tc_model.h's model of the H100/H200 tensor core, which gives the
// same bits as the H200 (measured: tools/gpu/probes/mma_probe.cu).
#include "emu_internal.h"
#include "tc_model.h"

namespace emu_rt {

static inline uint16_t lo16(unsigned v) { return (uint16_t)(v & 0xffffu); }
static inline uint16_t hi16(unsigned v) { return (uint16_t)(v >> 16); }
static inline unsigned pack(uint16_t lo, uint16_t hi) { return (unsigned)lo | ((unsigned)hi << 16); }

// D = A B + C for one m16n8k16 tile. Lane l = 4 g + t (g = l / 4, t = l % 4) holds
//   a[0] = A[g][2t, 2t+1]   a[1] = A[g+8][2t, 2t+1]   a[2] = A[g][2t+8, 2t+9]   a[3] = A[g+8][2t+8, 2t+9]
//   b[0] = B[2t, 2t+1][g]   b[1] = B[2t+8, 2t+9][g]
//   c[0..1] = C[g][2t, 2t+1]   c[2..3] = C[g+8][2t, 2t+1]   (and d alike)
static void execute_mma(Fiber* F) {
    uint16_t A[16][16], Bt[8][16];  // Bt[n][k]: the columns of B
    float C[16][8];
    for (unsigned l = 0; l < 32; ++l) {
        const emu_mma_operands& o = *static_cast<const emu_mma_operands*>(F[l].payload);
        const unsigned g = l / 4, t = l % 4;
        A[g][2 * t] = lo16(o.a[0]), A[g][2 * t + 1] = hi16(o.a[0]);
        A[g + 8][2 * t] = lo16(o.a[1]), A[g + 8][2 * t + 1] = hi16(o.a[1]);
        A[g][2 * t + 8] = lo16(o.a[2]), A[g][2 * t + 9] = hi16(o.a[2]);
        A[g + 8][2 * t + 8] = lo16(o.a[3]), A[g + 8][2 * t + 9] = hi16(o.a[3]);
        Bt[g][2 * t] = lo16(o.b[0]), Bt[g][2 * t + 1] = hi16(o.b[0]);
        Bt[g][2 * t + 8] = lo16(o.b[1]), Bt[g][2 * t + 9] = hi16(o.b[1]);
        C[g][2 * t] = o.c[0], C[g][2 * t + 1] = o.c[1];
        C[g + 8][2 * t] = o.c[2], C[g + 8][2 * t + 1] = o.c[3];
    }
    for (unsigned l = 0; l < 32; ++l) {
        const emu_mma_operands& o = *static_cast<const emu_mma_operands*>(F[l].payload);
        const unsigned g = l / 4, t = l % 4;
        const unsigned rows[4] = {g, g, g + 8, g + 8}, cols[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
        float d[4];
        for (int i = 0; i < 4; ++i)
            d[i] = tc_model::dot(A[rows[i]], Bt[cols[i]], 16, C[rows[i]][cols[i]], tc_model::H100);
        for (int i = 0; i < 4; ++i) o.d[i] = d[i];  // after all reads: d may alias c
    }
}

// ldmatrix.m8n8.x{1,2,4}[.trans].b16: lanes 8i..8i+7 gave the rows of matrix i (each lane read
// its own 16-byte row before parking). Without .trans lane t receives row t/4, elements
// 2(t%4) and 2(t%4)+1 of each matrix; with .trans, column t/4, rows 2(t%4) and 2(t%4)+1.
static void execute_ldmatrix(Fiber* F) {
    const emu_ldmatrix_operands& first = *static_cast<const emu_ldmatrix_operands*>(F[0].payload);
    const int num = first.num;
    for (unsigned l = 0; l < 32; ++l) {
        const emu_ldmatrix_operands& o = *static_cast<const emu_ldmatrix_operands*>(F[l].payload);
        const unsigned r = l / 4, c = 2 * (l % 4);
        for (int i = 0; i < num; ++i) {
            const emu_ldmatrix_operands& row_r = *static_cast<const emu_ldmatrix_operands*>(F[8 * i + r].payload);
            if (!o.trans) {
                o.out[i] = pack(row_r.row[c], row_r.row[c + 1]);
            } else {
                const emu_ldmatrix_operands& a = *static_cast<const emu_ldmatrix_operands*>(F[8 * i + c].payload);
                const emu_ldmatrix_operands& b = *static_cast<const emu_ldmatrix_operands*>(F[8 * i + c + 1].payload);
                o.out[i] = pack(a.row[r], b.row[r]);
            }
        }
    }
}

void execute_tensor_collective(Worker& w, Warp& W, unsigned M) {
    Fiber* F = &w.fibers[W.first];
    (void)M;  // always the full warp (checked when the lanes arrived)
    if (F[0].op == EMU_OP_MMA) {
        execute_mma(F);
        return;
    }
    // All lanes must agree on the shape.
    const emu_ldmatrix_operands& first = *static_cast<const emu_ldmatrix_operands*>(F[0].payload);
    for (unsigned l = 1; l < 32; ++l) {
        const emu_ldmatrix_operands& o = *static_cast<const emu_ldmatrix_operands*>(F[l].payload);
        if (o.num != first.num || o.trans != first.trans) {
            block_error(w, fmt("moe_ldmatrix at %s: lanes 0 and %u ask for different shapes (x%d%s vs x%d%s).",
                               where(F[0].file, F[0].line).c_str(), l, first.num, first.trans ? ".trans" : "",
                               o.num, o.trans ? ".trans" : ""));
            return;
        }
    }
    execute_ldmatrix(F);
}

}  // namespace emu_rt

// ------------------------------------------------------------------------------------------------
// Hopper (hopper.h): the shared window, mbarriers, TMA, wgmma, named barriers. Every entry point
// runs on the calling thread's fiber, with preemption off while it changes the block's state.
// ------------------------------------------------------------------------------------------------
namespace emu_rt {

static Fiber& hopper_fiber(const char* what) {
    Fiber* f = tls_fiber;
    if (!f) {
        fprintf(stderr, "emu: %s called outside of an emulated kernel launch\n", what);
        abort();
    }
    tls_preemptible = 0;
    return *f;
}
[[noreturn]] static void hopper_fail(Worker& w, Fiber& f, const char* what, int line, const char* file,
                                     const std::string& why) {
    fiber_fail(w, f, fmt("%s at %s in thread %u (threadIdx %u,%u,%u): %s.", what, where(file, line).c_str(), f.linear,
                         f.tid.x, f.tid.y, f.tid.z, why.c_str()));
}

// The shared window: offsets into the block's dynamic shared memory.
static unsigned char* window(const Worker& w) { return w.dyn; }
static size_t window_bytes(const Worker& w) { return w.L->dyn_bytes; }
static size_t shared_offset(Worker& w, Fiber& f, const void* p, const char* what, int line, const char* file) {
    const unsigned char* c = static_cast<const unsigned char*>(p);
    if (!window(w) || c < window(w) || c > window(w) + window_bytes(w))
        hopper_fail(w, f, what, line, file,
                    fmt("%p is not in the block's dynamic shared memory (%zu bytes at %p): on the emulator only "
                        "dynamic shared memory has a shared-window address (pass static __shared__ variables "
                        "by pointer)",
                        p, window_bytes(w), (void*)window(w)));
    return (size_t)(c - window(w));
}

// An mbarrier's 8 bytes (hopper.h).
struct Mbar {
    unsigned expected, pending;
    int tx;
    unsigned phase;
};
static Mbar mbar_load(const unsigned long long* bar) {
    const unsigned long long v = *bar;
    Mbar m;
    m.expected = (unsigned)(v & 0xFFFFFu);
    m.pending = (unsigned)((v >> 20) & 0xFFFFFu);
    m.tx = (int)((v >> 40) & 0x1FFFFFu);
    if (m.tx & 0x100000) m.tx -= 0x200000;
    m.phase = (unsigned)(v >> 63);
    return m;
}
static void mbar_store(unsigned long long* bar, const Mbar& m) {
    *bar = (unsigned long long)m.expected | ((unsigned long long)m.pending << 20) |
           ((unsigned long long)((unsigned)m.tx & 0x1FFFFFu) << 40) | ((unsigned long long)m.phase << 63);
}
static const int kTxLimit = (1 << 20) - 1;  // the transaction count's range, as the GPU's

// Applies an arrival (arrive: 1 or 0) and `tx` bytes announced (positive) or delivered (negative).
static void mbar_update(Worker& w, Fiber& f, unsigned long long* bar, unsigned arrive, long long tx, const char* what,
                        int line, const char* file) {
    Mbar m = mbar_load(bar);
    if (m.expected == 0)
        hopper_fail(w, f, what, line, file, "the mbarrier was never initialized (moe_mbar_init)");
    const long long t = (long long)m.tx + tx;
    if (t > kTxLimit || t < -kTxLimit)
        hopper_fail(w, f, what, line, file,
                    fmt("the mbarrier's transaction count would reach %lld bytes, past the hardware's +-%d", t,
                        kTxLimit));
    m.tx = (int)t;
    if (arrive) {
        if (m.pending == 0)
            hopper_fail(w, f, what, line, file,
                        fmt("one arrival more than the mbarrier's count (%u) in its phase of parity %u (it waits only "
                            "for %d transaction bytes now)",
                            m.expected, m.phase, m.tx));
        --m.pending;
    }
    if (m.pending == 0 && m.tx < 0)
        hopper_fail(w, f, what, line, file,
                    fmt("the phase of parity %u got all its %u arrivals and %d transaction bytes more than were "
                        "announced with expect_tx (a transaction-byte count that does not match the bytes copied)",
                        m.phase, m.expected, -m.tx));
    if (m.pending == 0 && m.tx == 0) {
        m.phase ^= 1u;
        m.pending = m.expected;
    }
    mbar_store(bar, m);
    ++w.progress;
}

std::string describe_hopper_wait(const Worker& w, const Fiber& f) {
    if (f.yield_reason == Y_CLUSTER_BAR) {
        const ClusterGroup& g = *w.cg;
        return fmt("at barrier.cluster (moe_cluster_sync) at %s, where %u of the cluster's %u threads arrived and %u "
                   "exited",
                   where(f.file, f.line).c_str(), g.bar_arrived, g.n * w.L->nthreads, cluster_exited(w));
    }
    if (f.yield_reason == Y_NAMED_BAR) {
        const unsigned id = f.wait_parity;
        return fmt("at named barrier %u (bar.sync) at %s, where %u of its %u threads arrived", id,
                   where(f.file, f.line).c_str(), w.hopper.nb_arrived[id], w.hopper.nb_count[id]);
    }
    const Mbar m = mbar_load(static_cast<const unsigned long long*>(f.wait_obj));
    std::string s = fmt("for the phase of parity %u of the mbarrier at %p (moe_mbar_wait at %s), which has %u of its "
                        "%u arrivals still to come",
                        f.wait_parity, f.wait_obj, where(f.file, f.line).c_str(), m.pending, m.expected);
    if (m.tx > 0)
        s += fmt(" and %d transaction bytes announced with expect_tx that no copy will deliver", m.tx);
    else if (m.tx < 0)
        s += fmt(" and %d bytes delivered beyond those announced", -m.tx);
    return s;
}

// ---------------------------------------------------------------------------- wgmma
// One operand of a wgmma as its descriptor gives it: element (r, k) of a K-major tile.
struct WgOperand {
    const unsigned char* smem;
    size_t bytes;
    unsigned start, lead, stride, layout;
    size_t offset(unsigned r, unsigned k) const {
        if (layout == 0)  // no swizzle: 8 x 16-byte core matrices, `lead` apart along K, `stride` along M/N
            return start + (r / 8) * stride + (k / 8) * lead + (r % 8) * 16 + (k % 8) * 2;
        // the 128-byte swizzle: rows of 128 bytes, 8-row groups `stride` apart; address bits 4-6
        // XORed with bits 7-9
        const size_t logical = start + (r / 8) * stride + (r % 8) * 128 + k * 2;
        return logical ^ (((logical >> 7) & 7) << 4);
    }
};
static WgOperand decode_desc(Worker& w, Fiber& f, unsigned long long desc, unsigned rows, const WgOp& op,
                             const char* which) {
    WgOperand o;
    o.smem = window(w);
    o.bytes = window_bytes(w);
    o.start = (unsigned)(desc & 0x3FFF) << 4;
    o.lead = (unsigned)((desc >> 16) & 0x3FFF) << 4;
    o.stride = (unsigned)((desc >> 32) & 0x3FFF) << 4;
    o.layout = (unsigned)(desc >> 62);
    const unsigned base_offset = (unsigned)((desc >> 49) & 7);
    if (o.layout > 1 || base_offset != 0)
        hopper_fail(w, f, "moe_wgmma_bf16", op.line, op.file,
                    fmt("operand %s's descriptor 0x%016llx asks for %s, which the emulator does not model (it models "
                        "the flat layout and the 128-byte swizzle with base offset 0)",
                        which, desc, o.layout > 1 ? "the 64- or 32-byte swizzle" : "a base offset"));
    // Every byte it reads must be in the block's shared memory.
    const size_t far = std::max(o.offset(rows - 1, 15), std::max(o.offset(rows - 1, 0), o.offset(rows - 8, 15)));
    if (!o.smem || far + 2 > o.bytes)
        hopper_fail(w, f, "moe_wgmma_bf16", op.line, op.file,
                    fmt("operand %s (descriptor 0x%016llx) reaches shared byte %zu, past the block's %zu bytes of "
                        "dynamic shared memory",
                        which, desc, far + 1, o.bytes));
    return o;
}
static inline uint16_t ld_bf16(const WgOperand& o, unsigned r, unsigned k) {
    uint16_t v;
    std::memcpy(&v, o.smem + o.offset(r, k), 2);
    return v;
}
static bool all_poison(const float* d, int n) {
    for (int i = 0; i < n; ++i) {
        unsigned u;
        std::memcpy(&u, &d[i], 4);
        if (u != EMU_WGMMA_POISON) return false;
    }
    return true;
}
static void fill_poison(float* d, int n) {
    const unsigned u = EMU_WGMMA_POISON;
    for (int i = 0; i < n; ++i) std::memcpy(&d[i], &u, 4);
}

// The proxy check: a wgmma (async proxy) must not read shared memory that a generic-proxy write
// (a plain store, a landed cp.async) changed after the block's last fence.proxy.async. The
// emulator cannot see plain stores, so it compares contents: it keeps the async proxy's view of
// every 16-byte chunk (the block's 0xFF fill at its start, what a TMA copy wrote, what a wgmma
// last read) with the block's fence count at that time. When the first thread of a warpgroup
// executes a wgmma, each chunk of A and B that differs from the view was written by the generic
// proxy since then; if no thread of the block fenced between the view and the wgmma's issue,
// nothing made that write visible to the async proxy: an error. What is detected is therefore
// "no fence.proxy.async anywhere in the block between the write and the wgmma"; a fence by a
// thread that the writer's write does not happen before (per the PTX memory model it must be
// the writer's, or ordered after its write by a barrier) is taken as enough, and a write of the
// bytes already there is invisible. Stricter per-thread tracking would need every store.
static void check_proxy(Worker& w, Fiber& f, const WgOp& op, const WgOperand& o, unsigned rows, const char* which) {
    for (unsigned r = 0; r < rows; ++r)
        for (unsigned k = 0; k < 16; k += 8) {
            const size_t at = o.offset(r, k), c = at / 16;
            unsigned char* view = w.async_view.data() + c * 16;
            if (!std::memcmp(view, o.smem + c * 16, 16)) continue;
            if (w.view_epoch[c] == op.fence_epoch)
                hopper_fail(w, f, "moe_wgmma_bf16", op.line, op.file,
                            fmt("operand %s reads shared bytes %zu to %zu (row %u, k %u to %u of the tile), which a "
                                "generic-proxy write (a store or a cp.async) changed after the block's last "
                                "fence.proxy.async: the wgmma, which reads through the async proxy, may not see it "
                                "(moe_fence_proxy_async between the writes and the wgmma)",
                                which, c * 16, c * 16 + 15, r, k, k + 7));
            std::memcpy(view, o.smem + c * 16, 16);
            w.view_epoch[c] = w.fence_epoch;
        }
}

// A hash of the bytes a wgmma's operand reads (16-byte chunks, in order): the first thread of a
// warpgroup takes it of A and B when the wgmma is issued and again when it executes, so shared
// memory overwritten in between (a buffer released or refilled while the wgmma may still read
// it) is an error, not a silent read of the new bytes.
static uint64_t operand_hash(const WgOperand& o, unsigned rows, uint64_t h) {
    for (unsigned r = 0; r < rows; ++r)
        for (unsigned k = 0; k < 16; k += 8) {
            uint64_t v[2];
            std::memcpy(v, o.smem + o.offset(r, k), 16);
            h = (h ^ v[0]) * 0x100000001b3ull;
            h = (h ^ v[1]) * 0x100000001b3ull;
        }
    return h;
}
static uint64_t operands_hash(const WgOperand& a, const WgOperand& b, unsigned n) {
    return operand_hash(b, n, operand_hash(a, 64, 0xcbf29ce484222325ull));
}

// Executes op (the thread's i-th queued wgmma): this thread's N / 2 accumulators, rows 16w + g
// and 16w + g + 8 of the 64, columns 8j + 2q and 8j + 2q + 1, each a tc_model dot product of 16
// from op.in. The result goes to the next queued wgmma on the same accumulators, or to them.
static void execute_wgmma(Worker& w, Fiber& f, HopperBlock::Thread& ht, size_t i) {
    WgOp& op = ht.ops[i];
    const WgOperand A = decode_desc(w, f, op.a, 64, op, "A");
    const WgOperand B = decode_desc(w, f, op.b, (unsigned)op.n, op, "B");
    const unsigned t = f.linear % 128, w4 = t / 32, g = (t % 32) / 4, q = t % 4;
    if (t == 0) {
        if (operands_hash(A, B, (unsigned)op.n) != op.operands_hash)
            hopper_fail(w, f, "moe_wgmma_bf16", op.line, op.file,
                        "the shared memory it reads changed between the wgmma and the moe_wgmma_wait that completes "
                        "it (a buffer released, refilled or written while the wgmma may still read it)");
        check_proxy(w, f, op, A, 64, "A");
        check_proxy(w, f, op, B, (unsigned)op.n, "B");
    }
    uint16_t arow[2][16];
    for (unsigned h = 0; h < 2; ++h)
        for (unsigned k = 0; k < 16; ++k) arow[h][k] = ld_bf16(A, 16 * w4 + g + 8 * h, k);
    float out[128];
    for (int j = 0; j < op.n / 8; ++j)
        for (unsigned c = 0; c < 2; ++c) {
            uint16_t bcol[16];
            for (unsigned k = 0; k < 16; ++k) bcol[k] = ld_bf16(B, 8 * j + 2 * q + c, k);
            for (unsigned h = 0; h < 2; ++h)
                out[4 * j + 2 * h + c] = tc_model::dot(arow[h], bcol, 16, op.in[4 * j + 2 * h + c], tc_model::H100);
        }
    const int acc = op.n / 2;
    for (size_t j = i + 1; j < ht.ops.size(); ++j)
        if (ht.ops[j].d == op.d) {
            std::memcpy(ht.ops[j].in, out, sizeof(float) * acc);
            return;
        }
    if (!all_poison(op.d, acc))
        hopper_fail(w, f, "moe_wgmma_bf16", op.line, op.file,
                    "its accumulators were written while it was in flight (between the wgmma and the "
                    "moe_wgmma_wait that completes it)");
    std::memcpy(op.d, out, sizeof(float) * acc);
}

}  // namespace emu_rt

using namespace emu_rt;

size_t emu_cvta_shared(const void* p, int line, const char* file) {
    Fiber& f = hopper_fiber("__cvta_generic_to_shared");
    const size_t off = shared_offset(*tls_worker, f, p, "__cvta_generic_to_shared", line, file);
    tls_preemptible = 1;
    return off;
}

void emu_mbar_init(unsigned long long* bar, unsigned count, int line, const char* file) {
    Fiber& f = hopper_fiber("moe_mbar_init");
    Worker& w = *tls_worker;
    if ((uintptr_t)bar & 7) hopper_fail(w, f, "moe_mbar_init", line, file, "the mbarrier is not 8-byte aligned");
    if (count == 0 || count > 0xFFFFFu)
        hopper_fail(w, f, "moe_mbar_init", line, file, fmt("count %u: an mbarrier counts 1 to 2^20 - 1 arrivals", count));
    Mbar m{count, count, 0, 0};
    mbar_store(bar, m);
    ++w.progress;
    tls_preemptible = 1;
}

void emu_mbar_arrive(unsigned long long* bar, unsigned tx_bytes, int line, const char* file) {
    Fiber& f = hopper_fiber("moe_mbar_arrive");
    mbar_update(*tls_worker, f, bar, 1, (long long)tx_bytes, tx_bytes ? "moe_mbar_arrive_expect_tx" : "moe_mbar_arrive",
                line, file);
    tls_preemptible = 1;
}

void emu_mbar_wait(unsigned long long* bar, unsigned parity, int line, const char* file) {
    Fiber& f = hopper_fiber("moe_mbar_wait");
    Worker& w = *tls_worker;
    for (;;) {
        const Mbar m = mbar_load(bar);
        if (m.expected == 0) hopper_fail(w, f, "moe_mbar_wait", line, file, "the mbarrier was never initialized");
        if (m.phase != (parity & 1u)) break;  // the phase of that parity has completed
        f.wait_obj = bar;
        f.wait_parity = parity & 1u;
        f.line = line;
        f.file = file;
        yield_fiber(w, f, Y_MBAR);
    }
    tls_preemptible = 1;
}

// Checks a TMA copy of `map`'s box to shared byte `off` and writes the box there into `smem` (the
// shared memory of this block or, multicast, of another of its cluster). Returns the box's bytes.
static size_t tma_box(Worker& w, Fiber& f, const void* map, size_t off, int c0, int c1, Worker& to,
                      const char* what, int line, const char* file) {
    unsigned char* smem = to.dyn;
    emu_tensor_map m;
    std::memcpy(&m, map, sizeof m);
    if (m.magic != EMU_TENSOR_MAP_MAGIC)
        hopper_fail(w, f, what, line, file,
                    fmt("%p is not a tensor map encoded for the emulator (its first 8 bytes are 0x%016llx; the host "
                        "writes an emu_tensor_map, kernels/emu/hopper.h)",
                        map, m.magic));
    if (m.elem_bytes != 2 || (m.swizzle != 0 && m.swizzle != 128) || m.box_rows == 0 || m.box_cols == 0 ||
        m.box_rows > 256 || m.box_cols > 256 || (m.swizzle == 128 && m.box_cols * 2 > 128))
        hopper_fail(w, f, what, line, file,
                    fmt("the tensor map's element size %llu, box %llu x %llu or swizzle %llu is not one the emulator "
                        "models (2-byte elements, boxes of at most 256 rows and, swizzled, 128-byte rows)",
                        m.elem_bytes, m.box_rows, m.box_cols, m.swizzle));
    const size_t row_bytes = (size_t)m.box_cols * 2, box_bytes = (size_t)m.box_rows * row_bytes;
    if (off % 128)
        hopper_fail(w, f, what, line, file, fmt("the destination (shared byte %zu) is not 128-byte aligned", off));
    if (off + box_bytes > window_bytes(w))
        hopper_fail(w, f, what, line, file,
                    fmt("the box (%zu bytes at shared byte %zu) runs past the block's %zu bytes of dynamic shared "
                        "memory",
                        box_bytes, off, window_bytes(w)));
    const unsigned char* base = reinterpret_cast<const unsigned char*>((uintptr_t)m.base);
    for (unsigned long long r = 0; r < m.box_rows; ++r) {
        const long long gr = (long long)c1 + (long long)r;
        const bool row_in = gr >= 0 && gr < (long long)m.rows;
        for (size_t b = 0; b < row_bytes; b += 16) {
            // 16 bytes (8 elements) at a time: the swizzle moves whole 16-byte chunks.
            unsigned char chunk[16];
            const size_t n = std::min<size_t>(16, row_bytes - b);
            const long long gc = (long long)c0 + (long long)(b / 2);
            if (row_in && gc >= 0 && gc + (long long)(n / 2) <= (long long)m.cols) {
                std::memcpy(chunk, base + (size_t)gr * m.row_bytes + (size_t)gc * 2, n);
            } else {
                std::memset(chunk, 0, sizeof chunk);
                for (size_t e = 0; e < n / 2; ++e) {
                    const long long c = gc + (long long)e;
                    if (row_in && c >= 0 && c < (long long)m.cols)
                        std::memcpy(chunk + 2 * e, base + (size_t)gr * m.row_bytes + (size_t)c * 2, 2);
                }
            }
            size_t at = off + (size_t)r * row_bytes + b;
            if (m.swizzle == 128) at ^= ((at >> 7) & 7) << 4;
            std::memcpy(smem + at, chunk, n);
            // Written by the async proxy: what a wgmma may read without a fence.
            std::memcpy(to.async_view.data() + at, chunk, n);
            to.view_epoch[at / 16] = to.fence_epoch;
        }
    }
    return box_bytes;
}

void emu_tma_load_2d(void* dst, const void* map, int c0, int c1, unsigned long long* bar, int line,
                     const char* file) {
    Fiber& f = hopper_fiber("moe_tma_load_2d");
    Worker& w = *tls_worker;
    const char* what = "moe_tma_load_2d";
    const size_t off = shared_offset(w, f, dst, what, line, file);
    const size_t bytes = tma_box(w, f, map, off, c0, c1, w, what, line, file);
    mbar_update(w, f, bar, 0, -(long long)bytes, what, line, file);
    tls_preemptible = 1;
}

void emu_wgmma_bf16(int n, float* d, unsigned long long a, unsigned long long b, int line, const char* file) {
    Fiber& f = hopper_fiber("moe_wgmma_bf16");
    Worker& w = *tls_worker;
    if ((f.linear / 128 + 1) * 128 > w.L->nthreads)
        hopper_fail(w, f, "moe_wgmma_bf16", line, file,
                    fmt("wgmma needs whole warpgroups of 128 threads; the block has %u", w.L->nthreads));
    HopperBlock::Thread& ht = w.hopper.threads[f.linear];
    WgOp op;
    op.d = d;
    op.n = n;
    op.a = a;
    op.b = b;
    op.group = ~0u;
    op.fence_epoch = w.fence_epoch;
    op.line = line;
    op.file = file;
    op.operands_hash = 0;
    if (f.linear % 128 == 0)
        op.operands_hash = operands_hash(decode_desc(w, f, a, 64, op, "A"), decode_desc(w, f, b, (unsigned)n, op, "B"),
                                         (unsigned)n);
    bool chained = false;
    for (const WgOp& o : ht.ops) chained |= o.d == d;
    if (chained) {
        if (!all_poison(d, n / 2))
            hopper_fail(w, f, "moe_wgmma_bf16", line, file,
                        "the accumulators of a wgmma still in flight were written before the next wgmma on them "
                        "(they may be touched only after moe_wgmma_wait completes it)");
    } else {
        std::memcpy(op.in, d, sizeof(float) * (size_t)(n / 2));
        fill_poison(d, n / 2);
    }
    ht.ops.push_back(op);
    tls_preemptible = 1;
}

void emu_wgmma_commit(int line, const char* file) {
    Fiber& f = hopper_fiber("moe_wgmma_commit");
    (void)line, (void)file;
    HopperBlock::Thread& ht = tls_worker->hopper.threads[f.linear];
    for (WgOp& o : ht.ops)
        if (o.group == ~0u) o.group = ht.committed;
    ++ht.committed;
    tls_preemptible = 1;
}

void emu_wgmma_wait(int newest, int line, const char* file) {
    Fiber& f = hopper_fiber("moe_wgmma_wait");
    (void)line, (void)file;
    Worker& w = *tls_worker;
    HopperBlock::Thread& ht = w.hopper.threads[f.linear];
    if (ht.committed > (unsigned)newest) {
        const unsigned limit = ht.committed - (unsigned)newest;  // groups [0, limit) complete
        size_t done = 0;
        while (done < ht.ops.size() && ht.ops[done].group != ~0u && ht.ops[done].group < limit) {
            execute_wgmma(w, f, ht, done);
            ++done;
        }
        ht.ops.erase(ht.ops.begin(), ht.ops.begin() + (long)done);
    }
    tls_preemptible = 1;
}

void emu_fence_proxy_async() {
    hopper_fiber("moe_fence_proxy_async");
    ++tls_worker->fence_epoch;
    tls_preemptible = 1;
}

void emu_named_barrier(unsigned id, unsigned count, int line, const char* file) {
    Fiber& f = hopper_fiber("moe_named_barrier_sync");
    Worker& w = *tls_worker;
    HopperBlock& hb = w.hopper;
    if (id == 0 || id >= 16)
        hopper_fail(w, f, "bar.sync", line, file,
                    fmt("barrier %u: named barriers are 1 to 15 here (0 is __syncthreads)", id));
    if (count == 0 || count % 32 || count > w.L->nthreads)
        hopper_fail(w, f, "bar.sync", line, file,
                    fmt("a count of %u threads: whole warps, at most the block's %u", count, w.L->nthreads));
    if (hb.nb_arrived[id] == 0)
        hb.nb_count[id] = count;
    else if (hb.nb_count[id] != count)
        hopper_fail(w, f, "bar.sync", line, file,
                    fmt("a count of %u threads where the threads already there gave %u", count, hb.nb_count[id]));
    ++w.progress;
    if (++hb.nb_arrived[id] == count) {
        hb.nb_arrived[id] = 0;
        ++hb.nb_gen[id];
    } else {
        const unsigned gen = hb.nb_gen[id];
        while (hb.nb_gen[id] == gen) {
            f.wait_parity = id;
            f.line = line;
            f.file = file;
            yield_fiber(w, f, Y_NAMED_BAR);
        }
    }
    tls_preemptible = 1;
}

// ---------------------------------------------------------------------------- clusters
// The blocks of a cluster run on one worker each, taking turns (emu_runtime.cpp's ClusterGroup):
// while this thread runs, every other block of its cluster is parked between two passes, so its
// shared memory and barriers can be read and written here without locks.

// The kernels' cluster shapes: the sections __cluster_dims__ puts kernels in (cuda_emu.h), whose
// bounds the linker gives as __start_/__stop_ symbols (weak: absent when no kernel has the shape).
#define EMU_CLUSTER_SHAPES(X) X(1, 1, 1) X(1, 1, 2) X(1, 1, 3) X(1, 1, 4) X(1, 1, 5) X(1, 1, 6) X(1, 1, 7) \
    X(1, 1, 8) X(1, 2, 1) X(1, 2, 2) X(1, 2, 3) X(1, 2, 4) X(1, 3, 1) X(1, 3, 2) X(1, 4, 1) X(1, 4, 2) X(1, 5, 1) \
    X(1, 6, 1) X(1, 7, 1) X(1, 8, 1) X(2, 1, 1) X(2, 1, 2) X(2, 1, 3) X(2, 1, 4) X(2, 2, 1) X(2, 2, 2) X(2, 3, 1) \
    X(2, 4, 1) X(3, 1, 1) X(3, 1, 2) X(3, 2, 1) X(4, 1, 1) X(4, 1, 2) X(4, 2, 1) X(5, 1, 1) X(6, 1, 1) X(7, 1, 1) \
    X(8, 1, 1)
#define EMU_CLUSTER_BOUNDS(a, b, c)                                                    \
    extern "C" char __start_emu_cluster_##a##x##b##x##c[] __attribute__((weak));      \
    extern "C" char __stop_emu_cluster_##a##x##b##x##c[] __attribute__((weak));
EMU_CLUSTER_SHAPES(EMU_CLUSTER_BOUNDS)
#define EMU_CLUSTER_ENTRY(a, b, c) {__start_emu_cluster_##a##x##b##x##c, __stop_emu_cluster_##a##x##b##x##c, {a, b, c}},

void emu_rt::kernel_cluster_dims(const void* kernel, unsigned dims[3]) {
    struct Shape {
        const char *start, *stop;
        unsigned d[3];
    };
    static const Shape shapes[] = {EMU_CLUSTER_SHAPES(EMU_CLUSTER_ENTRY)};
    dims[0] = dims[1] = dims[2] = 1;
    const char* k = static_cast<const char*>(kernel);
    if (!k) return;
    for (const Shape& s : shapes)
        if (s.start && k >= s.start && k < s.stop) {
            dims[0] = s.d[0], dims[1] = s.d[1], dims[2] = s.d[2];
            return;
        }
}

// mapa: the address of `p` (this block's shared memory: the dynamic window or a static
// __shared__ variable) in the block of rank `rank` of the cluster, which must still run.
static unsigned char* cluster_map(Worker& w, Fiber& f, const void* p, unsigned rank, const char* what, int line,
                                  const char* file) {
    ClusterGroup& g = *w.cg;
    if (rank >= g.n)
        hopper_fail(w, f, what, line, file,
                    fmt("rank %u is outside the cluster, whose %u block%s ranks 0 to %u%s", rank, g.n,
                        g.n == 1 ? " has" : "s have", g.n - 1,
                        g.n == 1 ? " (the kernel has no __cluster_dims__: every block is a cluster of one)" : ""));
    Worker& t = *g.ranks[rank];
    if (&t != &w && !t.block_live)
        hopper_fail(w, f, what, line, file,
                    fmt("block (%u,%u,%u), rank %u of the cluster, has exited and its shared memory with it (a block "
                        "must not leave while another block of its cluster can still reach its shared memory: "
                        "barrier.cluster before leaving)",
                        t.bidx.x, t.bidx.y, t.bidx.z, rank));
    const unsigned char* c = static_cast<const unsigned char*>(p);
    if (window(w) && c >= window(w) && c < window(w) + window_bytes(w)) return t.dyn + (c - window(w));
    // A static __shared__ variable is thread_local: the same distance from a __thread anchor in
    // every worker (initial-exec TLS). Anything else (a local variable, global memory) is not
    // shared memory.
    const long long off = (long long)(c - w.tls_anchor);
    const bool on_stack = c >= (const unsigned char*)f.stack_lo && c < (const unsigned char*)f.stack_lo + f.stack_bytes;
    if (on_stack || off < -(64ll << 20) || off > (64ll << 20))
        hopper_fail(w, f, what, line, file,
                    fmt("%p is not in this block's shared memory (neither its dynamic shared memory nor a static "
                        "__shared__ variable), so it has no address in another block of the cluster",
                        p));
    return t.tls_anchor + off;
}

unsigned emu_cluster_rank() {
    Fiber* f = tls_fiber;
    if (!f) {
        fprintf(stderr, "emu: moe_cluster_rank called outside of an emulated kernel launch\n");
        abort();
    }
    return tls_worker->rank;
}

// barrier.cluster.arrive.release + barrier.cluster.wait.acquire: the phase completes when every
// thread of the cluster that has not exited has arrived (PTX: exited threads do not count).
void emu_cluster_sync(int line, const char* file) {
    Fiber& f = hopper_fiber("moe_cluster_sync");
    Worker& w = *tls_worker;
    ClusterGroup& g = *w.cg;
    const unsigned gen = g.bar_gen;
    ++g.bar_arrived;
    ++w.progress;
    while (g.bar_gen == gen) {
        if (g.bar_arrived + cluster_exited(w) >= g.n * w.L->nthreads) {
            ++g.bar_gen;
            g.bar_arrived = 0;
            ++w.progress;
            break;
        }
        f.wait_obj = &g;
        f.wait_parity = gen;
        f.line = line;
        f.file = file;
        yield_fiber(w, f, Y_CLUSTER_BAR);
    }
    tls_preemptible = 1;
}

// mapa.shared::cluster + mbarrier.arrive.shared::cluster: one arrival on the barrier at `bar`'s
// place in block `rank`'s shared memory.
void emu_mbar_arrive_cluster(unsigned long long* bar, unsigned rank, int line, const char* file) {
    Fiber& f = hopper_fiber("moe_mbar_arrive_cluster");
    Worker& w = *tls_worker;
    const char* what = "moe_mbar_arrive_cluster";
    unsigned char* remote = cluster_map(w, f, bar, rank, what, line, file);
    if ((uintptr_t)remote & 7) hopper_fail(w, f, what, line, file, "the mbarrier is not 8-byte aligned");
    mbar_update(w, f, reinterpret_cast<unsigned long long*>(remote), 1, 0, what, line, file);
    tls_preemptible = 1;
}

// cp.async.bulk.tensor ... .multicast::cluster: the box, read once, written at dst's place in the
// shared memory of every block in `mask` (bit r: rank r), its bytes counted on the barrier at
// `bar`'s place in each of them.
void emu_tma_load_2d_multicast(void* dst, const void* map, int c0, int c1, unsigned long long* bar, unsigned mask,
                               int line, const char* file) {
    Fiber& f = hopper_fiber("moe_tma_load_2d_multicast");
    Worker& w = *tls_worker;
    const char* what = "moe_tma_load_2d_multicast";
    const ClusterGroup& g = *w.cg;
    if (mask == 0) hopper_fail(w, f, what, line, file, "the multicast mask 0x0 names no block of the cluster");
    for (unsigned r = 0; r < 16; ++r)
        if ((mask >> r & 1u) && r >= g.n)
            hopper_fail(w, f, what, line, file,
                        fmt("the multicast mask 0x%x names rank %u, outside the cluster, whose %u block%s ranks 0 to "
                            "%u",
                            mask, r, g.n, g.n == 1 ? " has" : "s have", g.n - 1));
    const size_t off = shared_offset(w, f, dst, what, line, file);
    for (unsigned r = 0; r < g.n; ++r) {
        if (!(mask >> r & 1u)) continue;
        cluster_map(w, f, dst, r, what, line, file);  // the block still runs
        const size_t bytes = tma_box(w, f, map, off, c0, c1, *w.cg->ranks[r], what, line, file);
        unsigned char* rbar = cluster_map(w, f, bar, r, what, line, file);
        mbar_update(w, f, reinterpret_cast<unsigned long long*>(rbar), 0, -(long long)bytes, what, line, file);
    }
    tls_preemptible = 1;
}
