// emu_runtime.cpp -- the CPU emulator of CUDA: fibers, the scheduler, barriers, warp collectives
// and the launch entry point (see README.md; the other parts are emu_memory.cpp, emu_signals.cpp
// and emu_tensor.cpp, sharing emu_internal.h).
//
// Compiled once and linked into every binary that contains emulated kernels.
//
// Model: one CUDA thread = one fiber with its own stack. A block runs to completion on one worker
// OS thread. The worker's own stack is the scheduler context: it runs the runnable lanes of one
// warp in lane order; each lane runs until it reaches a warp collective, __syncthreads, a yield
// point (an atomic, a fence, __nanosleep, or the preemption timer) or returns. When a warp has no
// runnable lane, collectives whose whole mask has arrived complete and their lanes become
// runnable again; a warp whose lanes all wait at __syncthreads, have yielded or have exited hands
// over to the next warp. When every warp is at the barrier, it is released (or an error is
// reported); lanes that yielded run again in the next pass. Workers pull block indices from an
// atomic counter.
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <time.h>

#include <sys/mman.h>
#include <unistd.h>

#include "emu_internal.h"

// Built-in variables (declared in cuda_emu.h).
__thread uint3 emu_tls_threadIdx;
__thread uint3 emu_tls_blockIdx;
__thread uint3 emu_tls_blockDim;
__thread uint3 emu_tls_gridDim;
__thread void* emu_tls_dyn_shared;

namespace emu_rt {
__thread Worker* tls_worker = nullptr;
__thread Fiber* tls_fiber = nullptr;
__thread volatile int tls_preemptible = 0;
__thread unsigned long tls_switches = 0;
}  // namespace emu_rt
__thread unsigned emu_tls_polls = 0;
// emu_trampoline.h: while emu_tls_probe is set, a trampoline records the kernel it would call and
// returns (emu_launch asks it for the kernel's cluster shape).
__thread int emu_tls_probe = 0;
__thread const void* emu_tls_probe_kernel = nullptr;

using namespace emu_rt;

// ------------------------------------------------------------------------------------------------
// Context switch
// ------------------------------------------------------------------------------------------------
#if defined(__APPLE__)
#define EMU_SYM(x) "_" #x
#define EMU_FUNC_BEGIN(x) ".globl _" #x "\n.p2align 4\n_" #x ":\n"
#define EMU_FUNC_END(x) ""
#else
#define EMU_SYM(x) #x
#define EMU_FUNC_BEGIN(x) ".globl " #x "\n.hidden " #x "\n.type " #x ", %function\n.p2align 4\n" #x ":\n"
#define EMU_FUNC_END(x) ".size " #x ", .-" #x "\n"
#endif

#if EMU_CTX_ASM
// void emu_ctx_switch(void** save_sp, void* new_sp): saves the callee-saved registers on the
// current stack, stores the stack pointer to *save_sp, switches to new_sp and restores the same
// frame from there. No system call.
//
// The floating-point control state (MXCSR and the x87 control word; FPCR on aarch64) is not part
// of a fiber's context: CUDA has no instruction that changes a thread's rounding mode, and a
// kernel that also compiles under NVRTC cannot call fesetround, so every fiber of a worker
// shares one state, which worker_main sets to IEEE defaults (round to nearest, no flush to zero)
// for the launch and restores afterwards. Saving and restoring it on every switch (fnstcw/fldcw
// serialise) used to cost three quarters of a switch.
// emu_fiber_entry: first "return" target of a fresh fiber; calls fn(arg) (fn/arg in callee-saved
// registers of the initial frame). fn never returns.
extern "C" void emu_ctx_switch(void** save_sp, void* new_sp);
extern "C" void emu_fiber_entry(void);
#if EMU_CTX_X86_64
// Frame (from sp): [0] r12, [8] r13, [16] r14, [24] r15, [32] rbx, [40] rbp, [48] return address.
asm(".text\n"
    EMU_FUNC_BEGIN(emu_ctx_switch)
    "    pushq %rbp\n"
    "    pushq %rbx\n"
    "    pushq %r15\n"
    "    pushq %r14\n"
    "    pushq %r13\n"
    "    pushq %r12\n"
    "    movq %rsp, (%rdi)\n"
    "    movq %rsi, %rsp\n"
    "    popq %r12\n"
    "    popq %r13\n"
    "    popq %r14\n"
    "    popq %r15\n"
    "    popq %rbx\n"
    "    popq %rbp\n"
    "    ret\n"
    EMU_FUNC_END(emu_ctx_switch)
    EMU_FUNC_BEGIN(emu_fiber_entry)
    "    movq %r12, %rdi\n"
    "    callq *%rbx\n"
    "    ud2\n"
    EMU_FUNC_END(emu_fiber_entry));
static const size_t kFrameWords = 7;
#elif EMU_CTX_AARCH64
// Frame (160 bytes from sp): x19..x30 at [0..96), d8..d15 at [96..160).
asm(".text\n"
    EMU_FUNC_BEGIN(emu_ctx_switch)
    "    sub sp, sp, #160\n"
    "    stp x19, x20, [sp, #0]\n"
    "    stp x21, x22, [sp, #16]\n"
    "    stp x23, x24, [sp, #32]\n"
    "    stp x25, x26, [sp, #48]\n"
    "    stp x27, x28, [sp, #64]\n"
    "    stp x29, x30, [sp, #80]\n"
    "    stp d8, d9, [sp, #96]\n"
    "    stp d10, d11, [sp, #112]\n"
    "    stp d12, d13, [sp, #128]\n"
    "    stp d14, d15, [sp, #144]\n"
    "    mov x9, sp\n"
    "    str x9, [x0]\n"
    "    mov sp, x1\n"
    "    ldp x19, x20, [sp, #0]\n"
    "    ldp x21, x22, [sp, #16]\n"
    "    ldp x23, x24, [sp, #32]\n"
    "    ldp x25, x26, [sp, #48]\n"
    "    ldp x27, x28, [sp, #64]\n"
    "    ldp x29, x30, [sp, #80]\n"
    "    ldp d8, d9, [sp, #96]\n"
    "    ldp d10, d11, [sp, #112]\n"
    "    ldp d12, d13, [sp, #128]\n"
    "    ldp d14, d15, [sp, #144]\n"
    "    add sp, sp, #160\n"
    "    ret\n"
    EMU_FUNC_END(emu_ctx_switch)
    EMU_FUNC_BEGIN(emu_fiber_entry)
    "    mov x0, x19\n"
    "    blr x20\n"
    "    brk #0\n"
    EMU_FUNC_END(emu_fiber_entry));
static const size_t kFrameWords = 20;
#endif
#endif  // EMU_CTX_ASM

