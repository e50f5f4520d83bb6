//! The emulator backend: device memory is host memory (each buffer in its own mapping with a
//! guard page after its end, `kernels/emu/emu_memory.cpp`), and a launch hands the kernel's
//! emulated entry point and its parameter array to `emu_launch` (`kernels/emu/emu_runtime.cpp`),
//! which runs every block, one fiber per CUDA thread, and reports instead of crashing when a
//! kernel breaks CUDA's rules or a thread faults. After a fault the device is unusable, as a CUDA
//! context is after an illegal address; other devices (and the shared one) are not affected.

mod ffi;

use crate::backend::{Backend, BackendKind, KernelHandle};
use crate::blas::call::GemmCall;
use crate::error::{EmuErrorKind, Fault, FaultKind, KernelError, Result};
use crate::launch::{LaunchConfig, ParamArray};
use crate::source::KernelSource;
use std::ffi::{c_char, CStr, CString};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// How long a block may make no progress while threads spin before the launch is reported as a
/// deadlock, unless `MOE_EMU_DEADLOCK_SECS` says otherwise.
const DEFAULT_DEADLOCK: Duration = Duration::from_secs(20);

static NEXT_ID: AtomicU32 = AtomicU32::new(1);

pub(crate) struct Emu {
    /// Tags this device's allocations and launches (the overrun check after a launch looks at
    /// this device's buffers only).
    id: u32,
    workers: u32,
    deadlock_ms: AtomicU64,
    /// Why the device is unusable, after a fault.
    broken: Mutex<Option<String>>,
}

fn deadlock_from_env() -> Duration {
    std::env::var("MOE_EMU_DEADLOCK_SECS")
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(Duration::from_secs_f64)
        .unwrap_or(DEFAULT_DEADLOCK)
}

