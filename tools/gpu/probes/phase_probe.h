// phase_probe.h -- what the cycle probes of chapters 5 and 8 share: lane 0 of each warp reads the
// SM's cycle counter at a kernel's marks into g_clock[warp][mark]; the host takes one launch's
// marks as phase ends (counted from the earliest warp's mark 0) and prints each phase's median.
#pragma once
#include <algorithm>
#include <cstdio>
#include <vector>

#define PHASE_WARPS 32  // the most warps of a probed block
#define PHASE_MARKS 16  // the most marks of a probed kernel
__device__ long long g_clock[PHASE_WARPS][PHASE_MARKS];  // [warp][mark]; 0: not reached

// Mark n: the calling warp's cycle count now (its lane 0 stores it).
#define PHASE_MARK(n)                                                                              \
    do {                                                                                           \
        long long c_;                                                                              \
        asm volatile("mov.u64 %0, %%clock64;" : "=l"(c_)::"memory");                               \
        if ((threadIdx.x & 31) == 0) g_clock[threadIdx.x >> 5][n] = c_;                            \
    } while (0)

// Mark n once v exists: v is stored first (volatile, so the compiler keeps it), and a warp issues
// in order, so the clock is read only after the store's issue, which waits for v.
__device__ unsigned g_sink[PHASE_WARPS][PHASE_MARKS];
#define PHASE_MARK_DEP(n, v)                                                                       \
    do {                                                                                           \
        asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(&g_sink[threadIdx.x >> 5][n]),       \
                     "r"((unsigned)(v))                                                            \
                     : "memory");                                                                  \
        PHASE_MARK(n);                                                                             \
    } while (0)

// Before a launch: every mark 0, so that a warp that does not reach one leaves it before the start.
inline void phase_clear() {
    static const long long zero[PHASE_WARPS][PHASE_MARKS] = {};
    CHECK(cudaMemcpyToSymbol(g_clock, zero, sizeof zero));
}

// After a launch of `warps` warps: phase n (1 .. phases) ends when the last warp that does its
// work is past mark n, warps [0, warps_of(n)); appended to at[n].
template <typename WarpsOf>
void phase_collect(int warps, int phases, WarpsOf warps_of, std::vector<std::vector<long long>>& at) {
    long long c[PHASE_WARPS][PHASE_MARKS];
    CHECK(cudaMemcpyFromSymbol(c, g_clock, sizeof c));
    long long start = c[0][0];
    for (int w = 1; w < warps; ++w) start = std::min(start, c[w][0]);
    for (int n = 1; n <= phases; ++n) {
        long long last = 0;
        for (int w = 0; w < warps_of(n); ++w) last = std::max(last, c[w][n] - start);
        at[n].push_back(last);
    }
}

// The probes' one timing loop: `launch` (one launch of the probed kernel) 60 times, the marks
// cleared before each; the first 10 not counted, the other 50 collected into `at`.
template <typename Launch, typename WarpsOf>
void phase_launches(Launch launch, int warps, int phases, WarpsOf warps_of,
                    std::vector<std::vector<long long>>& at) {
    for (int i = 0; i < 60; ++i) {
        phase_clear();
        launch();
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        if (i >= 10) phase_collect(warps, phases, warps_of, at);
    }
}

// Each phase's median end and its length, one line each, names `width` characters wide.
inline void phase_print(const char* const* name, int phases, int width,
                        std::vector<std::vector<long long>>& at) {
    long long before = 0;
    for (int n = 1; n <= phases; ++n) {
        std::sort(at[n].begin(), at[n].end());
        const long long m = at[n][at[n].size() / 2];
        printf("  %-*s %6lld  (+%lld)\n", width, name[n], m, m - before);
        before = m;
    }
}
