// emu_internal.h -- the emulator runtime's own state, shared by its four files:
//   emu_runtime.cpp  fibers, the scheduler, barriers, warp collectives, emu_launch
//   emu_memory.cpp   device memory with guard pages, the buffer registry, overrun checks
//   emu_signals.cpp  faults (SIGSEGV, SIGBUS, SIGFPE, SIGILL) and preemption of spinning threads
//   emu_tensor.cpp   tensor-core fragments (mma.sync, ldmatrix) as warp collectives
// Not included by kernels: they see only cuda_emu.h.
#ifndef MOE_EMU_INTERNAL_H
#define MOE_EMU_INTERNAL_H

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_emu.h"
#include "emu_abi.h"

// ------------------------------------------------------------------------------------------------
// Context switch: a few instructions of assembly on x86-64 and aarch64 (Linux, macOS), ucontext
// elsewhere or with -DMOE_EMU_FORCE_UCONTEXT (emu_runtime.cpp).
// ------------------------------------------------------------------------------------------------
#if defined(MOE_EMU_FORCE_UCONTEXT)
#define EMU_CTX_UCONTEXT 1
#elif defined(__x86_64__) && (defined(__linux__) || defined(__APPLE__))
#define EMU_CTX_ASM 1
#define EMU_CTX_X86_64 1
#elif defined(__aarch64__) && (defined(__linux__) || defined(__APPLE__))
#define EMU_CTX_ASM 1
#define EMU_CTX_AARCH64 1
#else
#define EMU_CTX_UCONTEXT 1
#endif
#if EMU_CTX_UCONTEXT
#include <ucontext.h>
#endif

