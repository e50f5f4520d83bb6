//! The runtime's proof: every emulated CUDA feature, run through `kernels/selftest.cu` on every
//! backend and checked against an independent computation here; and, on a GPU machine, the
//! same kernels on the emulator and on the GPU, compared bit for bit.

#[path = "common/tiles.rs"]
mod tiles;

use moe_kernels::testing::{assert_same_bits, assert_same_bits_up_to_nan_payload};
use moe_kernels::{args, BackendKind, Device, EmuErrorKind, KernelError, LaunchConfig};
use tiles::{exact_dot, Family, Tiles};

/// Everything the self-test kernels write, for one device.
#[derive(Debug)]
struct Outputs {
    indices: Vec<i32>,
    block_sum: Vec<f32>,
    warp: Vec<i32>,
    hist: Vec<i32>,
    max_or: (i32, u32),
    bf16_bits: Vec<u16>,
    bf16_back: Vec<f32>,
    math: Vec<f32>,
    convert: Vec<u32>,
    atomic_cells: Vec<f32>,
}

const GRID: (u32, u32, u32) = (3, 2, 2);
const BLOCK: (u32, u32, u32) = (4, 2, 3);

/// Deterministic inputs (a splitmix64 hash), independent of any RNG crate.
fn hash(i: u64, salt: u64) -> u64 {
    let mut z = i
        .wrapping_add(salt.wrapping_mul(0x9e3779b97f4a7c15))
        .wrapping_add(0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
    z ^ (z >> 31)
}

fn floats(n: usize, salt: u64, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|i| ((hash(i as u64, salt) >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale)
        .collect()
}

/// bf16 inputs: every edge case (ties, subnormals, max finite, overflow, inf, NaN payloads,
/// signed zeros) and many ordinary values.
fn bf16_inputs() -> Vec<f32> {
    let mut v: Vec<f32> = [
        0x0000_0000u32,
        0x8000_0000,
        0x3f80_8000,
        0x3f81_8000,
        0x3f80_8001,
        0x3f80_7fff,
        0x0000_0001,
        0x0000_8000,
        0x0001_8000,
        0x007f_ffff,
        0x7f7f_ffff,
        0x7f7f_7fff,
        0x7f7f_8000,
        0xff7f_ffff,
        0x7f80_0000,
        0xff80_0000,
        0x7fc0_0000,
        0x7f80_0001,
        0xffc1_2345,
        0x7fff_ffff,
    ]
    .iter()
    .map(|&b| f32::from_bits(b))
    .collect();
    v.extend((0..4000u64).map(|i| f32::from_bits(hash(i, 7) as u32)));
    v
}

fn run_all(dev: &'static Device) -> Result<Outputs, KernelError> {
    let m = dev.load(&moe_kernels::families::SELFTEST)?;

    let threads = (BLOCK.0 * BLOCK.1 * BLOCK.2 * GRID.0 * GRID.1 * GRID.2) as usize;
    let indices = dev.alloc::<i32>(threads * 4)?;
    m.launch(
        "selftest_indices",
        LaunchConfig {
            grid: GRID,
            block: BLOCK,
            shared_bytes: 0,
            dependent: false,
        },
        &args![&indices],
    )?;

    let x = dev.upload(&floats(4 * 256, 1, 3.0))?;
    let block_sum = dev.alloc::<f32>(8)?;
    m.launch(
        "selftest_block_sum",
        LaunchConfig::blocks(4, 256).with_shared(256 * 4),
        &args![&x, &block_sum],
    )?;

    let wx: Vec<i32> = (0..64).map(|i| (hash(i, 3) % 100) as i32).collect();
    let wx = dev.upload(&wx)?;
    let warp = dev.alloc::<i32>(64 * 16)?;
    m.launch(
        "selftest_warp",
        LaunchConfig::blocks(1, 64),
        &args![&wx, &warp],
    )?;

    let ax: Vec<i32> = (0..10_000).map(|i| (hash(i, 5) % 1000) as i32).collect();
    let ax = dev.upload(&ax)?;
    let hist = dev.zeros::<i32>(16)?;
    let maxv = dev.zeros::<i32>(1)?;
    let orv = dev.zeros::<u32>(1)?;
    m.launch(
        "selftest_atomics",
        LaunchConfig::for_elements(10_000, 128),
        &args![&ax, 10_000i32, &hist, &maxv, &orv],
    )?;

    let bx = bf16_inputs();
    let bn = bx.len();
    let bx = dev.upload(&bx)?;
    let bits = dev.alloc::<u16>(bn)?;
    let back = dev.alloc::<f32>(bn)?;
    m.launch(
        "selftest_bf16",
        LaunchConfig::for_elements(bn, 256),
        &args![&bx, &bits, &back, bn as i32],
    )?;

    let mx = math_inputs();
    let mn = mx.len();
    let mx = dev.upload(&mx)?;
    let math = dev.alloc::<f32>(mn * 6)?;
    m.launch(
        "selftest_math",
        LaunchConfig::for_elements(mn, 256),
        &args![&mx, &math, mn as i32],
    )?;

    let (cx, cells, add) = convert_inputs();
    let cn = cx.len();
    let cx = dev.upload(&cx)?;
    let convert = dev.alloc::<u32>(cn * 10)?;
    let atomic_cells = dev.upload(&cells)?;
    let add = dev.upload(&add)?;
    m.launch(
        "selftest_convert",
        LaunchConfig::for_elements(cn, 128),
        &args![&cx, &convert, &atomic_cells, &add, cn as i32],
    )?;

    Ok(Outputs {
        convert: convert.to_vec()?,
        atomic_cells: atomic_cells.to_vec()?,
        indices: indices.to_vec()?,
        block_sum: block_sum.to_vec()?,
        warp: warp.to_vec()?,
        hist: hist.to_vec()?,
        max_or: (maxv.to_vec()?[0], orv.to_vec()?[0]),
        bf16_bits: bits.to_vec()?,
        bf16_back: back.to_vec()?,
        math: math.to_vec()?,
    })
}

/// Conversion inputs: the edges of every integer range, halves (ties), signed zeros, infinities,
/// NaNs, then random bit patterns (every exponent). Atomic pairs (cell, addend): subnormal and
/// normal values whose sums land on both sides of the smallest normal, then ordinary ones.
fn convert_inputs() -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let mut x: Vec<f32> = vec![
        0.0,
        -0.0,
        0.5,
        1.5,
        2.5,
        -0.5,
        -1.5,
        -2.5,
        0.499_999_97,
        -0.6,
        1e-45,
        -1e-45,
        2_147_483_520.0,
        2_147_483_648.0,
        -2_147_483_648.0,
        -2_147_483_904.0,
        3e9,
        -3e9,
        4_294_967_040.0,
        4_294_967_296.0,
        9.223_371_5e18,
        9.223_372e18,
        -9.223_372e18,
        1e19,
        -1e19,
        f32::MAX,
        f32::MIN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7f80_0001),
        f32::from_bits(0xffc1_2345),
    ];
    x.extend((0..4000u64).map(|i| f32::from_bits(hash(i, 17) as u32)));
    let tiny = f32::MIN_POSITIVE; // 2^-126, the smallest normal
    let mut pairs: Vec<(f32, f32)> = vec![
        (1e-40, 1e-40),
        (1e-40, -1e-40),
        (-1e-40, 0.0),
        (0.0, 1e-40),
        (tiny, 1e-40),
        (1.5 * tiny, -tiny),
        (tiny, -0.5 * tiny),
        (2.0 * tiny, -tiny),
        (1.0, 1e-40),
        (-0.0, -1e-40),
    ];
    pairs.extend((0..(x.len() - pairs.len()) as u64).map(|i| {
        let a = f32::from_bits(
            (hash(i, 19) as u32 & 0x807f_ffff) | (0x0080_0000 * (hash(i, 23) % 4) as u32),
        );
        let b = f32::from_bits(
            (hash(i, 29) as u32 & 0x807f_ffff) | (0x0080_0000 * (hash(i, 31) % 4) as u32),
        );
        (a, b)
    }));
    let (cells, add) = pairs.into_iter().unzip();
    (x, cells, add)
}