namespace emu_rt {

// Saves the running context into `save` and continues in `to`.
static inline void switch_ctx(Ctx& save, Ctx& to) {
#if EMU_CTX_ASM
    emu_ctx_switch(&save.sp, to.sp);
#else
    swapcontext(&save.uc, &to.uc);
#endif
}

// ---------------------------------------------------------------------------- fiber stacks
// One mapping per set, a PROT_NONE guard region below each stack. Sets are pooled and reused by
// later workers / launches.
static std::mutex g_stack_mu;
static std::vector<StackSet*> g_stack_pool;

static size_t page_size() {
    static size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    return ps;
}
// Guard below each stack: at least 64 KiB (address space only), so that a frame of a few KiB
// cannot jump over it.
size_t stack_guard_size() {
    static size_t g = std::max<size_t>(page_size(), 64 * 1024) / page_size() * page_size();
    return g;
}
static size_t stack_bytes_setting() {
    static size_t v = [] {
        size_t kb = 256;
        if (const char* s = getenv("MOE_EMU_STACK_KB")) {
            long x = strtol(s, nullptr, 10);
            if (x >= 16) kb = (size_t)x;
        }
        size_t ps = page_size();
        return (kb * 1024 + ps - 1) / ps * ps;
    }();
    return v;
}

static StackSet* acquire_stacks(unsigned n) {
    size_t want = stack_bytes_setting();
    {
        std::lock_guard<std::mutex> g(g_stack_mu);
        int best = -1;
        for (size_t i = 0; i < g_stack_pool.size(); ++i) {
            StackSet* s = g_stack_pool[i];
            if (s->count >= n && s->stack_bytes == want && (best < 0 || s->count < g_stack_pool[best]->count)) best = (int)i;
        }
        if (best >= 0) {
            StackSet* s = g_stack_pool[best];
            g_stack_pool.erase(g_stack_pool.begin() + best);
            return s;
        }
    }
    unsigned count = 32;
    while (count < n) count *= 2;
    StackSet* s = new StackSet;
    s->stack_bytes = want;
    s->stride = want + stack_guard_size();
    s->count = count;
    s->map_len = s->stride * count;
    int flags = MAP_PRIVATE | MAP_ANON;
#ifdef MAP_NORESERVE
    flags |= MAP_NORESERVE;
#endif
    void* p = mmap(nullptr, s->map_len, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (p == MAP_FAILED) {
        delete s;
        return nullptr;
    }
    s->base = static_cast<char*>(p);
    for (unsigned i = 0; i < count; ++i) mprotect(s->base + i * s->stride, stack_guard_size(), PROT_NONE);
    return s;
}
static void release_stacks(StackSet* s) {
    if (!s) return;
    std::lock_guard<std::mutex> g(g_stack_mu);
    g_stack_pool.push_back(s);
}

// ---------------------------------------------------------------------------- error formatting
std::string fmt(const char* f, ...) {
    char buf[2048];
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, sizeof buf, f, ap);
    va_end(ap);
    return buf;
}
static const char* base_name(const char* p) {
    if (!p) return "?";
    const char* s = strrchr(p, '/');
    return s ? s + 1 : p;
}
std::string where(const char* file, int line) { return fmt("%s:%d", base_name(file), line); }

// "threads 0-31,64,70-71" (linear ids); with threadIdx for a single thread of a multi-dim block.
std::string thread_list(const Launch& L, const std::vector<unsigned>& ids) {
    std::string s = ids.size() == 1 ? "thread " : "threads ";
    size_t i = 0, ranges = 0;
    while (i < ids.size()) {
        size_t j = i;
        while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
        if (ranges == 8) {
            s += ",...";
            break;
        }
        if (ranges) s += ",";
        s += j == i ? fmt("%u", ids[i]) : fmt("%u-%u", ids[i], ids[j]);
        ++ranges;
        i = j + 1;
    }
    if (ids.size() == 1 && (L.by > 1 || L.bz > 1)) {
        unsigned t = ids[0];
        s += fmt(" (threadIdx %u,%u,%u)", t % L.bx, (t / L.bx) % L.by, t / (L.bx * L.by));
    }
    return s;
}
std::vector<unsigned> lanes_to_ids(const Warp& W, unsigned m) {
    std::vector<unsigned> v;
    while (m) {
        v.push_back(W.first + (unsigned)__builtin_ctz(m));
        m &= m - 1;
    }
    return v;
}
static const char* op_name(int op) {
    switch (op) {
        case EMU_OP_SHFL_IDX: return "__shfl_sync";
        case EMU_OP_SHFL_UP: return "__shfl_up_sync";
        case EMU_OP_SHFL_DOWN: return "__shfl_down_sync";
        case EMU_OP_SHFL_XOR: return "__shfl_xor_sync";
        case EMU_OP_BALLOT: return "__ballot_sync";
        case EMU_OP_ANY: return "__any_sync";
        case EMU_OP_ALL: return "__all_sync";
        case EMU_OP_SYNCWARP: return "__syncwarp";
        case EMU_OP_ACTIVEMASK: return "__activemask";
        case EMU_OP_REDUX_ADD: return "__reduce_add_sync";
        case EMU_OP_REDUX_MIN: return "__reduce_min_sync";
        case EMU_OP_REDUX_MAX: return "__reduce_max_sync";
        case EMU_OP_REDUX_AND: return "__reduce_and_sync";
        case EMU_OP_REDUX_OR: return "__reduce_or_sync";
        case EMU_OP_REDUX_XOR: return "__reduce_xor_sync";
        case EMU_OP_MMA: return "moe_mma_m16n8k16_bf16";
        case EMU_OP_LDMATRIX: return "moe_ldmatrix";
    }
    return "?";
}
static const char* bar_name(int k) {
    switch (k) {
        case 1: return "__syncthreads_count";
        case 2: return "__syncthreads_and";
        case 3: return "__syncthreads_or";
    }
    return "__syncthreads";
}

std::string block_prefix(const Worker& w) {
    const Launch& L = *w.L;
    if (L.csize > 1)
        return fmt("block (%u,%u,%u) [grid (%u,%u,%u), block (%u,%u,%u), cluster (%u,%u,%u), rank %u]: ", w.bidx.x,
                   w.bidx.y, w.bidx.z, L.gx, L.gy, L.gz, L.bx, L.by, L.bz, L.cx, L.cy, L.cz, w.rank);
    return fmt("block (%u,%u,%u) [grid (%u,%u,%u), block (%u,%u,%u)]: ", w.bidx.x, w.bidx.y, w.bidx.z, L.gx, L.gy,
               L.gz, L.bx, L.by, L.bz);
}

static void copy_message(EmuReport* r, const std::string& msg) {
    size_t n = std::min(msg.size(), sizeof r->message - 1);
    memcpy(r->message, msg.data(), n);
    r->message[n] = 0;
}

// The first error of a launch wins; later ones (other workers stopping) are dropped.
void set_report(Launch& L, int kind, const std::string& msg) {
    std::lock_guard<std::mutex> g(L.mu);
    if (L.report->kind == 0) {
        L.report->kind = kind;
        copy_message(L.report, msg);
    }
    L.failed.store(true);
}
void block_error(Worker& w, const std::string& msg) {
    w.failed = true;
    set_report(*w.L, 2, block_prefix(w) + msg);
}

// ---------------------------------------------------------------------------- fibers
extern "C" void emu_fiber_main(Fiber* f);
#if EMU_CTX_UCONTEXT
extern "C" void emu_fiber_trampoline_uc(unsigned lo, unsigned hi);
#endif

static void fiber_init(Worker& w, Fiber& f) {
#if EMU_CTX_ASM
    uintptr_t top = (uintptr_t)(f.stack_lo + f.stack_bytes) & ~(uintptr_t)15;
    void** sp = (void**)(top - kFrameWords * sizeof(void*));
    memset(sp, 0, kFrameWords * sizeof(void*));
#if EMU_CTX_X86_64
    sp[0] = (void*)&f;                      // r12: argument
    sp[4] = (void*)&emu_fiber_main;         // rbx: function
    sp[6] = (void*)&emu_fiber_entry;        // return address
#else
    sp[0] = (void*)&f;                      // x19: argument
    sp[1] = (void*)&emu_fiber_main;         // x20: function
    sp[11] = (void*)&emu_fiber_entry;       // x30: return address
#endif
    f.ctx.sp = sp;
#else
    getcontext(&f.ctx.uc);
    f.ctx.uc.uc_stack.ss_sp = f.stack_lo;
    f.ctx.uc.uc_stack.ss_size = f.stack_bytes;
    f.ctx.uc.uc_link = nullptr;
    uintptr_t a = (uintptr_t)&f;
    makecontext(&f.ctx.uc, (void (*)())emu_fiber_trampoline_uc, 2, (unsigned)(a & 0xffffffffu), (unsigned)(a >> 32));
#endif
    (void)w;
}

#if EMU_CTX_UCONTEXT
extern "C" void emu_fiber_trampoline_uc(unsigned lo, unsigned hi) {
    emu_fiber_main((Fiber*)(((uintptr_t)hi << 32) | lo));
}
#endif

static inline void resume(Worker& w, Fiber& f) {
    ++tls_switches;
    emu_tls_threadIdx = f.tid;
    tls_fiber = &f;
    switch_ctx(w.sched, f.ctx);
    tls_fiber = nullptr;
}

// Called on the fiber: back to the scheduler. Returns when the scheduler resumes this fiber.
static inline void yield_to_scheduler(Worker& w, Fiber& f) { switch_ctx(f.ctx, w.sched); }

// Called on a fiber that parks (collective, barrier, yield, exit): switches straight to the next
// runnable lane of the same warp (one switch instead of two through the scheduler), or to the
// scheduler when no lane of the warp is left to run in this pass.
void park_and_switch(Worker& w, Fiber& f) {
    Warp& W = w.warps[f.warp];
    unsigned r = W.runnable;
    if (!r) {
        yield_to_scheduler(w, f);
        return;
    }
    unsigned l = (unsigned)__builtin_ctz(r);
    W.runnable = r & (r - 1);
    Fiber& n = w.fibers[W.first + l];
    ++tls_switches;
    emu_tls_threadIdx = n.tid;
    tls_fiber = &n;
    switch_ctx(f.ctx, n.ctx);
}

[[noreturn]] void fiber_fail(Worker& w, Fiber& f, const std::string& msg) {
    tls_preemptible = 0;
    block_error(w, msg);
    f.state = ST_DONE;
    yield_to_scheduler(w, f);  // never resumed
    abort();
}

void yield_fiber(Worker& w, Fiber& f, uint8_t reason) {
    f.state = ST_YIELD;
    f.yield_reason = reason;
    w.warps[f.warp].yielded |= 1u << f.lane;
    park_and_switch(w, f);
    f.state = ST_RUNNABLE;
}

[[noreturn]] void fiber_fault(Worker& w, Fiber& f, int fault, unsigned long long addr, bool has_addr,
                              const std::string& detail) {
    tls_preemptible = 0;
    Launch& L = *w.L;
    {
        std::lock_guard<std::mutex> g(L.mu);
        if (L.report->kind == 0) {
            EmuReport* r = L.report;
            r->kind = 3;
            r->fault = fault;
            r->has_thread = 1;
            r->block[0] = w.bidx.x, r->block[1] = w.bidx.y, r->block[2] = w.bidx.z;
            r->thread[0] = f.tid.x, r->thread[1] = f.tid.y, r->thread[2] = f.tid.z;
            r->has_address = has_addr;
            r->address = addr;
            copy_message(r, detail);
        }
        L.failed.store(true);
    }
    w.failed = true;
    f.state = ST_DONE;
    yield_to_scheduler(w, f);  // never resumed
    abort();
}

// ---------------------------------------------------------------------------- warp collectives
// PTX shfl.sync semantics. c = ((32 - width) << 8) | clamp with clamp = 0 for up, 0x1f otherwise.
// Returns the source lane (own lane when the source is outside the sub-section).
static unsigned shfl_src(int op, unsigned lane, unsigned b, int width) {
    unsigned segmask = (unsigned)(32 - width) & 31u;
    unsigned cval = op == EMU_OP_SHFL_UP ? 0u : 31u;
    int maxLane = (int)((lane & segmask) | (cval & ~segmask));
    int minLane = (int)(lane & segmask);
    unsigned bval = b & 31u;
    int j = 0;
    bool pval = false;
    switch (op) {
        case EMU_OP_SHFL_UP: j = (int)lane - (int)bval; pval = j >= maxLane; break;
        case EMU_OP_SHFL_DOWN: j = (int)lane + (int)bval; pval = j <= maxLane; break;
        case EMU_OP_SHFL_XOR: j = (int)(lane ^ bval); pval = j <= maxLane; break;
        default: j = minLane | (int)(bval & ~segmask); pval = j <= maxLane; break;
    }
    return pval ? (unsigned)j : lane;
}

// Completes the collective of the lanes in M (all parked with the same op and mask).
static bool execute_collective(Worker& w, Warp& W, unsigned M) {
    Fiber* F = &w.fibers[W.first];
    int op = F[__builtin_ctz(M)].op;
    ++w.progress;
    if (op <= EMU_OP_SHFL_XOR) {
        for (unsigned m = M; m; m &= m - 1) {
            unsigned l = (unsigned)__builtin_ctz(m);
            unsigned j = shfl_src(op, l, (unsigned)F[l].arg, F[l].width);
            if (!(M >> j & 1u)) {
                block_error(w, fmt("%s(mask=0x%08x) at %s: lane %u (thread %u) reads lane %u (thread %u), which is not "
                                   "in the mask (CUDA: undefined result).",
                                   op_name(op), M, where(F[l].file, F[l].line).c_str(), l, W.first + l, j, W.first + j));
                return false;
            }
            F[l].result = F[j].value;
        }
    } else if (op == EMU_OP_SYNCWARP) {
        // nothing to exchange
    } else if (op == EMU_OP_MMA || op == EMU_OP_LDMATRIX) {
        execute_tensor_collective(w, W, M);
    } else if (op >= EMU_OP_REDUX_ADD && op <= EMU_OP_REDUX_XOR) {
        // redux.sync: add wraps mod 2^32; min and max compare as signed when arg is 1.
        const bool is_signed = F[__builtin_ctz(M)].arg == 1;
        unsigned r = (unsigned)F[__builtin_ctz(M)].value;
        for (unsigned m = M & (M - 1); m; m &= m - 1) {
            const unsigned v = (unsigned)F[__builtin_ctz(m)].value;
            switch (op) {
                case EMU_OP_REDUX_ADD: r += v; break;
                case EMU_OP_REDUX_MIN: r = is_signed ? ((int)v < (int)r ? v : r) : (v < r ? v : r); break;
                case EMU_OP_REDUX_MAX: r = is_signed ? ((int)v > (int)r ? v : r) : (v > r ? v : r); break;
                case EMU_OP_REDUX_AND: r &= v; break;
                case EMU_OP_REDUX_OR: r |= v; break;
                default: r ^= v; break;
            }
        }
        for (unsigned m = M; m; m &= m - 1) F[__builtin_ctz(m)].result = r;
    } else {
        unsigned bits = 0;
        for (unsigned m = M; m; m &= m - 1) {
            unsigned l = (unsigned)__builtin_ctz(m);
            if (F[l].value) bits |= 1u << l;
        }
        unsigned long long r = op == EMU_OP_BALLOT ? bits : op == EMU_OP_ANY ? (bits != 0) : (bits == M);
        for (unsigned m = M; m; m &= m - 1) F[__builtin_ctz(m)].result = r;
    }
    return true;
}

// The lanes a collective with mask M waits for: for __syncwarp, lanes that have exited count as
// arrived (CUDA allows __syncwarp after some lanes of its mask returned); for every exchange
// they do not.
static inline unsigned waits_for(int op, unsigned M, const Warp& W) {
    return op == EMU_OP_SYNCWARP ? (M & ~W.exited) : M;
}

// Completes every collective whose whole mask has arrived. Returns true if any completed.
static bool complete_collectives(Worker& w, Warp& W) {
    Fiber* F = &w.fibers[W.first];
    unsigned pending = W.parked;
    bool progress = false;
    while (pending) {
        unsigned l = (unsigned)__builtin_ctz(pending);
        unsigned M = F[l].mask;
        int op = F[l].op;
        if (op == EMU_OP_ACTIVEMASK) {
            unsigned G = 0;
            for (unsigned m = pending; m; m &= m - 1) {
                const Fiber& g = F[__builtin_ctz(m)];
                if (g.op == EMU_OP_ACTIVEMASK && g.line == F[l].line && (g.file == F[l].file || !strcmp(g.file, F[l].file)))
                    G |= 1u << __builtin_ctz(m);
            }
            for (unsigned m = G; m; m &= m - 1) F[__builtin_ctz(m)].result = G;
            W.parked &= ~G;
            W.runnable |= G;
            pending &= ~G;
            progress = true;
            ++w.progress;
            continue;
        }
        unsigned need = waits_for(op, M, W);
        bool ok = (need & ~W.parked) == 0;
        for (unsigned m = need; ok && m; m &= m - 1) {
            const Fiber& g = F[__builtin_ctz(m)];
            ok = g.op == op && g.mask == M;
        }
        if (!ok) {
            pending &= ~(1u << l);
            continue;
        }
        if (!execute_collective(w, W, need)) return false;
        W.parked &= ~need;
        W.runnable |= need;
        pending &= ~need;
        progress = true;
    }
    return progress;
}

// The warp cannot make progress: explain why its first parked collective can never complete.
static void report_stuck_warp(Worker& w, unsigned wi) {
    Warp& W = w.warps[wi];
    const Launch& L = *w.L;
    Fiber* F = &w.fibers[W.first];
    unsigned l = (unsigned)__builtin_ctz(W.parked);
    unsigned M = F[l].mask;
    int op = F[l].op;
    unsigned same = 0;
    for (unsigned m = W.parked & M; m; m &= m - 1) {
        unsigned j = (unsigned)__builtin_ctz(m);
        if (F[j].op == op && F[j].mask == M) same |= 1u << j;
    }
    std::string msg = fmt("warp %u: %s(mask=0x%08x) at %s can never complete: %s wait there, but ", wi, op_name(op), M,
                          where(F[l].file, F[l].line).c_str(), thread_list(L, lanes_to_ids(W, same)).c_str());
    std::vector<std::string> why;
    unsigned ex = waits_for(op, M, W) & W.exited;
    if (ex) why.push_back(thread_list(L, lanes_to_ids(W, ex)) + " named in the mask exited");
    unsigned bar = M & W.at_bar;
    if (bar) {
        unsigned b = (unsigned)__builtin_ctz(bar);
        why.push_back(thread_list(L, lanes_to_ids(W, bar)) + " named in the mask wait at " + bar_name(F[b].bar_kind) +
                      "() at " + where(F[b].file, F[b].line) + " (deadlock)");
    }
    unsigned other = M & W.parked & ~same;
    while (other) {
        unsigned j = (unsigned)__builtin_ctz(other);
        unsigned grp = 0;
        for (unsigned m = other; m; m &= m - 1) {
            unsigned k = (unsigned)__builtin_ctz(m);
            if (F[k].op == F[j].op && F[k].mask == F[j].mask && F[k].line == F[j].line) grp |= 1u << k;
        }
        why.push_back(thread_list(L, lanes_to_ids(W, grp)) + fmt(" named in the mask wait at a different collective, %s(mask=0x%08x) at %s",
                                                                  op_name(F[j].op), F[j].mask, where(F[j].file, F[j].line).c_str()));
        other &= ~grp;
    }
    if (why.empty()) why.push_back("the collective could not be matched");
    for (size_t i = 0; i < why.size(); ++i) msg += (i ? "; " : "") + why[i];
    msg += ".";
    block_error(w, msg);
}

// Runs one warp until all its lanes wait at __syncthreads, have yielded or have exited.
static void run_warp(Worker& w, unsigned wi) {
    Warp& W = w.warps[wi];
    Fiber* F = &w.fibers[W.first];
    for (;;) {
        unsigned r = W.runnable;
        if (!r) {
            if (!W.parked) return;
            if (complete_collectives(w, W)) continue;
            // A collective may wait for a lane that yielded: try again next pass.
            if (W.yielded) return;
            if (!w.failed) report_stuck_warp(w, wi);
            return;
        }
        // Resume the first runnable lane; lanes hand over to each other (park_and_switch) and the
        // last one of this pass comes back here.
        unsigned l = (unsigned)__builtin_ctz(r);
        W.runnable = r & (r - 1);
        resume(w, F[l]);
        if (w.failed) return;
    }
}

static unsigned long long now_ns() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

static const char* yield_reason(uint8_t r) {
    switch (r) {
        case Y_ATOMIC: return "polling with an atomic";
        case Y_FENCE: return "at a memory fence";
        case Y_SLEEP: return "in __nanosleep";
        case Y_PREEMPT: return "in a loop without atomics or barriers, a volatile load perhaps";
        case Y_MBAR: return "waiting on an mbarrier";
        case Y_NAMED_BAR: return "waiting at a named barrier";
        case Y_CLUSTER_BAR: return "waiting at barrier.cluster";
    }
    return "?";
}

// What the threads of one block do when it is stuck, in words: who waits where, who spins, who
// exited.
static std::vector<std::string> stuck_parts(const Worker& w) {
    const Launch& L = *w.L;
    std::vector<std::string> parts;
    // Threads at an mbarrier, a named barrier or barrier.cluster (hopper.h): grouped by what they
    // wait for.
    {
        std::vector<bool> used(L.nthreads, false);
        for (unsigned t = 0; t < L.nthreads; ++t) {
            const Fiber& f = w.fibers[t];
            if (used[t] || f.state != ST_YIELD || !hopper_wait(f.yield_reason)) continue;
            std::vector<unsigned> ids;
            for (unsigned u = t; u < L.nthreads; ++u) {
                const Fiber& o = w.fibers[u];
                if (!used[u] && o.state == ST_YIELD && o.yield_reason == f.yield_reason && o.wait_obj == f.wait_obj &&
                    o.wait_parity == f.wait_parity && o.line == f.line) {
                    used[u] = true;
                    ids.push_back(u);
                }
            }
            parts.push_back(thread_list(L, ids) + (ids.size() == 1 ? " waits " : " wait ") + describe_hopper_wait(w, f));
        }
    }
    for (int reason = Y_ATOMIC; reason <= Y_PREEMPT; ++reason) {
        std::vector<unsigned> ids;
        for (unsigned t = 0; t < L.nthreads; ++t)
            if (w.fibers[t].state == ST_YIELD && w.fibers[t].yield_reason == reason) ids.push_back(t);
        if (!ids.empty())
            parts.push_back(thread_list(L, ids) + (ids.size() == 1 ? " keeps" : " keep") + " spinning (" +
                            yield_reason((uint8_t)reason) + ")");
    }
    std::vector<unsigned> bar, coll, done;
    for (unsigned t = 0; t < L.nthreads; ++t) {
        uint8_t s = w.fibers[t].state;
        if (s == ST_AT_BAR) bar.push_back(t);
        else if (s == ST_AT_WARP) coll.push_back(t);
        else if (s == ST_DONE) done.push_back(t);
    }
    auto verb = [](const std::vector<unsigned>& ids, const char* one, const char* many) { return ids.size() == 1 ? one : many; };
    if (!bar.empty()) {
        const Fiber& f = w.fibers[bar[0]];
        parts.push_back(thread_list(L, bar) + verb(bar, " waits at ", " wait at ") + bar_name(f.bar_kind) + "() at " +
                        where(f.file, f.line));
    }
    if (!coll.empty()) {
        const Fiber& f = w.fibers[coll[0]];
        parts.push_back(thread_list(L, coll) + verb(coll, " waits at ", " wait at ") + op_name(f.op) + " at " +
                        where(f.file, f.line));
    }
    if (!done.empty()) parts.push_back(thread_list(L, done) + verb(done, " has exited", " have exited"));
    return parts;
}

// No thread of the block (of the cluster, with clusters) made progress for the deadlock timeout
// while some spin (ms > 0), or every thread that can still run waits for other threads that
// never come (ms = 0): say who does what.
static void report_deadlock(Worker& w, unsigned long long ms) {
    const Launch& L = *w.L;
    const bool cluster = L.csize > 1;
    std::string msg = ms ? fmt("deadlock: no thread %smade progress for %llu ms", cluster ? "of the cluster " : "", ms)
                         : fmt("deadlock: every thread %sthat can still run waits on an mbarrier, a named barrier or "
                               "barrier.cluster that no thread will complete",
                               cluster ? "of the cluster " : "");
    std::string body;
    if (!cluster) {
        std::vector<std::string> parts = stuck_parts(w);
        for (size_t i = 0; i < parts.size(); ++i) body += (i ? "; " : ": ") + parts[i];
    } else {
        // Every block of the cluster, rank by rank (the others are parked between their turns, so
        // their state is still).
        const ClusterGroup& g = *w.cg;
        for (unsigned r = 0; r < g.n; ++r) {
            const Worker& o = *g.ranks[r];
            std::vector<std::string> parts = stuck_parts(o);
            body += fmt("%s block (%u,%u,%u), rank %u:", r ? "." : ":", o.bidx.x, o.bidx.y, o.bidx.z, r);
            if (!o.block_live && parts.empty()) body += " has exited";
            for (size_t i = 0; i < parts.size(); ++i) body += (i ? "; " : " ") + parts[i];
        }
    }
    msg += body;
    if (ms)
        msg += fmt(". A spin-wait whose flag no thread will set never ends on a GPU either; if this is a long "
                   "computation instead, raise the limit (MOE_EMU_DEADLOCK_SECS, or the device's setting).");
    else
        msg += ". The GPU would hang here.";
    w.failed = true;
    if (cluster) {
        const ClusterGroup& g = *w.cg;
        const Worker& r0 = *g.ranks[0];
        set_report(*w.L, 4,
                   fmt("cluster of blocks (%u,%u,%u) to (%u,%u,%u) [grid (%u,%u,%u), block (%u,%u,%u), cluster "
                       "(%u,%u,%u)]: ",
                       r0.bidx.x, r0.bidx.y, r0.bidx.z, r0.bidx.x + L.cx - 1, r0.bidx.y + L.cy - 1,
                       r0.bidx.z + L.cz - 1, L.gx, L.gy, L.gz, L.bx, L.by, L.bz, L.cx, L.cy, L.cz) +
                       msg);
    } else {
        set_report(*w.L, 4, block_prefix(w) + msg);
    }
}

unsigned cluster_exited(const Worker& w) {
    unsigned n = 0;
    for (const Worker* o : w.cg->ranks) n += o->done;
    return n;
}

// Block b's start: its dynamic shared memory filled with 0xFF, every thread runnable at the
// kernel's first line.
static void block_start(Worker& w, unsigned long long b) {
    Launch& L = *w.L;
    w.bidx = uint3{(unsigned)(b % L.gx), (unsigned)((b / L.gx) % L.gy), (unsigned)(b / ((unsigned long long)L.gx * L.gy))};
    emu_tls_blockIdx = w.bidx;
    if (L.dyn_bytes) {
        memset(w.dyn, 0xFF, L.dyn_bytes);
        memset(w.async_view.data(), 0xFF, L.dyn_bytes);
        std::fill(w.view_epoch.begin(), w.view_epoch.end(), 0u);
    }
    w.fence_epoch = 0;
    w.done = 0;
    w.stall_progress = ~0ull;
    w.hopper.reset(L.nthreads);
    w.hopper_idle_passes = 0;
    w.block_live = true;
    for (unsigned t = 0; t < L.nthreads; ++t) {
        Fiber& f = w.fibers[t];
        f.state = ST_RUNNABLE;
        f.yield_reason = Y_NONE;
        fiber_init(w, f);
    }
    for (unsigned wi = 0; wi < L.nwarps; ++wi) {
        Warp& W = w.warps[wi];
        W.runnable = W.exist;
        W.parked = W.at_bar = W.yielded = W.exited = 0;
    }
}

// The progress the deadlock timer watches: the block's, or the whole cluster's.
static unsigned long long watched_progress(const Worker& w) {
    if (w.L->csize == 1) return w.progress;
    unsigned long long p = 0;
    for (const Worker* o : w.cg->ranks) p += o->progress;
    return p;
}

// One scheduling pass of the block: every warp runs until its lanes wait, have yielded or have
// exited; then a __syncthreads that every live thread reached is released (or reported).
// Returns true when the block is over (every thread exited, or an error).
static bool block_pass(Worker& w) {
    Launch& L = *w.L;
    if (L.failed.load(std::memory_order_relaxed)) {
        w.failed = true;
        return true;
    }
    unsigned yielded = 0;
    const unsigned long long pass_progress = w.progress;
    for (unsigned wi = 0; wi < L.nwarps; ++wi) {
        run_warp(w, wi);
        if (w.failed) return true;
        yielded |= w.warps[wi].yielded;
    }
    // Threads that wait on an mbarrier, at a named barrier or at barrier.cluster wait for other
    // threads of this block (or cluster; a TMA copy lands when it is issued): when every thread
    // that gave way waits there and two passes in a row (of every block of the cluster) moved
    // nothing, nothing ever will.
    bool idle = yielded && w.progress == pass_progress;
    for (unsigned t = 0; idle && t < L.nthreads; ++t) {
        const Fiber& f = w.fibers[t];
        idle = f.state != ST_YIELD || hopper_wait(f.yield_reason);
    }
    if (L.csize > 1) {
        ClusterGroup& g = *w.cg;
        unsigned live = 0;
        for (const Worker* o : g.ranks) live += o->block_live;
        g.idle_streak = idle ? g.idle_streak + 1 : 0;
        if (g.idle_streak >= 2 * live) {
            report_deadlock(w, 0);
            return true;
        }
    } else {
        w.hopper_idle_passes = idle ? w.hopper_idle_passes + 1 : 0;
        if (w.hopper_idle_passes >= 2) {
            report_deadlock(w, 0);
            return true;
        }
    }
    if (w.done == L.nthreads) return true;
    if (yielded) {
        // Some threads spin or were preempted: run them again, unless nothing has moved for
        // the deadlock timeout.
        const unsigned long long p = watched_progress(w);
        if (p != w.stall_progress) {
            w.stall_progress = p;
            w.stall_since_ns = now_ns();
        } else if (now_ns() - w.stall_since_ns >= L.deadlock_ms * 1000000ull) {
            report_deadlock(w, L.deadlock_ms);
            return true;
        }
        for (unsigned wi = 0; wi < L.nwarps; ++wi) {
            Warp& W = w.warps[wi];
            W.runnable |= W.yielded;
            W.yielded = 0;
        }
        return false;
    }
    // Every live thread waits at a barrier: check it can be released (without allocating:
    // this runs at every barrier; the lists are built only for an error message).
    const Fiber* first = nullptr;
    bool mixed = false, paths = false, any_exited = false;
    for (unsigned t = 0; t < L.nthreads; ++t) {
        const Fiber& f = w.fibers[t];
        if (f.state == ST_AT_BAR) {
            if (!first) {
                first = &f;
            } else if (f.line != first->line || f.bar_kind != first->bar_kind ||
                       (f.file != first->file && strcmp(f.file, first->file) != 0)) {
                mixed = true;
            } else if (f.bar_path != first->bar_path) {
                paths = true;
            }
        } else if (f.state == ST_DONE) {
            any_exited = true;
        }
    }
    std::vector<unsigned> waiting, exited;
    if (first && (any_exited || mixed || paths)) {
        for (unsigned t = 0; t < L.nthreads; ++t) {
            if (w.fibers[t].state == ST_AT_BAR) waiting.push_back(t);
            else if (w.fibers[t].state == ST_DONE) exited.push_back(t);
        }
    }
    if (!first) {
        // Nothing waits at a barrier and nothing can run: every warp reported or exited.
        return true;
    }
    if (!exited.empty()) {
        block_error(w, fmt("%s() at %s can never complete: %s wait there, but %s exited without reaching it.",
                           bar_name(first->bar_kind), where(first->file, first->line).c_str(),
                           thread_list(L, waiting).c_str(), thread_list(L, exited).c_str()));
        return true;
    }
    if (mixed || paths) {
        // Group by call site (and by call path, for one site reached through different calls).
        std::string msg = mixed ? "threads of the block wait at different barriers (divergent __syncthreads): "
                                : "threads of the block wait at the same __syncthreads() reached through different "
                                  "calls (a barrier inside a helper function called from divergent branches): ";
        std::vector<bool> used(L.nthreads, false);
        bool firstg = true;
        int group = 0;
        for (unsigned t : waiting) {
            if (used[t]) continue;
            const Fiber& f = w.fibers[t];
            std::vector<unsigned> g;
            for (unsigned u : waiting) {
                const Fiber& o = w.fibers[u];
                if (!used[u] && o.line == f.line && !strcmp(o.file, f.file) && o.bar_kind == f.bar_kind &&
                    o.bar_path == f.bar_path) {
                    used[u] = true;
                    g.push_back(u);
                }
            }
            msg += (firstg ? "" : "; ") + thread_list(L, g) + " at " + bar_name(f.bar_kind) + "() " +
                   where(f.file, f.line) + (mixed ? "" : fmt(" via call path %d", ++group));
            firstg = false;
        }
        block_error(w, msg + ".");
        return true;
    }
    // Release.
    int count = 0;
    for (unsigned t = 0; t < L.nthreads; ++t) count += w.fibers[t].bar_pred;
    int kind0 = first->bar_kind;
    int res = kind0 == 1 ? count : kind0 == 2 ? (count == (int)L.nthreads) : kind0 == 3 ? (count != 0) : 0;
    for (unsigned t = 0; t < L.nthreads; ++t) {
        w.fibers[t].state = ST_RUNNABLE;
        w.fibers[t].bar_result = res;
    }
    for (unsigned wi = 0; wi < L.nwarps; ++wi) {
        Warp& W = w.warps[wi];
        W.runnable = W.at_bar;
        W.at_bar = 0;
    }
    ++w.progress;
    return false;
}

// Runs block b to the end on this worker (a launch without clusters).
static void run_block(Worker& w, unsigned long long b) {
    block_start(w, b);
    while (!block_pass(w)) {
    }
    w.block_live = false;
}

static unsigned worker_setting() {
    static unsigned v = [] {
        unsigned n = std::thread::hardware_concurrency();
        if (n == 0) n = 1;
        if (const char* s = getenv("MOE_EMU_THREADS")) {
            long x = strtol(s, nullptr, 10);
            if (x >= 1) n = (unsigned)std::min(x, 1024L);
        }
        return n;
    }();
    return v;
}

// The floating-point control state of a worker thread (see the context switch).
struct FpEnv {
    unsigned mxcsr = 0;
    unsigned short x87 = 0;
    unsigned long long fpcr = 0;
};
static FpEnv set_ieee_fp_env() {
    FpEnv e;
#if defined(__x86_64__)
    asm volatile("stmxcsr %0" : "=m"(e.mxcsr));
    asm volatile("fnstcw %0" : "=m"(e.x87));
    unsigned mx = 0x1F80;           // all exceptions masked, round to nearest, no FTZ, no DAZ
    unsigned short cw = 0x037F;     // the x87 default
    asm volatile("ldmxcsr %0" : : "m"(mx));
    asm volatile("fldcw %0" : : "m"(cw));
#elif defined(__aarch64__)
    asm volatile("mrs %0, fpcr" : "=r"(e.fpcr));
    unsigned long long z = 0;       // round to nearest, no flush to zero, no default NaN
    asm volatile("msr fpcr, %0" : : "r"(z));
#endif
    return e;
}
static void restore_fp_env(const FpEnv& e) {
#if defined(__x86_64__)
    asm volatile("ldmxcsr %0" : : "m"(e.mxcsr));
    asm volatile("fldcw %0" : : "m"(e.x87));
#elif defined(__aarch64__)
    asm volatile("msr fpcr, %0" : : "r"(e.fpcr));
#else
    (void)e;
#endif
}

// ---------------------------------------------------------------------------- clusters
// The ranks of a group take turns (ClusterGroup): waits until it is `rank`'s.
static void wait_turn(ClusterGroup& g, unsigned rank) {
    for (int i = 0; i < 256; ++i) {
        if (g.turn.load(std::memory_order_acquire) == rank) return;
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
    }
    std::unique_lock<std::mutex> lk(g.mu);
    g.cv.wait(lk, [&] { return g.turn.load(std::memory_order_acquire) == rank; });
}
// Hands the turn to the next rank whose block still runs (this one again if it is the last).
static void pass_turn(ClusterGroup& g, unsigned rank) {
    unsigned next = ~0u;
    for (unsigned i = 1; i <= g.n; ++i) {
        const unsigned r = (rank + i) % g.n;
        if (g.ranks[r] && g.ranks[r]->block_live) {
            next = r;
            break;
        }
    }
    {
        std::lock_guard<std::mutex> lk(g.mu);
        g.turn.store(next, std::memory_order_release);
    }
    g.cv.notify_all();
}
// The gathering is complete (g.mu held): with `claim`, take the next cluster (or find none left,
// or the launch failed), and let the ranks that wait go on.
static void end_gathering(ClusterGroup& g, Launch& L, bool claim) {
    g.gathered = 0;
    if (claim) {
        const unsigned long long c = L.failed.load() ? L.nclusters : L.next.fetch_add(1);
        g.stop = c >= L.nclusters;
        g.cluster = c;
        g.bar_arrived = g.bar_gen = g.idle_streak = 0;
        g.turn.store(0, std::memory_order_release);
    }
    ++g.gather_gen;
}
// Every rank of the group meets here; with `claim`, the last to come takes the next cluster and
// the others learn which. Returns false when the group is done.
static bool gather(ClusterGroup& g, Launch& L, bool claim) {
    std::unique_lock<std::mutex> lk(g.mu);
    const unsigned gen = g.gather_gen;
    if (++g.gathered + g.missing == g.n) {
        end_gathering(g, L, claim);
        lk.unlock();
        g.cv.notify_all();
        lk.lock();
    } else {
        g.cv.wait(lk, [&] { return g.gather_gen != gen; });
    }
    return !g.stop;
}
// `k` ranks of the group whose threads could not be started (the launch has failed): they are
// counted as arrived, so the ranks that did start, all at their first gathering, stop there
// instead of waiting for them.
static void abandon_ranks(ClusterGroup& g, Launch& L, unsigned k) {
    {
        std::lock_guard<std::mutex> lk(g.mu);
        g.missing += k;
        if (g.gathered + g.missing != g.n) return;  // (a group none of whose ranks started: no one waits)
        end_gathering(g, L, true);
    }
    g.cv.notify_all();
}
// The linear index of the block of rank `rank` in cluster c (clusters numbered x first, as
// blocks are; a rank is the block's linear index inside its cluster, %cluster_ctarank).
static unsigned long long cluster_block(const Launch& L, unsigned long long c, unsigned rank) {
    const unsigned long long ncx = L.gx / L.cx, ncy = L.gy / L.cy;
    const unsigned long long x = (c % ncx) * L.cx + rank % L.cx;
    const unsigned long long y = ((c / ncx) % ncy) * L.cy + (rank / L.cx) % L.cy;
    const unsigned long long z = (c / (ncx * ncy)) * L.cz + rank / (L.cx * L.cy);
    return x + y * L.gx + z * (unsigned long long)L.gx * L.gy;
}

// A worker OS thread: blocks one after another (g null), or rank `rank` of every cluster its
// group takes.
static void worker_main(Launch* L, ClusterGroup* g, unsigned rank) {
    Worker w;
    w.L = L;
    w.cg = g ? g : &w.solo;
    w.rank = g ? rank : 0;
    w.solo.ranks.assign(1, &w);
    w.tls_anchor = reinterpret_cast<unsigned char*>(&emu_tls_threadIdx);
    if (g) g->ranks[rank] = &w;
    // Kernels run with IEEE defaults (round to nearest, no flush to zero, exceptions masked),
    // whatever the calling thread set; its own state comes back afterwards.
    FpEnv saved_fp = set_ieee_fp_env();
    w.stacks = acquire_stacks(L->nthreads);
    if (!w.stacks) {
        set_report(*L, 1, fmt("could not map fiber stacks (%u threads x %zu KiB): %s", L->nthreads,
                              stack_bytes_setting() / 1024, strerror(errno)));
        if (g) gather(*g, *L, true);  // the group's other ranks wait for this one: they all stop
        restore_fp_env(saved_fp);
        return;
    }
    w.fibers.resize(L->nthreads);
    w.warps.resize(L->nwarps);
    for (unsigned t = 0; t < L->nthreads; ++t) {
        Fiber& f = w.fibers[t];
        f.linear = t;
        f.tid = uint3{t % L->bx, (t / L->bx) % L->by, t / (L->bx * L->by)};
        f.lane = t % 32;
        f.warp = t / 32;
        f.stack_lo = w.stacks->base + (size_t)t * w.stacks->stride + stack_guard_size();
        f.stack_bytes = w.stacks->stack_bytes;
    }
    for (unsigned wi = 0; wi < L->nwarps; ++wi) {
        Warp& W = w.warps[wi];
        W.first = wi * 32;
        unsigned n = std::min(32u, L->nthreads - wi * 32);
        W.exist = n == 32 ? 0xffffffffu : ((1u << n) - 1u);
    }
    void* dyn_mem = nullptr;
    if (L->dyn_bytes) {
        // On 1024 bytes, as hopper.h's shared window needs (the 128-byte swizzle is a function of
        // the address bits).
        size_t cap = (L->dyn_bytes + 1023) / 1024 * 1024;
        dyn_mem = aligned_alloc(1024, cap);
        w.dyn = static_cast<unsigned char*>(dyn_mem);
        w.async_view.resize(cap);
        w.view_epoch.resize(cap / 16);
    }
    Worker* saved_worker = tls_worker;
    uint3 saved[4] = {emu_tls_threadIdx, emu_tls_blockIdx, emu_tls_blockDim, emu_tls_gridDim};
    void* saved_dyn = emu_tls_dyn_shared;
    tls_worker = &w;
    emu_tls_blockDim = uint3{L->bx, L->by, L->bz};
    emu_tls_gridDim = uint3{L->gx, L->gy, L->gz};
    emu_tls_dyn_shared = w.dyn;
    WorkerSignals sig;
    worker_signals_begin(sig);
    if (!g) {
        while (!L->failed.load(std::memory_order_relaxed)) {
            unsigned long long b = L->next.fetch_add(1);
            if (b >= L->nblocks) break;
            run_block(w, b);
            if (w.failed) break;
        }
    } else {
        // A cluster: every rank starts its block, then they take turns, a pass each, until every
        // block is over; then the next cluster.
        while (gather(*g, *L, true)) {
            block_start(w, cluster_block(*L, g->cluster, rank));
            gather(*g, *L, false);
            for (;;) {
                wait_turn(*g, rank);
                const bool over = block_pass(w);
                if (over) w.block_live = false;
                pass_turn(*g, rank);
                if (over) break;
            }
        }
    }
    worker_signals_end(sig);
    tls_worker = saved_worker;
    emu_tls_threadIdx = saved[0];
    emu_tls_blockIdx = saved[1];
    emu_tls_blockDim = saved[2];
    emu_tls_gridDim = saved[3];
    emu_tls_dyn_shared = saved_dyn;
    free(dyn_mem);
    release_stacks(w.stacks);
    restore_fp_env(saved_fp);
}

// The emulator's kernels may be built for this CPU's vector and FMA instructions (the build
// decides, see moe-kernels-build); refuse to run them on a CPU that lacks them.
static const char* cpu_problem() {
#if defined(__x86_64__) && defined(MOE_EMU_KERNELS_FMA)
    static const char* p = [] () -> const char* {
        __builtin_cpu_init();
        if (!__builtin_cpu_supports("fma") || !__builtin_cpu_supports("avx2"))
            return "this build of the emulator's kernels uses FMA and AVX2 instructions, which this CPU lacks: "
                   "rebuild on this machine (or set MOE_EMU_ARCH=generic when building)";
        return nullptr;
    }();
    return p;
#else
    return nullptr;
#endif
}

}  // namespace emu_rt

