// emu_signals.cpp -- faults and spinning threads.
//
// Faults. A kernel thread that dereferences a bad pointer, divides an integer by zero, runs off
// its stack or executes an illegal instruction raises SIGSEGV, SIGBUS, SIGFPE or SIGILL on the
// host. The handler runs on the worker's alternate signal stack; when the faulting code is an
// emulated thread, it records what happened and changes the interrupted context so that, when
// the handler returns, the thread continues in fault_trampoline on a clean part of its own
// stack. The trampoline turns the fault into the launch's report (kernel, block, thread,
// address, nearest buffer) and abandons the thread; the launch fails and the process lives.
// A fault anywhere else (the host program, the scheduler) goes to the handler that was there
// before (Rust's stack-overflow handler, or the default action).
//
// Spinning. A thread that waits for another's flag with a volatile load never reaches a warp
// collective or a barrier, so the scheduler would never run the thread that sets the flag. On
// Linux a timer interrupts each worker every 10 ms; if the same emulated thread has been running
// since the previous tick, and it is in kernel code (not in the runtime), the handler switches
// to the scheduler from inside the signal handler, which lets the other threads run; the thread
// continues later where it was interrupted. Atomics, fences and __nanosleep yield by
// themselves (cuda_emu.h), so spin-waits built on them need no timer.
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "emu_internal.h"

namespace emu_rt {
namespace {

struct sigaction g_old[65];
std::once_flag g_once;
int g_preempt_sig = 0;
const size_t kAltStack = 64 * 1024;

// What the fault handler saw, for the trampoline (the same OS thread, later).
__thread int tls_fault_sig = 0;
__thread int tls_fault_code = 0;
__thread unsigned long long tls_fault_addr = 0;
// Context switches of this worker, and the count at the last preemption tick.
__thread unsigned long tls_ticks_seen = ~0ul;

void chain(int sig, siginfo_t* si, void* ctx) {
    struct sigaction& o = g_old[sig];
    if ((o.sa_flags & SA_SIGINFO) && o.sa_sigaction) {
        o.sa_sigaction(sig, si, ctx);
        return;
    }
    if (!(o.sa_flags & SA_SIGINFO) && o.sa_handler != SIG_DFL && o.sa_handler != SIG_IGN) {
        o.sa_handler(sig);
        return;
    }
    // Default action: restore it and return; the instruction faults again and the process ends
    // as it would have without the emulator.
    signal(sig, SIG_DFL);
}

extern "C" [[noreturn]] void emu_fault_trampoline();

void on_fault(int sig, siginfo_t* si, void* ctx) {
    Fiber* f = tls_fiber;
    Worker* w = tls_worker;
    if (!f || !w) {
        chain(sig, si, ctx);
        return;
    }
    tls_fault_sig = sig;
    tls_fault_code = si->si_code;
    tls_fault_addr = (unsigned long long)(uintptr_t)si->si_addr;
    // Continue in the trampoline, on the top of the thread's own stack (the frames there are
    // abandoned with the thread).
    uintptr_t top = ((uintptr_t)(f->stack_lo + f->stack_bytes) & ~(uintptr_t)15) - 512;
    ucontext_t* uc = static_cast<ucontext_t*>(ctx);
#if defined(__x86_64__) && defined(__linux__)
    uc->uc_mcontext.gregs[REG_RSP] = (greg_t)(top - 8);  // as if called: rsp = 8 (mod 16)
    uc->uc_mcontext.gregs[REG_RIP] = (greg_t)&emu_fault_trampoline;
#elif defined(__aarch64__) && defined(__linux__)
    uc->uc_mcontext.sp = top;
    uc->uc_mcontext.pc = (unsigned long long)&emu_fault_trampoline;
    uc->uc_mcontext.regs[30] = 0;
#else
    (void)uc;
    (void)top;
    chain(sig, si, ctx);  // no recovery on this platform: the process ends as before
#endif
}

void on_preempt(int, siginfo_t*, void*) {
    Fiber* f = tls_fiber;
    Worker* w = tls_worker;
    if (!f || !w || !tls_preemptible) return;
    // Only a thread that has run for a whole tick: one that started since gets its turn.
    if (tls_ticks_seen != tls_switches) {
        tls_ticks_seen = tls_switches;
        return;
    }
    int saved_errno = errno;
    tls_preemptible = 0;
    yield_fiber(*w, *f, Y_PREEMPT);
    tls_preemptible = 1;
    errno = saved_errno;
}

}  // namespace

void install_signal_handlers() {
    std::call_once(g_once, [] {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_fault;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL}) sigaction(sig, &sa, &g_old[sig]);
#if defined(__linux__)
        g_preempt_sig = SIGRTMIN + 4;
        struct sigaction sp;
        memset(&sp, 0, sizeof sp);
        sp.sa_sigaction = on_preempt;
        // SA_NODEFER: the handler may switch away and come back much later; the signal must
        // not stay blocked for the other threads meanwhile (the handler ignores itself).
        sp.sa_flags = SA_SIGINFO | SA_RESTART | SA_NODEFER;
        sigemptyset(&sp.sa_mask);
        sigaction(g_preempt_sig, &sp, &g_old[g_preempt_sig]);
#endif
    });
}

