//! The CUDA backend, through cudarc's thin driver, NVRTC and cuBLAS bindings, all loaded at run
//! time (the binary builds and starts with no CUDA installed). Every call checks its result and
//! turns a failure into a [`KernelError`] that names the call.
//!
//! - this file: the device, its stream (and a second one for [`crate::Device::side_by_side`]),
//!   memory, copies, module loading, launches;
//! - [`nvrtc`]: compiling a family for the device's architecture;
//! - [`cache`]: the compiled families kept on disk, so only a family's first run compiles it;
//! - `graph`: CUDA graphs and events, for the measuring harness;
//! - `blas`: cuBLAS GEMMs on the same stream.

pub(crate) mod blas;
pub mod cache;
pub(crate) mod graph;
pub mod nvrtc;

pub use cache::KernelCache;
pub use nvrtc::{
    compile_cubin, compile_ptx, cuda_include_dir, defines_for, experiment_defines, nvrtc_compiles,
    nvrtc_options, nvrtc_version, target_arch,
};

use crate::backend::{Backend, BackendKind, KernelHandle};
use crate::blas::call::GemmCall;
use crate::error::{KernelError, Result};
use crate::launch::{LaunchConfig, ParamArray};
use crate::source::KernelSource;
use cudarc::driver::{result as cu, sys};
use std::ffi::CString;

pub(crate) fn check<T>(
    r: std::result::Result<T, cu::DriverError>,
    call: impl FnOnce() -> String,
) -> Result<T> {
    r.map_err(|e| KernelError::Cuda {
        call: call(),
        error: describe(&e),
    })
}

fn describe(e: &cu::DriverError) -> String {
    let name = e
        .error_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let text = e
        .error_string()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name.is_empty() {
        format!("{:?}", e.0)
    } else {
        format!("{name} ({text})")
    }
}

/// One GPU: its primary context, one stream on which everything of this process runs in order
/// (but the launches sent to the second stream between a fork and a join), and what the harness
/// needs to know about it.
pub struct Gpu {
    ctx: sys::CUcontext,
    pub(crate) stream: sys::CUstream,
    /// The second stream, and the events of a fork (main to side) and a join (side to main).
    side: sys::CUstream,
    fork_event: sys::CUevent,
    join_event: sys::CUevent,
    pub(crate) name: String,
    pub(crate) arch: &'static str,
    pub(crate) sms: u32,
    pub(crate) l2_bytes: usize,
    /// Compute capability 9.0 or later (programmatic dependent launch, `griddepcontrol`, exists)
    /// and not turned off with `MOE_DEPENDENT_LAUNCH=0`.
    dependent_launch: bool,
    blas: std::sync::OnceLock<std::result::Result<blas::Blas, KernelError>>,
    /// A second cuBLAS handle, bound to the second stream (a handle's workspace belongs to it).
    blas_side: std::sync::OnceLock<std::result::Result<blas::Blas, KernelError>>,
}

