// wgmma_tc_probe.cu -- what Hopper's warpgroup MMA computes, bit for bit: does
// `wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16` round as kernels/emu/tc_model.h's model
// of `mma.sync` does, one k-step of 16 at a time? The emulator assumes so (kernels/emu/hopper.h
// runs each wgmma as tc_model dot products of 16 from the accumulators); this probe checks it. A
// measuring tool for the GPU machine, built there with nvcc (tools/gpu/run's probes stage):
//
//     nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I kernels/emu \
//         -o /tmp/wgmma_tc_probe tools/gpu/probes/wgmma_tc_probe.cu
//     /tmp/wgmma_tc_probe [OUT_DIR] [TILES]
//
// One warpgroup per tile computes D = C + A . B^T for A [64][64], B [N][64] (bf16) and C [64][N]
// (fp32), as chapter 4's kernels do: four wgmma of k 16 chained on the same accumulators in one
// commit group, both operands read from shared memory through descriptors (the flat core-matrix
// layout of wgmma_probe.cu: 128 bytes between core matrices along K, 256 along M or N), N = 128
// and 256 (the kernels' shapes). The host predicts every output with tc_model (H100 parameters:
// 2 extra bits, round toward zero, 16 products a group), c first, then each k-step's 16 products
// on the rounded result of the one before, and counts the outputs whose bits differ. The tile
// families are mma_probe.cu's:
//   exact    small integers: every product and sum exact; checks the layout
//   uniform  random signs, exponents in [-8, 8], random significands; c alike
//   wide     exponents in [-40, 40]: long alignment shifts
//   cancel   c = -(A . B^T over all 64 k) rounded to fp32, a few ulps off: what alignment kept
//   cbig     c 2^10..2^20 above the products: the products' low bits fall off the window
//   special  zeros of both signs, subnormal inputs and results, inf, NaN, overflow
// It prints one line per shape and family (cases = tiles, outputs compared, outputs that differ,
// the largest distance in ulps) and a last line "wgmma tc probe: ..."; with OUT_DIR it writes the
// same table to OUT_DIR/wgmma_tc_model.csv. Exit status: 0 when no output differs, 1 when one
// does (or a CUDA call failed), 2 on a GPU without sm_90a.
#include <cuda_bf16.h>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tc_model.h"

#include "cuda_check.h"

constexpr int M = 64, KSTEPS = 4, K = 16 * KSTEPS;
constexpr uint32_t K_STEP = 128, ROW_STEP = 256;  // bytes between core matrices along K, M/N

// Byte offset of element (r, k), k < 16, of one k-step's operand in the core-matrix layout.
__host__ __device__ inline uint32_t core_offset(int r, int k) {
    return (uint32_t)(((r / 8) * 2 + k / 8) * 128 + (r % 8) * 16 + (k % 8) * 2);
}

// kernels/wgmma.cuh's descriptor: start address, leading offset (bits 16-29: the step along K)
// and stride offset (bits 32-45: along M or N), each in 16-byte units; no swizzle.
__device__ inline uint64_t descriptor(const void* smem, uint32_t leading, uint32_t stride) {
    const uint32_t addr = (uint32_t)__cvta_generic_to_shared(smem);
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((leading >> 4) & 0x3FFF) << 16) |
           ((uint64_t)((stride >> 4) & 0x3FFF) << 32);
}

// kernels/wgmma.cuh's instructions (the same PTX): d += a . b, scale-d 1, neither transposed.
#define WG_D8(i)                                                                                          \
    "+f"(d[(i)]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3]), "+f"(d[(i) + 4]), "+f"(d[(i) + 5]), \
        "+f"(d[(i) + 6]), "+f"(d[(i) + 7])
#define WG_D64(i)                                                                                         \
    WG_D8(i), WG_D8((i) + 8), WG_D8((i) + 16), WG_D8((i) + 24), WG_D8((i) + 32), WG_D8((i) + 40),           \
        WG_D8((i) + 48), WG_D8((i) + 56)
#define WG_REGS_0_63                                                                                      \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                              \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "                    \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "                    \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define WG_REGS_64_127                                                                                    \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "                    \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "                    \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "         \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

template <int N>
__device__ inline void wgmma(float (&d)[N / 2], uint64_t a, uint64_t b);

template <>
__device__ inline void wgmma<128>(float (&d)[64], uint64_t a, uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" WG_REGS_0_63 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : WG_D64(0)
        : "l"(a), "l"(b), "r"(1));
}

template <>
__device__ inline void wgmma<256>(float (&d)[128], uint64_t a, uint64_t b) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" WG_REGS_0_63 ", " WG_REGS_64_127
        "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
        : WG_D64(0), WG_D64(64)
        : "l"(a), "l"(b), "r"(1));
}

