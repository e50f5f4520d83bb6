//! A kernel family as the binary carries it: the CUDA C text for NVRTC and the emulator's
//! compiled entry points, both produced from `kernels/<family>.cu` by `moe-kernels-build`.

use std::ffi::c_void;

/// An emulated kernel's entry: unpacks a `cuLaunchKernel`-style parameter array and runs the
/// kernel body for the current emulated thread.
pub type EmuEntry = unsafe extern "C" fn(params: *mut *mut c_void);

/// One `extern "C" __global__` kernel: its name, its emulated entry point, and the kinds of its
/// parameters (read from its signature by the build), against which every launch is checked.
#[derive(Clone, Copy)]
pub struct EmuKernel {
    pub name: &'static str,
    pub entry: EmuEntry,
    pub params: &'static [crate::launch::ParamKind],
}

/// One kernel family: `kernels/<family>.cu`, built for both backends.
pub struct KernelSource {
    /// The file stem, e.g. `ch01_router`.
    pub family: &'static str,
    /// The source with its quoted includes pasted in, compiled by NVRTC at run time.
    pub cuda_source: &'static str,
    /// The same kernels compiled by the host C++ compiler against `kernels/emu/`.
    pub emu: &'static [EmuKernel],
}

impl KernelSource {
    /// The kernel names, in source order.
    pub fn kernel_names(&self) -> impl Iterator<Item = &'static str> {
        self.emu.iter().map(|k| k.name)
    }
}

/// Includes the `KernelSource` that the crate's build script generated for a family:
/// `pub static ROUTER: KernelSource = moe_kernels::kernel_family!("ch01_router");`
/// (the build script must call `moe_kernels_build::compile_family("ch01_router", ..)`).
#[macro_export]
macro_rules! kernel_family {
    ($family:literal) => {
        include!(concat!(env!("OUT_DIR"), "/", $family, ".rs"))
    };
}

/// Includes the launch-geometry constants of a family (every `#define NAME 123` of its .cu with
/// an upper-case name) as `pub const NAME: usize`, so each is named once, in the kernel file:
/// `pub mod geometry { moe_kernels::kernel_constants!("ch01_router"); }`.
#[macro_export]
macro_rules! kernel_constants {
    ($family:literal) => {
        include!(concat!(env!("OUT_DIR"), "/", $family, "_consts.rs"));
    };
}
