//! The library GEMM (`moe_kernels::blas::linear`) on every backend, against an f64 reference;
//! and on a GPU machine, cuBLAS against the emulator's reference GEMM.

use half::bf16;
use moe_kernels::blas::{linear, Linear};
use moe_kernels::{Device, KernelError};

fn values(n: usize, salt: u64, scale: f32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            let mut z = (i as u64 ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15))
                .wrapping_add(0x9E37_79B9_7F4A_7C15);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (((z >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0) * scale
        })
        .collect()
}

/// y = x · wᵀ in f64 from the values the device sees.
fn reference(x: &[f64], w: &[f64], s: Linear) -> Vec<f64> {
    let mut y = vec![0.0; s.rows * s.out_features];
    for r in 0..s.rows {
        for o in 0..s.out_features {
            y[r * s.out_features + o] = (0..s.in_features)
                .map(|k| x[r * s.in_features + k] * w[o * s.in_features + k])
                .sum();
        }
    }
    y
}

fn shapes() -> [Linear; 3] {
    [
        Linear {
            rows: 1,
            in_features: 64,
            out_features: 48,
        },
        Linear {
            rows: 37,
            in_features: 100,
            out_features: 33,
        },
        Linear {
            rows: 130,
            in_features: 256,
            out_features: 96,
        },
    ]
}

/// bf16 in, fp32 out: within fp32 accumulation error of the exact sum of the bf16 products.
fn bf16_gemm_matches_f64(dev: &'static Device) {
    for s in shapes() {
        let x: Vec<bf16> = values(s.rows * s.in_features, 1, 1.0)
            .iter()
            .map(|&v| bf16::from_f32(v))
            .collect();
        let w: Vec<bf16> = values(s.out_features * s.in_features, 2, 0.1)
            .iter()
            .map(|&v| bf16::from_f32(v))
            .collect();
        let (xd, wd) = (dev.upload(&x).unwrap(), dev.upload(&w).unwrap());
        let y = dev.alloc::<f32>(s.rows * s.out_features).unwrap();
        linear(dev, s, &xd.as_view(), &wd.as_view(), &y.as_view(), false).unwrap();
        let got = y.to_vec().unwrap();
        let want = reference(
            &x.iter().map(|v| v.to_f64()).collect::<Vec<_>>(),
            &w.iter().map(|v| v.to_f64()).collect::<Vec<_>>(),
            s,
        );
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let tol = 1e-5 * (s.in_features as f64).sqrt() * 0.1;
            assert!(
                (*g as f64 - w).abs() <= tol,
                "{s:?}: element {i}: {g} vs {w}"
            );
        }
    }
}

/// fp32 in and out, and accumulation into y (y += x · wᵀ).
fn f32_gemm_accumulates(dev: &'static Device) {
    let s = Linear {
        rows: 9,
        in_features: 70,
        out_features: 20,
    };
    let x = values(s.rows * s.in_features, 3, 1.0);
    let w = values(s.out_features * s.in_features, 4, 0.5);
    let y0 = values(s.rows * s.out_features, 5, 2.0);
    let (xd, wd, y) = (
        dev.upload(&x).unwrap(),
        dev.upload(&w).unwrap(),
        dev.upload(&y0).unwrap(),
    );
    linear(dev, s, &xd.as_view(), &wd.as_view(), &y.as_view(), true).unwrap();
    let got = y.to_vec().unwrap();
    let r = reference(
        &x.iter().map(|&v| v as f64).collect::<Vec<_>>(),
        &w.iter().map(|&v| v as f64).collect::<Vec<_>>(),
        s,
    );
    for i in 0..got.len() {
        let want = r[i] + y0[i] as f64;
        assert!(
            (got[i] as f64 - want).abs() < 1e-5,
            "element {i}: {} vs {want}",
            got[i]
        );
    }
}

/// bf16 out: one rounding of the fp32 result (within one bf16 ulp of the f64 value).
fn bf16_output_is_rounded_once(dev: &'static Device) {
    let s = Linear {
        rows: 5,
        in_features: 32,
        out_features: 16,
    };
    let x: Vec<bf16> = values(s.rows * s.in_features, 6, 1.0)
        .iter()
        .map(|&v| bf16::from_f32(v))
        .collect();
    let w: Vec<bf16> = values(s.out_features * s.in_features, 7, 1.0)
        .iter()
        .map(|&v| bf16::from_f32(v))
        .collect();
    let (xd, wd) = (dev.upload(&x).unwrap(), dev.upload(&w).unwrap());
    let y = dev.alloc::<bf16>(s.rows * s.out_features).unwrap();
    linear(dev, s, &xd.as_view(), &wd.as_view(), &y.as_view(), false).unwrap();
    let want = reference(
        &x.iter().map(|v| v.to_f64()).collect::<Vec<_>>(),
        &w.iter().map(|v| v.to_f64()).collect::<Vec<_>>(),
        s,
    );
    for (i, (g, w)) in y.to_vec().unwrap().iter().zip(&want).enumerate() {
        let ulp = (w.abs() * 2f64.powi(-7)).max(1e-30);
        assert!((g.to_f64() - w).abs() <= ulp, "element {i}: {g} vs {w}");
    }
}

/// Shapes are checked before anything runs; an empty batch does nothing.
fn bad_shapes_are_typed_errors(dev: &'static Device) {
    let s = Linear {
        rows: 2,
        in_features: 8,
        out_features: 4,
    };
    let x = dev.zeros::<f32>(15).unwrap();
    let w = dev.zeros::<f32>(32).unwrap();
    let y = dev.zeros::<f32>(8).unwrap();
    let e = linear(dev, s, &x.as_view(), &w.as_view(), &y.as_view(), false).unwrap_err();
    assert_eq!(
        e,
        KernelError::Length {
            what: "GEMM x [rows, in]".into(),
            expected: 16,
            got: 15
        }
    );
    let empty = Linear { rows: 0, ..s };
    let none = dev.zeros::<f32>(0).unwrap();
    linear(
        dev,
        empty,
        &none.as_view(),
        &w.as_view(),
        &none.as_view(),
        false,
    )
    .unwrap();
}

moe_kernels::backend_tests!(
    bf16_gemm_matches_f64,
    f32_gemm_accumulates,
    bf16_output_is_rounded_once,
    bad_shapes_are_typed_errors
);

/// cuBLAS against the emulator's reference GEMM: not the same bits (cuBLAS chooses its own
/// summation order), but within fp32 rounding of each other.
#[test]
#[ignore = "needs a GPU"]
fn cublas_and_the_reference_gemm_agree_within_rounding() {
    let (gpu, emu) = (moe_kernels::testing::cuda(), moe_kernels::testing::emu());
    let s = Linear {
        rows: 300,
        in_features: 2048,
        out_features: 128,
    };
    let x: Vec<bf16> = values(s.rows * s.in_features, 8, 1.0)
        .iter()
        .map(|&v| bf16::from_f32(v))
        .collect();
    let w: Vec<bf16> = values(s.out_features * s.in_features, 9, 0.05)
        .iter()
        .map(|&v| bf16::from_f32(v))
        .collect();
    let run = |dev: &'static Device| {
        let (xd, wd) = (dev.upload(&x).unwrap(), dev.upload(&w).unwrap());
        let y = dev.alloc::<f32>(s.rows * s.out_features).unwrap();
        linear(dev, s, &xd.as_view(), &wd.as_view(), &y.as_view(), false).unwrap();
        y.to_vec().unwrap()
    };
    let (g, c) = (run(gpu), run(emu));
    let worst = g
        .iter()
        .zip(&c)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(worst < 1e-4, "largest difference {worst}");
}