/// What the GPU computes for each conversion of `v` (PTX cvt: round, then saturate; NaN gives
/// 0). Rust's `as` from float to integer has exactly these rules, so it is the reference, with
/// one exception the H200 showed us: a NaN converted to a 64-bit integer gives `i64::MIN`, not 0.
fn convert_reference(v: f32) -> [u32; 10] {
    let rn = v.round_ties_even();
    let to_i64 = |x: f32| if x.is_nan() { i64::MIN } else { x as i64 };
    let lz = to_i64(v) as u64;
    let ln = to_i64(rn) as u64;
    [
        rn as i32 as u32,
        v as i32 as u32,
        v.floor() as i32 as u32,
        v.ceil() as i32 as u32,
        rn as u32,
        v as u32,
        lz as u32,
        (lz >> 32) as u32,
        ln as u32,
        (ln >> 32) as u32,
    ]
}

/// atom.add.f32: round to nearest even, subnormal inputs and result flushed to (signed) zero.
fn atomic_add_reference(cell: f32, add: f32) -> f32 {
    let ftz = |x: f32| {
        if x.is_subnormal() {
            0.0f32.copysign(x)
        } else {
            x
        }
    };
    ftz(ftz(cell) + ftz(add))
}

fn conversions_saturate_and_atomics_flush_like_the_gpu(dev: &'static Device) {
    let out = run_all(dev).unwrap();
    let (x, cells, add) = convert_inputs();
    for (i, &v) in x.iter().enumerate() {
        let got = &out.convert[i * 10..i * 10 + 10];
        assert_eq!(
            got,
            convert_reference(v),
            "conversions of {v:e} ({:#010x})",
            v.to_bits()
        );
    }
    for i in 0..x.len() {
        let want = atomic_add_reference(cells[i], add[i]);
        assert_eq!(
            out.atomic_cells[i].to_bits(),
            want.to_bits(),
            "atomicAdd({:e}, {:e}) gave {:e}, want {want:e}",
            cells[i],
            add[i],
            out.atomic_cells[i]
        );
    }
}

