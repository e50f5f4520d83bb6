// Self-test of the CUDA CPU emulator. Kernels (test_kernels.cu, test_kernels2.cu) are written as
// CUDA; every result is checked against values computed independently on the host.
#define MOE_EMU 1
#include "cuda_emu.h"
#include "test_kernels.cu"
#include "emu_trampoline.h"
#include "launch_shim.h"

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

typedef void (*emu_kernel_fn)(void** params);
extern "C" unsigned emu_worker_count(void);
extern "C" void emu_tramp__test2__k2_scale(void** p);

#define TRAMP(k) extern "C" void tramp_##k(void** p) { emu::call_kernel(k, p); }
TRAMP(k_indices) TRAMP(k_shared_private) TRAMP(k_dynamic_shared) TRAMP(k_tree_reduce)
TRAMP(k_shfl_i32) TRAMP(k_shfl_f32) TRAMP(k_shfl_f64) TRAMP(k_shfl_u64) TRAMP(k_vote) TRAMP(k_atomics)
TRAMP(k_speed) TRAMP(k_err_barrier_exit) TRAMP(k_err_barrier_divergent) TRAMP(k_err_shfl_exited)
TRAMP(k_err_shfl_exited_first) TRAMP(k_err_mismatch) TRAMP(k_err_not_in_mask) TRAMP(k_err_src_outside)
TRAMP(k_err_deadlock) TRAMP(k_err_partial_warp_mask) TRAMP(k_err_assert) TRAMP(k_ok) TRAMP(k_activemask)

static int g_checks = 0, g_failures = 0;
static std::string g_section;
#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        ++g_checks;                                                        \
        if (!(cond)) {                                                     \
            ++g_failures;                                                  \
            if (g_failures <= 60) {                                        \
                printf("FAIL [%s] %s:%d: %s -- ", g_section.c_str(), __FILE__, __LINE__, #cond); \
                printf(__VA_ARGS__);                                       \
                printf("\n");                                              \
            }                                                              \
        }                                                                  \
    } while (0)

struct Res { int rc; std::string err; };
static Res launch(emu_kernel_fn fn, std::vector<void*> params, dim3 g, dim3 b, size_t dyn = 0) {
    char err[2048];
    memset(err, 'x', sizeof err);
    int rc = emu_launch_msg(fn, params.data(), g.x, g.y, g.z, b.x, b.y, b.z, dyn, err, sizeof err);
    return Res{rc, rc ? std::string(err) : std::string()};
}
static bool contains(const std::string& s, const char* sub) { return s.find(sub) != std::string::npos; }

// ------------------------------------------------------------------------------------------------
static void test_indices() {
    g_section = "indices";
    struct Cfg { dim3 g, b; };
    Cfg cfgs[] = {{dim3(7), dim3(45)}, {dim3(3, 4), dim3(16, 4)}, {dim3(2, 3, 4), dim3(5, 3, 3)},
                  {dim3(2, 1, 2), dim3(8, 8, 16)}, {dim3(1), dim3(1)}, {dim3(5, 1, 1), dim3(1, 33, 1)}};
    for (const Cfg& c : cfgs) {
        unsigned nt = c.b.x * c.b.y * c.b.z, nb = c.g.x * c.g.y * c.g.z;
        std::vector<int> out((size_t)nt * nb * 13, -7);
        int* po = out.data();
        Res r = launch(tramp_k_indices, {&po}, c.g, c.b);
        CHECK(r.rc == 0, "launch failed: %s", r.err.c_str());
        int bad = 0;
        for (unsigned bz = 0; bz < c.g.z; ++bz)
            for (unsigned by = 0; by < c.g.y; ++by)
                for (unsigned bx = 0; bx < c.g.x; ++bx)
                    for (unsigned tz = 0; tz < c.b.z; ++tz)
                        for (unsigned ty = 0; ty < c.b.y; ++ty)
                            for (unsigned tx = 0; tx < c.b.x; ++tx) {
                                size_t blin = bx + (size_t)by * c.g.x + (size_t)bz * c.g.x * c.g.y;
                                unsigned tlin = tx + ty * c.b.x + tz * c.b.x * c.b.y;
                                const int* o = &out[(blin * nt + tlin) * 13];
                                unsigned wfirst = tlin / 32 * 32, nl = std::min(32u, nt - wfirst);
                                unsigned am = nl == 32 ? 0xffffffffu : (1u << nl) - 1;
                                int exp[13] = {(int)tx, (int)ty, (int)tz, (int)bx, (int)by, (int)bz, (int)c.b.x, (int)c.b.y,
                                               (int)c.b.z, (int)c.g.x, (int)c.g.y, (int)c.g.z, (int)am};
                                for (int k = 0; k < 13; ++k)
                                    if (o[k] != exp[k]) {
                                        if (++bad <= 3) printf("  t(%u,%u,%u) b(%u,%u,%u) field %d: %d vs %d\n", tx, ty, tz, bx, by, bz, k, o[k], exp[k]);
                                    }
                            }
        CHECK(bad == 0, "grid (%u,%u,%u) block (%u,%u,%u): %d wrong values", c.g.x, c.g.y, c.g.z, c.b.x, c.b.y, c.b.z, bad);
    }
}