// ------------------------------------------------------------------------------------------------
// Fiber body and the device-side entry points declared in cuda_emu.h
// ------------------------------------------------------------------------------------------------
extern "C" void emu_fiber_main(Fiber* f) {
    Worker& w = *tls_worker;
    tls_preemptible = 1;
    w.L->fn(w.L->params);
    tls_preemptible = 0;
    Warp& W = w.warps[f->warp];
    f->state = ST_DONE;
    W.exited |= 1u << f->lane;
    ++w.done;
    ++w.progress;
    park_and_switch(w, *f);  // never resumed
    abort();
}

[[noreturn]] static void outside_kernel(const char* what) {
    fprintf(stderr, "emu: %s called outside of an emulated kernel launch\n", what);
    abort();
}
static inline Fiber& current_fiber(const char* what) {
    Fiber* f = tls_fiber;
    if (__builtin_expect(!f, 0)) outside_kernel(what);
    return *f;
}

// A hash of the return addresses from the function that holds the barrier up to the fiber's
// entry, through the frame pointer chain (the emulator builds with -fno-omit-frame-pointer):
// two threads at the same source line reached through different calls of a helper function get
// different hashes. The innermost return address (into the function that holds the barrier) is
// left out: compilers duplicate a barrier call into both arms of a preceding branch, which would
// make one barrier look like two. So a helper that the compiler inlined is not told apart from
// its caller.
static uint64_t call_path(const Fiber& f, void** fp) {
    uint64_t h = 1469598103934665603ull;
    const char* lo = f.stack_lo;
    const char* hi = f.stack_lo + f.stack_bytes;
    // `fp`: the frame of the function that holds the barrier; fp[1] returns into its caller.
    for (int depth = 0; depth < 24; ++depth) {
        if ((const char*)fp < lo || (const char*)fp + 2 * sizeof(void*) > hi || ((uintptr_t)fp & 7)) break;
        h = (h ^ (uint64_t)(uintptr_t)fp[1]) * 1099511628211ull;
        void** next = (void**)fp[0];
        if (next <= fp) break;
        fp = next;
    }
    return h;
}