fn math_inputs() -> Vec<f32> {
    let mut v = floats(20_000, 11, 30.0);
    v.extend([
        0.0, -0.0, 1.0, -1.0, 88.0, 88.7, 89.0, -87.0, -100.0, -104.0, 1e-30, -1e-30, 1e-45, 20.0,
        20.5, 40.0,
    ]);
    v.extend([f32::INFINITY, f32::NEG_INFINITY, f32::NAN]);
    v
}

fn indices_in_3d_grids_and_blocks(dev: &'static Device) {
    let out = run_all(dev).unwrap();
    let (bx, by, bz) = BLOCK;
    let (gx, gy, gz) = GRID;
    let per_block = (bx * by * bz) as usize;
    for z in 0..gz {
        for y in 0..gy {
            for x in 0..gx {
                let block = (x + gx * (y + gy * z)) as usize;
                for tz in 0..bz {
                    for ty in 0..by {
                        for tx in 0..bx {
                            let g = block * per_block + (tx + bx * (ty + by * tz)) as usize;
                            let want = [
                                (x + 10 * y + 100 * z) as i32,
                                (tx + 10 * ty + 100 * tz) as i32,
                                (bx + 10 * by + 100 * bz) as i32,
                                (gx + 10 * gy + 100 * gz) as i32,
                            ];
                            assert_eq!(out.indices[g * 4..g * 4 + 4], want, "thread {g}");
                        }
                    }
                }
            }
        }
    }
}

fn shared_memory_and_barriers_reduce_in_a_fixed_order(dev: &'static Device) {
    let out = run_all(dev).unwrap();
    let x = floats(4 * 256, 1, 3.0);
    for b in 0..4 {
        // The kernel's tree, replayed in f32 in the same order.
        let copy = &x[b * 256..(b + 1) * 256];
        let mut tree: Vec<f32> = (0..256).map(|i| copy[255 - i]).collect();
        let mut s = 128;
        while s > 0 {
            for i in 0..s {
                tree[i] += tree[i + s];
            }
            s /= 2;
        }
        assert_eq!(out.block_sum[b].to_bits(), tree[0].to_bits(), "block {b}");
        assert_eq!(
            out.block_sum[4 + b],
            b as f32,
            "block {b} saw another block's shared memory"
        );
    }
}