fn text(buf: &[c_char]) -> String {
    // SAFETY: the runtime always NUL-terminates (it zeroes the report first).
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

impl Emu {
    pub(crate) fn new() -> Emu {
        Emu {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            workers: unsafe { ffi::emu_worker_count() },
            deadlock_ms: AtomicU64::new(deadlock_from_env().as_millis() as u64),
            broken: Mutex::new(None),
        }
    }

    pub(crate) fn set_deadlock_timeout(&self, t: Duration) {
        self.deadlock_ms
            .store((t.as_millis() as u64).max(1), Ordering::Relaxed);
    }

    fn usable(&self) -> Result<()> {
        match &*self.broken.lock().unwrap_or_else(|p| p.into_inner()) {
            None => Ok(()),
            Some(why) => Err(KernelError::DeviceUnusable { why: why.clone() }),
        }
    }

    fn break_with(&self, why: String) {
        let mut b = self.broken.lock().unwrap_or_else(|p| p.into_inner());
        if b.is_none() {
            *b = Some(why);
        }
    }
}

impl Backend for Emu {
    fn kind(&self) -> BackendKind {
        BackendKind::Emu
    }

    fn describe(&self) -> String {
        let gib = unsafe { ffi::emu_memory_limit() } as f64 / (1u64 << 30) as f64;
        format!(
            "CPU emulator, {} worker threads, {gib:.1} GiB of device memory",
            self.workers
        )
    }

    fn name(&self) -> String {
        "CPU emulator".to_string()
    }

    fn worker_threads(&self) -> Option<usize> {
        Some(self.workers as usize)
    }

    fn alloc(&self, bytes: usize, what: &str) -> Result<u64> {
        let label = CString::new(what.replace('\0', " ")).expect("no NUL");
        let mut err = vec![0 as c_char; 512];
        let p =
            unsafe { ffi::emu_alloc(bytes, self.id, label.as_ptr(), err.as_mut_ptr(), err.len()) };
        if p.is_null() {
            return Err(KernelError::OutOfMemory {
                bytes,
                why: text(&err),
            });
        }
        Ok(p as u64)
    }

    fn free(&self, ptr: u64, _bytes: usize) {
        unsafe { ffi::emu_free(ptr as *mut std::ffi::c_void) }
    }

    fn fill(&self, ptr: u64, byte: u8, bytes: usize) -> Result<()> {
        self.usable()?;
        // SAFETY: `ptr` is one of this backend's allocations of at least `bytes` bytes.
        unsafe { std::ptr::write_bytes(ptr as *mut u8, byte, bytes) };
        Ok(())
    }

    fn write(&self, ptr: u64, data: &[u8]) -> Result<()> {
        self.usable()?;
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), ptr as *mut u8, data.len()) };
        Ok(())
    }

    fn read(&self, data: &mut [u8], ptr: u64) -> Result<()> {
        self.usable()?;
        unsafe { std::ptr::copy_nonoverlapping(ptr as *const u8, data.as_mut_ptr(), data.len()) };
        Ok(())
    }

    fn synchronize(&self) -> Result<()> {
        self.usable()
    }

    fn load(&self, src: &KernelSource) -> Result<Vec<(&'static str, KernelHandle)>> {
        Ok(src
            .emu
            .iter()
            .map(|k| (k.name, KernelHandle(k.entry as usize)))
            .collect())
    }

    fn launch(
        &self,
        label: &str,
        kernel: KernelHandle,
        cfg: LaunchConfig,
        params: &mut ParamArray,
    ) -> Result<()> {
        self.usable()?;
        // SAFETY: handles of this backend are the addresses of `EmuEntry` functions (load above).
        let entry: ffi::EmuKernelFn = unsafe { std::mem::transmute(kernel.0) };
        let mut report: Box<ffi::EmuReport> = Box::new(unsafe { std::mem::zeroed() });
        let rc = unsafe {
            ffi::emu_launch(
                entry,
                params.ptrs.as_mut_ptr(),
                cfg.grid.0,
                cfg.grid.1,
                cfg.grid.2,
                cfg.block.0,
                cfg.block.1,
                cfg.block.2,
                cfg.shared_bytes as usize,
                self.id,
                self.deadlock_ms.load(Ordering::Relaxed),
                &mut *report,
            )
        };
        let message = text(&report.message);
        let kernel = label.to_string();
        match rc {
            0 => Ok(()),
            1 | 5 => Err(KernelError::Emu {
                kernel,
                kind: EmuErrorKind::Launch,
                message,
            }),
            2 => Err(KernelError::Emu {
                kernel,
                kind: EmuErrorKind::Misuse,
                message,
            }),
            4 => Err(KernelError::Emu {
                kernel,
                kind: EmuErrorKind::Deadlock,
                message,
            }),
            _ => {
                let kind = match report.fault {
                    2 => FaultKind::BufferOverrun,
                    3 => FaultKind::StackOverflow,
                    4 => FaultKind::IntegerDivision,
                    5 => FaultKind::IllegalInstruction,
                    _ => FaultKind::Memory,
                };
                let fault = Fault {
                    kind,
                    block: (report.has_thread != 0).then_some(report.block),
                    thread: (report.has_thread != 0).then_some(report.thread),
                    address: (report.has_address != 0).then_some(report.address),
                    detail: message,
                };
                let err = KernelError::EmuFault { kernel, fault };
                self.break_with(err.to_string());
                Err(err)
            }
        }
    }

    fn gemm(&self, call: &GemmCall) -> Result<()> {
        self.usable()?;
        // SAFETY: `blas::linear` checked every operand's length against the shape, and the
        // operands are live views of this backend's buffers.
        unsafe { crate::blas::reference::gemm(call, self.workers as usize) };
        Ok(())
    }
}

/// Bytes of emulated device memory in use (all emulated devices together) and the limit.
pub fn memory_in_use() -> (u64, u64) {
    unsafe { (ffi::emu_memory_used(), ffi::emu_memory_limit()) }
}
