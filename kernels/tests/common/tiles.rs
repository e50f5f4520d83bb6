//! Test tiles for the tensor-core fragments: A [16, 16], B [16, 8] (stored by column, [8][16])
//! in bf16, C [16, 8] in fp32, in families that stress different parts of the arithmetic (the
//! same families the GPU probe `tools/gpu/probes/mma_probe.cu` measured).

/// A family of tiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// Small integers: every product and sum exact.
    Exact,
    /// Random signs, exponents in [-8, 8], random significands.
    Uniform,
    /// Exponents in [-40, 40]: long alignment shifts.
    Wide,
    /// c = -(a . b), a few ulps off: the result is what the alignment kept.
    Cancel,
    /// c 2^26..2^36: the products' low bits fall off the accumulator.
    CBig,
    /// Zeros of both signs, subnormals, infinities, NaN, overflow.
    Special,
}

impl Family {
    pub const ALL: [Family; 6] = [
        Family::Exact,
        Family::Uniform,
        Family::Wide,
        Family::Cancel,
        Family::CBig,
        Family::Special,
    ];
}

/// `n` tiles, row-major: a [n][16][16], b [n][8][16], c [n][16][8] (bf16 as bits).
pub struct Tiles {
    pub n: usize,
    pub a: Vec<u16>,
    pub b: Vec<u16>,
    pub c: Vec<f32>,
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = splitmix(self.0);
        self.0
    }
    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % (hi - lo + 1) as u64) as i64
    }
}

fn bf16(sign: i64, exp: i64, mant: i64) -> u16 {
    ((sign << 15) | ((exp + 127) << 7) | (mant & 0x7f)) as u16
}
fn f32_of(sign: i64, exp: i64, mant: u64) -> f32 {
    f32::from_bits(((sign as u32) << 31) | (((exp + 127) as u32) << 23) | (mant as u32 & 0x7f_ffff))
}
pub fn bf16_value(h: u16) -> f64 {
    f32::from_bits((h as u32) << 16) as f64
}

/// The exact value of c + a[m, :] . b[:, n] (exact in f64 for the finite families here).
pub fn exact_dot(t: &Tiles, tile: usize, m: usize, n: usize) -> f64 {
    let mut s = t.c[tile * 128 + m * 8 + n] as f64;
    for k in 0..16 {
        s += bf16_value(t.a[tile * 256 + m * 16 + k]) * bf16_value(t.b[tile * 128 + n * 16 + k]);
    }
    s
}

impl Tiles {
    /// The largest |term| of output (m, n): the products and c.
    pub fn largest_term(&self, tile: usize, m: usize, n: usize) -> f64 {
        let mut l = (self.c[tile * 128 + m * 8 + n] as f64).abs();
        for k in 0..16 {
            let p = bf16_value(self.a[tile * 256 + m * 16 + k])
                * bf16_value(self.b[tile * 128 + n * 16 + k]);
            l = l.max(p.abs());
        }
        l
    }

