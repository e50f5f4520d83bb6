// emu_runtime.cpp -- runtime of the CPU emulator of CUDA (see README.md).
//
// Compiled once and linked into every binary that contains emulated kernels:
//   g++ -std=c++17 -O2 -ffp-contract=off -pthread -c emu_runtime.cpp
//
// Model: one CUDA thread = one fiber with its own stack. A block runs to completion on one worker
// OS thread. The worker's own stack is the scheduler context: it runs the runnable lanes of one
// warp in lane order; each lane runs until it reaches a warp collective, __syncthreads or returns.
// When a warp has no runnable lane, collectives whose whole mask has arrived complete and their
// lanes become runnable again; a warp whose lanes all wait at __syncthreads (or have exited) hands
// over to the next warp. When every warp is at the barrier, it is released (or an error is
// reported). Workers pull block indices from an atomic counter.
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include "cuda_emu.h"

typedef void (*emu_kernel_fn)(void** params);

// Built-in variables (declared in cuda_emu.h).
__thread uint3 emu_tls_threadIdx;
__thread uint3 emu_tls_blockIdx;
__thread uint3 emu_tls_blockDim;
__thread uint3 emu_tls_gridDim;
__thread void* emu_tls_dyn_shared;

// ------------------------------------------------------------------------------------------------
// Context switch
// ------------------------------------------------------------------------------------------------
#if defined(MOE_EMU_FORCE_UCONTEXT)
#define EMU_CTX_UCONTEXT 1
#include <ucontext.h>
#elif defined(__x86_64__) && (defined(__linux__) || defined(__APPLE__))
#define EMU_CTX_ASM 1
#define EMU_CTX_X86_64 1
#elif defined(__aarch64__) && (defined(__linux__) || defined(__APPLE__))
#define EMU_CTX_ASM 1
#define EMU_CTX_AARCH64 1
#else
#define EMU_CTX_UCONTEXT 1
#include <ucontext.h>
#endif

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
// void emu_ctx_switch(void** save_sp, void* new_sp): saves the callee-saved registers and the
// floating-point control state on the current stack, stores the stack pointer to *save_sp,
// switches to new_sp and restores the same frame from there. No system call.
// emu_fiber_entry: first "return" target of a fresh fiber; calls fn(arg) (fn/arg in callee-saved
// registers of the initial frame). fn never returns.
extern "C" void emu_ctx_switch(void** save_sp, void* new_sp);
extern "C" void emu_fiber_entry(void);
#if EMU_CTX_X86_64
// Frame (from sp): [0] mxcsr (4 bytes) + x87 control word (2), [8] pad, [16] r12, [24] r13,
// [32] r14, [40] r15, [48] rbx, [56] rbp, [64] return address.
asm(".text\n"
    EMU_FUNC_BEGIN(emu_ctx_switch)
    "    pushq %rbp\n"
    "    pushq %rbx\n"
    "    pushq %r15\n"
    "    pushq %r14\n"
    "    pushq %r13\n"
    "    pushq %r12\n"
    "    subq $16, %rsp\n"
    "    stmxcsr (%rsp)\n"
    "    fnstcw 4(%rsp)\n"
    "    movq %rsp, (%rdi)\n"
    "    movq %rsi, %rsp\n"
    "    ldmxcsr (%rsp)\n"
    "    fldcw 4(%rsp)\n"
    "    addq $16, %rsp\n"
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
static const size_t kFrameWords = 9;
#elif EMU_CTX_AARCH64
// Frame (176 bytes from sp): x19..x30 at [0..96), d8..d15 at [96..160), fpcr at [160].
asm(".text\n"
    EMU_FUNC_BEGIN(emu_ctx_switch)
    "    sub sp, sp, #176\n"
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
    "    mrs x9, fpcr\n"
    "    str x9, [sp, #160]\n"
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
    "    ldr x9, [sp, #160]\n"
    "    msr fpcr, x9\n"
    "    add sp, sp, #176\n"
    "    ret\n"
    EMU_FUNC_END(emu_ctx_switch)
    EMU_FUNC_BEGIN(emu_fiber_entry)
    "    mov x0, x19\n"
    "    blr x20\n"
    "    brk #0\n"
    EMU_FUNC_END(emu_fiber_entry));
static const size_t kFrameWords = 22;
#endif
#endif  // EMU_CTX_ASM

namespace {

enum FiberState : uint8_t { ST_RUNNABLE, ST_AT_WARP, ST_AT_BAR, ST_DONE };

// A saved execution context: a stack pointer for the assembly switch, a ucontext otherwise.
struct Ctx {
    void* sp = nullptr;
#if EMU_CTX_UCONTEXT
    ucontext_t uc;
#endif
};

// Saves the running context into `save` and continues in `to`.
inline void switch_ctx(Ctx& save, Ctx& to) {
#if EMU_CTX_ASM
    emu_ctx_switch(&save.sp, to.sp);
#else
    swapcontext(&save.uc, &to.uc);
#endif
}

struct Fiber {
    Ctx ctx;
    uint3 tid{0, 0, 0};
    unsigned linear = 0, lane = 0, warp = 0;
    uint8_t state = ST_RUNNABLE;
    // pending warp collective / barrier
    int op = 0;
    unsigned mask = 0;
    int arg = 0;
    int width = 32;
    unsigned size = 4;
    unsigned long long value = 0, result = 0;
    int line = 0;
    const char* file = "";
    int bar_kind = 0, bar_pred = 0, bar_result = 0;
    char* stack_lo = nullptr;
    size_t stack_bytes = 0;
};

struct Warp {
    unsigned first = 0;     // linear id of lane 0
    unsigned exist = 0;     // lanes that exist (partial last warp)
    unsigned runnable = 0;  // lanes to resume
    unsigned parked = 0;    // lanes waiting at a warp collective
    unsigned at_bar = 0;    // lanes waiting at __syncthreads
    unsigned exited = 0;    // lanes whose kernel returned
};

// Fiber stacks: one mapping per set, a PROT_NONE guard region below each stack. Sets are pooled and
// reused by later workers / launches.
struct StackSet {
    char* base = nullptr;
    size_t map_len = 0, stride = 0, stack_bytes = 0;
    unsigned count = 0;
};
std::mutex g_stack_mu;
std::vector<StackSet*> g_stack_pool;

size_t page_size() {
    static size_t ps = (size_t)sysconf(_SC_PAGESIZE);
    return ps;
}
// Guard below each stack: at least 64 KiB (address space only), so that a frame of a few KiB
// cannot jump over it.
size_t guard_size() {
    static size_t g = std::max<size_t>(page_size(), 64 * 1024) / page_size() * page_size();
    return g;
}
size_t stack_bytes_setting() {
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

StackSet* acquire_stacks(unsigned n) {
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
    s->stride = want + guard_size();
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
    for (unsigned i = 0; i < count; ++i) mprotect(s->base + i * s->stride, guard_size(), PROT_NONE);
    return s;
}
void release_stacks(StackSet* s) {
    if (!s) return;
    std::lock_guard<std::mutex> g(g_stack_mu);
    g_stack_pool.push_back(s);
}

struct Launch {
    emu_kernel_fn fn;
    void** params;
    unsigned gx, gy, gz, bx, by, bz;
    unsigned nthreads, nwarps;
    unsigned long long nblocks;
    size_t dyn_bytes;
    std::atomic<unsigned long long> next{0};
    std::atomic<bool> failed{false};
    std::mutex mu;
    std::string err;
};

struct Worker {
    Ctx sched;
    Launch* L = nullptr;
    std::vector<Fiber> fibers;
    std::vector<Warp> warps;
    StackSet* stacks = nullptr;
    unsigned char* dyn = nullptr;
    bool failed = false;  // error raised in the current block
    unsigned done = 0;    // exited threads of the current block
    uint3 bidx{0, 0, 0};
    unsigned mxcsr_fpcw[2] = {0, 0};
};

__thread Worker* tls_worker = nullptr;
__thread Fiber* tls_fiber = nullptr;

// ---------------------------------------------------------------------------- error formatting
std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, sizeof buf, f, ap);
    va_end(ap);
    return buf;
}
const char* base_name(const char* p) {
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
const char* op_name(int op) {
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
    }
    return "?";
}
const char* bar_name(int k) {
    switch (k) {
        case 1: return "__syncthreads_count";
        case 2: return "__syncthreads_and";
        case 3: return "__syncthreads_or";
    }
    return "__syncthreads";
}

std::string block_prefix(const Worker& w) {
    const Launch& L = *w.L;
    return fmt("emu: kernel error in block (%u,%u,%u) [grid (%u,%u,%u), block (%u,%u,%u)]: ", w.bidx.x, w.bidx.y,
               w.bidx.z, L.gx, L.gy, L.gz, L.bx, L.by, L.bz);
}

void set_launch_error(Launch& L, const std::string& msg) {
    std::lock_guard<std::mutex> g(L.mu);
    if (L.err.empty()) L.err = msg;
    L.failed.store(true);
}
void block_error(Worker& w, const std::string& msg) {
    w.failed = true;
    set_launch_error(*w.L, block_prefix(w) + msg);
}

// ---------------------------------------------------------------------------- fibers
extern "C" void emu_fiber_main(Fiber* f);
#if EMU_CTX_UCONTEXT
extern "C" void emu_fiber_trampoline_uc(unsigned lo, unsigned hi);
#endif

void fiber_init(Worker& w, Fiber& f) {
#if EMU_CTX_ASM
    uintptr_t top = (uintptr_t)(f.stack_lo + f.stack_bytes) & ~(uintptr_t)15;
    void** sp = (void**)(top - kFrameWords * sizeof(void*));
    memset(sp, 0, kFrameWords * sizeof(void*));
#if EMU_CTX_X86_64
    memcpy(&sp[0], w.mxcsr_fpcw, 8);       // mxcsr, x87 control word of the worker
    sp[2] = (void*)&f;                      // r12: argument
    sp[6] = (void*)&emu_fiber_main;         // rbx: function
    sp[8] = (void*)&emu_fiber_entry;        // return address
#else
    sp[0] = (void*)&f;                      // x19: argument
    sp[1] = (void*)&emu_fiber_main;         // x20: function
    sp[11] = (void*)&emu_fiber_entry;       // x30: return address
    uint64_t fpcr;
    asm volatile("mrs %0, fpcr" : "=r"(fpcr));
    sp[20] = (void*)(uintptr_t)fpcr;
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

inline void resume(Worker& w, Fiber& f) {
    emu_tls_threadIdx = f.tid;
    tls_fiber = &f;
    switch_ctx(w.sched, f.ctx);
    tls_fiber = nullptr;
}

// Called on the fiber: back to the scheduler. Returns when the scheduler resumes this fiber.
inline void yield_to_scheduler(Worker& w, Fiber& f) { switch_ctx(f.ctx, w.sched); }

// Called on a fiber that parks (collective, barrier, exit): switches straight to the next runnable
// lane of the same warp (one switch instead of two through the scheduler), or to the scheduler
// when no lane of the warp is left to run in this pass.
inline void park_and_switch(Worker& w, Fiber& f) {
    Warp& W = w.warps[f.warp];
    unsigned r = W.runnable;
    if (!r) {
        yield_to_scheduler(w, f);
        return;
    }
    unsigned l = (unsigned)__builtin_ctz(r);
    W.runnable = r & (r - 1);
    Fiber& n = w.fibers[W.first + l];
    emu_tls_threadIdx = n.tid;
    tls_fiber = &n;
    switch_ctx(f.ctx, n.ctx);
}

[[noreturn]] void fiber_fail(Worker& w, Fiber& f, const std::string& msg) {
    block_error(w, msg);
    f.state = ST_DONE;
    yield_to_scheduler(w, f);  // never resumed
    abort();
}

// ---------------------------------------------------------------------------- warp collectives
// PTX shfl.sync semantics. c = ((32 - width) << 8) | clamp with clamp = 0 for up, 0x1f otherwise.
// Returns the source lane (own lane when the source is outside the sub-section).
unsigned shfl_src(int op, unsigned lane, unsigned b, int width) {
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
bool execute_collective(Worker& w, Warp& W, unsigned M) {
    Fiber* F = &w.fibers[W.first];
    int op = F[__builtin_ctz(M)].op;
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

// Completes every collective whose whole mask has arrived. Returns true if any completed.
bool complete_collectives(Worker& w, Warp& W) {
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
            continue;
        }
        bool ok = (M & ~W.parked) == 0;
        for (unsigned m = M; ok && m; m &= m - 1) {
            const Fiber& g = F[__builtin_ctz(m)];
            ok = g.op == op && g.mask == M;
        }
        if (!ok) {
            pending &= ~(1u << l);
            continue;
        }
        if (!execute_collective(w, W, M)) return false;
        W.parked &= ~M;
        W.runnable |= M;
        pending &= ~M;
        progress = true;
    }
    return progress;
}

// The warp cannot make progress: explain why its first parked collective can never complete.
void report_stuck_warp(Worker& w, unsigned wi) {
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
    unsigned ex = M & W.exited;
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

// Runs one warp until all its lanes wait at __syncthreads or have exited.
void run_warp(Worker& w, unsigned wi) {
    Warp& W = w.warps[wi];
    Fiber* F = &w.fibers[W.first];
    for (;;) {
        unsigned r = W.runnable;
        if (!r) {
            if (!W.parked) return;
            if (complete_collectives(w, W)) continue;
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

void run_block(Worker& w, unsigned long long b) {
    Launch& L = *w.L;
    w.bidx = uint3{(unsigned)(b % L.gx), (unsigned)((b / L.gx) % L.gy), (unsigned)(b / ((unsigned long long)L.gx * L.gy))};
    emu_tls_blockIdx = w.bidx;
    if (L.dyn_bytes) memset(w.dyn, 0xFF, L.dyn_bytes);
    w.done = 0;
    for (unsigned t = 0; t < L.nthreads; ++t) {
        Fiber& f = w.fibers[t];
        f.state = ST_RUNNABLE;
        fiber_init(w, f);
    }
    for (unsigned wi = 0; wi < L.nwarps; ++wi) {
        Warp& W = w.warps[wi];
        W.runnable = W.exist;
        W.parked = W.at_bar = W.exited = 0;
    }
    for (;;) {
        for (unsigned wi = 0; wi < L.nwarps; ++wi) {
            run_warp(w, wi);
            if (w.failed) return;
        }
        if (w.done == L.nthreads) return;
        // Every live thread waits at a barrier: check it can be released.
        std::vector<unsigned> waiting, exited;
        int line0 = -1, kind0 = -1;
        const char* file0 = "";
        bool mixed = false;
        for (unsigned t = 0; t < L.nthreads; ++t) {
            const Fiber& f = w.fibers[t];
            if (f.state == ST_AT_BAR) {
                waiting.push_back(t);
                if (line0 < 0) {
                    line0 = f.line;
                    file0 = f.file;
                    kind0 = f.bar_kind;
                } else if (f.line != line0 || f.bar_kind != kind0 || (f.file != file0 && strcmp(f.file, file0) != 0)) {
                    mixed = true;
                }
            } else if (f.state == ST_DONE) {
                exited.push_back(t);
            }
        }
        if (!exited.empty()) {
            block_error(w, fmt("%s() at %s can never complete: %s wait there, but %s exited without reaching it.",
                               bar_name(kind0), where(file0, line0).c_str(), thread_list(L, waiting).c_str(),
                               thread_list(L, exited).c_str()));
            return;
        }
        if (mixed) {
            // group by call site
            std::string msg = "threads of the block wait at different barriers (divergent __syncthreads): ";
            std::vector<bool> used(L.nthreads, false);
            bool first = true;
            for (unsigned t : waiting) {
                if (used[t]) continue;
                const Fiber& f = w.fibers[t];
                std::vector<unsigned> g;
                for (unsigned u : waiting)
                    if (!used[u] && w.fibers[u].line == f.line && !strcmp(w.fibers[u].file, f.file) &&
                        w.fibers[u].bar_kind == f.bar_kind) {
                        used[u] = true;
                        g.push_back(u);
                    }
                msg += (first ? "" : "; ") + thread_list(L, g) + " at " + bar_name(f.bar_kind) + "() " + where(f.file, f.line);
                first = false;
            }
            block_error(w, msg + ".");
            return;
        }
        // Release.
        int count = 0;
        for (unsigned t = 0; t < L.nthreads; ++t) count += w.fibers[t].bar_pred;
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
        if (L.failed.load(std::memory_order_relaxed)) {
            w.failed = true;
            return;
        }
    }
}

void worker_main(Launch* L) {
    Worker w;
    w.L = L;
#if EMU_CTX_X86_64
    asm volatile("stmxcsr %0" : "=m"(w.mxcsr_fpcw[0]));
    unsigned short cw;
    asm volatile("fnstcw %0" : "=m"(cw));
    w.mxcsr_fpcw[1] = cw;
#endif
    w.stacks = acquire_stacks(L->nthreads);
    if (!w.stacks) {
        set_launch_error(*L, fmt("emu: could not map fiber stacks (%u threads x %zu KiB): %s", L->nthreads,
                                 stack_bytes_setting() / 1024, strerror(errno)));
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
        f.stack_lo = w.stacks->base + (size_t)t * w.stacks->stride + guard_size();
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
        size_t cap = (L->dyn_bytes + 63) / 64 * 64;
        dyn_mem = aligned_alloc(64, cap);
        w.dyn = static_cast<unsigned char*>(dyn_mem);
    }
    Worker* saved_worker = tls_worker;
    uint3 saved[4] = {emu_tls_threadIdx, emu_tls_blockIdx, emu_tls_blockDim, emu_tls_gridDim};
    void* saved_dyn = emu_tls_dyn_shared;
    tls_worker = &w;
    emu_tls_blockDim = uint3{L->bx, L->by, L->bz};
    emu_tls_gridDim = uint3{L->gx, L->gy, L->gz};
    emu_tls_dyn_shared = w.dyn;
    while (!L->failed.load(std::memory_order_relaxed)) {
        unsigned long long b = L->next.fetch_add(1);
        if (b >= L->nblocks) break;
        run_block(w, b);
        if (w.failed) break;
    }
    tls_worker = saved_worker;
    emu_tls_threadIdx = saved[0];
    emu_tls_blockIdx = saved[1];
    emu_tls_blockDim = saved[2];
    emu_tls_gridDim = saved[3];
    emu_tls_dyn_shared = saved_dyn;
    free(dyn_mem);
    release_stacks(w.stacks);
}

unsigned worker_setting() {
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

void write_err(char* err, size_t err_len, const std::string& msg) {
    if (!err || err_len == 0) return;
    size_t n = std::min(msg.size(), err_len - 1);
    memcpy(err, msg.data(), n);
    err[n] = 0;
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// Fiber body and the device-side entry points declared in cuda_emu.h
// ------------------------------------------------------------------------------------------------
extern "C" void emu_fiber_main(Fiber* f) {
    Worker& w = *tls_worker;
    w.L->fn(w.L->params);
    Warp& W = w.warps[f->warp];
    f->state = ST_DONE;
    W.exited |= 1u << f->lane;
    ++w.done;
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

static void bar_wait(int kind, int pred, int line, const char* file) {
    Fiber& f = current_fiber("__syncthreads()");
    Worker& w = *tls_worker;
    f.state = ST_AT_BAR;
    f.bar_kind = kind;
    f.bar_pred = pred;
    f.line = line;
    f.file = file;
    w.warps[f.warp].at_bar |= 1u << f.lane;
    park_and_switch(w, f);
}

void emu_syncthreads(int line, const char* file) { bar_wait(0, 0, line, file); }
int emu_syncthreads_count(int pred, int line, const char* file) {
    bar_wait(1, pred, line, file);
    return tls_fiber->bar_result;
}
int emu_syncthreads_and(int pred, int line, const char* file) {
    bar_wait(2, pred, line, file);
    return tls_fiber->bar_result;
}
int emu_syncthreads_or(int pred, int line, const char* file) {
    bar_wait(3, pred, line, file);
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
    if (mask & W.exited)
        fiber_fail(w, f, fmt("warp %u: %s(mask=0x%08x) at %s (thread %u) can never complete: %s named in the mask "
                             "exited.",
                             f.warp, op_name(op), mask, where(file, line).c_str(), f.linear,
                             thread_list(*w.L, lanes_to_ids(W, mask & W.exited)).c_str()));
}

unsigned long long emu_warp_collective(int op, unsigned mask, unsigned long long value, unsigned size, int arg,
                                       int width, int line, const char* file) {
    Fiber* fp = tls_fiber;
    if (__builtin_expect(!fp, 0)) outside_kernel(op_name(op));
    Fiber& f = *fp;
    Worker& w = *tls_worker;
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
    f.line = line;
    f.file = file;
    f.state = ST_AT_WARP;
    W.parked |= bit;
    park_and_switch(w, f);
    f.state = ST_RUNNABLE;
    return f.result;
}

// __activemask(): a scheduling point. The lane parks; when no lane of the warp can run, every lane
// parked at the same __activemask() call receives the mask of those lanes (the lanes that would
// execute it converged on the hardware).
unsigned emu_activemask(int line, const char* file) {
    Fiber& f = current_fiber("__activemask()");
    Worker& w = *tls_worker;
    f.op = EMU_OP_ACTIVEMASK;
    f.mask = 1u << f.lane;
    f.line = line;
    f.file = file;
    f.state = ST_AT_WARP;
    w.warps[f.warp].parked |= 1u << f.lane;
    park_and_switch(w, f);
    f.state = ST_RUNNABLE;
    return (unsigned)f.result;
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
                          unsigned block_x, unsigned block_y, unsigned block_z, size_t dynamic_shared_bytes, char* err,
                          size_t err_len) {
    if (err && err_len) err[0] = 0;
    unsigned long long nthreads = (unsigned long long)block_x * block_y * block_z;
    unsigned long long nblocks = (unsigned long long)grid_x * grid_y * grid_z;
    std::string cfg = fmt("grid (%u,%u,%u), block (%u,%u,%u), %zu bytes of dynamic shared memory", grid_x, grid_y,
                          grid_z, block_x, block_y, block_z, dynamic_shared_bytes);
    std::string bad;
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
    if (!bad.empty()) {
        write_err(err, err_len, "emu: invalid launch configuration (" + cfg + "): " + bad + ".");
        return 1;
    }
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
    L.dyn_bytes = dynamic_shared_bytes;
    unsigned nw = (unsigned)std::min<unsigned long long>(worker_setting(), nblocks);
    std::vector<std::thread> extra;
    try {
        for (unsigned i = 1; i < nw; ++i) extra.emplace_back(worker_main, &L);
    } catch (...) {
        // fewer workers is fine
    }
    worker_main(&L);
    for (auto& t : extra) t.join();
    if (L.failed.load()) {
        write_err(err, err_len, L.err);
        return 2;
    }
    return 0;
}
