//! The runtime's own kernel families.

use crate::source::KernelSource;

/// `kernels/floor.cu`: the empty kernel, the read probe and the L2 flushes of the harness.
pub static FLOOR: KernelSource = crate::kernel_family!("floor");

/// `kernels/selftest.cu`: one kernel per emulated CUDA feature (tensor-core fragments
/// included), run on both backends by the runtime's tests.
pub static SELFTEST: KernelSource = crate::kernel_family!("selftest");

/// `kernels/adversarial.cu`: kernels that break the rules on purpose (faults, spin-waits,
/// deadlocks, divergent barriers), for the emulator's own tests.
pub static ADVERSARIAL: KernelSource = crate::kernel_family!("adversarial");

/// `kernels/primer.cu`: the GPU primer's tiny kernels, one idea each (`cargo run --example
/// primer`, book/src/gpu-primer.md).
pub static PRIMER: KernelSource = crate::kernel_family!("primer");

/// The primer's launch geometry: the upper-case `#define`s of `kernels/primer.cu`.
pub mod primer {
    crate::kernel_constants!("primer");
}
