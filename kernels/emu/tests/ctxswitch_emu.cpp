// Run by run.sh: checks what the context switch itself must preserve, on every target the script
// builds (x86-64 and aarch64 assembly, ucontext fallback):
//   live      values held in callee-saved integer and floating-point registers (and spilled to the
//             fiber's stack) survive warp collectives and __syncthreads while other lanes, holding
//             different values in the same registers, run in between (aarch64, GCC 12 -O2: k_live
//             keeps them in all of x19-x28 and d8-d15; x86-64 has no callee-saved FP registers);
//   fpenv     kernels run with IEEE defaults (round to nearest, no flush to zero) whatever rounding
//             mode the launching thread set, across switches, and the launching thread gets its own
//             mode back afterwards (CUDA has no per-thread rounding mode, so the switch does not
//             carry one: see emu_runtime.cpp);
//   align     the stack of a fiber is 16-byte aligned as the ABI requires (at the first call and
//             after switches).
// Prints one line per section and a summary; exit status 1 on any failure.
#include <cfenv>

#define MOE_EMU 1
#include "cuda_emu.h"
#include "emu_trampoline.h"
#include "launch_shim.h"

#include <vector>

#define NV 12   // values per thread of each kind in k_live

// One step of k_live, done after every switch point: each value is updated (differently, so the
// compiler does not pack them into vector registers) from x, and stays live across the next switch.
// Plain IEEE double arithmetic (no contraction: built with -ffp-contract=off), so the host
// reference below, which runs the same steps, is bit-exact.
#define LIVE_STEP(x)                                                                               \
    do {                                                                                           \
        double xd = (double)((x) & 255u);                                                          \
        d0 = d0 * 0.5 + xd; d1 = d1 - xd; d2 = d2 * 2.0 - xd; d3 = d3 + xd * 0.25;                \
        d4 = d4 * 0.25 + 1.0; d5 = d5 - xd * 2.0; d6 = d6 * -1.0; d7 = d7 + xd * 8.0;             \
        d8 = d8 * 4.0 - 1.0; d9 = d9 + 3.0; d10 = d10 * 0.125 - xd; d11 = d11 - 0.5;               \
        u0 = u0 * 3 + (x); u1 = u1 ^ (x); u2 = u2 - (x); u3 = u3 + (x) * 5; u4 = u4 * 7;           \
        u5 = u5 + 11; u6 = u6 ^ ((x) << 7); u7 = u7 * 13 - (x); u8 = u8 + ((x) >> 1);              \
        u9 = u9 - 17; u10 = u10 * 19 + 1; u11 = u11 ^ 0x5555;                                      \
    } while (0)

// Loads NV doubles and NV 64-bit integers and keeps all of them live across 4 shuffles and 2
// barriers (updated after each), then writes them and the shuffle result out.
extern "C" __global__ void k_live(const double* din, const unsigned long long* uin, double* dout,
                                  unsigned long long* uout) {
    unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    const double* d = din + (size_t)t * NV;
    const unsigned long long* u = uin + (size_t)t * NV;
    double d0 = d[0], d1 = d[1], d2 = d[2], d3 = d[3], d4 = d[4], d5 = d[5];
    double d6 = d[6], d7 = d[7], d8 = d[8], d9 = d[9], d10 = d[10], d11 = d[11];
    unsigned long long u0 = u[0], u1 = u[1], u2 = u[2], u3 = u[3], u4 = u[4], u5 = u[5];
    unsigned long long u6 = u[6], u7 = u[7], u8 = u[8], u9 = u[9], u10 = u[10], u11 = u[11];
    unsigned long long x = t;
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    LIVE_STEP(x);
    x += __shfl_xor_sync(0xffffffffu, x, 2);
    LIVE_STEP(x);
    __syncthreads();
    LIVE_STEP(x);
    x += __shfl_xor_sync(0xffffffffu, x, 4);
    LIVE_STEP(x);
    x += __shfl_xor_sync(0xffffffffu, x, 8);
    LIVE_STEP(x);
    __syncthreads();
    double* od = dout + (size_t)t * NV;
    unsigned long long* ou = uout + (size_t)t * (NV + 1);
    od[0] = d0; od[1] = d1; od[2] = d2; od[3] = d3; od[4] = d4; od[5] = d5;
    od[6] = d6; od[7] = d7; od[8] = d8; od[9] = d9; od[10] = d10; od[11] = d11;
    ou[0] = u0; ou[1] = u1; ou[2] = u2; ou[3] = u3; ou[4] = u4; ou[5] = u5;
    ou[6] = u6; ou[7] = u7; ou[8] = u8; ou[9] = u9; ou[10] = u10; ou[11] = u11;
    ou[NV] = x;
}