static void test_activemask() {
    g_section = "activemask";
    std::vector<int> out(3 * 80, 0);
    int* po = out.data();
    Res r = launch(tramp_k_activemask, {&po}, dim3(3), dim3(80));
    CHECK(r.rc == 0, "%s", r.err.c_str());
    int bad = 0;
    for (unsigned b = 0; b < 3; ++b)
        for (unsigned t = 0; t < 80; ++t) {
            unsigned lane = t % 32, wf = t - lane, nl = std::min(32u, 80 - wf), exp = 0;
            for (unsigned l = 0; l < nl; ++l)
                if (l % 3 == 0) exp |= 1u << l;
            bad += (unsigned)out[b * 80 + t] != (lane % 3 == 0 ? exp : 0xdeadu);
        }
    CHECK(bad == 0, "%d wrong __activemask() results in divergent code", bad);
}

static void test_shared() {
    g_section = "shared";
    int bad = 0, spin = 3000;
    int* pb = &bad;
    Res r = launch(tramp_k_shared_private, {&pb, &spin}, dim3(64), dim3(256));
    CHECK(r.rc == 0, "%s", r.err.c_str());
    CHECK(bad == 0, "blocks saw foreign shared memory (flags %d)", bad);
    // dynamic shared
    int sizes[] = {0, 8, 100, 4096, 48 * 1024, 100 * 1024};
    for (int n : sizes) {
        bad = 0;
        Res r2 = launch(tramp_k_dynamic_shared, {&pb, &n}, dim3(40), dim3(96), (size_t)n);
        CHECK(r2.rc == 0, "%s", r2.err.c_str());
        CHECK(bad == 0, "dynamic shared %d bytes: flags %d", n, bad);
    }
    // second translation unit (own __shared__ variables)
    std::vector<float> x(1000), ref(1000);
    for (int i = 0; i < 1000; ++i) { x[i] = 0.37f * i - 11.0f; ref[i] = x[i] * 3.5f; }
    float* px = x.data();
    float a = 3.5f;
    int n = 1000;
    Res r3 = launch(emu_tramp__test2__k2_scale, {&px, &a, &n}, dim3(16), dim3(64));
    CHECK(r3.rc == 0, "%s", r3.err.c_str());
    CHECK(memcmp(x.data(), ref.data(), 4000) == 0, "k2_scale mismatch");
}

static void test_reduce() {
    g_section = "tree-reduce";
    int n = 256 * 50 - 17;
    std::vector<float> in(n), out(50, -1.f);
    for (int i = 0; i < n; ++i) in[i] = (float)((i * 2654435761u) % 1000) / 7.0f - 50.0f;
    const float* pi = in.data();
    float* po = out.data();
    Res r = launch(tramp_k_tree_reduce, {&pi, &po, &n}, dim3(50), dim3(256));
    CHECK(r.rc == 0, "%s", r.err.c_str());
    for (int b = 0; b < 50; ++b) {
        float s[256];
        for (int t = 0; t < 256; ++t) s[t] = b * 256 + t < n ? in[b * 256 + t] : 0.0f;
        for (int st = 128; st > 0; st >>= 1)
            for (int t = 0; t < st; ++t) s[t] = s[t] + s[t + st];
        CHECK(memcmp(&s[0], &out[b], 4) == 0, "block %d: %g vs %g", b, out[b], s[0]);
    }
}

