//! The runtime's one error type. Every failure a reader can cause or meet (no GPU, a kernel that
//! does not compile, a CUDA error, an emulator that caught a bad barrier) arrives here with a
//! message that names the problem; nothing in this crate panics on such a failure.

use std::fmt;

/// What went wrong while choosing a backend, compiling, allocating, copying or launching.
#[derive(Debug, Clone, PartialEq)]
pub enum KernelError {
    /// `MOE_BACKEND` holds something other than `cuda`, `emu` or nothing.
    UnknownBackend(String),
    /// The CUDA backend was asked for but cannot run here; `why` says what is missing.
    NoGpu { why: String },
    /// NVRTC rejected a kernel family; `log` is the compiler's own output.
    Compile {
        family: String,
        options: Vec<String>,
        log: String,
    },
    /// A CUDA driver call failed. `call` says which, and for what.
    Cuda { call: String, error: String },
    /// The emulator stopped a launch (a barrier not reached by every thread, a bad warp
    /// exchange, a bad launch configuration); `message` is the emulator's diagnosis.
    Emu { kernel: String, message: String },
    /// A kernel name that its family does not define.
    UnknownKernel { family: String, name: String },
    /// A launch whose arguments do not match the kernel's parameters (count or kind).
    Arguments {
        kernel: String,
        expected: String,
        got: String,
    },
    /// A buffer of the wrong length for a copy.
    Length {
        what: String,
        expected: usize,
        got: usize,
    },
    /// Only the CUDA backend can do this (timing with CUDA graphs, for instance).
    CudaOnly(&'static str),
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelError::UnknownBackend(v) => {
                write!(
                    f,
                    "MOE_BACKEND={v:?} is not a backend: use `cuda`, `emu`, or leave it unset"
                )
            }
            KernelError::NoGpu { why } => write!(f, "the CUDA backend cannot run here: {why}"),
            KernelError::Compile {
                family,
                options,
                log,
            } => write!(
                f,
                "NVRTC could not compile kernels/{family}.cu (options: {}):\n{log}",
                options.join(" ")
            ),
            KernelError::Cuda { call, error } => write!(f, "CUDA error in {call}: {error}"),
            KernelError::Emu { kernel, message } => {
                write!(f, "the emulator stopped kernel {kernel}: {message}")
            }
            KernelError::UnknownKernel { family, name } => {
                write!(
                    f,
                    "kernels/{family}.cu has no extern \"C\" __global__ kernel named {name}"
                )
            }
            KernelError::Arguments {
                kernel,
                expected,
                got,
            } => write!(
                f,
                "kernel {kernel} takes ({expected}) but was launched with ({got})"
            ),
            KernelError::Length {
                what,
                expected,
                got,
            } => {
                write!(f, "{what}: expected {expected} elements, got {got}")
            }
            KernelError::CudaOnly(what) => write!(f, "{what} needs the CUDA backend"),
        }
    }
}

impl std::error::Error for KernelError {}

/// `Result` with [`KernelError`].
pub type Result<T> = std::result::Result<T, KernelError>;
