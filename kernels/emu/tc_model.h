// tc_model.h -- a bit-level model of one tensor-core dot product: d = a[0..n) . b[0..n) + c, with
// bf16 a and b and an fp32 c and d, as `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32`
// computes each element of its 16 x 8 result (n = 16).
//
// Plain host C++ (no CUDA): used by the emulator's mma (emu/mma.h) and by the GPU probe that
// measured the H200 (tools/gpu/probes/mma_probe.cu), so the model the emulator runs is the model
// the probe checked.
//
// The model (the features published for NVIDIA tensor cores since Volta, with the H100's
// parameters from Khattak & Mikaitis, "Accurate models of NVIDIA tensor cores", 2025; checked
// bit for bit on this project's H200, see book/src/runtime.md):
//   1. Every product a_i * b_i is exact (8-bit by 8-bit significands).
//   2. The anchor E is the largest exponent among the products, each taken as exp(a) + exp(b)
//      before normalisation (so a product in [2, 4) counts at the lower exponent), and c's.
//   3. Every term (products and c) is truncated toward zero to a multiple of 2^(E - 23 - extra):
//      the accumulator keeps `extra` bits below fp32's 24-bit window at the anchor.
//   4. The truncated terms are added exactly, and the sum is rounded once to fp32 (toward zero on
//      the H100 family), subnormals kept.
//   NaN in, inf * 0 or inf - inf give NaN (the canonical 0x7fffffff); otherwise an infinite
//   term gives an infinite result.
//
// `block` splits the n products into chained groups (block < n: each group's result, rounded,
// is the c of the next group); the H100 adds all 16 of an m16n8k16 in one group.
#ifndef MOE_EMU_TC_MODEL_H
#define MOE_EMU_TC_MODEL_H

#include <cstdint>
#include <cstring>