fn warp_intrinsics_follow_cuda_semantics(dev: &'static Device) {
    let out = run_all(dev).unwrap();
    let x: Vec<i32> = (0..64).map(|i| (hash(i, 3) % 100) as i32).collect();
    for tid in 0..64usize {
        let (warp, lane) = (tid / 32, tid % 32);
        let at = |l: usize| x[warp * 32 + l];
        let o = &out.warp[tid * 16..tid * 16 + 16];
        assert_eq!(o[0], at((lane * 7) % 32), "shfl idx, lane {tid}");
        assert_eq!(
            o[1],
            if lane >= 3 { at(lane - 3) } else { at(lane) },
            "shfl up, lane {tid}"
        );
        assert_eq!(
            o[2],
            if lane + 5 < 32 {
                at(lane + 5)
            } else {
                at(lane)
            },
            "shfl down, lane {tid}"
        );
        assert_eq!(o[3], at(lane ^ 9), "shfl xor, lane {tid}");
        assert_eq!(
            o[4],
            at((lane / 16) * 16 + 3),
            "shfl idx width 16, lane {tid}"
        );
        let seg = (lane / 8) * 8;
        assert_eq!(
            o[5],
            if lane + 2 < seg + 8 {
                at(lane + 2)
            } else {
                at(lane)
            },
            "shfl down width 8, lane {tid}"
        );
        let ballot = (0..32)
            .filter(|&l| at(l) & 1 == 1)
            .fold(0u32, |b, l| b | 1 << l);
        assert_eq!(o[6] as u32, ballot, "ballot, lane {tid}");
        let any = (0..32).any(|l| at(l) > 90) as i32;
        assert_eq!(o[7], any + 2, "any/all, lane {tid}");
        // The fixed xor tree: after round `off`, lane l holds the sum of its group of 2*off.
        let mut f: Vec<f32> = (0..32).map(|l| at(l) as f32 * 0.1).collect();
        let mut off = 16;
        while off > 0 {
            f = (0..32).map(|l| f[l] + f[l ^ off]).collect();
            off /= 2;
        }
        assert_eq!(
            o[8],
            f[lane].to_bits() as i32,
            "float xor-tree sum, lane {tid}"
        );
        assert_eq!(
            o[9],
            if lane < 16 { at(lane ^ 1) } else { -1 },
            "half-warp shuffle, lane {tid}"
        );
        assert_eq!(
            (o[10], o[11]),
            (at(31 - lane), (31 - lane) as i32),
            "64-bit shuffle, lane {tid}"
        );
        let lanes = |r: std::ops::Range<usize>| r.map(at).collect::<Vec<i32>>();
        let all = lanes(0..32);
        let umax = all.iter().map(|&v| (v - 50) as u32).max().unwrap();
        assert_eq!(o[12] as u32, umax, "reduce max (unsigned), lane {tid}");
        let smin = all.iter().map(|&v| v - 50).min().unwrap();
        assert_eq!(o[13], smin, "reduce min (signed), lane {tid}");
        let sum = all.iter().fold(0u32, |s, &v| {
            s.wrapping_add((v as u32).wrapping_mul(2654435761))
        });
        assert_eq!(o[14] as u32, sum, "reduce add (wrapping), lane {tid}");
        let half = if lane < 16 {
            (0..16).fold(0u32, |s, l| s ^ ((at(l) as u32) << (l & 7))) as i32
        } else {
            let hi = lanes(16..32);
            let or = hi.iter().fold(0u32, |s, &v| s | 1 << (v & 7));
            hi.iter().map(|&v| v - 50).max().unwrap() + 1000 * or as i32
        };
        assert_eq!(o[15], half, "half-warp reduce xor / max and or, lane {tid}");
    }
}

fn atomics_count_exactly_under_contention(dev: &'static Device) {
    let out = run_all(dev).unwrap();
    let x: Vec<i32> = (0..10_000).map(|i| (hash(i, 5) % 1000) as i32).collect();
    let mut hist = vec![0; 16];
    for v in &x {
        hist[(v & 15) as usize] += 1;
    }
    assert_eq!(out.hist, hist);
    assert_eq!(out.max_or.0, *x.iter().max().unwrap());
    assert_eq!(out.max_or.1, x.iter().fold(0u32, |a, v| a | 1 << (v & 31)));
}

fn bf16_rounds_to_nearest_even(dev: &'static Device) {
    let out = run_all(dev).unwrap();
    for (i, &v) in bf16_inputs().iter().enumerate() {
        let got = out.bf16_bits[i];
        if v.is_nan() {
            // The hardware's cvt.rn.bf16.f32 returns the canonical NaN.
            assert_eq!(got, 0x7fff, "NaN input {:#010x}", v.to_bits());
            assert!(out.bf16_back[i].is_nan());
        } else {
            // Independent rounding: the half crate's round-to-nearest-even.
            let want = half::bf16::from_f32(v).to_bits();
            assert_eq!(got, want, "input {v:e} ({:#010x})", v.to_bits());
            assert_eq!(out.bf16_back[i].to_bits(), (want as u32) << 16);
        }
    }
}

