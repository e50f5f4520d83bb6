//! Choosing a backend and using it: memory, copies, compiled modules, library GEMMs.
//!
//! `MOE_BACKEND=cuda` or `emu` (any case) forces a backend; unset or empty, the GPU is used when
//! a driver, a device and NVRTC are present, else the emulator. [`Device::auto`] prints one line
//! to stderr saying which backend runs and why.

use crate::backend::{Backend, BackendKind};
use crate::blas::call::GemmCall;
use crate::buffer::{as_bytes, DeviceBuffer, DeviceRepr};
use crate::cuda::Gpu;
use crate::emu::Emu;
use crate::error::{KernelError, Result};
use crate::module::Module;
use crate::source::KernelSource;
use std::collections::HashMap;
use std::io::Write;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// A place where kernels run. Devices live for the whole process, so they are handed out as
/// `&'static Device`: one GPU, one shared emulator, and fresh emulators on request.
pub struct Device {
    backend: &'static dyn Backend,
    emu: Option<&'static Emu>,
    launches: &'static AtomicU64,
    modules: Mutex<HashMap<&'static str, Arc<Module>>>,
}

static EMU: OnceLock<Device> = OnceLock::new();
static CUDA: OnceLock<std::result::Result<Device, KernelError>> = OnceLock::new();
static AUTO: OnceLock<std::result::Result<(&'static Device, String), KernelError>> =
    OnceLock::new();

/// What `MOE_BACKEND` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackendRequest {
    /// `cuda` (in any case).
    Cuda,
    /// `emu` (in any case).
    Emu,
    /// Unset, or set to nothing but spaces (`empty` says which, for the message).
    Auto { empty: bool },
}

/// Reads a `MOE_BACKEND` value: `cuda` or `emu` in any case, surrounding spaces ignored; an empty
/// value counts as unset; anything else is an error that names it.
pub fn parse_backend(var: Option<&str>) -> Result<BackendRequest> {
    let Some(v) = var else {
        return Ok(BackendRequest::Auto { empty: false });
    };
    match v.trim().to_ascii_lowercase().as_str() {
        "cuda" => Ok(BackendRequest::Cuda),
        "emu" => Ok(BackendRequest::Emu),
        "" => Ok(BackendRequest::Auto { empty: true }),
        _ => Err(KernelError::UnknownBackend(v.to_string())),
    }
}

impl Device {
    fn leak(backend: &'static dyn Backend, emu: Option<&'static Emu>) -> Device {
        Device {
            backend,
            emu,
            launches: Box::leak(Box::new(AtomicU64::new(0))),
            modules: Mutex::new(HashMap::new()),
        }
    }

    fn new_emu() -> Device {
        let emu: &'static Emu = Box::leak(Box::new(Emu::new()));
        Device::leak(emu, Some(emu))
    }