namespace tc_model {

enum Rounding : int { RZ = 0, RNE = 1 };

struct Params {
    int extra;     // accumulator bits below fp32's 24 at the anchor (H100: 2)
    int rounding;  // final rounding of the exact sum of truncated terms (H100: RZ)
    int block;     // products per group (H100: 16)
};

static const Params H100 = {2, RZ, 16};

inline uint32_t f32_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
inline float bits_f32(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// The exact sum s * 2^lsb (s a signed 64-bit integer), rounded to fp32: 24 significant bits for
// a normal result, multiples of 2^-149 below 2^-126. Overflow gives infinity, also under RZ (the
// H200 does so, where IEEE's rounding toward zero would give the largest finite value).
inline float round_to_f32(int64_t s, int lsb, int rounding) {
    if (s == 0) return 0.0f;
    const uint32_t sign = s < 0 ? 0x80000000u : 0u;
    const uint64_t m = s < 0 ? (uint64_t)(-s) : (uint64_t)s;
    const int top = 63 - __builtin_clzll(m);  // |sum| in [2^(top+lsb), 2^(top+lsb+1))
    const int e = top + lsb;
    int q_lsb = e >= -126 ? e - 23 : -149;  // weight of the last kept bit
    const int sh = q_lsb - lsb;
    uint64_t q;
    if (sh <= 0) {
        q = m << (-sh);
    } else if (sh >= 64) {
        q = 0;
    } else {
        q = m >> sh;
        if (rounding == RNE) {
            const uint64_t rem = m & ((1ull << sh) - 1), half = 1ull << (sh - 1);
            if (rem > half || (rem == half && (q & 1))) ++q;
        }
    }
    if (q >> 24) {  // rounding carried into a 25th bit
        q >>= 1;
        q_lsb += 1;
    }
    if (q == 0) return bits_f32(sign);
    const int qtop = 63 - __builtin_clzll(q);
    const int ee = qtop + q_lsb;
    if (ee > 127) return bits_f32(sign | 0x7f800000u);
    if (ee < -126) return bits_f32(sign | (uint32_t)q);  // subnormal: q_lsb == -149
    const uint32_t frac = (uint32_t)(q << (23 - qtop)) & 0x7fffffu;
    return bits_f32(sign | ((uint32_t)(ee + 127) << 23) | frac);
}

// One group: c + sum of n exact products, under `p`.
inline float dot_group(const uint16_t* a, const uint16_t* b, int n, float c, const Params& p) {
    // Specials first.
    bool nan = (f32_bits(c) & 0x7fffffffu) > 0x7f800000u;
    bool pinf = false, ninf = false;
    if (!nan && (f32_bits(c) & 0x7fffffffu) == 0x7f800000u) (f32_bits(c) >> 31 ? ninf : pinf) = true;
    for (int i = 0; i < n && !nan; ++i) {
        uint32_t ea = (a[i] >> 7) & 0xff, eb = (b[i] >> 7) & 0xff;
        bool a_nan = ea == 0xff && (a[i] & 0x7f), b_nan = eb == 0xff && (b[i] & 0x7f);
        bool a_inf = ea == 0xff && !(a[i] & 0x7f), b_inf = eb == 0xff && !(b[i] & 0x7f);
        bool a_zero = (a[i] & 0x7fff) == 0, b_zero = (b[i] & 0x7fff) == 0;
        if (a_nan || b_nan || (a_inf && b_zero) || (b_inf && a_zero)) nan = true;
        else if (a_inf || b_inf) (((a[i] ^ b[i]) >> 15) ? ninf : pinf) = true;
    }
    if (nan || (pinf && ninf)) return bits_f32(0x7fffffffu);
    if (pinf) return bits_f32(0x7f800000u);
    if (ninf) return bits_f32(0xff800000u);

    // Terms: value = sig * 2^(exp - shift0), with exp the anchor-candidate exponent.
    struct Term { int64_t sig; int exp; int scale; bool neg; };  // value = sig * 2^scale
    Term t[65];
    int nt = 0;
    int anchor = -100000;
    for (int i = 0; i < n; ++i) {
        if ((a[i] & 0x7fff) == 0 || (b[i] & 0x7fff) == 0) continue;
        int ea = (a[i] >> 7) & 0xff, eb = (b[i] >> 7) & 0xff;
        int ma = (a[i] & 0x7f) | (ea ? 0x80 : 0), mb = (b[i] & 0x7f) | (eb ? 0x80 : 0);
        int xa = (ea ? ea : 1) - 127, xb = (eb ? eb : 1) - 127;  // subnormals at -126
        Term& q = t[nt++];
        q.sig = (int64_t)ma * mb;         // exact product significand, 7 + 7 fraction bits
        q.exp = xa + xb;                  // exponent before normalisation
        q.scale = xa + xb - 14;
        q.neg = ((a[i] ^ b[i]) >> 15) & 1;
        if (q.exp > anchor) anchor = q.exp;
    }
    uint32_t cb = f32_bits(c);
    if (cb & 0x7fffffffu) {
        int ec = (cb >> 23) & 0xff;
        Term& q = t[nt++];
        q.sig = (cb & 0x7fffff) | (ec ? 0x800000 : 0);
        q.exp = (ec ? ec : 1) - 127;
        q.scale = q.exp - 23;
        q.neg = cb >> 31;
        if (q.exp > anchor) anchor = q.exp;
    }
    if (nt == 0) return 0.0f;  // +0, whatever the signs of the zeros
    const int lsb = anchor - 23 - p.extra;
    int64_t s = 0;
    for (int i = 0; i < nt; ++i) {
        int sh = lsb - t[i].scale;  // truncate sig * 2^scale to a multiple of 2^lsb
        int64_t mag = sh <= 0 ? (t[i].sig << (-sh)) : (sh >= 63 ? 0 : (t[i].sig >> sh));
        s += t[i].neg ? -mag : mag;
    }
    return round_to_f32(s, lsb, p.rounding);
}

// d = c + a[0..n) . b[0..n), in groups of p.block products.
inline float dot(const uint16_t* a, const uint16_t* b, int n, float c, const Params& p) {
    float acc = c;
    for (int k = 0; k < n; k += p.block) {
        int len = n - k < p.block ? n - k : p.block;
        acc = dot_group(a + k, b + k, len, acc, p);
    }
    return acc;
}

}  // namespace tc_model

#endif  // MOE_EMU_TC_MODEL_H
