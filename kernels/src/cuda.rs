//! The CUDA backend, through cudarc's thin driver and NVRTC bindings, both loaded at run time
//! (the binary builds and starts with no CUDA installed). Every call checks its result and turns
//! a failure into a [`KernelError`] that names the call.

use crate::error::{KernelError, Result};
use crate::launch::{LaunchConfig, ParamArray};
use crate::source::KernelSource;
use cudarc::driver::{result as cu, sys};
use std::collections::HashMap;
use std::ffi::CString;
use std::path::PathBuf;

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

/// One GPU: its primary context, one stream on which everything of this process runs in order,
/// and what the harness needs to know about it.
pub(crate) struct Gpu {
    ctx: sys::CUcontext,
    pub(crate) stream: sys::CUstream,
    pub(crate) name: String,
    pub(crate) arch: &'static str,
    pub(crate) sms: u32,
    pub(crate) l2_bytes: usize,
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
        // NVRTC wants a &'static str; one string per process.
        let arch: &'static str = Box::leak(format!("sm_{major}{minor}").into_boxed_str());
        Ok(Gpu {
            ctx,
            stream,
            name,
            arch,
            sms,
            l2_bytes,
        })
    }

    /// Makes this GPU's context current on the calling thread.
    pub(crate) fn bind(&self) -> Result<()> {
        check(unsafe { cu::ctx::set_current(self.ctx) }, || {
            "cuCtxSetCurrent".into()
        })
    }

    pub(crate) fn alloc(&self, bytes: usize) -> Result<u64> {
        self.bind()?;
        check(unsafe { cu::malloc_sync(bytes.max(1)) }, || {
            format!("cuMemAlloc({bytes} bytes)")
        })
    }

    pub(crate) fn free(&self, ptr: u64) {
        // Freeing happens in Drop, where an error cannot be returned; a failure here means the
        // context is already broken and an earlier call has reported it.
        if self.bind().is_ok() {
            let _ = unsafe { cu::free_sync(ptr) };
        }
    }

    pub(crate) fn memset(&self, ptr: u64, byte: u8, bytes: usize) -> Result<()> {
        self.bind()?;
        check(
            unsafe { cu::memset_d8_async(ptr, byte, bytes, self.stream) },
            || format!("cuMemsetD8Async({bytes} bytes)"),
        )
    }

    pub(crate) fn htod(&self, ptr: u64, data: &[u8]) -> Result<()> {
        self.bind()?;
        check(
            unsafe { cu::memcpy_htod_async(ptr, data, self.stream) },
            || format!("cuMemcpyHtoDAsync({} bytes)", data.len()),
        )?;
        self.sync("after a host-to-device copy")
    }

    pub(crate) fn dtoh(&self, data: &mut [u8], ptr: u64) -> Result<()> {
        self.bind()?;
        check(
            unsafe { cu::memcpy_dtoh_async(data, ptr, self.stream) },
            || format!("cuMemcpyDtoHAsync({} bytes)", data.len()),
        )?;
        self.sync("after a device-to-host copy")
    }

    pub(crate) fn sync(&self, when: &str) -> Result<()> {
        self.bind()?;
        check(unsafe { cu::stream::synchronize(self.stream) }, || {
            format!("cuStreamSynchronize ({when})")
        })
    }

    /// Compiles a family with NVRTC for this GPU's architecture and loads it.
    pub(crate) fn compile(&self, src: &KernelSource) -> Result<HashMap<&'static str, usize>> {
        let (ptx, _options) = compile_ptx(src, self.arch)?;
        self.bind()?;
        let image = CString::new(ptx).expect("PTX has no NUL");
        let module = check(
            unsafe { cu::module::load_data(image.as_ptr() as *const _) },
            || format!("cuModuleLoadData(kernels/{}.cu)", src.family),
        )?;
        let mut functions = HashMap::new();
        for name in src.kernel_names() {
            let cname = CString::new(name).unwrap();
            let f = check(unsafe { cu::module::get_function(module, cname) }, || {
                format!("cuModuleGetFunction({}::{name})", src.family)
            })?;
            functions.insert(name, f as usize);
        }
        Ok(functions)
    }

    pub(crate) fn launch(
        &self,
        label: &str,
        f: usize,
        cfg: LaunchConfig,
        params: &mut ParamArray,
    ) -> Result<()> {
        self.bind()?;
        let f = f as sys::CUfunction;
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
        check(
            unsafe {
                cu::launch_kernel(
                    f,
                    cfg.grid,
                    cfg.block,
                    cfg.shared_bytes,
                    self.stream,
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
}

/// Where `<cuda_bf16.h>` and friends are: `CUDA_INCLUDE_DIR`, `/usr/local/cuda/include`, or the
/// pip wheel's `nvidia/cu13/include` (found through `python3`).
pub fn cuda_include_dir() -> Option<PathBuf> {
    let has_headers = |p: &PathBuf| p.join("cuda_bf16.h").is_file();
    if let Some(dir) = std::env::var_os("CUDA_INCLUDE_DIR").map(PathBuf::from) {
        if has_headers(&dir) {
            return Some(dir);
        }
    }
    let usual = PathBuf::from("/usr/local/cuda/include");
    if has_headers(&usual) {
        return Some(usual);
    }
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import site,os;print('\\n'.join(site.getsitepackages()+[site.getusersitepackages()]))",
        ])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| PathBuf::from(l.trim()).join("nvidia/cu13/include"))
        .find(has_headers)
}

