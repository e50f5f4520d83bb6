//! A library GEMM on either backend: cuBLAS on the GPU (loaded at run time, like the driver),
//! a plain reference GEMM on the emulator. Chapter code calls [`linear`] and never touches
//! cudarc.
//!
//! The two do not give the same bits: cuBLAS picks its own kernel, tile shape and summation
//! order by shape (and may split the sum over `in` across blocks), while the reference adds
//! the products of each output in order with one `fmaf` per product. Compare them with a
//! tolerance (about 1e-6 relative for fp32 sums of a few thousand products; bf16 outputs
//! within one bf16 rounding).

pub mod call;
pub(crate) mod reference;

use crate::buffer::{DeviceRepr, DeviceView};
use crate::device::Device;
use crate::error::{KernelError, Result};
pub use call::{Dtype, GemmCall};

/// Element types a GEMM takes: `f32` and `bf16`.
pub trait GemmType: DeviceRepr {
    const DTYPE: Dtype;
}
impl GemmType for f32 {
    const DTYPE: Dtype = Dtype::F32;
}
impl GemmType for half::bf16 {
    const DTYPE: Dtype = Dtype::Bf16;
}

/// The sizes of one linear layer: `rows` tokens of `in_features` in, `out_features` out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Linear {
    pub rows: usize,
    pub in_features: usize,
    pub out_features: usize,
}

fn check_len<T: DeviceRepr>(what: &str, v: &DeviceView<'_, T>, want: usize) -> Result<()> {
    if v.len() == want {
        Ok(())
    } else {
        Err(KernelError::Length {
            what: what.to_string(),
            expected: want,
            got: v.len(),
        })
    }
}

/// `y [rows, out] = x [rows, in] · w [out, in]ᵀ` on `device`, fp32 accumulation (`+=` when
/// `accumulate`); `x` and `w` are both `A` (`f32` or `bf16`), `y` is `C` (`f32` or `bf16`,
/// rounded to nearest even once at the end). Queued on the device's stream like a kernel.
/// An empty batch (`rows = 0`) does nothing.
pub fn linear<A: GemmType, C: GemmType>(
    device: &Device,
    shape: Linear,
    x: &DeviceView<'_, A>,
    w: &DeviceView<'_, A>,
    y: &DeviceView<'_, C>,
    accumulate: bool,
) -> Result<()> {
    let Linear {
        rows,
        in_features,
        out_features,
    } = shape;
    check_len("GEMM x [rows, in]", x, rows * in_features)?;
    check_len("GEMM w [out, in]", w, out_features * in_features)?;
    check_len("GEMM y [rows, out]", y, rows * out_features)?;
    for (what, kind) in [
        ("GEMM x", x.kind()),
        ("GEMM w", w.kind()),
        ("GEMM y", y.kind()),
    ] {
        if kind != device.kind() {
            return Err(KernelError::WrongDevice {
                what: what.to_string(),
                device: device.kind().to_string(),
                found: kind.to_string(),
            });
        }
    }
    if rows == 0 || out_features == 0 {
        return Ok(());
    }
    device.gemm(&GemmCall {
        rows,
        in_features,
        out_features,
        x: x.device_ptr(),
        ldx: in_features,
        w: w.device_ptr(),
        ldw: in_features,
        y: y.device_ptr(),
        ldy: out_features,
        input: A::DTYPE,
        output: C::DTYPE,
        accumulate,
    })
}
