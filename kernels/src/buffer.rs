//! Device memory. A [`DeviceBuffer`] is an address on the device: GPU memory on the CUDA
//! backend, host memory on the emulator. Kernels receive the same kind of pointer either way.
//! A [`DeviceView`] is a window into a buffer (one expert's rows of a packed weight, say), which
//! a kernel or a GEMM receives as a pointer to its first element.
//!
//! A buffer holds the backend that owns its memory (not the [`crate::Device`]), so this module
//! sits below `device.rs` and never imports it.

use crate::backend::{Backend, BackendKind};
use crate::error::{KernelError, Result};
use crate::launch::KernelArg;
use std::marker::PhantomData;
use std::ops::Range;

/// Element types that may live in device memory: plain, `Copy`, no padding, any bit pattern
/// valid.
///
/// # Safety
/// Implement only for types for which every bit pattern is a valid value and which have no
/// padding, since their bytes are copied to and from the device as they are.
pub unsafe trait DeviceRepr: Copy + Send + Sync + 'static {}
unsafe impl DeviceRepr for f32 {}
unsafe impl DeviceRepr for f64 {}
unsafe impl DeviceRepr for i32 {}
unsafe impl DeviceRepr for u32 {}
unsafe impl DeviceRepr for i64 {}
unsafe impl DeviceRepr for u64 {}
unsafe impl DeviceRepr for u8 {}
unsafe impl DeviceRepr for u16 {}
unsafe impl DeviceRepr for half::bf16 {}
unsafe impl DeviceRepr for half::f16 {}

/// `len` elements of `T` in device memory, freed on drop.
pub struct DeviceBuffer<T: DeviceRepr> {
    pub(crate) ptr: u64,
    pub(crate) len: usize,
    pub(crate) backend: &'static dyn Backend,
    pub(crate) _t: PhantomData<T>,
}

impl<T: DeviceRepr> DeviceBuffer<T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True when the buffer holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Size in bytes.
    pub fn bytes(&self) -> usize {
        self.len * std::mem::size_of::<T>()
    }
    /// The address a kernel receives.
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }
    /// The backend that owns this memory.
    pub fn kind(&self) -> BackendKind {
        self.backend.kind()
    }
    /// Copies the buffer back to the host (waits for queued work first).
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut out: Vec<T> = Vec::with_capacity(self.len);
        // SAFETY: `out` has capacity for `len` elements; every bit pattern is a valid `T`
        // (DeviceRepr), and `read` fills all `bytes()` bytes or fails, in which case the
        // length stays 0.
        let dst =
            unsafe { std::slice::from_raw_parts_mut(out.as_mut_ptr() as *mut u8, self.bytes()) };
        self.backend.read(dst, self.ptr)?;
        unsafe { out.set_len(self.len) };
        Ok(out)
    }
    /// Overwrites the buffer with `data` (same length).
    pub fn copy_from(&mut self, data: &[T]) -> Result<()> {
        if data.len() != self.len {
            return Err(KernelError::Length {
                what: "copy to device".into(),
                expected: self.len,
                got: data.len(),
            });
        }
        self.backend.write(self.ptr, as_bytes(data))
    }
    /// Elements `range` of this buffer, as a view a kernel or a GEMM can take.
    pub fn view(&self, range: Range<usize>) -> Result<DeviceView<'_, T>> {
        if range.start > range.end || range.end > self.len {
            return Err(KernelError::Length {
                what: format!("view {}..{} of a buffer", range.start, range.end),
                expected: self.len,
                got: range.end,
            });
        }
        Ok(DeviceView {
            ptr: self.ptr + (range.start * std::mem::size_of::<T>()) as u64,
            len: range.end - range.start,
            backend: self.backend,
            _t: PhantomData,
        })
    }
    /// The whole buffer as a view.
    pub fn as_view(&self) -> DeviceView<'_, T> {
        DeviceView {
            ptr: self.ptr,
            len: self.len,
            backend: self.backend,
            _t: PhantomData,
        }
    }
}

/// The bytes of a slice of device-representable values.
pub(crate) fn as_bytes<T: DeviceRepr>(data: &[T]) -> &[u8] {
    // SAFETY: DeviceRepr types have no padding, so every byte is initialised.
    unsafe { std::slice::from_raw_parts(data.as_ptr() as *const u8, std::mem::size_of_val(data)) }
}

impl<T: DeviceRepr> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        self.backend.free(self.ptr, self.bytes());
    }
}

impl<T: DeviceRepr> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceBuffer<{}>[{}] on {}",
            std::any::type_name::<T>(),
            self.len,
            self.backend.kind()
        )
    }
}

/// `len` elements of a [`DeviceBuffer`], starting somewhere inside it; borrowed from the buffer,
/// so it cannot outlive the memory.
#[derive(Clone, Copy)]
pub struct DeviceView<'a, T: DeviceRepr> {
    pub(crate) ptr: u64,
    pub(crate) len: usize,
    pub(crate) backend: &'static dyn Backend,
    _t: PhantomData<&'a T>,
}

impl<T: DeviceRepr> DeviceView<'_, T> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True when the view holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The address of the first element.
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }
    /// The backend that owns this memory.
    pub fn kind(&self) -> BackendKind {
        self.backend.kind()
    }
}

impl<T: DeviceRepr> From<&DeviceBuffer<T>> for KernelArg {
    fn from(b: &DeviceBuffer<T>) -> Self {
        KernelArg::Ptr(b.device_ptr())
    }
}
impl<T: DeviceRepr> From<&mut DeviceBuffer<T>> for KernelArg {
    fn from(b: &mut DeviceBuffer<T>) -> Self {
        KernelArg::Ptr(b.device_ptr())
    }
}
impl<T: DeviceRepr> From<&DeviceView<'_, T>> for KernelArg {
    fn from(v: &DeviceView<'_, T>) -> Self {
        KernelArg::Ptr(v.device_ptr())
    }
}
impl<T: DeviceRepr> From<DeviceView<'_, T>> for KernelArg {
    fn from(v: DeviceView<'_, T>) -> Self {
        KernelArg::Ptr(v.device_ptr())
    }
}
