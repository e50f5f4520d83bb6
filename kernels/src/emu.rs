//! The emulator backend: device memory is host memory, and a launch hands the kernel's
//! emulated entry point and its parameter array to `emu_launch` (kernels/emu/emu_runtime.cpp),
//! which runs every block, one fiber per CUDA thread, and returns an error message instead of
//! crashing when a kernel breaks CUDA's rules.

use crate::error::{KernelError, Result};
use crate::launch::{LaunchConfig, ParamArray};
use crate::source::EmuEntry;
use std::alloc::{alloc, dealloc, Layout};
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

extern "C" {
    fn emu_launch(
        f: EmuEntry,
        params: *mut *mut c_void,
        grid_x: c_uint,
        grid_y: c_uint,
        grid_z: c_uint,
        block_x: c_uint,
        block_y: c_uint,
        block_z: c_uint,
        dynamic_shared_bytes: usize,
        err: *mut c_char,
        err_len: usize,
    ) -> c_int;
    fn emu_worker_count() -> c_uint;
}

/// Device allocations on the emulator are aligned like cudaMalloc's (256 bytes).
const ALIGN: usize = 256;

pub(crate) struct Emu {
    pub(crate) workers: u32,
}

impl Emu {
    pub(crate) fn new() -> Emu {
        Emu {
            workers: unsafe { emu_worker_count() },
        }
    }

    pub(crate) fn alloc(&self, bytes: usize) -> u64 {
        let layout = Layout::from_size_align(bytes.max(1), ALIGN).expect("allocation size");
        let p = unsafe { alloc(layout) };
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        p as u64
    }

    pub(crate) fn free(&self, ptr: u64, bytes: usize) {
        let layout = Layout::from_size_align(bytes.max(1), ALIGN).expect("allocation size");
        unsafe { dealloc(ptr as *mut u8, layout) }
    }

    pub(crate) fn launch(
        &self,
        name: &str,
        entry: EmuEntry,
        cfg: LaunchConfig,
        params: &mut ParamArray,
    ) -> Result<()> {
        let mut err = vec![0 as c_char; 2048];
        let rc = unsafe {
            emu_launch(
                entry,
                params.ptrs.as_mut_ptr(),
                cfg.grid.0,
                cfg.grid.1,
                cfg.grid.2,
                cfg.block.0,
                cfg.block.1,
                cfg.block.2,
                cfg.shared_bytes as usize,
                err.as_mut_ptr(),
                err.len(),
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let message = unsafe { CStr::from_ptr(err.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        Err(KernelError::Emu {
            kernel: name.to_string(),
            message,
        })
    }
}