// One tile per block of one warpgroup. a: [64][K] row-major (m, k); b: [N][K] (n, k); c, d:
// [64][N] (m, n). Each k-step's operands in their own core-matrix block of shared memory.
template <int N>
__global__ void __launch_bounds__(128) wgmma_tiles(const uint16_t* A, const uint16_t* B, const float* C, float* D) {
    __shared__ __align__(128) uint16_t sa[KSTEPS * M * 16];
    __shared__ __align__(128) uint16_t sb[KSTEPS * N * 16];
    const int t = threadIdx.x;
    const size_t tile = blockIdx.x;
    const uint16_t* a = A + tile * M * K;
    const uint16_t* b = B + tile * N * K;
    const float* c = C + tile * M * N;
    float* d = D + tile * M * N;
    for (int i = t; i < M * K; i += 128) {
        const int m = i / K, k = i % K;
        sa[(k / 16) * M * 16 + core_offset(m, k % 16) / 2] = a[i];
    }
    for (int i = t; i < N * K; i += 128) {
        const int n = i / K, k = i % K;
        sb[(k / 16) * N * 16 + core_offset(n, k % 16) / 2] = b[i];
    }
    __syncthreads();
    // The generic-proxy stores above, made visible to wgmma's reads (the async proxy).
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    // The accumulator layout (wgmma_probe.cu): warp w, g = lane / 4, q = lane % 4 holds
    // D[16w + g (+8)][8j + 2q (+1)] in acc[4j + 2h + e].
    const int w = t / 32, lane = t % 32, g = lane / 4, q = lane % 4;
    float acc[N / 2];
#pragma unroll
    for (int j = 0; j < N / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int e = 0; e < 2; ++e) acc[4 * j + 2 * h + e] = c[(16 * w + g + 8 * h) * N + 8 * j + 2 * q + e];
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk)
        wgmma<N>(acc, descriptor(sa + kk * M * 16, K_STEP, ROW_STEP), descriptor(sb + kk * N * 16, K_STEP, ROW_STEP));
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
    for (int j = 0; j < N / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int e = 0; e < 2; ++e) d[(16 * w + g + 8 * h) * N + 8 * j + 2 * q + e] = acc[4 * j + 2 * h + e];
}