// The frame of the function that called the runtime entry point this expands in (its saved frame
// pointer).
#define EMU_CALLER_FRAME() ((void**)((void**)__builtin_frame_address(0))[0])

static void bar_wait(int kind, int pred, int line, const char* file, void** caller) {
    Fiber& f = current_fiber("__syncthreads()");
    Worker& w = *tls_worker;
    tls_preemptible = 0;
    f.state = ST_AT_BAR;
    f.bar_kind = kind;
    f.bar_pred = pred;
    f.line = line;
    f.file = file;
    f.bar_path = call_path(f, caller);
    w.warps[f.warp].at_bar |= 1u << f.lane;
    ++w.progress;
    park_and_switch(w, f);
    tls_preemptible = 1;
}

void emu_syncthreads(int line, const char* file) { bar_wait(0, 0, line, file, EMU_CALLER_FRAME()); }
int emu_syncthreads_count(int pred, int line, const char* file) {
    bar_wait(1, pred, line, file, EMU_CALLER_FRAME());
    return tls_fiber->bar_result;
}
int emu_syncthreads_and(int pred, int line, const char* file) {
    bar_wait(2, pred, line, file, EMU_CALLER_FRAME());
    return tls_fiber->bar_result;
}
int emu_syncthreads_or(int pred, int line, const char* file) {
    bar_wait(3, pred, line, file, EMU_CALLER_FRAME());
    return tls_fiber->bar_result;
}