thread_local! {
    /// Whether this thread's launches go to the second stream (between fork and unfork).
    static ON_SIDE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

// The context and stream handles are usable from any thread once the context is made current
// there, which `bind` does before every call.
unsafe impl Send for Gpu {}
unsafe impl Sync for Gpu {}

impl Gpu {
    /// Opens device 0, or says exactly why the CUDA backend cannot run.
    pub(crate) fn open() -> Result<Gpu> {
        if !unsafe { sys::is_culib_present() } {
            return Err(KernelError::NoGpu {
                why: "no CUDA driver library (libcuda.so.1) was found".into(),
            });
        }
        check(cu::init(), || "cuInit".into())
            .map_err(|e| KernelError::NoGpu { why: e.to_string() })?;
        let count = check(cu::device::get_count(), || "cuDeviceGetCount".into())?;
        if count < 1 {
            return Err(KernelError::NoGpu {
                why: "the CUDA driver sees no device".into(),
            });
        }
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(KernelError::NoGpu {
                why: "NVRTC 13 (libnvrtc.so.13) is not on the library path; add the folder that holds it \
                      (e.g. /usr/local/cuda/lib64 or pip's nvidia/cu13/lib) to LD_LIBRARY_PATH"
                    .into(),
            });
        }
        let dev = check(cu::device::get(0), || "cuDeviceGet(0)".into())?;
        let attr = |a: sys::CUdevice_attribute| {
            check(unsafe { cu::device::get_attribute(dev, a) }, || {
                format!("cuDeviceGetAttribute({a:?})")
            })
        };
        let major = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        let sms = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
        let l2_bytes = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as usize;
        let name = check(cu::device::get_name(dev), || "cuDeviceGetName".into())?;
        let ctx = check(unsafe { cu::primary_ctx::retain(dev) }, || {
            "cuDevicePrimaryCtxRetain".into()
        })?;
        check(unsafe { cu::ctx::set_current(ctx) }, || {
            "cuCtxSetCurrent".into()
        })?;
        let stream = check(
            cu::stream::create(cu::stream::StreamKind::NonBlocking),
            || "cuStreamCreate".into(),
        )?;
        let side = check(
            cu::stream::create(cu::stream::StreamKind::NonBlocking),
            || "cuStreamCreate (the second stream)".into(),
        )?;
        let event = || {
            check(
                cu::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING),
                || "cuEventCreate (fork and join)".into(),
            )
        };
        let (fork_event, join_event) = (event()?, event()?);
        // NVRTC wants a &'static str; one string per process.
        let arch: &'static str = Box::leak(format!("sm_{major}{minor}").into_boxed_str());
        Ok(Gpu {
            ctx,
            stream,
            side,
            fork_event,
            join_event,
            name,
            arch,
            sms,
            l2_bytes,
            // MOE_DEPENDENT_LAUNCH=0 launches dependents as plain launches (to measure what the
            // overlap buys; results are the same either way).
            dependent_launch: major >= 9
                && std::env::var("MOE_DEPENDENT_LAUNCH").map_or(true, |v| v.trim() != "0"),
            blas: std::sync::OnceLock::new(),
            blas_side: std::sync::OnceLock::new(),
        })
    }

    /// The stream this thread's launches go to now.
    fn current(&self) -> sys::CUstream {
        if ON_SIDE.with(|s| s.get()) {
            self.side
        } else {
            self.stream
        }
    }

    /// Makes this GPU's context current on the calling thread.
    pub(crate) fn bind(&self) -> Result<()> {
        check(unsafe { cu::ctx::set_current(self.ctx) }, || {
            "cuCtxSetCurrent".into()
        })
    }

    /// A programmatic dependent launch ([`LaunchConfig::dependent`]): `cuLaunchKernelEx` with
    /// the attribute that lets the kernel's blocks start while the kernel before it on the stream
    /// finishes. Inside a CUDA graph capture the edge between the two becomes a programmatic one.
    /// Before compute capability 9.0 there is no `griddepcontrol`: a plain launch.
    fn launch_dependent(
        &self,
        label: &str,
        f: sys::CUfunction,
        cfg: LaunchConfig,
        params: &mut ParamArray,
    ) -> Result<()> {
        let describe = || {
            format!(
                "cuLaunchKernelEx({label}, grid {:?}, block {:?}, shared {} B, programmatic stream serialization)",
                cfg.grid, cfg.block, cfg.shared_bytes
            )
        };
        let mut attr: sys::CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = self.dependent_launch as i32;
        let config = sys::CUlaunchConfig {
            gridDimX: cfg.grid.0,
            gridDimY: cfg.grid.1,
            gridDimZ: cfg.grid.2,
            blockDimX: cfg.block.0,
            blockDimY: cfg.block.1,
            blockDimZ: cfg.block.2,
            sharedMemBytes: cfg.shared_bytes,
            hStream: self.current(),
            attrs: &mut attr,
            numAttrs: 1,
        };
        let r = unsafe {
            sys::cuLaunchKernelEx(&config, f, params.ptrs.as_mut_ptr(), std::ptr::null_mut())
        };
        check(r.result(), describe)
    }

    /// The 128-byte tensor map of a row-major bf16 matrix `[rows, cols]` at `ptr` whose boxes
    /// are `box_rows` × `box_cols` elements, laid out in shared memory with the 128-byte swizzle
    /// (`box_cols` · 2 must be 128 at most); parts of a box past the matrix are filled with
    /// zeros. For the tensor memory accelerator's bulk copies (`kernels/tma.cuh`).
    pub(crate) fn tensor_map_bf16(
        &self,
        ptr: u64,
        rows: u64,
        cols: u64,
        box_rows: u32,
        box_cols: u32,
    ) -> Result<[u64; 16]> {
        use sys::{
            CUtensorMapDataType as D, CUtensorMapFloatOOBfill as F, CUtensorMapInterleave as I,
            CUtensorMapL2promotion as L, CUtensorMapSwizzle as S,
        };
        self.bind()?;
        let mut map: sys::CUtensorMap = unsafe { std::mem::zeroed() };
        let dims = [cols, rows];
        let strides = [cols * 2]; // bytes between rows; the innermost dimension's is implied
        let boxes = [box_cols, box_rows];
        let steps = [1u32, 1];
        let r = unsafe {
            sys::cuTensorMapEncodeTiled(
                &mut map,
                D::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
                2,
                ptr as *mut std::ffi::c_void,
                dims.as_ptr(),
                strides.as_ptr(),
                boxes.as_ptr(),
                steps.as_ptr(),
                I::CU_TENSOR_MAP_INTERLEAVE_NONE,
                S::CU_TENSOR_MAP_SWIZZLE_128B,
                L::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                F::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            )
        };
        check(r.result(), || {
            format!("cuTensorMapEncodeTiled(bf16 [{rows}, {cols}] at {ptr:#x}, box {box_rows} x {box_cols}, 128-byte swizzle)")
        })?;
        Ok(map.opaque)
    }

    pub(crate) fn sync(&self, when: &str) -> Result<()> {
        self.bind()?;
        check(unsafe { cu::stream::synchronize(self.stream) }, || {
            format!("cuStreamSynchronize ({when})")
        })
    }
}

