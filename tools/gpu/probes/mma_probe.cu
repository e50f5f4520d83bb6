// mma_probe.cu -- what the GPU's tensor cores compute for `mma.sync.aligned.m16n8k16.row.col.f32.
// bf16.bf16.f32`, against the bit-level model of kernels/emu/tc_model.h under several parameter
// sets. A measuring tool for the GPU machine, built there with nvcc (it has no Rust):
//
//     nvcc -O2 -std=c++17 -arch=sm_90 -I kernels/emu -o /tmp/mma_probe tools/gpu/probes/mma_probe.cu
//     /tmp/mma_probe OUT_DIR [TILES] [csv|dump]
//
// For each family of test tiles it prints, per candidate model, how many of the 128 outputs per
// tile differ from the GPU in their bits and the largest distance in ulps, and writes the same
// table to OUT_DIR/tensor_core_model.csv (bench/results/h200/ keeps it). With `dump` it also
// writes every tile (A, B, C and the GPU's D) to OUT_DIR/mma_<family>.bin, so that other models
// can be checked later without a GPU. The families:
//   exact    small integers: every product and sum exact; checks the fragment layout
//   uniform  random signs, exponents in [-8, 8], random significands; c alike
//   wide     exponents in [-40, 40]: long alignment shifts
//   cancel   c = -(a . b) rounded to fp32, perturbed: the result is what alignment kept
//   cbig     c 2^10..2^20 above the products: the products' low bits fall off the window
//   special  zeros of both signs, subnormal inputs and results, inf, NaN, overflow
#include <cuda_bf16.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <vector>
#include <string>

#include "tc_model.h"

#include "cuda_check.h"

// One tile per warp. a: [16][16] row-major (m, k); b: [8][16] (n, k); c, d: [16][8] (m, n).
__global__ void mma_tiles(const uint16_t* A, const uint16_t* B, const float* C, float* D, int tiles) {
    const int tile = blockIdx.x;
    if (tile >= tiles) return;
    const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
    const uint16_t* a = A + (size_t)tile * 256;
    const uint16_t* b = B + (size_t)tile * 128;
    const float* c = C + (size_t)tile * 128;
    float* d = D + (size_t)tile * 128;
    auto pack = [](uint16_t lo, uint16_t hi) { return (uint32_t)lo | ((uint32_t)hi << 16); };
    uint32_t ra0 = pack(a[g * 16 + 2 * t], a[g * 16 + 2 * t + 1]);
    uint32_t ra1 = pack(a[(g + 8) * 16 + 2 * t], a[(g + 8) * 16 + 2 * t + 1]);
    uint32_t ra2 = pack(a[g * 16 + 2 * t + 8], a[g * 16 + 2 * t + 9]);
    uint32_t ra3 = pack(a[(g + 8) * 16 + 2 * t + 8], a[(g + 8) * 16 + 2 * t + 9]);
    uint32_t rb0 = pack(b[g * 16 + 2 * t], b[g * 16 + 2 * t + 1]);
    uint32_t rb1 = pack(b[g * 16 + 2 * t + 8], b[g * 16 + 2 * t + 9]);
    float c0 = c[g * 8 + 2 * t], c1 = c[g * 8 + 2 * t + 1];
    float c2 = c[(g + 8) * 8 + 2 * t], c3 = c[(g + 8) * 8 + 2 * t + 1];
    float d0, d1, d2, d3;
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%10,%11,%12,%13};\n"
        : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
        : "r"(ra0), "r"(ra1), "r"(ra2), "r"(ra3), "r"(rb0), "r"(rb1), "f"(c0), "f"(c1), "f"(c2),
          "f"(c3));
    d[g * 8 + 2 * t] = d0;
    d[g * 8 + 2 * t + 1] = d1;
    d[(g + 8) * 8 + 2 * t] = d2;
    d[(g + 8) * 8 + 2 * t + 1] = d3;
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

struct Tiles {
    std::vector<uint16_t> a, b;
    std::vector<float> c, d;
    int n = 0;
    void resize(int tiles) {
        n = tiles;
        a.assign((size_t)tiles * 256, 0);
        b.assign((size_t)tiles * 128, 0);
        c.assign((size_t)tiles * 128, 0.0f);
        d.assign((size_t)tiles * 128, 0.0f);
    }
};

static double exact_dot(const Tiles& T, int tile, int m, int n) {
    double s = T.c[(size_t)tile * 128 + m * 8 + n];
    for (int k = 0; k < 16; ++k)
        s += (double)bf16_to_f32(T.a[(size_t)tile * 256 + m * 16 + k]) *
             (double)bf16_to_f32(T.b[(size_t)tile * 128 + n * 16 + k]);
    return s;
}