static void collective_checks(Worker& w, Warp& W, Fiber& f, int op, unsigned mask, int width, int line,
                              const char* file) {
    if (!(mask & (1u << f.lane)))
        fiber_fail(w, f, fmt("%s(mask=0x%08x) at %s called by lane %u (thread %u), which is not in its own mask.",
                             op_name(op), mask, where(file, line).c_str(), f.lane, f.linear));
    if (mask & ~W.exist)
        fiber_fail(w, f, fmt("%s(mask=0x%08x) at %s (thread %u): the mask names lanes 0x%08x that do not exist in "
                             "warp %u (the block has %u threads).",
                             op_name(op), mask, where(file, line).c_str(), f.linear, mask & ~W.exist, f.warp,
                             w.L->nthreads));
    if (op <= EMU_OP_SHFL_XOR && (width < 1 || width > 32 || (width & (width - 1))))
        fiber_fail(w, f, fmt("%s at %s (thread %u): width %d is not a power of two in [1, 32].", op_name(op),
                             where(file, line).c_str(), f.linear, width));
    if ((mask & W.exited) && op != EMU_OP_SYNCWARP)
        fiber_fail(w, f, fmt("warp %u: %s(mask=0x%08x) at %s (thread %u) can never complete: %s named in the mask "
                             "exited.",
                             f.warp, op_name(op), mask, where(file, line).c_str(), f.linear,
                             thread_list(*w.L, lanes_to_ids(W, mask & W.exited)).c_str()));
}