fn project_math_is_accurate_and_fma_rounds_once(dev: &'static Device) {
    let out = run_all(dev).unwrap();
    let ulps = |got: f32, want: f64| -> f64 {
        if want == 0.0 {
            return if got == 0.0 { 0.0 } else { f64::INFINITY };
        }
        let w = want as f32;
        if !w.is_finite() {
            return if got == w { 0.0 } else { f64::INFINITY };
        }
        let ulp = f32::from_bits(w.abs().to_bits() + 1) - w.abs();
        ((got as f64 - want) / ulp as f64).abs()
    };
    let mut worst = [0f64; 5];
    for (i, &v) in math_inputs().iter().enumerate() {
        let o = &out.math[i * 6..i * 6 + 6];
        let d = v as f64;
        if v.is_nan() {
            assert!(o[..5].iter().all(|x| x.is_nan()), "NaN in, row {i}: {o:?}");
            continue;
        }
        let want = [
            d.exp(),
            d.abs().ln(),
            d.abs().ln_1p(),
            1.0 / (1.0 + (-d).exp()),
            d.exp().ln_1p(),
        ];
        for j in 0..5 {
            let w = want[j];
            // Results in the subnormal range carry fewer bits; check those absolutely.
            let e = if w.abs() < 1.2e-38 {
                ((o[j] as f64 - w).abs() / 1.4e-45).min(4.0)
            } else {
                ulps(o[j], w)
            };
            worst[j] = worst[j].max(e);
        }
        assert_eq!(
            o[5].to_bits(),
            v.mul_add(v, -1.0).to_bits(),
            "fmaf({v}, {v}, -1)"
        );
    }
    for (j, name) in ["exp", "log", "log1p", "sigmoid", "softplus"]
        .iter()
        .enumerate()
    {
        assert!(worst[j] <= 4.0, "{name}: worst error {} ulp", worst[j]);
    }
}

// ANCHOR: emu_vs_gpu
#[test]
#[ignore = "needs a GPU"]
fn emulator_and_gpu_agree_bit_for_bit() {
    let gpu = run_all(moe_kernels::testing::cuda()).unwrap();
    let cpu = run_all(moe_kernels::testing::emu()).unwrap();
    assert_same_bits("indices", &gpu.indices, &cpu.indices);
    assert_same_bits("block_sum", &gpu.block_sum, &cpu.block_sum);
    assert_same_bits("warp", &gpu.warp, &cpu.warp);
    assert_same_bits("hist", &gpu.hist, &cpu.hist);
    assert_eq!(gpu.max_or, cpu.max_or);
    assert_same_bits("bf16 bits", &gpu.bf16_bits, &cpu.bf16_bits);
    // bf16_back holds NaN only for NaN inputs, converted through the canonical bf16 NaN on both.
    assert_same_bits("bf16 back", &gpu.bf16_back, &cpu.bf16_back);
    // The math of a NaN input is NaN on both backends, with the hardware's own payload.
    assert_same_bits("conversions", &gpu.convert, &cpu.convert);
    assert_same_bits("atomicAdd", &gpu.atomic_cells, &cpu.atomic_cells);
    let payloads = assert_same_bits_up_to_nan_payload("math", &gpu.math, &cpu.math);
    assert!(
        payloads <= 6,
        "only the NaN input's row may differ in NaN payloads, found {payloads}"
    );
}
// ANCHOR_END: emu_vs_gpu

/// common.cuh's straight-line forms (chapter 4's SwiGLU epilogue) give the bits of the forms they
/// stand in for: moe_expf_flat those of moe_expf, and moe_rcp_rn_fast those of `1.0f / x` over
/// moe_rcp_fast_ok's range, on `count` floats spaced `stride` bit patterns apart from `first`.
fn flat_math_gives_the_same_bits(dev: &'static Device, first: u32, count: u64, stride: u32) {
    let m = dev.load(&moe_kernels::families::SELFTEST).unwrap();
    let bad = dev.upload(&[0u64; 2]).unwrap();
    let first_bad = dev.upload(&[u32::MAX; 2]).unwrap();
    m.launch(
        "selftest_flat_math",
        LaunchConfig::blocks(
            if dev.kind() == BackendKind::Emu {
                4
            } else {
                132 * 16
            },
            256,
        ),
        &args![first, count, stride, &bad, &first_bad],
    )
    .unwrap();
    let (bad, first_bad) = (bad.to_vec().unwrap(), first_bad.to_vec().unwrap());
    assert_eq!(
        bad,
        [0, 0],
        "floats whose bits differ: moe_expf_flat {} (first {:#010x}), moe_rcp_rn_fast {} (first {:#010x})",
        bad[0],
        first_bad[0],
        bad[1],
        first_bad[1]
    );
}

