//! Choosing a backend and talking to it: memory, copies, compiled modules, launches.
//!
//! `MOE_BACKEND=cuda` or `emu` forces a backend; unset, the GPU is used when a driver, a device
//! and NVRTC are present, else the emulator. [`Device::auto`] prints one line to stderr saying
//! which backend runs and why.

use crate::buffer::{DeviceBuffer, DeviceRepr};
use crate::cuda::Gpu;
use crate::emu::Emu;
use crate::error::{KernelError, Result};
use crate::launch::{KernelArg, LaunchConfig, ParamArray, ParamKind};
use crate::source::{EmuEntry, KernelSource};
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Which backend a [`Device`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

pub(crate) enum Backend {
    Cuda(Gpu),
    Emu(Emu),
}

/// A place where kernels run. There is one `Device` of each kind per process, so they are
/// handed out as `&'static Device`.
pub struct Device {
    pub(crate) backend: Backend,
    launches: AtomicU64,
    modules: Mutex<HashMap<&'static str, Arc<Module>>>,
}

static EMU: OnceLock<Device> = OnceLock::new();
static CUDA: OnceLock<std::result::Result<Device, KernelError>> = OnceLock::new();
static AUTO: OnceLock<std::result::Result<(&'static Device, String), KernelError>> =
    OnceLock::new();

impl Device {
    fn new(backend: Backend) -> Device {
        Device {
            backend,
            launches: AtomicU64::new(0),
            modules: Mutex::new(HashMap::new()),
        }
    }

    /// The CPU emulator (always available).
    pub fn emu() -> &'static Device {
        EMU.get_or_init(|| Device::new(Backend::Emu(Emu::new())))
    }

    /// The GPU, or an error that says why there is none.
    pub fn cuda() -> Result<&'static Device> {
        match CUDA.get_or_init(|| Gpu::open().map(|g| Device::new(Backend::Cuda(g)))) {
            Ok(d) => Ok(d),
            Err(e) => Err(e.clone()),
        }
    }

    /// The backend `MOE_BACKEND` asks for (auto when unset), with the reason it was chosen.
    /// Forcing `cuda` where it cannot run is an error, never a silent fallback.
    pub fn select() -> Result<(&'static Device, String)> {
        AUTO.get_or_init(|| {
            let var = std::env::var("MOE_BACKEND").unwrap_or_default();
            match var.trim() {
                "cuda" => Device::cuda().map(|d| (d, "MOE_BACKEND=cuda".to_string())),
                "emu" => Ok((Device::emu(), "MOE_BACKEND=emu".to_string())),
                "" => match Device::cuda() {
                    Ok(d) => Ok((
                        d,
                        "MOE_BACKEND is unset and a CUDA device is present".to_string(),
                    )),
                    Err(KernelError::NoGpu { why }) => {
                        Ok((Device::emu(), format!("MOE_BACKEND is unset and {why}")))
                    }
                    Err(e) => Err(e),
                },
                other => Err(KernelError::UnknownBackend(other.to_string())),
            }
        })
        .clone()
    }

    /// [`Device::select`], printing once per process to stderr which backend runs and why, e.g.
    /// `backend: emu (CPU emulator, 2 worker threads) — MOE_BACKEND is unset and no CUDA driver
    /// library (libcuda.so.1) was found`.
    pub fn auto() -> Result<&'static Device> {
        static SAID: std::sync::Once = std::sync::Once::new();
        let (d, why) = Device::select()?;
        SAID.call_once(|| eprintln!("backend: {} ({}) — {why}", d.kind(), d.describe()));
        Ok(d)
    }

    /// Which backend this is.
    pub fn kind(&self) -> BackendKind {
        match self.backend {
            Backend::Cuda(_) => BackendKind::Cuda,
            Backend::Emu(_) => BackendKind::Emu,
        }
    }

    /// A short description: `NVIDIA H200, sm_90, 132 SMs` or `CPU emulator, 2 worker threads`.
    pub fn describe(&self) -> String {
        match &self.backend {
            Backend::Cuda(g) => format!("{}, {}, {} SMs", g.name, g.arch, g.sms),
            Backend::Emu(e) => format!("CPU emulator, {} worker threads", e.workers),
        }
    }

    pub(crate) fn gpu(&self) -> Option<&Gpu> {
        match &self.backend {
            Backend::Cuda(g) => Some(g),
            Backend::Emu(_) => None,
        }
    }

    /// How many kernels this device has launched so far (the benchmark's launch count).
    pub fn launches(&self) -> u64 {
        self.launches.load(Ordering::Relaxed)
    }

    fn alloc_raw(&'static self, bytes: usize) -> Result<u64> {
        match &self.backend {
            Backend::Cuda(g) => g.alloc(bytes),
            Backend::Emu(e) => Ok(e.alloc(bytes)),
        }
    }

    pub(crate) fn free_raw(&self, ptr: u64, bytes: usize) {
        match &self.backend {
            Backend::Cuda(g) => g.free(ptr),
            Backend::Emu(e) => e.free(ptr, bytes),
        }
    }

    fn fill(&self, ptr: u64, byte: u8, bytes: usize) -> Result<()> {
        match &self.backend {
            Backend::Cuda(g) => g.memset(ptr, byte, bytes),
            Backend::Emu(_) => {
                unsafe { std::ptr::write_bytes(ptr as *mut u8, byte, bytes) };
                Ok(())
            }
        }
    }

    /// `len` elements of uninitialised memory, poisoned with 0xFF bytes on both backends
    /// (NaN for floats, -1 for integers), so an output a kernel forgot to write shows up.
    pub fn alloc<T: DeviceRepr>(&'static self, len: usize) -> Result<DeviceBuffer<T>> {
        let bytes = len * std::mem::size_of::<T>();
        let ptr = self.alloc_raw(bytes)?;
        let buf = DeviceBuffer {
            ptr,
            len,
            device: self,
            _t: PhantomData,
        };
        self.fill(ptr, 0xff, bytes)?;
        Ok(buf)
    }

    /// `len` zeroed elements.
    pub fn zeros<T: DeviceRepr>(&'static self, len: usize) -> Result<DeviceBuffer<T>> {
        let buf = self.alloc::<T>(len)?;
        self.fill(buf.ptr, 0, buf.bytes())?;
        Ok(buf)
    }

    /// A device copy of `data`.
    pub fn upload<T: DeviceRepr>(&'static self, data: &[T]) -> Result<DeviceBuffer<T>> {
        let bytes = std::mem::size_of_val(data);
        let ptr = self.alloc_raw(bytes)?;
        let mut buf = DeviceBuffer {
            ptr,
            len: data.len(),
            device: self,
            _t: PhantomData,
        };
        self.copy_to_device(&mut buf, data)?;
        Ok(buf)
    }

    pub(crate) fn copy_to_device<T: DeviceRepr>(
        &self,
        buf: &mut DeviceBuffer<T>,
        data: &[T],
    ) -> Result<()> {
        if data.len() != buf.len {
            return Err(KernelError::Length {
                what: "copy to device".into(),
                expected: buf.len,
                got: data.len(),
            });
        }
        let bytes = unsafe {
            std::slice::from_raw_parts(data.as_ptr() as *const u8, std::mem::size_of_val(data))
        };
        match &self.backend {
            Backend::Cuda(g) => g.htod(buf.ptr, bytes),
            Backend::Emu(_) => {
                unsafe {
                    std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.ptr as *mut u8, bytes.len())
                };
                Ok(())
            }
        }
    }

    /// Copies a buffer back to the host, after all queued work.
    pub fn download<T: DeviceRepr>(&self, buf: &DeviceBuffer<T>) -> Result<Vec<T>> {
        let mut out: Vec<T> = Vec::with_capacity(buf.len);
        let bytes = buf.bytes();
        match &self.backend {
            Backend::Cuda(g) => {
                let dst =
                    unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut u8, bytes) };
                g.dtoh(dst, buf.ptr)?;
            }
            Backend::Emu(_) => unsafe {
                std::ptr::copy_nonoverlapping(
                    buf.ptr as *const u8,
                    out.as_mut_ptr() as *mut u8,
                    bytes,
                )
            },
        }
        unsafe { out.set_len(buf.len) };
        Ok(out)
    }

    /// Waits for all queued work (a no-op on the emulator, whose launches are synchronous).
    pub fn synchronize(&self) -> Result<()> {
        match &self.backend {
            Backend::Cuda(g) => g.sync("Device::synchronize"),
            Backend::Emu(_) => Ok(()),
        }
    }

    /// The family compiled for this device: NVRTC for the GPU (once per process), the linked
    /// emulator entry points otherwise.
    pub fn load(&'static self, src: &'static KernelSource) -> Result<Arc<Module>> {
        let mut modules = self.modules.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = modules.get(src.family) {
            return Ok(m.clone());
        }
        let kernels = match &self.backend {
            Backend::Cuda(g) => g
                .compile(src)?
                .into_iter()
                .map(|(n, f)| (n, Handle::Cuda(f)))
                .collect(),
            Backend::Emu(_) => src
                .emu
                .iter()
                .map(|k| (k.name, Handle::Emu(k.entry)))
                .collect(),
        };
        let params = src.emu.iter().map(|k| (k.name, k.params)).collect();
        let m = Arc::new(Module {
            device: self,
            family: src.family,
            kernels,
            params,
        });
        modules.insert(src.family, m.clone());
        Ok(m)
    }
}