// Parks the calling lane at collective `op`; returns when the collective completed.
static unsigned long long park_at_collective(Fiber& f, Worker& w, int op, unsigned mask, unsigned long long value,
                                             unsigned size, int arg, int width, void* payload, int line,
                                             const char* file) {
    Warp& W = w.warps[f.warp];
    unsigned bit = 1u << f.lane;
    if (__builtin_expect(!(mask & bit) || (mask & ~W.exist) || (mask & W.exited) || width != 32, 0))
        collective_checks(w, W, f, op, mask, width, line, file);
    f.op = op;
    f.mask = mask;
    f.value = value;
    f.size = size;
    f.arg = arg;
    f.width = width;
    f.payload = payload;
    f.line = line;
    f.file = file;
    f.state = ST_AT_WARP;
    W.parked |= bit;
    park_and_switch(w, f);
    f.state = ST_RUNNABLE;
    return f.result;
}

unsigned long long emu_warp_collective(int op, unsigned mask, unsigned long long value, unsigned size, int arg,
                                       int width, int line, const char* file) {
    Fiber* fp = tls_fiber;
    if (__builtin_expect(!fp, 0)) outside_kernel(op_name(op));
    tls_preemptible = 0;
    unsigned long long r = park_at_collective(*fp, *tls_worker, op, mask, value, size, arg, width, nullptr, line, file);
    tls_preemptible = 1;
    return r;
}