/// On the emulator: 65,536 floats, every 65,537th bit pattern (every exponent, both signs, NaNs
/// and infinities among them). There the reciprocal is the division itself; the exponential's
/// masks are what this checks.
#[test]
fn flat_math_gives_the_same_bits_on_the_emulator() {
    flat_math_gives_the_same_bits(moe_kernels::testing::emu(), 0, 1 << 16, 65_537);
}

/// On the GPU: every float. The reciprocal there is MUFU.RCP and one Newton step, against CUDA's
/// own division; every d of [2^-126, 2^126) in either sign must give the division's bits.
#[test]
#[ignore = "needs a GPU"]
fn flat_math_gives_the_same_bits_on_every_float_on_the_gpu() {
    flat_math_gives_the_same_bits(moe_kernels::testing::cuda(), 0, 1 << 32, 1);
}

#[test]
fn emulator_reports_a_barrier_that_not_every_thread_reaches() {
    let emu = Device::emu();
    let m = emu.load(&moe_kernels::families::SELFTEST).unwrap();
    let out = emu.alloc::<i32>(32).unwrap();
    let err = m
        .launch(
            "selftest_bad_barrier",
            LaunchConfig::blocks(1, 32),
            &args![&out],
        )
        .unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(
            err,
            KernelError::Emu {
                kind: EmuErrorKind::Misuse,
                ..
            }
        ),
        "{text}"
    );
    assert!(
        text.contains("selftest_bad_barrier") && text.contains("__syncthreads"),
        "{text}"
    );
    // The emulator is still usable after a failed launch.
    let ok = dev_roundtrip(emu);
    assert_eq!(ok, vec![1.0, -2.0, 3.5]);
}

fn dev_roundtrip(dev: &'static Device) -> Vec<f32> {
    let m = dev.load(&moe_kernels::families::SELFTEST).unwrap();
    let x = dev.upload(&[1.0f32, -2.0, 3.5]).unwrap();
    let bits = dev.alloc::<u16>(3).unwrap();
    let back = dev.alloc::<f32>(3).unwrap();
    m.launch(
        "selftest_bf16",
        LaunchConfig::for_elements(3, 128),
        &args![&x, &bits, &back, 3i32],
    )
    .unwrap();
    back.to_vec().unwrap()
}

#[test]
fn unknown_kernels_and_bad_lengths_are_typed_errors() {
    let dev = Device::emu();
    let m = dev.load(&moe_kernels::families::SELFTEST).unwrap();
    let err = m
        .launch("no_such_kernel", LaunchConfig::blocks(1, 1), &[])
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "kernels/selftest.cu has no extern \"C\" __global__ kernel named no_such_kernel"
    );
    let mut b = dev.alloc::<f32>(3).unwrap();
    let err = b.copy_from(&[1.0, 2.0]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "copy to device: expected 3 elements, got 2"
    );
    let err = m
        .launch(
            "selftest_bf16",
            LaunchConfig::blocks(1, 2048),
            &args![&b, &b, &b, 0i32],
        )
        .unwrap_err();
    assert!(matches!(err, KernelError::Emu { .. }), "{err}");
    // Arguments are checked against the kernel's signature (read from the .cu by the build).
    let err = m
        .launch(
            "selftest_bf16",
            LaunchConfig::blocks(1, 32),
            &args![&b, &b, &b, 3i64],
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "kernel selftest::selftest_bf16 takes (Ptr, Ptr, Ptr, I32) but was launched with (Ptr, Ptr, Ptr, I64)"
    );
    let err = m
        .launch("selftest_bf16", LaunchConfig::blocks(1, 32), &args![&b, &b])
        .unwrap_err();
    assert!(matches!(err, KernelError::Arguments { .. }), "{err}");
}

fn fresh_allocations_are_poisoned(dev: &'static Device) {
    let b = dev.alloc::<f32>(5).unwrap();
    assert!(b
        .to_vec()
        .unwrap()
        .iter()
        .all(|v| v.to_bits() == 0xffff_ffff));
    let z = dev.zeros::<i32>(5).unwrap();
    assert_eq!(z.to_vec().unwrap(), vec![0; 5]);
}

// ---------------------------------------------------------------- tensor cores

/// Runs `selftest_mma` over `tiles` on `dev`: one warp per 16 x 8 x 16 tile.
fn mma(dev: &'static Device, t: &Tiles) -> Vec<f32> {
    let m = dev.load(&moe_kernels::families::SELFTEST).unwrap();
    let a = dev.upload(&t.a).unwrap();
    let b = dev.upload(&t.b).unwrap();
    let c = dev.upload(&t.c).unwrap();
    let d = dev.alloc::<f32>(t.c.len()).unwrap();
    m.launch(
        "selftest_mma",
        LaunchConfig::blocks(t.n as u32, 32),
        &args![&a, &b, &c, &d, t.n as i32],
    )
    .unwrap();
    d.to_vec().unwrap()
}