// Independent reference for shuffles, from the CUDA programming guide's description.
static int ref_src(int op, int lane, int arg, int width) {
    int sub = lane / width * width, src;
    switch (op) {
        case 0: src = sub + (int)((unsigned)arg % (unsigned)width); break;
        case 1: src = lane - arg; if (src < sub) src = lane; break;
        case 2: src = lane + arg; if (src >= sub + width) src = lane; break;
        default: src = lane ^ arg; if (src >= sub + width) src = lane; break;   // earlier groups are readable
    }
    return src;
}

template <class T>
static void shfl_case(emu_kernel_fn fn, int op, int arg, int width, unsigned mask, unsigned nt, unsigned nb,
                      std::function<T(unsigned)> gen, const char* tname) {
    std::vector<T> in(nt * nb), out(nt * nb);
    for (unsigned i = 0; i < nt * nb; ++i) { in[i] = gen(i); out[i] = gen(1000000 + i); }
    std::vector<T> exp = out;
    bool expect_err = false;
    for (unsigned b = 0; b < nb; ++b)
        for (unsigned t = 0; t < nt; ++t) {
            unsigned lane = t % 32, wf = t - lane, nl = std::min(32u, nt - wf);
            unsigned exist = nl == 32 ? 0xffffffffu : (1u << nl) - 1, m = mask & exist;
            if (!(m >> lane & 1)) continue;
            int src = ref_src(op, (int)lane, arg, width);
            if (!(m >> src & 1)) { expect_err = true; continue; }
            exp[b * nt + t] = in[b * nt + wf + src];
        }
    const T* pi = in.data();
    T* po = out.data();
    Res r = launch(fn, {&pi, &po, &op, &arg, &width, &mask}, dim3(nb), dim3(nt));
    if (expect_err) {
        CHECK(r.rc != 0 && contains(r.err, "not in the mask"), "%s op %d arg %d width %d mask %08x nt %u: expected error, got rc %d '%s'",
              tname, op, arg, width, mask, nt, r.rc, r.err.c_str());
    } else {
        CHECK(r.rc == 0, "%s op %d arg %d width %d mask %08x: %s", tname, op, arg, width, mask, r.err.c_str());
        CHECK(memcmp(out.data(), exp.data(), sizeof(T) * out.size()) == 0, "%s op %d arg %d width %d mask %08x nt %u: wrong values",
              tname, op, arg, width, mask, nt);
    }
}

static void test_shuffles() {
    g_section = "shuffle";
    int widths[] = {32, 16, 8, 4, 2, 1};
    int args[] = {0, 1, 2, 3, 5, 7, 8, 15, 16, 17, 31};
    unsigned masks[] = {0xffffffffu, 0x0000ffffu, 0xffff0000u, 0x55555555u, 0xf0f0f0f0u, 0x000000ffu};
    unsigned blocks[] = {96, 48};
    auto gi = [](unsigned i) { return (int)(i * 2654435761u); };
    for (int op = 0; op < 4; ++op)
        for (int w : widths)
            for (int a : args)
                for (unsigned m : masks)
                    for (unsigned nt : blocks) shfl_case<int>(tramp_k_shfl_i32, op, a, w, m, nt, 3, gi, "i32");
    shfl_case<int>(tramp_k_shfl_i32, 0, 33, 16, 0xffffffffu, 64, 2, gi, "i32");   // srcLane >= width: modulo
    shfl_case<int>(tramp_k_shfl_i32, 0, 40, 8, 0xffffffffu, 64, 2, gi, "i32");
    auto gf = [](unsigned i) { return (float)i * 0.75f - 3.0f; };
    auto gd = [](unsigned i) { return (double)i * 1e-7 + 1.0 / 3.0; };
    auto gu = [](unsigned i) { return 0x9e3779b97f4a7c15ull * (i + 1); };
    for (int op = 0; op < 4; ++op)
        for (int w : widths)
            for (int a : {1, 2, 5, 16}) {
                shfl_case<float>(tramp_k_shfl_f32, op, a, w, 0xffffffffu, 96, 2, gf, "f32");
                shfl_case<double>(tramp_k_shfl_f64, op, a, w, 0xffffffffu, 96, 2, gd, "f64");
                shfl_case<unsigned long long>(tramp_k_shfl_u64, op, a, w, 0xffff0000u, 80, 2, gu, "u64");
            }
}