static Tiles make(const std::string& fam, int tiles, uint64_t seed) {
    Tiles T;
    T.resize(tiles);
    Rng r{seed};
    for (int tile = 0; tile < tiles; ++tile) {
        uint16_t* a = &T.a[(size_t)tile * 256];
        uint16_t* b = &T.b[(size_t)tile * 128];
        float* c = &T.c[(size_t)tile * 128];
        if (fam == "exact") {
            for (int i = 0; i < 256; ++i) a[i] = f32_to_bf16_rne((float)r.range(-8, 8));
            for (int i = 0; i < 128; ++i) b[i] = f32_to_bf16_rne((float)r.range(-8, 8));
            for (int i = 0; i < 128; ++i) c[i] = (float)r.range(-100, 100);
        } else if (fam == "uniform" || fam == "wide" || fam == "cbig") {
            int span = fam == "wide" ? 40 : 8;
            for (int i = 0; i < 256; ++i) a[i] = bf16(r.range(0, 1), r.range(-span, span), r.range(0, 127));
            for (int i = 0; i < 128; ++i) b[i] = bf16(r.range(0, 1), r.range(-span, span), r.range(0, 127));
            for (int i = 0; i < 128; ++i) {
                int ce = fam == "cbig" ? r.range(10, 20) + 16 : r.range(-span, span);
                c[i] = f32(r.range(0, 1), ce, (uint32_t)r.next());
            }
        } else if (fam == "cancel") {
            for (int i = 0; i < 256; ++i) a[i] = bf16(r.range(0, 1), r.range(-4, 4), r.range(0, 127));
            for (int i = 0; i < 128; ++i) b[i] = bf16(r.range(0, 1), r.range(-4, 4), r.range(0, 127));
            for (int m = 0; m < 16; ++m)
                for (int n = 0; n < 8; ++n) {
                    c[m * 8 + n] = 0.0f;
                    double s = exact_dot(T, tile, m, n);
                    float f = (float)(-s);
                    uint32_t u = tc_model::f32_bits(f);
                    if (f != 0.0f) u += (uint32_t)r.range(-3, 3);  // a few ulps off the exact value
                    c[m * 8 + n] = tc_model::bits_f32(u);
                }
        } else {  // special
            static const uint16_t sa[] = {0x0000, 0x8000, 0x0001, 0x807f, 0x0040, 0x7f80, 0xff80,
                                          0x7fc0, 0x7f7f, 0xff7f, 0x3f80, 0x0080, 0x0100, 0x7f00,
                                          0x3f81, 0xbf80};
            static const uint32_t sc[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu,
                                          0x00800000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                          0x7f7fffffu, 0xff7fffffu, 0x3f800000u, 0x00400000u};
            for (int i = 0; i < 256; ++i) {
                int pick = r.range(0, 9);
                a[i] = pick < 5 ? sa[r.range(0, 15)]
                                : (pick < 8 ? bf16(r.range(0, 1), r.range(-126, -100), r.range(0, 127))
                                            : bf16(r.range(0, 1), r.range(60, 127), r.range(0, 127)));
                if (r.range(0, 3) == 0) a[i] = (uint16_t)(a[i] & 0x807f);  // subnormal or zero
            }
            for (int i = 0; i < 128; ++i) {
                int pick = r.range(0, 9);
                b[i] = pick < 5 ? sa[r.range(0, 15)]
                                : (pick < 8 ? bf16(r.range(0, 1), r.range(-30, 0), r.range(0, 127))
                                            : bf16(r.range(0, 1), r.range(50, 127), r.range(0, 127)));
            }
            for (int i = 0; i < 128; ++i) {
                int pick = r.range(0, 3);
                c[i] = pick == 0 ? tc_model::bits_f32(sc[r.range(0, 11)])
                                 : tc_model::bits_f32((uint32_t)r.next() & (pick == 1 ? 0x807fffffu : 0xffffffffu));
            }
            // Keep most tiles free of inf/NaN, so the finite special cases are seen too.
            if (tile % 4 != 0) {
                for (int i = 0; i < 256; ++i)
                    if (((a[i] >> 7) & 0xff) == 0xff) a[i] = (uint16_t)(a[i] & 0xbfff);
                for (int i = 0; i < 128; ++i)
                    if (((b[i] >> 7) & 0xff) == 0xff) b[i] = (uint16_t)(b[i] & 0xbfff);
                for (int i = 0; i < 128; ++i)
                    if (!std::isfinite(c[i])) c[i] = 1.0f;
            }
        }
    }
    return T;
}

static int64_t ulps(float x, float y) {  // distance in representable floats (same sign line)
    auto key = [](float f) {
        int32_t i;
        std::memcpy(&i, &f, 4);
        return i < 0 ? (int64_t)INT32_MIN - (int64_t)i : (int64_t)i;
    };
    return std::llabs(key(x) - key(y));
}