impl Backend for Gpu {
    fn kind(&self) -> BackendKind {
        BackendKind::Cuda
    }

    fn describe(&self) -> String {
        format!("{}, {}, {} SMs", self.name, self.arch, self.sms)
    }

    fn name(&self) -> String {
        self.name.clone()
    }

    fn alloc(&self, bytes: usize, what: &str) -> Result<u64> {
        self.bind()?;
        unsafe { cu::malloc_sync(bytes.max(1)) }.map_err(|e| KernelError::OutOfMemory {
            bytes,
            why: format!("cuMemAlloc for {what}: {}", describe(&e)),
        })
    }

    fn free(&self, ptr: u64, _bytes: usize) {
        // Freeing happens in Drop, where an error cannot be returned; a failure here means the
        // context is already broken and an earlier call has reported it.
        if self.bind().is_ok() {
            let _ = unsafe { cu::free_sync(ptr) };
        }
    }

    fn fill(&self, ptr: u64, byte: u8, bytes: usize) -> Result<()> {
        self.bind()?;
        check(
            unsafe { cu::memset_d8_async(ptr, byte, bytes, self.stream) },
            || format!("cuMemsetD8Async({bytes} bytes)"),
        )
    }

    fn write(&self, ptr: u64, data: &[u8]) -> Result<()> {
        self.bind()?;
        check(
            unsafe { cu::memcpy_htod_async(ptr, data, self.stream) },
            || format!("cuMemcpyHtoDAsync({} bytes)", data.len()),
        )?;
        self.sync("after a host-to-device copy")
    }

    fn read(&self, data: &mut [u8], ptr: u64) -> Result<()> {
        self.bind()?;
        check(
            unsafe { cu::memcpy_dtoh_async(data, ptr, self.stream) },
            || format!("cuMemcpyDtoHAsync({} bytes)", data.len()),
        )?;
        self.sync("after a device-to-host copy")
    }

