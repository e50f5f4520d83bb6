//! Helpers for tests that run on every backend.
//!
//! One test body, every backend (the model is candle's `test_device!`): write the body as a
//! function of a `&'static Device` and list it in [`backend_tests!`]. The macro makes two tests
//! of each body: `emu::<body>` on the CPU emulator, which runs everywhere, and `cuda::<body>` on
//! the GPU, marked `#[ignore = "needs a GPU"]` so that a machine without one counts it as
//! ignored, never as passed. On a GPU machine, `cargo test -- --include-ignored` (what
//! `tools/gpu/run` does) runs both.
//!
//! ```ignore
//! fn chain_matches_the_oracle(dev: &'static Device) { /* ... */ }
//! moe_kernels::backend_tests!(chain_matches_the_oracle);
//! ```
//!
//! Each test binary says once, on stderr (past the test harness's capture), which backends its
//! tests ran on.

use crate::device::Device;
use std::io::Write;
use std::sync::Mutex;

/// Says once per backend and process which device the tests of this binary run on.
fn announce(dev: &'static Device, why: &str) {
    static SAID: Mutex<Vec<crate::BackendKind>> = Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|p| p.into_inner());
    if !said.contains(&dev.kind()) {
        said.push(dev.kind());
        let exe = std::env::args()
            .next()
            .and_then(|a| {
                std::path::Path::new(&a)
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
            })
            .unwrap_or_default();
        // Strip cargo's hash: `chain-5244e9194ab39990` → `chain`.
        let name = exe.rsplit_once('-').map_or(exe.as_str(), |(n, _)| n);
        let _ = writeln!(
            std::io::stderr(),
            "tests of {name} on {}: {} ({why})",
            dev.kind(),
            dev.describe()
        );
    }
}

/// The CPU emulator, for the `emu::` half of [`backend_tests!`].
pub fn emu() -> &'static Device {
    let d = Device::emu();
    announce(d, "always");
    d
}

/// The GPU, for the `cuda::` half of [`backend_tests!`]; a test that asks for it on a machine
/// without one fails with the reason (those tests are ignored unless asked for).
pub fn cuda() -> &'static Device {
    match Device::cuda() {
        Ok(d) => {
            announce(d, "--include-ignored on a GPU machine");
            d
        }
        Err(e) => panic!("needs a GPU: {e}"),
    }
}

/// The backend `MOE_BACKEND` selects (auto when unset), as an example runs: for the tests that
/// check what a reader's `cargo run --example` prints. Panics with the selection error (e.g.
/// `MOE_BACKEND=cuda` without a GPU), which is the right outcome for a test run.
pub fn device() -> &'static Device {
    let d = Device::auto().unwrap_or_else(|e| panic!("{e}"));
    announce(d, "MOE_BACKEND");
    d
}

/// Makes each listed body a test on every backend: `emu::<body>` and `cuda::<body>` (ignored
/// without a GPU). Each body is a function `fn(&'static Device)` in the same module.
#[macro_export]
macro_rules! backend_tests {
    ($($body:ident),+ $(,)?) => {
        /// The test bodies on the CPU emulator.
        mod emu {
            $(
                #[test]
                fn $body() {
                    super::$body($crate::testing::emu())
                }
            )+
        }
        /// The same bodies on the GPU.
        mod cuda {
            $(
                #[test]
                #[ignore = "needs a GPU"]
                fn $body() {
                    super::$body($crate::testing::cuda())
                }
            )+
        }
    };
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
    let differs = |i: usize| ab[i * size..(i + 1) * size] != bb[i * size..(i + 1) * size];
    if let Some(i) = (0..a.len()).find(|&i| differs(i)) {
        let count = (0..a.len()).filter(|&i| differs(i)).count();
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