static uint64_t splitmix(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
struct Rng {
    uint64_t s;
    uint64_t next() { return s = splitmix(s); }
    int range(int lo, int hi) { return lo + (int)(next() % (uint64_t)(hi - lo + 1)); }
};
static uint16_t bf16(int sign, int exp, int mant) {  // exp unbiased, normal
    return (uint16_t)((sign << 15) | ((exp + 127) << 7) | (mant & 0x7f));
}
static float f32(int sign, int exp, uint32_t mant) {
    return tc_model::bits_f32(((uint32_t)sign << 31) | ((uint32_t)(exp + 127) << 23) | (mant & 0x7fffff));
}
static float bf16_to_f32(uint16_t h) { return tc_model::bits_f32((uint32_t)h << 16); }
static uint16_t f32_to_bf16_rne(float f) {
    uint32_t u = tc_model::f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

// `tiles` tiles of one family at N columns: a [tiles][64][K], b [tiles][N][K], c [tiles][64][N].
struct Tiles {
    int n = 0, cols = 0;
    std::vector<uint16_t> a, b;
    std::vector<float> c, d;
};

static double exact_dot(const Tiles& T, int tile, int m, int n) {
    double s = T.c[((size_t)tile * M + m) * T.cols + n];
    for (int k = 0; k < K; ++k)
        s += (double)bf16_to_f32(T.a[((size_t)tile * M + m) * K + k]) *
             (double)bf16_to_f32(T.b[((size_t)tile * T.cols + n) * K + k]);
    return s;
}

static Tiles make(const std::string& fam, int tiles, int cols, uint64_t seed) {
    Tiles T;
    T.n = tiles;
    T.cols = cols;
    const size_t na = (size_t)tiles * M * K, nb = (size_t)tiles * cols * K, nc = (size_t)tiles * M * cols;
    T.a.assign(na, 0);
    T.b.assign(nb, 0);
    T.c.assign(nc, 0.0f);
    T.d.assign(nc, 0.0f);
    Rng r{seed};
    if (fam == "exact") {
        for (auto& v : T.a) v = f32_to_bf16_rne((float)r.range(-8, 8));
        for (auto& v : T.b) v = f32_to_bf16_rne((float)r.range(-8, 8));
        for (auto& v : T.c) v = (float)r.range(-100, 100);
    } else if (fam == "uniform" || fam == "wide" || fam == "cbig") {
        const int span = fam == "wide" ? 40 : 8;
        for (auto& v : T.a) v = bf16(r.range(0, 1), r.range(-span, span), r.range(0, 127));
        for (auto& v : T.b) v = bf16(r.range(0, 1), r.range(-span, span), r.range(0, 127));
        for (auto& v : T.c) {
            const int ce = fam == "cbig" ? r.range(10, 20) + 16 : r.range(-span, span);
            v = f32(r.range(0, 1), ce, (uint32_t)r.next());
        }
    } else if (fam == "cancel") {
        for (auto& v : T.a) v = bf16(r.range(0, 1), r.range(-4, 4), r.range(0, 127));
        for (auto& v : T.b) v = bf16(r.range(0, 1), r.range(-4, 4), r.range(0, 127));
        for (int tile = 0; tile < tiles; ++tile)
            for (int m = 0; m < M; ++m)
                for (int n = 0; n < cols; ++n) {
                    float& c = T.c[((size_t)tile * M + m) * cols + n];
                    c = 0.0f;
                    const float f = (float)(-exact_dot(T, tile, m, n));
                    uint32_t u = tc_model::f32_bits(f);
                    if (f != 0.0f) u += (uint32_t)r.range(-3, 3);  // a few ulps off the exact value
                    c = tc_model::bits_f32(u);
                }
    } else {  // special
        static const uint16_t sa[] = {0x0000, 0x8000, 0x0001, 0x807f, 0x0040, 0x7f80, 0xff80, 0x7fc0,
                                      0x7f7f, 0xff7f, 0x3f80, 0x0080, 0x0100, 0x7f00, 0x3f81, 0xbf80};
        static const uint32_t sc[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00800000u, 0x7f800000u,
                                      0xff800000u, 0x7fc00000u, 0x7f7fffffu, 0xff7fffffu, 0x3f800000u, 0x00400000u};
        for (auto& v : T.a) {
            const int pick = r.range(0, 9);
            v = pick < 5 ? sa[r.range(0, 15)]
                         : (pick < 8 ? bf16(r.range(0, 1), r.range(-126, -100), r.range(0, 127))
                                     : bf16(r.range(0, 1), r.range(60, 127), r.range(0, 127)));
            if (r.range(0, 3) == 0) v = (uint16_t)(v & 0x807f);  // subnormal or zero
        }
        for (auto& v : T.b) {
            const int pick = r.range(0, 9);
            v = pick < 5 ? sa[r.range(0, 15)]
                         : (pick < 8 ? bf16(r.range(0, 1), r.range(-30, 0), r.range(0, 127))
                                     : bf16(r.range(0, 1), r.range(50, 127), r.range(0, 127)));
        }
        for (auto& v : T.c) {
            const int pick = r.range(0, 3);
            v = pick == 0 ? tc_model::bits_f32(sc[r.range(0, 11)])
                          : tc_model::bits_f32((uint32_t)r.next() & (pick == 1 ? 0x807fffffu : 0xffffffffu));
        }
        // Keep most tiles free of inf and NaN, so that the finite special cases are seen too.
        for (int tile = 0; tile < tiles; ++tile) {
            if (tile % 4 == 0) continue;
            for (size_t i = (size_t)tile * M * K; i < (size_t)(tile + 1) * M * K; ++i)
                if (((T.a[i] >> 7) & 0xff) == 0xff) T.a[i] = (uint16_t)(T.a[i] & 0xbfff);
            for (size_t i = (size_t)tile * cols * K; i < (size_t)(tile + 1) * cols * K; ++i)
                if (((T.b[i] >> 7) & 0xff) == 0xff) T.b[i] = (uint16_t)(T.b[i] & 0xbfff);
            for (size_t i = (size_t)tile * M * cols; i < (size_t)(tile + 1) * M * cols; ++i)
                if (!std::isfinite(T.c[i])) T.c[i] = 1.0f;
        }
    }
    return T;
}

// The model's output (m, n) of a tile: c, then each k-step's 16 products (tc_model.h, H100).
static float model(const Tiles& T, int tile, int m, int n) {
    float acc = T.c[((size_t)tile * M + m) * T.cols + n];
    const uint16_t* a = &T.a[((size_t)tile * M + m) * K];
    const uint16_t* b = &T.b[((size_t)tile * T.cols + n) * K];
    for (int kk = 0; kk < KSTEPS; ++kk) acc = tc_model::dot(a + 16 * kk, b + 16 * kk, 16, acc, tc_model::H100);
    return acc;
}

static int64_t ulps(float x, float y) {  // distance in representable floats (same sign line)
    auto key = [](float f) {
        const int32_t i = (int32_t)tc_model::f32_bits(f);
        return i < 0 ? (int64_t)INT32_MIN - i : (int64_t)i;
    };
    const int64_t dd = key(x) - key(y);
    return dd < 0 ? -dd : dd;
}

// Runs one family at N columns on the GPU; returns the outputs that differ from the model.
template <int N>
static long run(const char* fam, int tiles, uint64_t seed, FILE* csv, long& compared) {
    Tiles T = make(fam, tiles, N, seed);
    uint16_t *da, *db;
    float *dc, *dd;
    CHECK(cudaMalloc(&da, T.a.size() * 2));
    CHECK(cudaMalloc(&db, T.b.size() * 2));
    CHECK(cudaMalloc(&dc, T.c.size() * 4));
    CHECK(cudaMalloc(&dd, T.d.size() * 4));
    CHECK(cudaMemcpy(da, T.a.data(), T.a.size() * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(db, T.b.data(), T.b.size() * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dc, T.c.data(), T.c.size() * 4, cudaMemcpyHostToDevice));
    CHECK(cudaMemset(dd, 0xFF, T.d.size() * 4));  // NaN: an output never written differs
    wgmma_tiles<N><<<tiles, 128>>>(da, db, dc, dd);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(T.d.data(), dd, T.d.size() * 4, cudaMemcpyDeviceToHost));
    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(dc));
    CHECK(cudaFree(dd));
    long differ = 0, shown = 0;
    int64_t worst = 0;
    bool worst_inf = false;
    for (int tile = 0; tile < tiles; ++tile)
        for (int m = 0; m < M; ++m)
            for (int n = 0; n < N; ++n) {
                const float got = T.d[((size_t)tile * M + m) * N + n], want = model(T, tile, m, n);
                if (tc_model::f32_bits(got) == tc_model::f32_bits(want)) continue;
                ++differ;
                if (std::isnan(got) || std::isnan(want) || std::isinf(got) || std::isinf(want))
                    worst_inf = true;
                else if (ulps(got, want) > worst)
                    worst = ulps(got, want);
                if (shown++ < 3)
                    printf("    %s m64n%dk16 tile %d D[%d][%d]: GPU 0x%08x, model 0x%08x\n", fam, N, tile, m, n,
                           tc_model::f32_bits(got), tc_model::f32_bits(want));
            }
    const long outputs = (long)tiles * M * N;
    compared += outputs;
    char far[32];
    if (worst_inf)
        snprintf(far, sizeof far, "inf");
    else
        snprintf(far, sizeof far, "%lld", (long long)worst);
    printf("m64n%-3dk16  %-8s %8d %18ld %20ld %10s\n", N, fam, tiles, outputs, differ, far);
    if (csv) fprintf(csv, "m64n%dk16,%s,%d,%ld,%ld,%s\n", N, fam, tiles, outputs, differ, far);
    return differ;
}

int main(int argc, char** argv) {
    const char* out = argc > 1 ? argv[1] : nullptr;
    const int tiles = argc > 2 ? atoi(argv[2]) : 100;
    if (tiles < 1) {
        fprintf(stderr, "usage: wgmma_tc_probe [OUT_DIR] [TILES >= 1]\n");
        return 1;
    }
    cudaDeviceProp p;
    CHECK(cudaGetDeviceProperties(&p, 0));
    printf("wgmma tc probe on %s (sm_%d%d): wgmma.mma_async m64nNk16 f32.bf16.bf16, %d k-steps chained per tile, "
           "against tc_model.h (H100: %d extra bits, %s, %d products a group) one k-step at a time\n",
           p.name, p.major, p.minor, KSTEPS, tc_model::H100.extra, tc_model::H100.rounding == tc_model::RZ ? "RZ" : "RNE",
           tc_model::H100.block);
    if (p.major != 9) {
        printf("wgmma tc probe: wgmma needs sm_90a; this device is sm_%d%d\n", p.major, p.minor);
        return 2;
    }
    FILE* csv = nullptr;
    if (out) {
        const std::string path = std::string(out) + "/wgmma_tc_model.csv";
        csv = fopen(path.c_str(), "w");
        if (!csv) {
            fprintf(stderr, "cannot write %s\n", path.c_str());
            return 1;
        }
        fprintf(csv, "shape,family,cases,outputs,differ,max_ulps\n");
    }
    printf("%-11s %-8s %8s %18s %20s %10s\n", "shape", "family", "cases", "outputs compared", "outputs that differ",
           "max ulps");
    static const char* fams[] = {"exact", "uniform", "wide", "cancel", "cbig", "special"};
    long compared = 0, differ = 0;
    for (int f = 0; f < 6; ++f) differ += run<128>(fams[f], tiles, 1000 + (uint64_t)f, csv, compared);
    for (int f = 0; f < 6; ++f) differ += run<256>(fams[f], (tiles + 1) / 2, 2000 + (uint64_t)f, csv, compared);
    if (csv) fclose(csv);
    printf("wgmma tc probe: %ld of %ld outputs differ from tc_model one k-step at a time (%s)\n", differ, compared,
           differ == 0 ? "the rule of mma.sync holds" : "MISMATCH");
    return differ == 0 ? 0 : 1;
}