#[derive(Clone, Copy)]
enum Handle {
    Cuda(usize),
    Emu(EmuEntry),
}

/// A compiled kernel family on one device.
pub struct Module {
    device: &'static Device,
    family: &'static str,
    kernels: HashMap<&'static str, Handle>,
    params: HashMap<&'static str, &'static [ParamKind]>,
}

impl Module {
    /// The device this module runs on.
    pub fn device(&self) -> &'static Device {
        self.device
    }

    /// Launches kernel `name` of this family. On the GPU the launch is queued on the device's
    /// stream; on the emulator it runs to completion before this returns.
    pub fn launch(&self, name: &str, cfg: LaunchConfig, args: &[KernelArg]) -> Result<()> {
        let handle = *self
            .kernels
            .get(name)
            .ok_or_else(|| KernelError::UnknownKernel {
                family: self.family.into(),
                name: name.into(),
            })?;
        if let Some(want) = self.params.get(name) {
            if want.len() != args.len() || want.iter().zip(args).any(|(p, a)| *p != a.kind()) {
                let show = |v: &mut dyn Iterator<Item = ParamKind>| {
                    v.map(|k| format!("{k:?}")).collect::<Vec<_>>().join(", ")
                };
                return Err(KernelError::Arguments {
                    kernel: format!("{}::{name}", self.family),
                    expected: show(&mut want.iter().copied()),
                    got: show(&mut args.iter().map(|a| a.kind())),
                });
            }
        }
        let mut params = ParamArray::new(args);
        self.device.launches.fetch_add(1, Ordering::Relaxed);
        let label = format!("{}::{name}", self.family);
        match (&self.device.backend, handle) {
            (Backend::Cuda(g), Handle::Cuda(f)) => g.launch(&label, f, cfg, &mut params),
            (Backend::Emu(e), Handle::Emu(entry)) => e.launch(&label, entry, cfg, &mut params),
            _ => unreachable!("a module holds handles of its own device's kind"),
        }
    }
}
