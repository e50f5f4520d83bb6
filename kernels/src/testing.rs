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

/// Like [`assert_same_bits`] for floats, except that two NaNs count as equal whatever their
/// payloads. IEEE 754 leaves a NaN's payload to the hardware: the GPU writes the canonical NaN
/// (0x7fffffff) for every NaN an operation produces, while x86 passes an operand's payload on
/// (or writes 0xffc00000 for an invalid operation). Everywhere else the bits must match, and the
/// positions of the NaNs must match too. Returns how many NaN pairs had different payloads.
pub fn assert_same_bits_up_to_nan_payload(what: &str, a: &[f32], b: &[f32]) -> usize {
    assert_eq!(a.len(), b.len(), "{what}: lengths differ");
    let differs = |i: usize| a[i].to_bits() != b[i].to_bits() && !(a[i].is_nan() && b[i].is_nan());
    if let Some(i) = (0..a.len()).find(|&i| differs(i)) {
        let count = (0..a.len()).filter(|&i| differs(i)).count();
        panic!(
            "{what}: {count} of {} elements differ; first at {i}: {:?} ({:#010x}) vs {:?} ({:#010x})",
            a.len(),
            a[i],
            a[i].to_bits(),
            b[i],
            b[i].to_bits()
        );
    }
    (0..a.len())
        .filter(|&i| a[i].to_bits() != b[i].to_bits())
        .count()
}
