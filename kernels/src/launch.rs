//! How a launch is described: the grid, the block, the dynamic shared memory, and the
//! arguments in the parameter-array style of `cuLaunchKernel` (one pointer per argument, each
//! pointing at the argument's value). Both backends receive exactly this. (Buffers become
//! arguments in `buffer.rs`, which knows this module; this module knows no buffer.)

/// Grid and block shape and dynamic shared memory of one launch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    pub shared_bytes: u32,
    /// Programmatic dependent launch: the GPU may start this kernel's blocks before the kernel
    /// queued ahead of it on the stream has finished (once that kernel's blocks have all called
    /// `moe_launch_dependents()` or exited). The kernel must call `moe_grid_wait()`
    /// (common.cuh) before it reads anything the earlier kernel wrote, or writes anything that
    /// kernel reads; what it does before the wait (loads of weights no kernel writes) overlaps
    /// the earlier kernel's last blocks and this launch's own latency. The emulator runs kernels
    /// one after another, so there the wait has nothing to wait for. `MOE_DEPENDENT_LAUNCH=0` in
    /// the environment makes every launch a plain one on the GPU too (the same results: a way to
    /// measure the overlap). [`LaunchConfig::dependent`].
    pub dependent: bool,
}

impl LaunchConfig {
    /// One thread per element: `ceil(n / threads)` blocks of `threads` (at least one block, so an
    /// empty launch is still a valid launch; kernels guard their index).
    pub fn for_elements(n: usize, threads: u32) -> Self {
        let blocks = n.div_ceil(threads as usize).max(1) as u32;
        LaunchConfig {
            grid: (blocks, 1, 1),
            block: (threads, 1, 1),
            shared_bytes: 0,
            dependent: false,
        }
    }

    /// `blocks` blocks of `threads` threads in one dimension.
    pub fn blocks(blocks: u32, threads: u32) -> Self {
        LaunchConfig {
            grid: (blocks, 1, 1),
            block: (threads, 1, 1),
            shared_bytes: 0,
            dependent: false,
        }
    }

    /// The same launch as a programmatic dependent launch ([`LaunchConfig::dependent`]).
    pub fn dependent(mut self) -> Self {
        self.dependent = true;
        self
    }

    /// The same launch with `bytes` of dynamic shared memory.
    pub fn with_shared(mut self, bytes: u32) -> Self {
        self.shared_bytes = bytes;
        self
    }
}

/// One kernel argument, by value. A device buffer passes its device address (on the emulator,
/// the host address of its memory), exactly as a CUDA kernel receives a pointer.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum KernelArg {
    Ptr(u64),
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    F32(f32),
}

/// The kind of a kernel parameter, as the launcher passes it: every pointer is a `Ptr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    Ptr,
    I32,
    U32,
    I64,
    U64,
    F32,
}

impl KernelArg {
    /// The parameter kind this argument fills.
    pub fn kind(self) -> ParamKind {
        match self {
            KernelArg::Ptr(_) => ParamKind::Ptr,
            KernelArg::I32(_) => ParamKind::I32,
            KernelArg::U32(_) => ParamKind::U32,
            KernelArg::I64(_) => ParamKind::I64,
            KernelArg::U64(_) => ParamKind::U64,
            KernelArg::F32(_) => ParamKind::F32,
        }
    }

    /// The argument's bytes in an 8-byte cell, little-endian, as the kernel reads them.
    pub(crate) fn cell(self) -> u64 {
        match self {
            KernelArg::Ptr(v) | KernelArg::U64(v) => v,
            KernelArg::I64(v) => v as u64,
            KernelArg::I32(v) => v as u32 as u64,
            KernelArg::U32(v) => v as u64,
            KernelArg::F32(v) => v.to_bits() as u64,
        }
    }
}

impl From<i32> for KernelArg {
    fn from(v: i32) -> Self {
        KernelArg::I32(v)
    }
}
impl From<u32> for KernelArg {
    fn from(v: u32) -> Self {
        KernelArg::U32(v)
    }
}
impl From<i64> for KernelArg {
    fn from(v: i64) -> Self {
        KernelArg::I64(v)
    }
}
impl From<u64> for KernelArg {
    fn from(v: u64) -> Self {
        KernelArg::U64(v)
    }
}
impl From<f32> for KernelArg {
    fn from(v: f32) -> Self {
        KernelArg::F32(v)
    }
}

/// `args![a, b, 3i32]` — a `[KernelArg; N]` from buffers and scalars.
#[macro_export]
macro_rules! args {
    ($($a:expr),* $(,)?) => { [$($crate::KernelArg::from($a)),*] };
}

/// The parameter array: 8-byte cells holding the values, and one pointer per cell. `_cells` is
/// never read by name: it owns the storage the pointers point into, for as long as the array
/// lives (a Vec's heap buffer does not move when the Vec does).
pub(crate) struct ParamArray {
    _cells: Vec<u64>,
    pub(crate) ptrs: Vec<*mut std::ffi::c_void>,
}

impl ParamArray {
    pub(crate) fn new(args: &[KernelArg]) -> Self {
        let mut cells: Vec<u64> = args.iter().map(|a| a.cell()).collect();
        let ptrs = cells
            .iter_mut()
            .map(|c| c as *mut u64 as *mut std::ffi::c_void)
            .collect();
        ParamArray {
            _cells: cells,
            ptrs,
        }
    }
}