    pub fn make(fam: Family, n: usize, seed: u64) -> Tiles {
        let mut t = Tiles {
            n,
            a: vec![0; n * 256],
            b: vec![0; n * 128],
            c: vec![0.0; n * 128],
        };
        let mut r = Rng(seed);
        for tile in 0..n {
            let (a, b, c) = (tile * 256, tile * 128, tile * 128);
            match fam {
                Family::Exact => {
                    for i in 0..256 {
                        t.a[a + i] = half::bf16::from_f32(r.range(-8, 8) as f32).to_bits();
                    }
                    for i in 0..128 {
                        t.b[b + i] = half::bf16::from_f32(r.range(-8, 8) as f32).to_bits();
                    }
                    for i in 0..128 {
                        t.c[c + i] = r.range(-100, 100) as f32;
                    }
                }
                Family::Uniform | Family::Wide | Family::CBig => {
                    let span = if fam == Family::Wide { 40 } else { 8 };
                    for i in 0..256 {
                        t.a[a + i] = bf16(r.range(0, 1), r.range(-span, span), r.range(0, 127));
                    }
                    for i in 0..128 {
                        t.b[b + i] = bf16(r.range(0, 1), r.range(-span, span), r.range(0, 127));
                    }
                    for i in 0..128 {
                        let e = if fam == Family::CBig {
                            r.range(26, 36)
                        } else {
                            r.range(-span, span)
                        };
                        let s = r.range(0, 1);
                        t.c[c + i] = f32_of(s, e, r.next());
                    }
                }
                Family::Cancel => {
                    for i in 0..256 {
                        t.a[a + i] = bf16(r.range(0, 1), r.range(-4, 4), r.range(0, 127));
                    }
                    for i in 0..128 {
                        t.b[b + i] = bf16(r.range(0, 1), r.range(-4, 4), r.range(0, 127));
                    }
                    for m in 0..16 {
                        for nn in 0..8 {
                            t.c[c + m * 8 + nn] = 0.0;
                            let f = -(exact_dot(&t, tile, m, nn) as f32);
                            let bits =
                                f.to_bits() as i64 + if f != 0.0 { r.range(-3, 3) } else { 0 };
                            t.c[c + m * 8 + nn] = f32::from_bits(bits as u32);
                        }
                    }
                }
                Family::Special => {
                    const SA: [u16; 16] = [
                        0x0000, 0x8000, 0x0001, 0x807f, 0x0040, 0x7f80, 0xff80, 0x7fc0, 0x7f7f,
                        0xff7f, 0x3f80, 0x0080, 0x0100, 0x7f00, 0x3f81, 0xbf80,
                    ];
                    const SC: [u32; 12] = [
                        0x0000_0000,
                        0x8000_0000,
                        0x0000_0001,
                        0x807f_ffff,
                        0x0080_0000,
                        0x7f80_0000,
                        0xff80_0000,
                        0x7fc0_0000,
                        0x7f7f_ffff,
                        0xff7f_ffff,
                        0x3f80_0000,
                        0x0040_0000,
                    ];
                    for i in 0..256 {
                        let pick = r.range(0, 9);
                        let mut v = if pick < 5 {
                            SA[r.range(0, 15) as usize]
                        } else if pick < 8 {
                            bf16(r.range(0, 1), r.range(-126, -100), r.range(0, 127))
                        } else {
                            bf16(r.range(0, 1), r.range(60, 127), r.range(0, 127))
                        };
                        if r.range(0, 3) == 0 {
                            v &= 0x807f; // subnormal or zero
                        }
                        t.a[a + i] = v;
                    }
                    for i in 0..128 {
                        let pick = r.range(0, 9);
                        t.b[b + i] = if pick < 5 {
                            SA[r.range(0, 15) as usize]
                        } else if pick < 8 {
                            bf16(r.range(0, 1), r.range(-30, 0), r.range(0, 127))
                        } else {
                            bf16(r.range(0, 1), r.range(50, 127), r.range(0, 127))
                        };
                    }
                    for i in 0..128 {
                        let pick = r.range(0, 3);
                        t.c[c + i] = match pick {
                            0 => f32::from_bits(SC[r.range(0, 11) as usize]),
                            1 => f32::from_bits(r.next() as u32 & 0x807f_ffff),
                            _ => f32::from_bits(r.next() as u32),
                        };
                    }
                    // Keep most tiles free of inf and NaN, so the finite special cases show too.
                    if tile % 4 != 0 {
                        for i in 0..256 {
                            if (t.a[a + i] >> 7) & 0xff == 0xff {
                                t.a[a + i] &= 0xbfff;
                            }
                        }
                        for i in 0..128 {
                            if (t.b[b + i] >> 7) & 0xff == 0xff {
                                t.b[b + i] &= 0xbfff;
                            }
                            if !t.c[c + i].is_finite() {
                                t.c[c + i] = 1.0;
                            }
                        }
                    }
                }
            }
        }
        t
    }
}
