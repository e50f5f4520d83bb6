//! Device memory. A [`DeviceBuffer`] is an address on the device: GPU memory on the CUDA
//! backend, host memory on the emulator. Kernels receive the same kind of pointer either way.

use crate::device::Device;
use crate::error::Result;
use std::marker::PhantomData;

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
    pub(crate) device: &'static Device,
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
    /// The device that owns this memory.
    pub fn device(&self) -> &'static Device {
        self.device
    }
    /// Copies the buffer back to the host (waits for queued work first).
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.device.download(self)
    }
    /// Overwrites the buffer with `data` (same length).
    pub fn copy_from(&mut self, data: &[T]) -> Result<()> {
        self.device.copy_to_device(self, data)
    }
}

impl<T: DeviceRepr> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        self.device.free_raw(self.ptr, self.bytes());
    }
}

impl<T: DeviceRepr> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceBuffer<{}>[{}] on {}",
            std::any::type_name::<T>(),
            self.len,
            self.device.kind()
        )
    }
}