static void test_vote() {
    g_section = "vote";
    unsigned nt = 64, nb = 5;
    unsigned pmasks[] = {0xffffffffu, 0x0f0f0f0fu, 0x00000001u, 0x80000000u};
    for (unsigned pm : pmasks) {
        std::vector<int> pred(nt * nb), out(nt * nb * 8, -5);
        for (unsigned i = 0; i < nt * nb; ++i) {
            unsigned b = i / nt;
            pred[i] = b == 0 ? 1 : b == 1 ? 0 : (int)((i * 7919u) % 3 == 0) * (int)(i % 5 + 1);
        }
        const int* pp = pred.data();
        int* po = out.data();
        Res r = launch(tramp_k_vote, {&pp, &po, &pm}, dim3(nb), dim3(nt));
        CHECK(r.rc == 0, "%s", r.err.c_str());
        int bad = 0;
        for (unsigned b = 0; b < nb; ++b) {
            int cnt = 0;
            for (unsigned t = 0; t < nt; ++t) cnt += pred[b * nt + t] != 0;
            for (unsigned t = 0; t < nt; ++t) {
                unsigned lane = t % 32, wf = t - lane, bal = 0, pbal = 0;
                for (unsigned l = 0; l < 32; ++l)
                    if (pred[b * nt + wf + l]) bal |= 1u << l;
                pbal = bal & pm;
                const int* o = &out[(b * nt + t) * 8];
                if ((unsigned)o[0] != bal || o[1] != (bal != 0) || o[2] != (bal == 0xffffffffu)) ++bad;
                if (pm >> lane & 1) {
                    if ((unsigned)o[3] != pbal || o[4] != (pbal == pm) * 2 + (pbal != 0)) ++bad;
                } else if (o[3] != -5 || o[4] != -5) ++bad;
                if (o[5] != (int)((wf + 31 - lane) * 3 + 1)) ++bad;
                if (o[6] != cnt || o[7] != (cnt == (int)nt) * 2 + (cnt != 0)) ++bad;
            }
        }
        CHECK(bad == 0, "pmask %08x: %d wrong", pm, bad);
    }
}

static void test_atomics() {
    g_section = "atomics";
    int n = 1000 * 256 - 77;
    std::vector<unsigned> keys(n);
    unsigned s = 12345;
    for (int i = 0; i < n; ++i) { s = s * 1664525u + 1013904223u; keys[i] = s >> 3; }
    std::vector<unsigned> hist(64, 0), bits(4, 0);
    std::vector<float> fhist(64, 0.f);
    unsigned long long total = 0;
    double dsum = 0;
    int imax = INT_MIN, imin = INT_MAX, sub = 0;
    unsigned casc = 0;
    const unsigned* pk = keys.data();
    unsigned* ph = hist.data();
    float* pf = fhist.data();
    unsigned long long* pt = &total;
    double* pd = &dsum;
    int *pmax = &imax, *pmin = &imin, *psub = &sub;
    unsigned* pc = &casc;
    unsigned* pbits = bits.data();
    Res r = launch(tramp_k_atomics, {&pk, &n, &ph, &pf, &pt, &pd, &pmax, &pmin, &pc, &psub, &pbits}, dim3(1000), dim3(256));
    CHECK(r.rc == 0, "%s", r.err.c_str());
    std::vector<unsigned> eh(64, 0), eb(4, 0);
    unsigned long long et = 0;
    int emax = INT_MIN, emin = INT_MAX;
    for (int i = 0; i < n; ++i) {
        unsigned k = keys[i];
        eh[k % 64]++;
        et += k;
        int v = (int)(k % 100000) - 50000;
        emax = std::max(emax, v);
        emin = std::min(emin, v);
        eb[(k >> 5) % 4] |= 1u << (k & 31);
    }
    int bad = 0;
    for (int i = 0; i < 64; ++i) bad += hist[i] != eh[i] || fhist[i] != (float)eh[i];
    CHECK(bad == 0, "histogram wrong in %d bins", bad);
    CHECK(total == et, "u64 total %llu vs %llu", total, et);
    CHECK(dsum == 0.5 * n, "double sum %f", dsum);
    CHECK(imax == emax && imin == emin, "max/min %d %d vs %d %d", imax, imin, emax, emin);
    CHECK(casc == (unsigned)n, "CAS counter %u", casc);
    CHECK(sub == -2 * n, "sub %d", sub);
    CHECK(bits == eb, "or bits");
    // single-thread semantics of the wrappers
    unsigned u = 5;
    CHECK(atomicInc(&u, 5) == 5 && u == 0, "atomicInc wrap");
    CHECK(atomicDec(&u, 7) == 0 && u == 7, "atomicDec wrap");
    int x = 3;
    CHECK(atomicCAS(&x, 4, 9) == 3 && x == 3 && atomicCAS(&x, 3, 9) == 3 && x == 9, "atomicCAS");
    float f = 1.5f;
    CHECK(atomicExch(&f, 2.5f) == 1.5f && f == 2.5f, "atomicExch float");
    unsigned long long ull = 7;
    CHECK(atomicMax(&ull, 9ull) == 7 && ull == 9 && atomicMin(&ull, 3ull) == 9 && ull == 3, "ull max/min");
}

