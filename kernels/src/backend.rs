//! What a backend must do, once for both: the GPU ([`crate::cuda`]) and the CPU emulator
//! ([`crate::emu`]) implement the same trait, and [`crate::Device`], [`crate::DeviceBuffer`] and
//! [`crate::Module`] only ever talk to this trait.
//!
//! Layering, bottom up (no module imports one above it):
//! `error`, `launch`, `source`, `blas::call` (plain types) ← `backend` ← `cuda`, `emu` (the two
//! implementations) ← `buffer` ← `module` (the kernel table) ← `device` ← `blas`, `measure`,
//! `testing`.

use crate::blas::call::GemmCall;
use crate::error::Result;
use crate::launch::{LaunchConfig, ParamArray};
use crate::source::KernelSource;
use std::any::Any;
use std::fmt;

/// Which backend a [`crate::Device`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// An NVIDIA GPU through cudarc and NVRTC.
    Cuda,
    /// The CPU emulator running the same CUDA C source.
    Emu,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendKind::Cuda => "cuda",
            BackendKind::Emu => "emu",
        })
    }
}

/// A compiled kernel as its backend knows it: a `CUfunction` on the GPU, the address of an
/// emulated entry point on the CPU. Only the backend that made it may use it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KernelHandle(pub(crate) usize);

/// A backend as `Any`, so that a layer above both implementations (the device's `gpu()`, for the
/// measuring harness) can ask for the GPU's own type without this trait naming it.
pub(crate) trait AsAny {
    fn as_any(&self) -> &dyn Any;
}

impl<T: Any> AsAny for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// Device memory, copies, compilation and launches. Addresses are `u64` on both backends (the
/// emulator's are host addresses), exactly what a kernel receives.
pub(crate) trait Backend: AsAny + Send + Sync {
    fn kind(&self) -> BackendKind;
    /// `NVIDIA H200, sm_90, 132 SMs` or `CPU emulator, 2 worker threads, 11.7 GiB`.
    fn describe(&self) -> String;
    /// The device's own name: `NVIDIA H200`, or `CPU emulator`.
    fn name(&self) -> String;
    /// How many OS threads run blocks (the emulator's workers); `None` on a GPU.
    fn worker_threads(&self) -> Option<usize> {
        None
    }
    /// `bytes` of device memory; `what` names the buffer in error messages and fault reports.
    fn alloc(&self, bytes: usize, what: &str) -> Result<u64>;
    /// Frees an allocation (called from `Drop`, so it cannot fail loudly).
    fn free(&self, ptr: u64, bytes: usize);
    fn fill(&self, ptr: u64, byte: u8, bytes: usize) -> Result<()>;
    /// Host to device, after all queued work.
    fn write(&self, ptr: u64, data: &[u8]) -> Result<()>;
    /// Device to host, after all queued work.
    fn read(&self, data: &mut [u8], ptr: u64) -> Result<()>;
    fn synchronize(&self) -> Result<()>;
    /// Compiles (GPU) or looks up (emulator) every kernel of a family.
    fn load(&self, src: &KernelSource) -> Result<Vec<(&'static str, KernelHandle)>>;
    /// Queues (GPU) or runs (emulator) one launch; `label` is `family::kernel` for messages.
    fn launch(
        &self,
        label: &str,
        kernel: KernelHandle,
        cfg: LaunchConfig,
        params: &mut ParamArray,
    ) -> Result<()>;
    /// One library GEMM (cuBLAS on the GPU, the reference GEMM on the emulator).
    fn gemm(&self, call: &GemmCall) -> Result<()>;
    /// [`crate::Device::side_by_side`]'s three steps: `fork` makes a second stream wait for
    /// everything queued so far and sends the calling thread's launches and GEMMs to it;
    /// `unfork` sends them back to the main stream; `join` makes the main stream wait for
    /// everything queued on the second. The emulator runs every launch to its end when it is
    /// made, so one order of the two halves is already a correct schedule: no-ops there.
    fn fork(&self) -> Result<()> {
        Ok(())
    }
    fn unfork(&self) {}
    fn join(&self) -> Result<()> {
        Ok(())
    }
}