namespace emu_rt {

// A saved execution context: a stack pointer for the assembly switch, a ucontext otherwise.
struct Ctx {
    void* sp = nullptr;
#if EMU_CTX_UCONTEXT
    ucontext_t uc;
#endif
};

enum FiberState : uint8_t { ST_RUNNABLE, ST_AT_WARP, ST_AT_BAR, ST_YIELD, ST_DONE };
// Why a fiber yielded: it polled (an atomic, a fence, __nanosleep), the preemption timer stopped
// it, or it waits for an mbarrier's phase, at a named barrier or at barrier.cluster (hopper.h).
enum YieldReason : uint8_t { Y_NONE, Y_ATOMIC, Y_FENCE, Y_SLEEP, Y_PREEMPT, Y_MBAR, Y_NAMED_BAR, Y_CLUSTER_BAR };
// Whether a thread that yielded waits for other threads (an mbarrier, a named barrier,
// barrier.cluster) rather than spinning.
static inline bool hopper_wait(uint8_t reason) {
    return reason == Y_MBAR || reason == Y_NAMED_BAR || reason == Y_CLUSTER_BAR;
}

struct Fiber {
    Ctx ctx;
    uint3 tid{0, 0, 0};
    unsigned linear = 0, lane = 0, warp = 0;
    uint8_t state = ST_RUNNABLE;
    uint8_t yield_reason = Y_NONE;
    // pending warp collective / barrier
    int op = 0;
    unsigned mask = 0;
    int arg = 0;
    int width = 32;
    unsigned size = 4;
    unsigned long long value = 0, result = 0;
    void* payload = nullptr;  // EMU_OP_MMA / EMU_OP_LDMATRIX: this lane's operands, on its stack
    int line = 0;
    const char* file = "";
    int bar_kind = 0, bar_pred = 0, bar_result = 0;
    uint64_t bar_path = 0;  // hash of the call path to the barrier (helper functions included)
    char* stack_lo = nullptr;
    size_t stack_bytes = 0;
    // Y_MBAR: the mbarrier and the parity it waits for; Y_NAMED_BAR: the barrier's id;
    // Y_CLUSTER_BAR: the cluster and the barrier's generation (line, file: where it waits).
    const void* wait_obj = nullptr;
    unsigned wait_parity = 0;
};

// One wgmma a thread issued and the runtime has not executed yet (hopper.h).
struct WgOp {
    float* d;                 // the thread's accumulators (N / 2)
    int n;                    // wgmma's N
    unsigned long long a, b;  // the descriptors
    unsigned group;           // its commit group, ~0u until committed
    unsigned fence_epoch;     // the block's proxy-fence count when it was issued
    uint64_t operands_hash;   // first thread of a warpgroup: A's and B's bytes at issue
    int line;
    const char* file;
    float in[128];  // the accumulators it starts from (filled by the previous wgmma on d when chained)
};
// The Hopper state of the block in flight: each thread's wgmma queue and the named barriers.
struct HopperBlock {
    struct Thread {
        std::vector<WgOp> ops;
        unsigned committed = 0;  // groups committed so far
    };
    std::vector<Thread> threads;
    unsigned nb_arrived[16] = {}, nb_gen[16] = {}, nb_count[16] = {};
    void reset(unsigned nthreads) {
        threads.resize(nthreads);
        for (Thread& t : threads) {
            t.ops.clear();
            t.committed = 0;
        }
        for (int i = 0; i < 16; ++i) nb_arrived[i] = nb_gen[i] = nb_count[i] = 0;
    }
};

struct Warp {
    unsigned first = 0;     // linear id of lane 0
    unsigned exist = 0;     // lanes that exist (partial last warp)
    unsigned runnable = 0;  // lanes to resume
    unsigned parked = 0;    // lanes waiting at a warp collective
    unsigned at_bar = 0;    // lanes waiting at __syncthreads
    unsigned yielded = 0;   // lanes that gave way (polling or preempted); run again next pass
    unsigned exited = 0;    // lanes whose kernel returned
};

struct StackSet {
    char* base = nullptr;
    size_t map_len = 0, stride = 0, stack_bytes = 0;
    unsigned count = 0;
};

struct Worker;
// The blocks of one cluster (a kernel with __cluster_dims__, hopper.h). Each rank runs on its own
// worker OS thread, because static __shared__ variables are thread_local, but only one of them
// runs at a time: they take turns, one scheduling pass each, in rank order, so every thread of
// the cluster progresses, a wait on another block's barrier is met, and the run is deterministic
// (and the runtime's state needs no locks). A launch without clusters has one rank per group.
struct ClusterGroup {
    unsigned n = 1;                          // blocks per cluster
    std::vector<Worker*> ranks;              // the group's workers, by rank
    std::mutex mu;
    std::condition_variable cv;
    std::atomic<unsigned> turn{0};           // the rank whose pass it is
    unsigned gathered = 0, gather_gen = 0;   // ranks at the gathering between clusters
    unsigned missing = 0;                    // ranks whose thread never started (counted as arrived)
    unsigned long long cluster = 0;          // the cluster in flight
    bool stop = false;                       // no cluster left (or the launch failed)
    unsigned bar_arrived = 0, bar_gen = 0;   // barrier.cluster: arrivals in its current phase
    unsigned idle_streak = 0;                // passes in a row in which only waiters ran, in vain
};

struct Launch {
    emu_kernel_fn fn;
    void** params;
    unsigned gx, gy, gz, bx, by, bz;
    unsigned nthreads, nwarps;
    unsigned long long nblocks;
    unsigned cx = 1, cy = 1, cz = 1, csize = 1;  // the cluster's shape (__cluster_dims__) and blocks
    unsigned long long nclusters = 0;
    size_t dyn_bytes;
    unsigned device;
    unsigned long long deadlock_ms;
    std::atomic<unsigned long long> next{0};
    std::atomic<bool> failed{false};
    std::mutex mu;
    EmuReport* report;  // the first error wins
};

struct Worker {
    Ctx sched;
    Launch* L = nullptr;
    std::vector<Fiber> fibers;
    std::vector<Warp> warps;
    StackSet* stacks = nullptr;
    unsigned char* dyn = nullptr;
    bool failed = false;            // error raised in the current block
    unsigned done = 0;              // exited threads of the current block
    unsigned long long progress = 0;  // barrier arrivals, completed collectives, exits
    uint3 bidx{0, 0, 0};
    unsigned long long stall_since_ns = 0;     // when the block last made progress, if spinning
    unsigned long long stall_progress = ~0ull;  // `progress` at that time
    HopperBlock hopper;
    unsigned hopper_idle_passes = 0;  // passes in a row in which only mbarrier waiters ran, in vain
    // Clusters: the group this worker runs a rank of (its own one-rank group without clusters),
    // its rank, whether its block is running (its shared memory live), and the address of a
    // __thread variable of this OS thread: static __shared__ variables are thread_local, at the
    // same distance from it in every worker, which is how mapa finds another rank's.
    // The async proxy's view of the block's dynamic shared memory (hopper.h's proxy check): each
    // 16-byte chunk as a TMA copy wrote it or a wgmma last read it, and the count of the block's
    // fence.proxy.async (any thread's) at that time.
    std::vector<unsigned char> async_view;
    std::vector<unsigned> view_epoch;
    unsigned fence_epoch = 0;
    ClusterGroup solo;
    ClusterGroup* cg = nullptr;
    unsigned rank = 0;
    bool block_live = false;
    unsigned char* tls_anchor = nullptr;
};

// The worker OS thread's state, and the fiber it runs (nullptr in the scheduler).
extern __thread Worker* tls_worker;
extern __thread Fiber* tls_fiber;
// True only while kernel code runs on a fiber: the preemption timer may switch fibers there,
// never inside the runtime.
extern __thread volatile int tls_preemptible;
// Fiber switches on this worker (the preemption timer preempts only a thread that ran a whole
// tick without one).
extern __thread unsigned long tls_switches;

// ------------------------------------------------------------------------------------------------
// emu_runtime.cpp
// ------------------------------------------------------------------------------------------------
// The PROT_NONE region below each fiber's stack.
size_t stack_guard_size();
std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string where(const char* file, int line);
std::string thread_list(const Launch& L, const std::vector<unsigned>& ids);
std::vector<unsigned> lanes_to_ids(const Warp& W, unsigned m);
void set_report(Launch& L, int kind, const std::string& msg);
void block_error(Worker& w, const std::string& msg);
[[noreturn]] void fiber_fail(Worker& w, Fiber& f, const std::string& msg);
// Parks the calling fiber (its state already set) and runs the next lane of its warp, or the
// scheduler. Returns when the fiber is resumed.
void park_and_switch(Worker& w, Fiber& f);
// The calling fiber gives way until the next scheduling pass.
void yield_fiber(Worker& w, Fiber& f, uint8_t reason);
// A fault on fiber `f` (called on its own stack, from the signal trampoline): fills the
// launch's report and abandons the fiber.
[[noreturn]] void fiber_fault(Worker& w, Fiber& f, int fault, unsigned long long addr, bool has_addr,
                              const std::string& detail);

// ------------------------------------------------------------------------------------------------
// emu_memory.cpp
// ------------------------------------------------------------------------------------------------
// Which buffer an address belongs to or is nearest to, in words ("12 bytes past the end of
// DeviceBuffer<f32>[3], a 12-byte buffer at 0x..."); empty when no buffer is near.
std::string describe_address(unsigned long long addr);
// After a launch: a write into the padding around any of `device`'s buffers. Returns false and
// the message when one was found (and restores the padding, so the next check is clean).
bool check_padding(unsigned device, std::string& msg);

// ------------------------------------------------------------------------------------------------
// emu_signals.cpp
// ------------------------------------------------------------------------------------------------
// Installs the process-wide handlers once (chaining to any earlier ones).
void install_signal_handlers();
// Per worker thread, while it runs blocks: an alternate signal stack (so a fiber's stack
// overflow can be reported) and the preemption timer.
struct WorkerSignals {
    void* altstack = nullptr;
    bool own_altstack = false;
    void* timer = nullptr;
    bool has_timer = false;
};
void worker_signals_begin(WorkerSignals& s);
void worker_signals_end(WorkerSignals& s);

// ------------------------------------------------------------------------------------------------
// emu_tensor.cpp
// ------------------------------------------------------------------------------------------------
// Completes an mma or ldmatrix collective of the lanes in M (all 32 lanes of the warp).
void execute_tensor_collective(Worker& w, Warp& W, unsigned M);
// What a thread that yielded at an mbarrier, a named barrier or barrier.cluster waits for, in words.
std::string describe_hopper_wait(const Worker& w, const Fiber& f);
// The cluster shape of the kernel at `kernel` (its __cluster_dims__; 1,1,1 without).
void kernel_cluster_dims(const void* kernel, unsigned dims[3]);
// "block (1,0,0) [grid (2,1,1), block (128,1,1)]: " (and the cluster and rank, with clusters).
std::string block_prefix(const Worker& w);
// Threads of the cluster that have exited (the whole cluster's: every rank's block).
unsigned cluster_exited(const Worker& w);

}  // namespace emu_rt

#endif  // MOE_EMU_INTERNAL_H