    fn synchronize(&self) -> Result<()> {
        self.sync("Device::synchronize")
    }

    /// Loads a family's machine code for this GPU: from the kernel cache
    /// ([`KernelCache::from_env`]), or compiled by NVRTC straight to a CUBIN for this GPU's
    /// architecture and stored there. The driver gets a binary, so it compiles nothing itself.
    fn load(&self, src: &KernelSource) -> Result<Vec<(&'static str, KernelHandle)>> {
        let binary = cache::cubin(src, self.arch, &KernelCache::from_env())?;
        self.bind()?;
        let module = check(
            unsafe { cu::module::load_data(binary.image.as_ptr() as *const _) },
            || {
                format!(
                    "cuModuleLoadData(kernels/{}.cu, a {}-byte CUBIN for {}{})",
                    src.family,
                    binary.image.len(),
                    target_arch(self.arch),
                    match (&binary.outcome, &binary.path) {
                        (cache::Outcome::Hit, Some(p)) => format!(" read from {}", p.display()),
                        _ => String::new(),
                    }
                )
            },
        )?;
        let mut functions = Vec::new();
        for name in src.kernel_names() {
            let cname = CString::new(name).unwrap();
            let f = check(unsafe { cu::module::get_function(module, cname) }, || {
                format!("cuModuleGetFunction({}::{name})", src.family)
            })?;
            functions.push((name, KernelHandle(f as usize)));
        }
        Ok(functions)
    }

    fn launch(
        &self,
        label: &str,
        kernel: KernelHandle,
        cfg: LaunchConfig,
        params: &mut ParamArray,
    ) -> Result<()> {
        self.bind()?;
        let f = kernel.0 as sys::CUfunction;
        if cfg.shared_bytes > 48 * 1024 {
            check(
                unsafe {
                    cu::function::set_function_attribute(
                        f,
                        sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        cfg.shared_bytes as i32,
                    )
                },
                || {
                    format!(
                        "cuFuncSetAttribute({label}, max dynamic shared = {})",
                        cfg.shared_bytes
                    )
                },
            )?;
        }
        if cfg.dependent {
            return self.launch_dependent(label, f, cfg, params);
        }
        check(
            unsafe {
                cu::launch_kernel(
                    f,
                    cfg.grid,
                    cfg.block,
                    cfg.shared_bytes,
                    self.current(),
                    &mut params.ptrs,
                )
            },
            || {
                format!(
                    "cuLaunchKernel({label}, grid {:?}, block {:?}, shared {} B)",
                    cfg.grid, cfg.block, cfg.shared_bytes
                )
            },
        )
    }

    fn gemm(&self, call: &GemmCall) -> Result<()> {
        self.bind()?;
        let blas = if ON_SIDE.with(|s| s.get()) {
            self.blas_side.get_or_init(|| blas::Blas::new(self.side))
        } else {
            self.blas.get_or_init(|| blas::Blas::new(self.stream))
        };
        blas.as_ref().map_err(|e| e.clone())?.gemm(call)
    }

    fn fork(&self) -> Result<()> {
        self.bind()?;
        check(
            unsafe { cu::event::record(self.fork_event, self.stream) },
            || "cuEventRecord (fork)".into(),
        )?;
        check(
            unsafe {
                cu::stream::wait_event(
                    self.side,
                    self.fork_event,
                    sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                )
            },
            || "cuStreamWaitEvent (the second stream on the fork)".into(),
        )?;
        ON_SIDE.with(|s| s.set(true));
        Ok(())
    }

    fn unfork(&self) {
        ON_SIDE.with(|s| s.set(false));
    }

    fn join(&self) -> Result<()> {
        self.bind()?;
        check(
            unsafe { cu::event::record(self.join_event, self.side) },
            || "cuEventRecord (join)".into(),
        )?;
        check(
            unsafe {
                cu::stream::wait_event(
                    self.stream,
                    self.join_event,
                    sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                )
            },
            || "cuStreamWaitEvent (the main stream on the join)".into(),
        )
    }
}