// ANCHOR: mma_layout
/// Small integers: every product and sum is exact, so the tensor core must return the exact dot
/// product; any mistake in the fragment layout (a row or column from the wrong lane) shows.
fn mma_fragments_follow_the_documented_layout(dev: &'static Device) {
    let t = Tiles::make(Family::Exact, 64, 1);
    let d = mma(dev, &t);
    for tile in 0..t.n {
        for m in 0..16 {
            for n in 0..8 {
                let want = exact_dot(&t, tile, m, n);
                assert_eq!(
                    d[tile * 128 + m * 8 + n] as f64,
                    want,
                    "tile {tile} row {m} column {n}"
                );
            }
        }
    }
}
// ANCHOR_END: mma_layout

/// Random tiles: within what fp32 accumulation allows of the exact dot product (each of the 17
/// terms truncated below 2^-25 of the largest, then one rounding).
fn mma_is_close_to_the_exact_dot(dev: &'static Device) {
    for fam in [Family::Uniform, Family::Wide, Family::Cancel] {
        let t = Tiles::make(fam, 64, 2);
        let d = mma(dev, &t);
        for tile in 0..t.n {
            for m in 0..16 {
                for n in 0..8 {
                    let want = exact_dot(&t, tile, m, n);
                    let scale = t.largest_term(tile, m, n);
                    let got = d[tile * 128 + m * 8 + n] as f64;
                    let err = (got - want).abs();
                    assert!(
                        err <= scale * 17.0 * 2f64.powi(-25) + want.abs() * 2f64.powi(-23),
                        "{fam:?} tile {tile} ({m}, {n}): {got} vs exact {want} (largest term {scale})"
                    );
                }
            }
        }
    }
}

/// `selftest_ldmatrix` against the layout the PTX ISA documents, computed here.
fn ldmatrix_follows_the_documented_layout(dev: &'static Device) {
    let src: Vec<u16> = (0..256u32).map(|i| (i * 37 + 11) as u16).collect();
    let m = dev.load(&moe_kernels::families::SELFTEST).unwrap();
    let s = dev.upload(&src).unwrap();
    let out = dev.alloc::<u32>(32 * 14).unwrap();
    m.launch(
        "selftest_ldmatrix",
        LaunchConfig::blocks(1, 32),
        &args![&s, &out],
    )
    .unwrap();
    let out = out.to_vec().unwrap();
    let at = |mat: usize, r: usize, c: usize| src[mat * 64 + r * 8 + c] as u32;
    for lane in 0..32 {
        let (r, c) = (lane / 4, 2 * (lane % 4));
        let plain = |mat: usize| at(mat, r, c) | at(mat, r, c + 1) << 16;
        let trans = |mat: usize| at(mat, c, r) | at(mat, c + 1, r) << 16;
        let want = [
            plain(0),
            plain(1),
            plain(2),
            plain(3),
            trans(0),
            trans(1),
            trans(2),
            trans(3),
            plain(0),
            plain(1),
            trans(0),
            trans(1),
            plain(0),
            trans(0),
        ];
        assert_eq!(out[lane * 14..lane * 14 + 14], want, "lane {lane}");
    }
}

// ANCHOR: mma_emu_vs_gpu
/// The emulator's tensor core against the H200's, bit for bit, on every family of tiles:
/// random, wide exponent ranges, cancellation, a dominant accumulator, and the special values
/// (zeros, subnormals, infinities, NaN, overflow).
#[test]
#[ignore = "needs a GPU"]
fn mma_emulator_and_gpu_agree_bit_for_bit() {
    let (gpu, cpu) = (moe_kernels::testing::cuda(), moe_kernels::testing::emu());
    for (i, fam) in Family::ALL.iter().enumerate() {
        let t = Tiles::make(*fam, 2000, 100 + i as u64);
        let (g, c) = (mma(gpu, &t), mma(cpu, &t));
        let n = assert_same_bits_up_to_nan_payload(&format!("mma {fam:?}"), &g, &c);
        assert_eq!(n, 0, "{fam:?}: NaN payloads differ ({n})");
    }
}
// ANCHOR_END: mma_emu_vs_gpu

