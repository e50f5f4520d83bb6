//! The emulator runtime's C ABI (`kernels/emu/emu_abi.h`; change both together).

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void};

/// `EmuReport` of emu_abi.h: what a launch reports.
#[repr(C)]
pub(crate) struct EmuReport {
    pub kind: c_int,
    pub fault: c_int,
    pub has_thread: c_int,
    pub block: [c_uint; 3],
    pub thread: [c_uint; 3],
    pub has_address: c_int,
    pub address: c_ulonglong,
    pub message: [c_char; 4096],
}

pub(crate) type EmuKernelFn = unsafe extern "C" fn(params: *mut *mut c_void);

extern "C" {
    pub(crate) fn emu_launch(
        f: EmuKernelFn,
        params: *mut *mut c_void,
        grid_x: c_uint,
        grid_y: c_uint,
        grid_z: c_uint,
        block_x: c_uint,
        block_y: c_uint,
        block_z: c_uint,
        dynamic_shared_bytes: usize,
        device: c_uint,
        deadlock_ms: c_ulonglong,
        report: *mut EmuReport,
    ) -> c_int;
    pub(crate) fn emu_alloc(
        bytes: usize,
        device: c_uint,
        what: *const c_char,
        err: *mut c_char,
        err_len: usize,
    ) -> *mut c_void;
    pub(crate) fn emu_free(ptr: *mut c_void);
    pub(crate) fn emu_memory_limit() -> c_ulonglong;
    pub(crate) fn emu_memory_used() -> c_ulonglong;
    pub(crate) fn emu_worker_count() -> c_uint;
}
