//! # moe-kernels — one CUDA C source, two backends
//!
//! Every kernel of the book is written once, in CUDA C, in `kernels/<family>.cu`, and runs:
//!
//! - on an NVIDIA GPU ([`BackendKind::Cuda`]): cudarc loads the driver and NVRTC at run time;
//!   on a family's first use NVRTC compiles the embedded source with `--fmad=false` straight to
//!   machine code for the device's own architecture, kept in an on-disk cache
//!   ([`cuda::cache`], `MOE_KERNEL_CACHE`) so that later runs load it without compiling;
//! - on the CPU ([`BackendKind::Emu`]): the same file, compiled by the host C++ compiler
//!   against `kernels/emu/cuda_emu.h` with `-ffp-contract=off`, one fiber per CUDA thread.
//!
//! Kernels without tensor cores give the same bits on both, and so do the tensor-core fragments
//! of `kernels/mma.cuh` (the emulator models the H100/H200 tensor core bit for bit). Host code
//! launches a kernel the same way on both ([`Module::launch`] with a [`LaunchConfig`] and
//! [`KernelArg`]s), device memory is a [`DeviceBuffer`] on both, and [`blas::linear`] is a
//! library GEMM on both (cuBLAS, or a reference GEMM on the emulator).
//!
//! Modules, bottom up: [`error`], [`launch`], [`source`], `blas::call` (plain types);
//! `backend` (the trait both backends implement); [`cuda`] and `emu` (the two
//! implementations); [`buffer`]; [`module`] (the kernel table); [`device`]; [`blas`],
//! [`measure`], [`testing`]; and [`safetensors`], the files the chapters write.
//!
//! ```no_run
//! use moe_kernels::{args, Device, LaunchConfig};
//! let dev = Device::auto()?;                       // prints which backend runs, and why
//! let m = dev.load(&moe_kernels::families::SELFTEST)?;
//! let x = dev.upload(&[1.0f32, -2.0, 3.5])?;
//! let bits = dev.alloc::<u16>(3)?;
//! let back = dev.alloc::<f32>(3)?;
//! m.launch("selftest_bf16", LaunchConfig::for_elements(3, 128), &args![&x, &bits, &back, 3i32])?;
//! assert_eq!(back.to_vec()?, vec![1.0, -2.0, 3.5]);
//! # Ok::<(), moe_kernels::KernelError>(())
//! ```

mod backend;
pub mod blas;
pub mod buffer;
pub mod cuda;
pub mod device;
mod emu;
pub mod error;
pub mod families;
pub mod launch;
pub mod measure;
pub mod module;
pub mod safetensors;
pub mod source;
pub mod testing;

pub use backend::BackendKind;
pub use buffer::{DeviceBuffer, DeviceRepr, DeviceView};
pub use device::Device;
pub use emu::memory_in_use as emu_memory_in_use;
pub use error::{EmuErrorKind, Fault, FaultKind, KernelError, Result};
pub use launch::{KernelArg, LaunchConfig, ParamKind};
pub use module::{record_launches, with_launch_budget, Module};
pub use source::{EmuKernel, KernelSource};