    /// The shared CPU emulator (always available).
    pub fn emu() -> &'static Device {
        EMU.get_or_init(Device::new_emu)
    }

    /// A new emulator device of its own: a fault on it (which leaves it unusable, as on a GPU)
    /// does not touch the shared one. For tests that make kernels fail on purpose.
    pub fn emu_isolated() -> &'static Device {
        Box::leak(Box::new(Device::new_emu()))
    }

    /// The GPU, or an error that says why there is none.
    pub fn cuda() -> Result<&'static Device> {
        let d = CUDA.get_or_init(|| {
            Gpu::open().map(|g| {
                let g: &'static Gpu = Box::leak(Box::new(g));
                Device::leak(g, None)
            })
        });
        match d {
            Ok(d) => Ok(d),
            Err(e) => Err(e.clone()),
        }
    }

    /// The backend `MOE_BACKEND` asks for (auto when unset or empty), with the reason it was
    /// chosen. Forcing `cuda` where it cannot run is an error, never a silent fallback.
    pub fn select() -> Result<(&'static Device, String)> {
        AUTO.get_or_init(|| {
            let var = std::env::var("MOE_BACKEND").ok();
            match parse_backend(var.as_deref())? {
                BackendRequest::Cuda => {
                    Device::cuda().map(|d| (d, format!("MOE_BACKEND={}", var.unwrap_or_default())))
                }
                BackendRequest::Emu => Ok((
                    Device::emu(),
                    format!("MOE_BACKEND={}", var.unwrap_or_default()),
                )),
                BackendRequest::Auto { empty } => {
                    let unset = if empty {
                        "MOE_BACKEND is empty (read as unset)"
                    } else {
                        "MOE_BACKEND is unset"
                    };
                    match Device::cuda() {
                        Ok(d) => Ok((d, format!("{unset} and a CUDA device is present"))),
                        Err(KernelError::NoGpu { why }) => {
                            Ok((Device::emu(), format!("{unset} and {why}")))
                        }
                        Err(e) => Err(e),
                    }
                }
            }
        })
        .clone()
    }

    /// [`Device::select`], printing once per process to stderr which backend runs and why, e.g.
    /// `backend: emu (CPU emulator, 2 worker threads, 11.7 GiB of device memory) — MOE_BACKEND
    /// is unset and no CUDA driver library (libcuda.so.1) was found`. The line goes straight to
    /// the process's stderr, so a test binary shows it even when the test harness captures
    /// output.
    pub fn auto() -> Result<&'static Device> {
        static SAID: std::sync::Once = std::sync::Once::new();
        let (d, why) = Device::select()?;
        SAID.call_once(|| {
            let _ = writeln!(
                std::io::stderr(),
                "backend: {} ({}) — {why}",
                d.kind(),
                d.describe()
            );
        });
        Ok(d)
    }

    /// Which backend this is.
    pub fn kind(&self) -> BackendKind {
        self.backend.kind()
    }

    /// A short description: `NVIDIA H200, sm_90, 132 SMs` or `CPU emulator, 2 worker threads, …`.
    pub fn describe(&self) -> String {
        self.backend.describe()
    }

    /// The device's own name (`NVIDIA H200`, `CPU emulator`): what a CSV row's `device` says.
    pub fn name(&self) -> String {
        self.backend.name()
    }

    /// How many OS threads run blocks: the emulator's workers; `None` on a GPU.
    pub fn worker_threads(&self) -> Option<usize> {
        self.backend.worker_threads()
    }

    /// How many kernels this device has launched so far, from every thread.
    pub fn launches(&self) -> u64 {
        self.launches.load(Ordering::Relaxed)
    }

    /// On the emulator: how long a block may make no progress while threads spin before the
    /// launch fails as a deadlock (default 20 s, or `MOE_EMU_DEADLOCK_SECS`). No effect on a GPU,
    /// where such a kernel simply never ends.
    pub fn set_deadlock_timeout(&self, t: Duration) {
        if let Some(e) = self.emu {
            e.set_deadlock_timeout(t);
        }
    }

    /// The GPU's streaming multiprocessors (132 on an H200); `None` on the emulator.
    pub fn multiprocessors(&self) -> Option<usize> {
        self.gpu().map(|g| g.sms as usize)
    }

    /// Whether this device runs sm_90a code (Hopper's `wgmma`): a GPU of compute capability
    /// 9.0, whose kernels NVRTC compiles for `sm_90a` ([`crate::cuda::target_arch`]). Never the
    /// emulator, which runs the portable kernels only.
    pub fn has_sm90a(&self) -> bool {
        self.gpu()
            .is_some_and(|g| crate::cuda::target_arch(g.arch) == "sm_90a")
    }

    /// Whether this device runs chapter 4's Hopper versions (`wgmma`, TMA, mbarriers): an
    /// sm_90a GPU ([`Device::has_sm90a`]) or the emulator, whose twins of those instructions
    /// live in `kernels/emu/hopper.h`.
    pub fn runs_hopper(&self) -> bool {
        self.has_sm90a() || self.emu.is_some()
    }

    /// Whether this device is a GPU that runs `cp.async` (compute capability 8.0 or later:
    /// chapter 4's versions 2 and 3 stage K through it). `None` on the emulator, which runs
    /// every portable version (the rules that read this choose for a GPU).
    pub fn gpu_has_cp_async(&self) -> Option<bool> {
        self.gpu().map(|g| {
            g.arch
                .trim_start_matches("sm_")
                .parse::<u32>()
                .is_ok_and(|cc| cc >= 80)
        })
    }

    /// The tensor map of a row-major bf16 matrix `[rows, cols]` in `buf` (from element 0), for
    /// the tensor memory accelerator's copies of `box_rows` × `box_cols` boxes in the 128-byte
    /// swizzle: 128 bytes for a kernel to read from device memory. On a GPU the driver's
    /// encoding (cuTensorMapEncodeTiled); on the emulator the `emu_tensor_map` of
    /// `kernels/emu/hopper.h`, which its TMA reads.
    pub fn tensor_map_bf16<T: DeviceRepr>(
        &self,
        buf: &DeviceBuffer<T>,
        rows: usize,
        cols: usize,
        box_rows: u32,
        box_cols: u32,
    ) -> Result<[u64; 16]> {
        let need = rows.saturating_mul(cols).saturating_mul(2);
        let have = buf.len() * std::mem::size_of::<T>();
        if need > have {
            return Err(KernelError::Length {
                what: format!("the matrix of a tensor map ([{rows}, {cols}] bf16)"),
                expected: need,
                got: have,
            });
        }
        let Some(gpu) = self.gpu() else {
            if box_rows == 0 || box_cols == 0 || box_rows > 256 || box_cols * 2 > 128 {
                return Err(KernelError::Length {
                    what: format!("a tensor map's box ({box_rows} x {box_cols} bf16; at most 256 rows of 128 bytes)"),
                    expected: 128,
                    got: box_cols as usize * 2,
                });
            }
            // kernels/emu/hopper.h's emu_tensor_map: magic, base, rows, cols, row bytes, box
            // rows, box columns, element bytes, swizzle.
            let mut map = [0u64; 16];
            map[..9].copy_from_slice(&[
                0x5041_4d52_4f53_4e54, // "TNSORMAP"
                buf.device_ptr(),
                rows as u64,
                cols as u64,
                cols as u64 * 2,
                box_rows as u64,
                box_cols as u64,
                2,
                128,
            ]);
            return Ok(map);
        };
        gpu.tensor_map_bf16(
            buf.device_ptr(),
            rows as u64,
            cols as u64,
            box_rows,
            box_cols,
        )
    }

    /// The GPU behind this device, for the measuring harness; `None` on the emulator.
    pub(crate) fn gpu(&self) -> Option<&Gpu> {
        self.backend.as_any().downcast_ref::<Gpu>()
    }

    /// One library GEMM, counted, recorded and budgeted as a launch named `blas::linear` (on
    /// the GPU cuBLAS may launch more than one kernel for it; the book counts calls).
    pub(crate) fn gemm(&self, call: &GemmCall) -> Result<()> {
        if !crate::module::take_launch("blas::linear") {
            return Ok(());
        }
        self.launches.fetch_add(1, Ordering::Relaxed);
        self.backend.gemm(call)
    }

    fn alloc_uninit<T: DeviceRepr>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        let what = format!("DeviceBuffer<{}>[{len}]", short_type::<T>());
        let bytes = len
            .checked_mul(std::mem::size_of::<T>())
            .filter(|b| *b <= isize::MAX as usize)
            .ok_or_else(|| KernelError::TooLarge {
                what: what.clone(),
                elements: len,
                element_bytes: std::mem::size_of::<T>(),
            })?;
        let ptr = self.backend.alloc(bytes, &what)?;
        Ok(DeviceBuffer {
            ptr,
            len,
            backend: self.backend,
            _t: PhantomData,
        })
    }

    /// `len` elements of uninitialised memory, poisoned with 0xFF bytes on both backends
    /// (NaN for floats, -1 for integers), so an output a kernel forgot to write shows up.
    pub fn alloc<T: DeviceRepr>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        let buf = self.alloc_uninit::<T>(len)?;
        self.backend.fill(buf.ptr, 0xff, buf.bytes())?;
        Ok(buf)
    }

    /// `len` zeroed elements.
    pub fn zeros<T: DeviceRepr>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        let buf = self.alloc_uninit::<T>(len)?;
        self.backend.fill(buf.ptr, 0, buf.bytes())?;
        Ok(buf)
    }

    /// A device copy of `data`.
    pub fn upload<T: DeviceRepr>(&self, data: &[T]) -> Result<DeviceBuffer<T>> {
        let buf = self.alloc_uninit::<T>(data.len())?;
        self.backend.write(buf.ptr, as_bytes(data))?;
        Ok(buf)
    }

    // ANCHOR: side_by_side
    /// Queues `side`'s launches and library GEMMs on a second stream and `main`'s on the
    /// device's stream, so the GPU may run the two at once; both start after everything queued
    /// before the call, and anything queued after it starts after both (a fork and a join, by
    /// events; inside a CUDA graph capture they become the graph's edges). Each half must not
    /// read what the other writes. On the emulator the halves simply run one after the other
    /// (`side` first), which is one of the orders the GPU may take: the same results.
    pub fn side_by_side<A, B, E: From<KernelError>>(
        &self,
        side: impl FnOnce() -> std::result::Result<A, E>,
        main: impl FnOnce() -> std::result::Result<B, E>,
    ) -> std::result::Result<(A, B), E> {
        self.backend.fork()?;
        let a = side();
        self.backend.unfork();
        // The join comes whatever the halves did: a capture with a stream left forked cannot end.
        let b = a.and_then(|a| main().map(|b| (a, b)));
        let joined = self.backend.join();
        let both = b?;
        joined?;
        Ok(both)
    }
    // ANCHOR_END: side_by_side

    /// Waits for all queued work (on the emulator, launches are synchronous already).
    pub fn synchronize(&self) -> Result<()> {
        self.backend.synchronize()
    }

    /// The family compiled for this device, on its first use in the process: for the GPU a
    /// CUBIN from the kernel cache or from NVRTC ([`crate::cuda::cache`]), the linked emulator
    /// entry points otherwise.
    pub fn load(&self, src: &'static KernelSource) -> Result<Arc<Module>> {
        let mut modules = self.modules.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = modules.get(src.family) {
            return Ok(m.clone());
        }
        let m = Arc::new(Module::new(self.backend, self.launches, src)?);
        modules.insert(src.family, m.clone());
        Ok(m)
    }
}

/// `f32`, `half::bf16` → `bf16`: type names as a reader writes them.
fn short_type<T>() -> &'static str {
    let full = std::any::type_name::<T>();
    full.rsplit("::").next().unwrap_or(full)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moe_backend_values() {
        assert_eq!(
            parse_backend(None),
            Ok(BackendRequest::Auto { empty: false })
        );
        assert_eq!(
            parse_backend(Some("")),
            Ok(BackendRequest::Auto { empty: true })
        );
        assert_eq!(
            parse_backend(Some("  ")),
            Ok(BackendRequest::Auto { empty: true })
        );
        assert_eq!(parse_backend(Some("EMU")), Ok(BackendRequest::Emu));
        assert_eq!(parse_backend(Some(" Cuda ")), Ok(BackendRequest::Cuda));
        assert_eq!(
            parse_backend(Some("gpu")),
            Err(KernelError::UnknownBackend("gpu".into()))
        );
    }
}