/// The NVRTC options every kernel is compiled with. `--fmad=false`: no contraction of a*b+c
/// into one rounding, so the GPU rounds exactly as the emulator (built with -ffp-contract=off).
pub fn nvrtc_options(arch: &'static str) -> Result<cudarc::nvrtc::CompileOptions> {
    let include = cuda_include_dir().ok_or_else(|| KernelError::NoGpu {
        why: "the CUDA headers (cuda_bf16.h) were not found: set CUDA_INCLUDE_DIR, or install them in \
              /usr/local/cuda/include or with pip (nvidia-cuda-runtime==13.0.96)"
            .into(),
    })?;
    Ok(cudarc::nvrtc::CompileOptions {
        arch: Some(arch),
        fmad: Some(false),
        include_paths: vec![include.display().to_string()],
        options: vec!["--std=c++17".into()],
        ..Default::default()
    })
}

/// Compiles one family to PTX; returns the PTX and the options used. Needs only NVRTC (no GPU),
/// which is how CI checks every kernel for sm_90.
pub fn compile_ptx(src: &KernelSource, arch: &'static str) -> Result<(String, Vec<String>)> {
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(KernelError::NoGpu {
            why: "NVRTC 13 (libnvrtc.so.13) is not on the library path".into(),
        });
    }
    let opts = nvrtc_options(arch)?;
    let shown: Vec<String> = std::iter::once(format!("--gpu-architecture={arch}"))
        .chain(std::iter::once("--fmad=false".to_string()))
        .chain(opts.include_paths.iter().map(|p| format!("-I{p}")))
        .chain(opts.options.iter().cloned())
        .collect();
    let mut opts = opts;
    opts.name = Some(format!("{}.cu", src.family));
    match cudarc::nvrtc::compile_ptx_with_opts(src.cuda_source, opts) {
        Ok(ptx) => Ok((ptx.to_src(), shown)),
        Err(cudarc::nvrtc::CompileError::CompileError { log, .. }) => Err(KernelError::Compile {
            family: src.family.into(),
            options: shown,
            log: log.to_string_lossy().into_owned(),
        }),
        Err(e) => Err(KernelError::Compile {
            family: src.family.into(),
            options: shown,
            log: format!("{e:?}"),
        }),
    }
}
