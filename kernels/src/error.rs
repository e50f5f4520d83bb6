//! The runtime's one error type. Every failure a reader can cause or meet (no GPU, a kernel that
//! does not compile, a CUDA error, an emulator that caught a bad barrier or a bad memory access)
//! arrives here with a message that names the problem; nothing in this crate panics on such a
//! failure.

use std::fmt;

/// What kind of rule an emulated launch broke, when it was not a fault (see [`Fault`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmuErrorKind {
    /// The launch configuration is invalid (block size, grid size, shared memory).
    Launch,
    /// The kernel broke a CUDA rule: a barrier or warp collective that cannot complete, a
    /// device `assert`, `__trap()`.
    Misuse,
    /// No thread of a block made progress for the deadlock timeout (a spin-wait on a flag that
    /// nobody sets, for instance).
    Deadlock,
}

/// What a faulting emulated thread did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// A load or store at an address no device buffer owns (SIGSEGV/SIGBUS on the host).
    Memory,
    /// A store into the padding just past the end (or before the start) of a buffer, found
    /// after the launch: the thread that did it is not known.
    BufferOverrun,
    /// A thread's stack ran into its guard page (deep recursion, a large local array).
    StackOverflow,
    /// Integer division by zero or `INT_MIN / -1` (SIGFPE on the host; a GPU returns an
    /// unspecified value instead).
    IntegerDivision,
    /// An illegal instruction (SIGILL), for instance code built for another CPU.
    IllegalInstruction,
}

/// An emulated thread's fault, with where it happened.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault {
    pub kind: FaultKind,
    /// `blockIdx` of the faulting thread (`None` when the thread is not known).
    pub block: Option<[u32; 3]>,
    /// `threadIdx` of the faulting thread.
    pub thread: Option<[u32; 3]>,
    /// The address that was accessed, for memory faults.
    pub address: Option<u64>,
    /// The emulator's explanation: which buffer the address is nearest to, and how far.
    pub detail: String,
}

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
    /// A cuBLAS call failed.
    Blas { call: String, error: String },
    /// The emulator stopped a launch that broke a rule; `message` is its diagnosis.
    Emu {
        kernel: String,
        kind: EmuErrorKind,
        message: String,
    },
    /// An emulated thread faulted: the launch is stopped and the device is unusable afterwards,
    /// as a CUDA context is after an illegal address.
    EmuFault { kernel: String, fault: Fault },
    /// An earlier fault left this device unusable (CUDA's "sticky" errors).
    DeviceUnusable { why: String },
    /// A kernel name that its family does not define.
    UnknownKernel { family: String, name: String },
    /// A launch whose arguments do not match the kernel's parameters (count or kind).
    Arguments {
        kernel: String,
        expected: String,
        got: String,
    },
    /// A buffer of the wrong length for a copy or an operation.
    Length {
        what: String,
        expected: usize,
        got: usize,
    },
    /// An operand that lives on another backend than the call's device.
    WrongDevice {
        what: String,
        device: String,
        found: String,
    },
    /// An allocation whose size in bytes does not fit in memory's address space.
    TooLarge {
        what: String,
        elements: usize,
        element_bytes: usize,
    },
    /// The device has not that much memory left.
    OutOfMemory { bytes: usize, why: String },
    /// Only the CUDA backend can do this (timing with CUDA graphs, for instance).
    CudaOnly(&'static str),
    /// `MOE_NVRTC_DEFINES` holds something other than macro names (`NAME` or `NAME=VALUE`).
    BadDefines { value: String, why: String },
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            FaultKind::Memory => "invalid memory access",
            FaultKind::BufferOverrun => "write outside a buffer",
            FaultKind::StackOverflow => "stack overflow",
            FaultKind::IntegerDivision => "integer division by zero (or INT_MIN / -1)",
            FaultKind::IllegalInstruction => "illegal instruction",
        };
        write!(f, "{what}")?;
        if let (Some(b), Some(t)) = (self.block, self.thread) {
            write!(
                f,
                " in block ({},{},{}) thread ({},{},{})",
                b[0], b[1], b[2], t[0], t[1], t[2]
            )?;
        }
        if let Some(a) = self.address {
            write!(f, " at address {a:#x}")?;
        }
        if !self.detail.is_empty() {
            write!(f, ": {}", self.detail)?;
        }
        Ok(())
    }
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
            KernelError::Blas { call, error } => write!(f, "cuBLAS error in {call}: {error}"),
            KernelError::Emu {
                kernel, message, ..
            } => {
                write!(f, "the emulator stopped kernel {kernel}: {message}")
            }
            KernelError::EmuFault { kernel, fault } => {
                write!(f, "kernel {kernel} faulted on the emulator: {fault}")
            }
            KernelError::DeviceUnusable { why } => write!(
                f,
                "the device is unusable after an earlier fault ({why}); create a new one"
            ),
            KernelError::UnknownKernel { family, name } => {
                write!(
                    f,
                    "kernels/{family}.cu has no extern \"C\" __global__ kernel named {name}"
                )
            }
            KernelError::BadDefines { value, why } => write!(
                f,
                "MOE_NVRTC_DEFINES={value:?}: {why} (expected space-separated NAME or NAME=VALUE, \
                 letters, digits and '_')"
            ),
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
            KernelError::WrongDevice {
                what,
                device,
                found,
            } => write!(f, "{what}: the call runs on {device} but the operand lives on {found}"),
            KernelError::TooLarge {
                what,
                elements,
                element_bytes,
            } => write!(
                f,
                "{what}: {elements} elements of {element_bytes} bytes do not fit in the address space"
            ),
            KernelError::OutOfMemory { bytes, why } => {
                write!(f, "out of device memory allocating {bytes} bytes: {why}")
            }
            KernelError::CudaOnly(what) => write!(f, "{what} needs the CUDA backend"),
        }
    }
}

impl std::error::Error for KernelError {}

/// `Result` with [`KernelError`].
pub type Result<T> = std::result::Result<T, KernelError>;