// Tensor-core fragments (emu/mma.h): a collective of the full warp whose operands travel by
// pointer to each lane's stack.
void emu_tensor_collective(int op, void* payload, int line, const char* file) {
    Fiber& f = current_fiber(op == EMU_OP_MMA ? "moe_mma_m16n8k16_bf16" : "moe_ldmatrix");
    Worker& w = *tls_worker;
    tls_preemptible = 0;
    if (w.warps[f.warp].exist != 0xffffffffu)
        fiber_fail(w, f, fmt("%s at %s (thread %u): tensor-core instructions need a full warp of 32 threads, but "
                             "the block has %u threads.",
                             op_name(op), where(file, line).c_str(), f.linear, w.L->nthreads));
    park_at_collective(f, w, op, 0xffffffffu, 0, 0, 0, 32, payload, line, file);
    tls_preemptible = 1;
}

// __activemask(): a scheduling point. The lane parks; when no lane of the warp can run, every lane
// parked at the same __activemask() call receives the mask of those lanes (the lanes that would
// execute it converged on the hardware).
unsigned emu_activemask(int line, const char* file) {
    Fiber& f = current_fiber("__activemask()");
    Worker& w = *tls_worker;
    tls_preemptible = 0;
    f.op = EMU_OP_ACTIVEMASK;
    f.mask = 1u << f.lane;
    f.line = line;
    f.file = file;
    f.state = ST_AT_WARP;
    w.warps[f.warp].parked |= 1u << f.lane;
    park_and_switch(w, f);
    f.state = ST_RUNNABLE;
    tls_preemptible = 1;
    return (unsigned)f.result;
}

