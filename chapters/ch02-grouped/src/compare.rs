//! How a layer's output is checked against another's: the largest absolute difference,
//! relative to the size of the expected output (its root mean square), so one number fits
//! every shape and scale.
//!
//! The tolerances are stated here, once, and every test and the example use them:
//! - an f32 layer against the f64 oracle differs by f32 rounding of sums of a few hundred
//!   products: [`Tolerance::F32`];
//! - a bf16 layer rounds the hidden states' products' inputs, each expert's `gate | up` and its
//!   SwiGLU to bf16 (8 significant bits) on the way, where the oracle does not:
//!   [`Tolerance::BF16_VS_ORACLE`];
//! - two bf16 layers that round at the same places but sum in different orders (candle on the
//!   CPU, cuBLAS or the reference GEMM on a device) differ only where an f32 difference in the
//!   last bit flips a bf16 rounding: [`Tolerance::BF16_VS_BF16`];
//! - a layer against transformers' fp32 output on the Hugging Face fixtures:
//!   [`Tolerance::F32_VS_HF`], [`Tolerance::BF16_VS_HF`].

use crate::config::Dtype;

/// The difference between two outputs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OutputError {
    /// Largest `|got − want|`.
    pub max_abs: f64,
    /// Root mean square of `want`.
    pub rms: f64,
    /// `max_abs / rms` (0 for an empty or all-zero output that matches).
    pub relative: f64,
    /// Elements where one side is NaN or infinite and the other is not (or another infinity).
    pub nan: usize,
}

/// Compares `got` with `want` (same length).
pub fn output_error(want: &[f32], got: &[f32]) -> OutputError {
    assert_eq!(want.len(), got.len(), "outputs of different lengths");
    let mut max_abs = 0f64;
    let mut sq = 0f64;
    let mut nan = 0;
    for (&w, &g) in want.iter().zip(got) {
        // A NaN or infinity on either side is a difference, unless both sides hold the same one
        // (a NaN in the input gives NaN in every implementation): nothing to compare there.
        if !w.is_finite() || !g.is_finite() {
            let same = (w.is_nan() && g.is_nan()) || w == g;
            if !same {
                nan += 1;
            }
            continue;
        }
        max_abs = max_abs.max((w as f64 - g as f64).abs());
        sq += (w as f64) * (w as f64);
    }
    let rms = if want.is_empty() {
        0.0
    } else {
        (sq / want.len() as f64).sqrt()
    };
    let relative = if max_abs == 0.0 { 0.0 } else { max_abs / rms };
    OutputError {
        max_abs,
        rms,
        relative,
        nan,
    }
}

/// The largest accepted [`OutputError::relative`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance(pub f64);

// ANCHOR: tolerances
impl Tolerance {
    /// An f32 layer against the f64 oracle, or against another f32 layer. Worst measured over
    /// the regimes (`tests/layer.rs` prints it): 2.1e-6 (the CPU loop; the device loop 2.0e-6 on
    /// the emulator, 1.4e-6 with cuBLAS on the H200).
    pub const F32: Tolerance = Tolerance(1e-5);
    /// A bf16 layer against the f64 oracle computed on the same bf16 inputs and weights. The
    /// ~2I roundings of a token's `gate | up` and activation, each up to 2⁻⁸ relative, add up:
    /// the worst measured over the regimes is 2.04e-2 of the rms (`all_to_one_expert`; the CPU
    /// loop, the emulator and the H200 alike).
    pub const BF16_VS_ORACLE: Tolerance = Tolerance(4e-2);
    /// Two bf16 layers that round at the same places but sum in different orders. Worst
    /// measured against the CPU grouped loop: 2.1e-5 for the emulator's reference GEMM, 4.1e-4
    /// for cuBLAS on the H200 (`large_prefill`), where an f32 sum in another order tips more
    /// bf16 roundings of `gate | up`.
    pub const BF16_VS_BF16: Tolerance = Tolerance(2e-3);
    // ANCHOR_END: tolerances

    /// Against the oracle, for a layer computing in `dtype`.
    pub fn vs_oracle(dtype: Dtype) -> Tolerance {
        match dtype {
            Dtype::F32 => Tolerance::F32,
            Dtype::Bf16 => Tolerance::BF16_VS_ORACLE,
        }
    }

    /// Between two implementations computing in `dtype`.
    pub fn between(dtype: Dtype) -> Tolerance {
        match dtype {
            Dtype::F32 => Tolerance::F32,
            Dtype::Bf16 => Tolerance::BF16_VS_BF16,
        }
    }
}

// ANCHOR: hf_tolerance
/// Against Hugging Face transformers' own fp32 output, on the fixtures of
/// [`crate::conformance::hf_layers`] (`tests/hf_parity.rs`).
impl Tolerance {
    /// An f32 layer against transformers' fp32 output (max |difference| / rms of the output). Both
    /// compute in f32 in different orders; the literal layer computes in f64, so its difference is
    /// transformers' own rounding. Measured worst: 2.4e-6 (qwen2_moe layer 1, grouped-cpu); the
    /// device loop's 1.2e-6 on the emulator and 1.8e-6 with cuBLAS on the H200; the literal layer's
    /// 1.4e-6. The tolerance is four times the worst.
    pub const F32_VS_HF: Tolerance = Tolerance(1e-5);
    /// A bf16 layer against transformers' fp32 output: the hidden states and weights rounded to
    /// bf16 on entry, `gate | up` and the SwiGLU on the way (8 significant bits: up to 2⁻⁸ ≈ 3.9e-3 per
    /// value). Measured worst: 2.4e-2 (qwen2_moe layer 1, grouped-cpu, and grouped-device on the
    /// emulator and on the H200 alike); the literal bf16 layer's worst 2.0e-2. The tolerance is 2.5
    /// times the worst.
    pub const BF16_VS_HF: Tolerance = Tolerance(6e-2);
}
// ANCHOR_END: hf_tolerance

/// `Ok(error)` when `got` is within `tol` of `want` and has no NaN or infinity where `want` has
/// none; otherwise a message naming `what`, the error and the tolerance.
pub fn check_output(
    what: &str,
    want: &[f32],
    got: &[f32],
    tol: Tolerance,
) -> Result<OutputError, String> {
    if want.len() != got.len() {
        return Err(format!(
            "{what}: {} outputs, expected {}",
            got.len(),
            want.len()
        ));
    }
    let e = output_error(want, got);
    if e.nan > 0 {
        return Err(format!(
            "{what}: {} outputs are NaN or infinite where the expected are finite, or the reverse",
            e.nan
        ));
    }
    if e.relative > tol.0 {
        return Err(format!(
            "{what}: max |difference| {:.3e} is {:.3e} of the output's rms {:.3e}, above the tolerance {:.1e}",
            e.max_abs, e.relative, e.rms, tol.0
        ));
    }
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_finite_values_count_only_where_the_two_sides_differ() {
        let (nan, inf) = (f32::NAN, f32::INFINITY);
        let want = [1.0, nan, inf, 2.0, inf, 3.0];
        let got = [1.5, nan, inf, nan, -inf, 3.0];
        let e = output_error(&want, &got);
        // 2.0 against NaN and +inf against -inf differ; NaN/NaN and inf/inf do not.
        assert_eq!(e.nan, 2);
        assert_eq!(e.max_abs, 0.5);
        assert!(check_output("x", &want, &got, Tolerance(1.0)).is_err());
        assert!(check_output("x", &want[..3], &got[..3], Tolerance(1.0)).is_ok());
    }
}