// ------------------------------------------------------------------------------------------------
// bf16: independent reference (value comparison in double, ties to even).
static double bf16_value_slow(unsigned h) {   // exponent 255 with mantissa 0 -> 2^128 (unbounded exponent)
    unsigned e = (h >> 7) & 0xff, m = h & 0x7f;
    double v = e == 0 ? std::ldexp((double)m, -133) : std::ldexp((double)(128 + m), (int)e - 134);
    return (h & 0x8000) ? -v : v;
}
static double g_bf16_table[65536];
static inline double bf16_value(unsigned h) { return g_bf16_table[h & 0xffff]; }
static unsigned short ref_bf16_rn(float f) {
    if (std::isnan(f)) return 0x7FFF;
    unsigned u;
    memcpy(&u, &f, 4);
    unsigned short lo = (unsigned short)(u >> 16);   // truncated magnitude, same sign
    if (std::isinf(f)) return lo;
    unsigned short hi = (unsigned short)(lo + 1);
    double d = f, dl = std::fabs(d - bf16_value(lo)), dh = std::fabs(bf16_value(hi) - d);
    if (dl < dh) return lo;
    if (dh < dl) return hi;
    return (lo & 1) ? hi : lo;
}
static unsigned long long bf16_check(unsigned long long start, unsigned long long end, unsigned long long step) {
    unsigned long long bad = 0;
    for (unsigned long long v = start; v < end; v += step) {
        unsigned u = (unsigned)v;
        float f;
        memcpy(&f, &u, 4);
        unsigned short a = __bfloat16_as_ushort(__float2bfloat16_rn(f));
        unsigned short b = ref_bf16_rn(f);
        unsigned short z = __bfloat16_as_ushort(__float2bfloat16_rz(f));
        bool zok = std::isnan(f) ? z == 0x7FFF
                                 : (std::isinf(f) ? z == (u >> 16)
                                                  : std::fabs(bf16_value(z)) <= std::fabs((double)f) &&
                                                        std::fabs((double)f) < std::fabs(bf16_value((unsigned short)(z + 1))) &&
                                                        ((z & 0x8000) != 0) == ((u >> 31) != 0));
        if (a != b || !zok || __bfloat16_as_ushort(__float2bfloat16(f)) != a) {
            if (bad < 5) printf("  bf16 mismatch at %08x: rn %04x ref %04x rz %04x\n", u, a, b, z);
            ++bad;
        }
    }
    return bad;
}
static void test_bf16() {
    g_section = "bf16";
    for (unsigned h = 0; h < 65536; ++h) g_bf16_table[h] = bf16_value_slow(h);
    bool full = getenv("MOE_EMU_BF16_FULL") != nullptr;
    unsigned long long step = full ? 1 : 7;   // step 7 is coprime with 2^16: every low half is hit
    auto t0 = std::chrono::steady_clock::now();
    unsigned long long bad[2] = {0, 0};
    const unsigned long long N = 1ull << 32, half = N / 2;
    std::thread th([&] { bad[1] = bf16_check(half + ((step - half % step) % step), N, step); });
    bad[0] = bf16_check(0, half, step);
    th.join();
    CHECK(bad[0] + bad[1] == 0, "%llu mismatches over float bit patterns (step %llu)", bad[0] + bad[1], step);
    // every edge: for each bf16 value, the float patterns around truncation boundaries and ties
    unsigned long long ebad = 0, ecount = 0;
    unsigned lows[] = {0x0000, 0x0001, 0x3fff, 0x7ffe, 0x7fff, 0x8000, 0x8001, 0xbfff, 0xfffe, 0xffff};
    for (unsigned h = 0; h < 65536; ++h)
        for (unsigned lo : lows) { ebad += bf16_check(((unsigned long long)h << 16) | lo, (((unsigned long long)h << 16) | lo) + 1, 1); ++ecount; }
    CHECK(ebad == 0, "%llu edge mismatches", ebad);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("  bf16: %s float patterns (step %llu) + %llu edge patterns checked in %.2f s\n", full ? "all 2^32" : "~2^32/7",
           step, ecount, secs);
    // named edges
    auto rn = [](float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); };
    CHECK(rn(__uint_as_float(0x7f7fffffu)) == 0x7f80, "FLT_MAX rounds to inf");
    CHECK(rn(__uint_as_float(0x7f7f7fffu)) == 0x7f7f, "below tie stays max finite");
    CHECK(rn(__uint_as_float(0x7f7f8000u)) == 0x7f80, "tie at max finite -> inf (even)");
    CHECK(rn(__uint_as_float(0x3f808000u)) == 0x3f80, "tie to even (down)");
    CHECK(rn(__uint_as_float(0x3f818000u)) == 0x3f82, "tie to even (up)");
    CHECK(rn(__uint_as_float(0x00000001u)) == 0x0000, "smallest subnormal -> 0");
    CHECK(rn(__uint_as_float(0x00008000u)) == 0x0000, "subnormal tie -> even 0");
    CHECK(rn(__uint_as_float(0x00018000u)) == 0x0002, "subnormal tie -> even 2");
    CHECK(rn(__uint_as_float(0x80008001u)) == 0x8001, "negative subnormal, no FTZ");
    CHECK(rn(INFINITY) == 0x7f80 && rn(-INFINITY) == 0xff80, "inf");
    CHECK(rn(__uint_as_float(0xffc00001u)) == 0x7fff && rn(__uint_as_float(0x7f800001u)) == 0x7fff, "NaN canonical");
    CHECK(__bfloat16_as_ushort(__float2bfloat16_rz(__uint_as_float(0x7fffffffu))) == 0x7fff, "rz NaN");
    CHECK(__bfloat16_as_ushort(__float2bfloat16_rz(__uint_as_float(0xbf81ffffu))) == 0xbf81, "rz truncates");
    // bf16 -> float: exact for every pattern
    unsigned fbad = 0;
    for (unsigned h = 0; h < 65536; ++h) {
        float f = __bfloat162float(__ushort_as_bfloat16((unsigned short)h));
        unsigned e = (h >> 7) & 0xff, m = h & 0x7f;
        if (e == 255 && m) fbad += !(std::isnan(f) && __float_as_uint(f) == (h << 16));
        else if (e == 255) fbad += !(std::isinf(f) && (f < 0) == ((h & 0x8000) != 0));
        else fbad += (double)f != bf16_value(h) || std::signbit(f) != ((h & 0x8000) != 0);
    }
    CHECK(fbad == 0, "bf16->float %u wrong", fbad);
    __nv_bfloat162 p = __floats2bfloat162_rn(1.00390625f, -3.0f);
    CHECK(__bfloat16_as_ushort(p.x) == 0x3f80 && __low2float(p) == 1.0f && __high2float(p) == -3.0f, "bfloat162");
    CHECK(sizeof(__nv_bfloat16) == 2 && sizeof(__nv_bfloat162) == 4 && std::is_trivially_copyable<__nv_bfloat16>::value, "layout");
}

