//! # moe-kernels — one CUDA C source, two backends
//!
//! Every kernel of the book is written once, in CUDA C, in `kernels/<family>.cu`, and runs:
//!
//! - on an NVIDIA GPU ([`BackendKind::Cuda`]): cudarc loads the driver and NVRTC at run time;
//!   NVRTC compiles the embedded source for the device's own architecture once per process,
//!   with `--fmad=false`;
//! - on the CPU ([`BackendKind::Emu`]): the same file, compiled by the host C++ compiler
//!   against `kernels/emu/cuda_emu.h` with `-ffp-contract=off`, one fiber per CUDA thread.
//!
//! Kernels without tensor cores give the same bits on both. Host code launches a kernel the
//! same way on both ([`Module::launch`] with a [`LaunchConfig`] and [`KernelArg`]s), and device
//! memory is a [`DeviceBuffer`] on both.
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

pub mod buffer;
pub mod cuda;
pub mod device;
mod emu;
pub mod error;
pub mod families;
pub mod launch;
pub mod measure;
pub mod source;
pub mod testing;

pub use buffer::{DeviceBuffer, DeviceRepr};
pub use device::{BackendKind, Device, Module};
pub use error::{KernelError, Result};
pub use launch::{KernelArg, LaunchConfig, ParamKind};
pub use source::{EmuKernel, KernelSource};