void worker_signals_begin(WorkerSignals& s) {
    stack_t cur;
    if (sigaltstack(nullptr, &cur) == 0 && (cur.ss_flags & SS_DISABLE)) {
        void* p = mmap(nullptr, kAltStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANON, -1, 0);
        if (p != MAP_FAILED) {
            stack_t st;
            st.ss_sp = p;
            st.ss_size = kAltStack;
            st.ss_flags = 0;
            if (sigaltstack(&st, nullptr) == 0) {
                s.altstack = p;
                s.own_altstack = true;
            } else {
                munmap(p, kAltStack);
            }
        }
    }
#if defined(__linux__)
    if (g_preempt_sig) {
        struct sigevent sev;
        memset(&sev, 0, sizeof sev);
        sev.sigev_notify = SIGEV_THREAD_ID;
        sev.sigev_signo = g_preempt_sig;
#if defined(sigev_notify_thread_id)
        sev.sigev_notify_thread_id = (pid_t)syscall(SYS_gettid);
#else
        sev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
#endif
        timer_t t;
        if (timer_create(CLOCK_MONOTONIC, &sev, &t) == 0) {
            struct itimerspec its;
            its.it_interval.tv_sec = 0;
            its.it_interval.tv_nsec = 10 * 1000 * 1000;
            its.it_value = its.it_interval;
            timer_settime(t, 0, &its, nullptr);
            s.timer = (void*)t;
            s.has_timer = true;
        }
    }
#endif
    tls_ticks_seen = ~0ul;
}

void worker_signals_end(WorkerSignals& s) {
#if defined(__linux__)
    if (s.has_timer) timer_delete((timer_t)s.timer);
#endif
    if (s.own_altstack) {
        stack_t st;
        memset(&st, 0, sizeof st);
        st.ss_flags = SS_DISABLE;
        sigaltstack(&st, nullptr);
        munmap(s.altstack, kAltStack);
    }
}

}  // namespace emu_rt

using namespace emu_rt;

// Runs on the faulting thread's stack, after the handler returned: report and abandon it.
extern "C" [[noreturn]] void emu_fault_trampoline() {
    Fiber& f = *tls_fiber;
    Worker& w = *tls_worker;
    tls_preemptible = 0;
    const int sig = tls_fault_sig, code = tls_fault_code;
    const unsigned long long addr = tls_fault_addr;
    if (sig == SIGFPE) {
        fiber_fault(w, f, 4, 0, false,
                    code == FPE_INTOVF ? "INT_MIN / -1 overflows (a GPU returns an unspecified value instead of stopping)"
                                       : "a GPU returns an unspecified value instead of stopping; check the divisor");
    }
    if (sig == SIGILL) {
        fiber_fault(w, f, 5, addr, true,
                    "the CPU does not know this instruction (a build for another CPU, or a __builtin_trap)");
    }
    if (sig == SIGSEGV && code == SI_KERNEL) {
        fiber_fault(w, f, 1, 0, false,
                    "a general protection fault: a non-canonical address (a wild pointer) or a misaligned vector "
                    "access; the host does not say which address");
    }
    const char* lo = f.stack_lo;
    if (addr >= (unsigned long long)(uintptr_t)(lo - stack_guard_size()) && addr < (unsigned long long)(uintptr_t)lo) {
        fiber_fault(w, f, 3, addr, true,
                    fmt("the thread ran past the end of its %zu KiB stack (deep recursion or large local arrays); "
                        "raise MOE_EMU_STACK_KB",
                        f.stack_bytes / 1024));
    }
    std::string near = describe_address(addr);
    if (near.empty()) near = "no device buffer is allocated";
    if (sig == SIGBUS) near += " (SIGBUS: a misaligned or otherwise invalid access)";
    fiber_fault(w, f, 1, addr, true, near);
}