static void test_math_bits() {
    g_section = "math";
    CHECK(__popc(0xf0f0u) == 8 && __popcll(0xffffffffffull) == 40, "popc");
    CHECK(__ffs(0) == 0 && __ffs(8) == 4 && __ffsll(1ll << 40) == 41, "ffs");
    CHECK(__clz(0) == 32 && __clz(1) == 31 && __clz(-1) == 0 && __clzll(0) == 64 && __clzll(1) == 63, "clz");
    CHECK(__brev(1u) == 0x80000000u && __brev(0x12345678u) == 0x1e6a2c48u, "brev");
    CHECK(min(3, -4) == -4 && max(3u, 7u) == 7u && min(2.5f, -1.f) == -1.f && max(1ll << 40, 5ll) == (1ll << 40), "min/max");
    CHECK(__float_as_uint(1.0f) == 0x3f800000u && __int_as_float(0x40000000) == 2.0f, "bit casts");
    CHECK(__double_as_longlong(1.0) == 0x3ff0000000000000ll && __longlong_as_double(0) == 0.0, "double bit casts");
    CHECK(__fmaf_rn(1.0f + 0x1p-23f, 1.0f - 0x1p-23f, -1.0f) == -0x1p-46f, "fma single rounding");
    CHECK(__float2int_rn(2.5f) == 2 && __float2int_rn(3.5f) == 4 && __float2int_rn(NAN) == 0 && __float2int_rn(1e20f) == INT_MAX, "f2i");
    CHECK(std::isinf(CUDART_INF_F) && std::isnan(NAN) && alignof(float4) == 16 && alignof(uint4) == 16 && sizeof(float4) == 16, "consts/types");
    CHECK(isnan(__uint_as_float(0x7fc00000u)) && isinf(-INFINITY) && isfinite(1.0f), "isnan/isinf/isfinite");
    dim3 d(4);
    CHECK(d.x == 4 && d.y == 1 && d.z == 1, "dim3 defaults");
}