int main(int argc, char** argv) {
    const char* out = argc > 1 ? argv[1] : ".";
    const int tiles = argc > 2 ? atoi(argv[2]) : 5000;
    const bool dump = argc > 3 && std::string(argv[3]) == "dump";
    FILE* csv = fopen((std::string(out) + "/tensor_core_model.csv").c_str(), "w");
    if (!csv) {
        fprintf(stderr, "cannot write %s/tensor_core_model.csv\n", out);
        return 1;
    }
    fprintf(csv, "family,model,outputs,differ,max_ulps\n");
    const char* fams[] = {"exact", "uniform", "wide", "cancel", "cbig", "special"};
    struct Cand { const char* name; tc_model::Params p; };
    std::vector<Cand> cands;
    static char names[64][48];
    int nn = 0;
    for (int extra = 0; extra <= 5; ++extra)
        for (int rnd = 0; rnd <= 1; ++rnd)
            for (int blk : {16, 8}) {
                snprintf(names[nn], 48, "extra=%d %s block=%d", extra, rnd ? "RNE" : "RZ", blk);
                cands.push_back({names[nn], {extra, rnd, blk}});
                ++nn;
            }
    uint16_t *dA, *dB;
    float *dC, *dD;
    CHECK(cudaMalloc(&dA, (size_t)tiles * 256 * 2));
    CHECK(cudaMalloc(&dB, (size_t)tiles * 128 * 2));
    CHECK(cudaMalloc(&dC, (size_t)tiles * 128 * 4));
    CHECK(cudaMalloc(&dD, (size_t)tiles * 128 * 4));
    printf("%-8s %-24s %10s %12s %10s\n", "family", "model", "outputs", "differ", "max ulps");
    for (int f = 0; f < 6; ++f) {
        Tiles T = make(fams[f], tiles, 1000 + f);
        CHECK(cudaMemcpy(dA, T.a.data(), T.a.size() * 2, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(dB, T.b.data(), T.b.size() * 2, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(dC, T.c.data(), T.c.size() * 4, cudaMemcpyHostToDevice));
        mma_tiles<<<tiles, 32>>>(dA, dB, dC, dD, tiles);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpy(T.d.data(), dD, T.d.size() * 4, cudaMemcpyDeviceToHost));
        // The layout check: in `exact` every result is an exact integer.
        if (f == 0) {
            long bad = 0;
            for (int tile = 0; tile < tiles; ++tile)
                for (int m = 0; m < 16; ++m)
                    for (int n = 0; n < 8; ++n)
                        bad += (double)T.d[(size_t)tile * 128 + m * 8 + n] != exact_dot(T, tile, m, n);
            printf("layout check (exact family): %ld of %ld results differ from the exact dot product\n", bad,
                   (long)tiles * 128);
        }
        std::string path = std::string(out) + "/mma_" + fams[f] + ".bin";
        FILE* fp = dump ? fopen(path.c_str(), "wb") : nullptr;
        if (fp) {
            fwrite(&T.n, 4, 1, fp);
            fwrite(T.a.data(), 2, T.a.size(), fp);
            fwrite(T.b.data(), 2, T.b.size(), fp);
            fwrite(T.c.data(), 4, T.c.size(), fp);
            fwrite(T.d.data(), 4, T.d.size(), fp);
            fclose(fp);
        }
        for (const Cand& cd : cands) {
            long differ = 0;
            int64_t worst = 0;
            uint16_t col[16];
            for (int tile = 0; tile < tiles; ++tile)
                for (int m = 0; m < 16; ++m)
                    for (int n = 0; n < 8; ++n) {
                        for (int k = 0; k < 16; ++k) col[k] = T.b[(size_t)tile * 128 + n * 16 + k];
                        float want = T.d[(size_t)tile * 128 + m * 8 + n];
                        float got = tc_model::dot(&T.a[(size_t)tile * 256 + m * 16], col, 16,
                                                  T.c[(size_t)tile * 128 + m * 8 + n], cd.p);
                        if (tc_model::f32_bits(want) != tc_model::f32_bits(got)) {
                            ++differ;
                            if (std::isfinite(want) && std::isfinite(got)) {
                                int64_t u = ulps(want, got);
                                if (u > worst) worst = u;
                            } else {
                                worst = worst < (1ll << 40) ? (1ll << 40) : worst;  // a non-finite mismatch
                            }
                        }
                    }
            printf("%-8s %-24s %10ld %12ld %10lld\n", fams[f], cd.name, (long)tiles * 128, differ,
                   (long long)worst);
            // Non-finite mismatches count as "inf" ulps in the CSV.
            if (worst >= (1ll << 40))
                fprintf(csv, "%s,%s,%ld,%ld,inf\n", fams[f], cd.name, (long)tiles * 128, differ);
            else
                fprintf(csv, "%s,%s,%ld,%ld,%lld\n", fams[f], cd.name, (long)tiles * 128, differ, (long long)worst);
        }
        fflush(stdout);
    }
    fclose(csv);
    return 0;
}