// Each thread divides, meets every other thread at a barrier and a warp collective, divides
// again, and reports the rounding mode it saw and the rounded results.
extern "C" __global__ void k_fpenv(unsigned* out) {
    unsigned t = blockIdx.x * blockDim.x + threadIdx.x;
    volatile float one = 1.0f, three = 3.0f;
    float a = one / three, b = -one / three;
    __syncthreads();
    unsigned* o = out + (size_t)t * 5;
    o[0] = fegetround() == FE_TONEAREST;
    o[1] = __float_as_uint(a);
    o[2] = __float_as_uint(b);
    __syncwarp();
    float a2 = one / three, b2 = -one / three;
    o[3] = __float_as_uint(a2);
    o[4] = __float_as_uint(b2);
}

__device__ __noinline__ unsigned aligned_here(int tag) {
    alignas(16) volatile unsigned char buf[16];
    buf[0] = (unsigned char)tag;
    return (uintptr_t)buf % 16 == 0 && (uintptr_t)__builtin_frame_address(0) % 16 == 0 && buf[0] == (unsigned char)tag;
}
extern "C" __global__ void k_align(unsigned* out) {
    unsigned ok = aligned_here(1);
    __syncwarp();
    ok &= aligned_here(2);
    __syncthreads();
    ok &= aligned_here(3);
    out[blockIdx.x * blockDim.x + threadIdx.x] = ok;
}

extern "C" void tramp_k_live(void** p) { emu::call_kernel(k_live, p); }
extern "C" void tramp_k_fpenv(void** p) { emu::call_kernel(k_fpenv, p); }
extern "C" void tramp_k_align(void** p) { emu::call_kernel(k_align, p); }

static int g_checks = 0, g_failures = 0;
static void check(bool ok, const char* what, const char* err) {
    ++g_checks;
    if (!ok) {
        ++g_failures;
        printf("FAIL %s%s%s\n", what, err && *err ? ": " : "", err ? err : "");
    }
}

static void test_live() {
    const unsigned nb = 6, nt = 96, n = nb * nt;
    std::vector<double> din((size_t)n * NV), dout((size_t)n * NV, -1.0);
    std::vector<unsigned long long> uin((size_t)n * NV), uout((size_t)n * (NV + 1), 0);
    for (size_t i = 0; i < din.size(); ++i) {
        din[i] = (double)i * 1.25 + 1.0 / (double)(i + 3);
        uin[i] = 0x9e3779b97f4a7c15ull * (i + 1);
    }
    const double* pdi = din.data();
    const unsigned long long* pui = uin.data();
    double* pdo = dout.data();
    unsigned long long* puo = uout.data();
    void* p[] = {&pdi, &pui, &pdo, &puo};
    char err[1024] = "";
    int rc = emu_launch_msg(tramp_k_live, p, nb, 1, 1, nt, 1, 1, 0, err, sizeof err);
    check(rc == 0, "live: launch", err);
    unsigned bad = 0;
    for (unsigned t = 0; t < n; ++t) {
        const double* d = &din[(size_t)t * NV];
        const unsigned long long* u = &uin[(size_t)t * NV];
        double d0 = d[0], d1 = d[1], d2 = d[2], d3 = d[3], d4 = d[4], d5 = d[5];
        double d6 = d[6], d7 = d[7], d8 = d[8], d9 = d[9], d10 = d[10], d11 = d[11];
        unsigned long long u0 = u[0], u1 = u[1], u2 = u[2], u3 = u[3], u4 = u[4], u5 = u[5];
        unsigned long long u6 = u[6], u7 = u[7], u8 = u[8], u9 = u[9], u10 = u[10], u11 = u[11];
        // x after the shuffle with offset 2^r: sum of the thread ids of the aligned 2^(r+1) group
        unsigned long long xs[4];
        for (unsigned r = 0; r < 4; ++r) {
            unsigned g = 2u << r;
            xs[r] = 0;
            for (unsigned l = 0; l < g; ++l) xs[r] += (t & ~(g - 1)) + l;
        }
        LIVE_STEP(xs[0]);
        LIVE_STEP(xs[1]);
        LIVE_STEP(xs[1]);
        LIVE_STEP(xs[2]);
        LIVE_STEP(xs[3]);
        const double ed[NV] = {d0, d1, d2, d3, d4, d5, d6, d7, d8, d9, d10, d11};
        const unsigned long long eu[NV + 1] = {u0, u1, u2, u3, u4, u5, u6, u7, u8, u9, u10, u11, xs[3]};
        bad += memcmp(&dout[(size_t)t * NV], ed, sizeof ed) != 0 || memcmp(&uout[(size_t)t * (NV + 1)], eu, sizeof eu) != 0;
    }
    check(bad == 0, "live: values not preserved across switches", nullptr);
    printf("  live: %u threads x (%d doubles + %d integers) across 4 shuffles + 2 barriers: %u threads wrong\n", n, NV, NV, bad);
}