// ------------------------------------------------------------------------------------------------
static void check_ok_after(const char* what) {
    std::vector<int> out(4 * 64, -1);
    int* po = out.data();
    Res r = launch(tramp_k_ok, {&po}, dim3(4), dim3(64));
    bool good = r.rc == 0;
    for (int b = 0; b < 4; ++b)
        for (int t = 0; t < 64; ++t) good = good && out[b * 64 + t] == b * 100 + t;
    CHECK(good, "launch after '%s' failed: %s", what, r.err.c_str());
}

static void expect_error(const char* what, emu_kernel_fn fn, std::vector<void*> params, dim3 g, dim3 b,
                         std::vector<const char*> subs, bool print = true) {
    Res r = launch(fn, params, g, b);
    bool ok = r.rc != 0 && !r.err.empty();
    for (const char* s : subs) ok = ok && contains(r.err, s);
    CHECK(ok, "%s: rc %d, message '%s'", what, r.rc, r.err.c_str());
    if (print) printf("  [%s] -> %s\n", what, r.err.c_str());
    check_ok_after(what);
}

static void test_errors() {
    g_section = "errors";
    std::vector<int> out(1 << 16);
    int* po = out.data();
    expect_error("barrier with exited threads", tramp_k_err_barrier_exit, {&po}, dim3(3), dim3(64),
                 {"__syncthreads() at test_kernels.cu:", "threads 0-39 wait there", "threads 40-63 exited"});
    expect_error("divergent barriers", tramp_k_err_barrier_divergent, {&po}, dim3(2), dim3(64), {"different barriers", "threads 0-31", "threads 32-63"});
    expect_error("lane exited before full-mask shuffle", tramp_k_err_shfl_exited, {&po}, dim3(1), dim3(64),
                 {"__shfl_xor_sync(mask=0xffffffff)", "thread 31 named in the mask exited"});
    expect_error("lane exited first", tramp_k_err_shfl_exited_first, {&po}, dim3(1), dim3(32),
                 {"__shfl_down_sync", "thread 0 named in the mask exited"});
    expect_error("mismatched collectives", tramp_k_err_mismatch, {&po}, dim3(1), dim3(32), {"different collective", "__ballot_sync"});
    expect_error("lane not in own mask", tramp_k_err_not_in_mask, {&po}, dim3(1), dim3(32), {"not in its own mask", "lane 16"});
    expect_error("shuffle source outside mask", tramp_k_err_src_outside, {&po}, dim3(1), dim3(32), {"lane 0 (thread 0) reads lane 20", "not in the mask"});
    expect_error("deadlock warp collective vs __syncthreads", tramp_k_err_deadlock, {&po}, dim3(1), dim3(32), {"deadlock", "threads 0-15"});
    expect_error("mask names lanes beyond the block", tramp_k_err_partial_warp_mask, {&po}, dim3(1), dim3(40), {"do not exist", "warp 1"});
    int badb = 37;
    expect_error("device assert", tramp_k_err_assert, {&po, &badb}, dim3(100), dim3(32), {"assert(", "block (37,0,0)"});
    // many blocks failing on several workers at once: one error, process alive
    expect_error("errors in every block", tramp_k_err_barrier_exit, {&po}, dim3(500), dim3(64), {"exited"}, false);
    // bad launch configurations
    expect_error("block of 0 threads", tramp_k_ok, {&po}, dim3(1), dim3(0, 1, 1), {"invalid launch configuration"});
    expect_error("block of 1025 threads", tramp_k_ok, {&po}, dim3(1), dim3(1025), {"1 to 1024"});
    expect_error("block 32x32x2", tramp_k_ok, {&po}, dim3(1), dim3(32, 32, 2), {"1 to 1024"}, false);
    expect_error("grid dimension 0", tramp_k_ok, {&po}, dim3(4, 0, 1), dim3(32), {"grid dimension is 0"});
    expect_error("blockDim.z 65", tramp_k_ok, {&po}, dim3(1), dim3(1, 1, 65), {"blockDim.z"}, false);
}

