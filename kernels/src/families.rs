//! The runtime's own kernel families.

use crate::source::KernelSource;

/// `kernels/floor.cu`: the empty kernel, the read probe and the L2 flush of the harness.
pub static FLOOR: KernelSource = crate::kernel_family!("floor");

/// `kernels/selftest.cu`: one kernel per emulated CUDA feature, run on both backends by the
/// runtime's tests.
pub static SELFTEST: KernelSource = crate::kernel_family!("selftest");
