//! Helpers for tests that run on every backend.
//!
//! A test asks [`device`] for the backend under test (`MOE_BACKEND`, auto when unset). When that
//! is the GPU, [`emu_too`] also hands out the emulator, and the test checks that both gave the
//! same bits. Without a GPU, GPU-only tests call [`cuda_or_skip`], which prints that they were
//! skipped.

use crate::device::{BackendKind, Device};

/// The backend under test; panics with the selection error (e.g. `MOE_BACKEND=cuda` without a
/// GPU), which is the right outcome for a test run.
pub fn device() -> &'static Device {
    Device::auto().unwrap_or_else(|e| panic!("{e}"))
}

/// The emulator, when the backend under test is the GPU (so the two can be compared).
pub fn emu_too() -> Option<&'static Device> {
    (device().kind() == BackendKind::Cuda).then(Device::emu)
}

/// The GPU, or `None` after printing `skipped: <test> needs a CUDA device (<why>)`.
pub fn cuda_or_skip(test: &str) -> Option<&'static Device> {
    match Device::cuda() {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("skipped: {test} needs a CUDA device ({e})");
            None
        }
    }
}

/// Asserts that two slices hold the same bits (so NaN payloads and signed zeros count), and
/// says where the first difference is.
pub fn assert_same_bits<T: Copy + std::fmt::Debug>(what: &str, a: &[T], b: &[T]) {
    assert_eq!(a.len(), b.len(), "{what}: lengths differ");
    let size = std::mem::size_of::<T>();
    let ab =
        unsafe { std::slice::from_raw_parts(a.as_ptr() as *const u8, std::mem::size_of_val(a)) };
    let bb =
        unsafe { std::slice::from_raw_parts(b.as_ptr() as *const u8, std::mem::size_of_val(b)) };
    if let Some(i) =
        (0..a.len()).find(|&i| ab[i * size..(i + 1) * size] != bb[i * size..(i + 1) * size])
    {
        let count = (0..a.len())
            .filter(|&i| ab[i * size..(i + 1) * size] != bb[i * size..(i + 1) * size])
            .count();
        panic!(
            "{what}: {count} of {} elements differ; first at {i}: {:?} vs {:?}",
            a.len(),
            a[i],
            b[i]
        );
    }
}