// A polling point (an atomic every 32 calls, a fence, __nanosleep): let the other threads run, so
// a thread that waits for another's flag sees it.
void emu_yield(int reason) {
    Fiber* f = tls_fiber;
    if (!f) return;
    tls_preemptible = 0;
    yield_fiber(*tls_worker, *f, (uint8_t)reason);
    tls_preemptible = 1;
}

void emu_kernel_fail(const char* what, int line, const char* file) {
    Fiber& f = current_fiber(what);
    Worker& w = *tls_worker;
    fiber_fail(w, f, fmt("%s at %s in thread %u (threadIdx %u,%u,%u).", what, where(file, line).c_str(), f.linear,
                         f.tid.x, f.tid.y, f.tid.z));
}

// ------------------------------------------------------------------------------------------------
// ABI
// ------------------------------------------------------------------------------------------------
extern "C" unsigned emu_worker_count(void) { return worker_setting(); }

extern "C" int emu_launch(emu_kernel_fn fn, void** params, unsigned grid_x, unsigned grid_y, unsigned grid_z,
                          unsigned block_x, unsigned block_y, unsigned block_z, size_t dynamic_shared_bytes,
                          unsigned device, unsigned long long deadlock_ms, EmuReport* report) {
    memset(report, 0, sizeof *report);
    unsigned long long nthreads = (unsigned long long)block_x * block_y * block_z;
    unsigned long long nblocks = (unsigned long long)grid_x * grid_y * grid_z;
    std::string cfg = fmt("grid (%u,%u,%u), block (%u,%u,%u), %zu bytes of dynamic shared memory", grid_x, grid_y,
                          grid_z, block_x, block_y, block_z, dynamic_shared_bytes);
    std::string bad;
    if (const char* p = cpu_problem()) {
        report->kind = 5;
        copy_message(report, p);
        return 5;
    }
    if (!fn)
        bad = "no kernel function";
    else if (nthreads == 0 || nthreads > 1024)
        bad = fmt("the block has %llu threads; CUDA allows 1 to 1024", nthreads);
    else if (block_z > 64)
        bad = "blockDim.z > 64";
    else if (nblocks == 0)
        bad = "a grid dimension is 0";
    else if (grid_x > 2147483647u || grid_y > 65535u || grid_z > 65535u)
        bad = "grid dimension over CUDA's limit (x < 2^31, y and z <= 65535)";
    else if (dynamic_shared_bytes > 232448)
        bad = "more dynamic shared memory than any current GPU allows per block (227 KiB)";
    // The kernel's cluster shape (__cluster_dims__): the trampoline names the kernel it calls
    // (emu_trampoline.h), whose section holds the shape (cuda_emu.h).
    unsigned cdims[3] = {1, 1, 1};
    if (bad.empty()) {
        emu_tls_probe = 1;
        emu_tls_probe_kernel = nullptr;
        fn(params);
        emu_tls_probe = 0;
        kernel_cluster_dims(emu_tls_probe_kernel, cdims);
        const unsigned long long cs = (unsigned long long)cdims[0] * cdims[1] * cdims[2];
        cfg += cs > 1 ? fmt(", clusters of (%u,%u,%u) blocks", cdims[0], cdims[1], cdims[2]) : "";
        if (cs > 8)
            bad = "a cluster of more than 8 blocks (CUDA's portable limit; the emulator models no larger)";
        else if (grid_x % cdims[0] || grid_y % cdims[1] || grid_z % cdims[2])
            bad = "the grid is not a whole number of clusters";
    }
    if (!bad.empty()) {
        report->kind = 1;
        copy_message(report, "invalid launch configuration (" + cfg + "): " + bad + ".");
        return 1;
    }
    install_signal_handlers();
    Launch L;
    L.fn = fn;
    L.params = params;
    L.gx = grid_x;
    L.gy = grid_y;
    L.gz = grid_z;
    L.bx = block_x;
    L.by = block_y;
    L.bz = block_z;
    L.nthreads = (unsigned)nthreads;
    L.nwarps = (L.nthreads + 31) / 32;
    L.nblocks = nblocks;
    L.cx = cdims[0];
    L.cy = cdims[1];
    L.cz = cdims[2];
    L.csize = cdims[0] * cdims[1] * cdims[2];
    L.nclusters = nblocks / L.csize;
    L.dyn_bytes = dynamic_shared_bytes;
    L.device = device;
    L.deadlock_ms = deadlock_ms;
    L.report = report;
    std::vector<std::thread> extra;
    // The cluster groups are freed only after the joins below: when this thread (rank 0 of group
    // 0) returns, the other ranks of its own group may still be leaving their last gathering,
    // and another group's cluster may still be running.
    std::vector<std::unique_ptr<ClusterGroup>> groups;
    if (L.csize == 1) {
        unsigned nw = (unsigned)std::min<unsigned long long>(worker_setting(), nblocks);
        try {
            for (unsigned i = 1; i < nw; ++i) extra.emplace_back(worker_main, &L, nullptr, 0u);
        } catch (...) {
            // fewer workers is fine
        }
        worker_main(&L, nullptr, 0);
    } else {
        // Groups of one worker per rank (as many groups as the workers make, at least one); this
        // thread is rank 0 of group 0.
        const unsigned ng = (unsigned)std::max<unsigned long long>(
            1, std::min<unsigned long long>(worker_setting() / L.csize, L.nclusters));
        for (unsigned i = 0; i < ng; ++i) {
            groups.emplace_back(new ClusterGroup);
            groups.back()->n = L.csize;
            groups.back()->ranks.assign(L.csize, nullptr);
        }
        bool started = true;
        for (unsigned i = 0; i < ng && started; ++i)
            for (unsigned r = 0; r < L.csize; ++r) {
                if (i == 0 && r == 0) continue;
                try {
                    extra.emplace_back(worker_main, &L, groups[i].get(), r);
                } catch (...) {
                    // A rank that cannot start: the launch fails, no more threads are started,
                    // and the ranks of this group that never will are counted as arrived, so
                    // that the ones that did start (and this thread, in group 0) stop where they
                    // meet.
                    set_report(L, 1, fmt("could not start the %u worker threads a cluster of %u blocks needs",
                                         L.csize, L.csize));
                    abandon_ranks(*groups[i], L, L.csize - r);
                    started = false;
                    break;
                }
            }
        worker_main(&L, groups[0].get(), 0);
    }
    for (auto& t : extra) t.join();
    if (report->kind == 0) {
        std::string msg;
        if (!check_padding(device, msg)) {
            report->kind = 3;
            report->fault = 2;
            copy_message(report, msg);
        }
    }
    return report->kind;
}