static void test_concurrent_launches() {
    g_section = "concurrent";
    std::atomic<int> bad{0};
    auto body = [&](int seed) {
        for (int it = 0; it < 100; ++it) {
            std::vector<int> out(8 * 64, -1);
            int* po = out.data();
            char err[256];
            void* params[] = {&po};
            if (emu_launch_msg(tramp_k_ok, params, 8, 1, 1, 64, 1, 1, 0, err, sizeof err) != 0) ++bad;
            for (int b = 0; b < 8; ++b)
                for (int t = 0; t < 64; ++t)
                    if (out[b * 64 + t] != b * 100 + t) ++bad;
        }
        (void)seed;
    };
    std::thread a(body, 1), b(body, 2);
    body(3);
    a.join();
    b.join();
    CHECK(bad == 0, "%d bad results from concurrent launches", bad.load());
}

static double g_speed = -1;
static void test_speed() {
    g_section = "speed";
    const int rows = 1000, cols = 256;
    std::vector<float> x((size_t)rows * cols), out(rows);
    for (size_t i = 0; i < x.size(); ++i) x[i] = (float)((i * 2654435761u) % 10007) * 0.001f;
    const float* px = x.data();
    float* po = out.data();
    int c = cols;
    double best = 1e9;
    for (int rep = 0; rep < 3; ++rep) {
        auto t0 = std::chrono::steady_clock::now();
        Res r = launch(tramp_k_speed, {&px, &po, &c}, dim3(rows), dim3(32));
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::min(best, s);
        CHECK(r.rc == 0, "%s", r.err.c_str());
    }
    int bad = 0;
    for (int r = 0; r < rows; ++r) {
        float m = -INFINITY;
        for (int l = 0; l < 32; ++l) {
            float acc = 0.0f;
            for (int k = l; k < cols; k += 32) acc += x[(size_t)r * cols + k];
            m = std::max(m, acc);
        }
        bad += out[r] != m;
    }
    CHECK(bad == 0, "%d rows wrong", bad);
    g_speed = best;
    printf("  speed: 1000 blocks x 32 threads, 80 __shfl_xor_sync + 3 __syncthreads each: %.1f ms (best of 3, %u workers)\n",
           best * 1e3, emu_worker_count());
    double limit = getenv("MOE_EMU_SPEED_LIMIT_S") ? atof(getenv("MOE_EMU_SPEED_LIMIT_S")) : 0.5;
    CHECK(best < limit, "too slow: %.3f s (limit %.3f s)", best, limit);
}

int main() {
    auto t0 = std::chrono::steady_clock::now();
    printf("emu selftest: %u workers\n", emu_worker_count());
    test_indices();
    test_activemask();
    test_shared();
    test_reduce();
    test_shuffles();
    test_vote();
    test_atomics();
    test_math_bits();
    test_errors();
    test_concurrent_launches();
    test_speed();
    if (!getenv("SKIP_BF16")) test_bf16();
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("emu selftest: %s -- %d checks, %d failures, speed %.1f ms, total %.1f s\n", g_failures ? "FAILED" : "PASSED",
           g_checks, g_failures, g_speed * 1e3, secs);
    return g_failures ? 1 : 0;
}