static void test_fpenv() {
    const unsigned nb = 9, nt = 64, n = nb * nt;
    // 1/3 and -1/3 in binary32, rounded to nearest.
    const unsigned pos = 0x3eaaaaabu, neg = 0xbeaaaaabu;
    // The launching thread rounds upward; the kernels must not see it.
    fesetround(FE_UPWARD);
    std::vector<unsigned> out((size_t)n * 5, 0);
    unsigned* po = out.data();
    void* p[] = {&po};
    char err[1024] = "";
    int rc = emu_launch_msg(tramp_k_fpenv, p, nb, 1, 1, nt, 1, 1, 0, err, sizeof err);
    bool host_ok = fegetround() == FE_UPWARD;
    fesetround(FE_TONEAREST);
    check(rc == 0, "fpenv: launch", err);
    unsigned bad = 0;
    for (unsigned t = 0; t < n; ++t) {
        const unsigned* o = &out[(size_t)t * 5];
        bool ok = o[0] == 1 && o[1] == pos && o[2] == neg && o[3] == pos && o[4] == neg;
        if (!ok && ++bad <= 4)
            printf("  thread %u: mode %s, 1/3 %08x %08x, -1/3 %08x %08x (expected %08x, %08x)\n", t,
                   o[0] ? "nearest" : "NOT NEAREST", o[1], o[3], o[2], o[4], pos, neg);
    }
    check(bad == 0, "fpenv: a kernel ran with the launching thread's rounding mode", nullptr);
    check(host_ok, "fpenv: the launching thread's rounding mode was not restored", nullptr);
    printf("  fpenv: %u threads under a host rounding upward: %u not round-to-nearest; host mode %s\n", n, bad,
           host_ok ? "restored" : "LOST");
}

static void test_align() {
    const unsigned nb = 4, nt = 96, n = nb * nt;
    std::vector<unsigned> out(n, 7);
    unsigned* po = out.data();
    void* p[] = {&po};
    char err[1024] = "";
    int rc = emu_launch_msg(tramp_k_align, p, nb, 1, 1, nt, 1, 1, 0, err, sizeof err);
    check(rc == 0, "align: launch", err);
    unsigned bad = 0;
    for (unsigned t = 0; t < n; ++t) bad += out[t] != 1;
    check(bad == 0, "align: fiber stack not 16-byte aligned", nullptr);
    printf("  align: %u threads: %u with a misaligned stack\n", n, bad);
}

int main() {
    test_live();
    test_fpenv();
    test_align();
    printf("ctxswitch: %s -- %d checks, %d failures\n", g_failures ? "FAILED" : "PASSED", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