fn cp_async_lands_by_the_wait_and_zero_fills(dev: &'static Device) {
    let m = dev.load(&moe_kernels::families::SELFTEST).unwrap();
    let x: Vec<i32> = (0..128).map(|i| (hash(i, 11) % 1000) as i32 + 1).collect();
    let xd = dev.upload(&x).unwrap();
    let out = dev.alloc::<i32>(128).unwrap();
    m.launch(
        "selftest_cp_async",
        LaunchConfig::blocks(1, 32).with_shared(128 * 4),
        &args![&xd, &out],
    )
    .unwrap();
    let got = out.to_vec().unwrap();
    for l in 0..32 {
        let nb = (l + 1) % 32;
        let want: Vec<i32> = if nb == 31 {
            vec![0; 4]
        } else {
            x[4 * nb..4 * nb + 4].to_vec()
        };
        assert_eq!(
            got[4 * l..4 * l + 4],
            want[..],
            "thread {l} reads thread {nb}'s slot"
        );
    }
}

// ANCHOR: cp_async_emu
// The emulator lands a copy only when a wait lets it: a kernel that reads a stage too early reads
// the dynamic shared memory's 0xFF fill, so a missing wait fails on the emulator as it may on the
// GPU.
#[test]
fn emulator_lands_cp_async_copies_only_at_the_wait() {
    let emu = Device::emu();
    let m = emu.load(&moe_kernels::families::SELFTEST).unwrap();
    let x: Vec<i32> = (0..128).map(|i| i + 7).collect();
    let xd = emu.upload(&x).unwrap();
    let out = emu.alloc::<i32>(512).unwrap();
    m.launch(
        "selftest_cp_async_unwaited",
        LaunchConfig::blocks(1, 32).with_shared(256 * 4),
        &args![&xd, &out],
    )
    .unwrap();
    let got = out.to_vec().unwrap();
    assert!(
        got[..128].iter().all(|&v| v == -1),
        "before any wait: the fill"
    );
    assert_eq!(got[128..256], x[..], "the older group, after wait(1)");
    assert!(
        got[256..384].iter().all(|&v| v == -1),
        "the newer group, after wait(1)"
    );
    assert_eq!(got[384..], x[..], "the newer group, after wait(0)");
}
// ANCHOR_END: cp_async_emu

// A dependent launch reads its predecessor's writes after moe_grid_wait, however early it
// started. On the GPU the consumer's blocks may start while the producer sleeps (how many producer
// blocks had finished when they started is printed: fewer than all shows the overlap happened).
fn dependent_launch_sees_the_previous_kernel_after_its_wait(dev: &'static Device) {
    let m = dev.load(&moe_kernels::families::SELFTEST).unwrap();
    let (blocks, threads) = (264u32, 128u32);
    let n = (blocks * threads) as usize;
    let buf = dev.upload(&vec![0i32; n]).unwrap();
    let finished = dev.upload(&[0i32]).unwrap();
    let early = dev.upload(&[-1i32]).unwrap();
    let out = dev.upload(&vec![0i32; n]).unwrap();
    m.launch(
        "selftest_pdl_producer",
        LaunchConfig::blocks(blocks, threads),
        &args![&buf, &finished, n as i32],
    )
    .unwrap();
    m.launch(
        "selftest_pdl_consumer",
        LaunchConfig::blocks(blocks, threads).dependent(),
        &args![&buf, &finished, &out, &early, n as i32],
    )
    .unwrap();
    let got = out.to_vec().unwrap();
    let wrong = (0..n).filter(|&i| got[i] != i as i32 + 1).count();
    assert_eq!(
        wrong, 0,
        "{wrong} of {n} values read before the producer wrote them"
    );
    let early = early.to_vec().unwrap()[0];
    assert!((0..=blocks as i32).contains(&early), "early = {early}");
    eprintln!(
        "dependent launch on {}: the consumer's blocks started with {early} of {blocks} producer blocks finished",
        dev.describe()
    );
}

moe_kernels::backend_tests!(
    dependent_launch_sees_the_previous_kernel_after_its_wait,
    indices_in_3d_grids_and_blocks,
    shared_memory_and_barriers_reduce_in_a_fixed_order,
    warp_intrinsics_follow_cuda_semantics,
    atomics_count_exactly_under_contention,
    bf16_rounds_to_nearest_even,
    project_math_is_accurate_and_fma_rounds_once,
    fresh_allocations_are_poisoned,
    mma_fragments_follow_the_documented_layout,
    mma_is_close_to_the_exact_dot,
    ldmatrix_follows_the_documented_layout,
    conversions_saturate_and_atomics_flush_like_the_gpu,
    cp_async_lands_by_the_wait_and_zero_fills,
);
