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
//!
//! [`backend_tests!`]: crate::backend_tests!

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

/// The CPU emulator, for the `emu::` half of [`backend_tests!`](crate::backend_tests!).
pub fn emu() -> &'static Device {
    let d = Device::emu();
    announce(d, "always");
    d
}

/// The GPU, for the `cuda::` half of [`backend_tests!`](crate::backend_tests!); a test that asks
/// for it on a machine without one fails with the reason (those tests are ignored unless asked
/// for).
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

/// Whether element i of two equally long slices differs in its bits (NaN payloads and signed
/// zeros count): the one test of [`assert_same_bits`] and [`count_differing_bits`].
fn bits_differ<'a, T: Copy>(a: &'a [T], b: &'a [T]) -> impl Fn(usize) -> bool + 'a {
    let size = std::mem::size_of::<T>();
    let ab =
        unsafe { std::slice::from_raw_parts(a.as_ptr() as *const u8, std::mem::size_of_val(a)) };
    let bb =
        unsafe { std::slice::from_raw_parts(b.as_ptr() as *const u8, std::mem::size_of_val(b)) };
    move |i| ab[i * size..(i + 1) * size] != bb[i * size..(i + 1) * size]
}

/// Whether float i differs in its bits, two NaNs counting as equal whatever their payloads: the
/// one test of [`assert_same_bits_up_to_nan_payload`] and [`count_differing_up_to_nan_payload`].
fn differs_up_to_nan_payload<'a>(a: &'a [f32], b: &'a [f32]) -> impl Fn(usize) -> bool + 'a {
    move |i| a[i].to_bits() != b[i].to_bits() && !(a[i].is_nan() && b[i].is_nan())
}

/// Asserts that two slices hold the same bits (so NaN payloads and signed zeros count), and
/// says where the first difference is.
pub fn assert_same_bits<T: Copy + std::fmt::Debug>(what: &str, a: &[T], b: &[T]) {
    assert_eq!(a.len(), b.len(), "{what}: lengths differ");
    let differs = bits_differ(a, b);
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
    let differs = differs_up_to_nan_payload(a, b);
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

/// How many elements of two slices differ in their bits (NaN payloads and signed zeros count).
pub fn count_differing_bits<T: Copy>(a: &[T], b: &[T]) -> usize {
    assert_eq!(a.len(), b.len(), "lengths differ");
    let differs = bits_differ(a, b);
    (0..a.len()).filter(|&i| differs(i)).count()
}

/// How many floats differ in their bits, two NaNs counting as equal whatever their payloads (as
/// [`assert_same_bits_up_to_nan_payload`] compares).
pub fn count_differing_up_to_nan_payload(a: &[f32], b: &[f32]) -> usize {
    assert_eq!(a.len(), b.len(), "lengths differ");
    let differs = differs_up_to_nan_payload(a, b);
    (0..a.len()).filter(|&i| differs(i)).count()
}

/// An equality table: the comparisons a test made, as counts, for the book to print. Where the
/// variable `MOE_EQUALITY_DIR` names a folder when a [`Tally`] is made (`tools/gpu/run` sets it
/// for the GPU tests), its lines go to `<dir>/<name>.csv` as
/// `part,case,comparison,elements,differing` (the header first when the file is new; a second run
/// into the same folder appends, so start from an empty one); elsewhere nothing is written. The
/// tests assert as before: a tally writes its lines before one of its comparisons fails, and when
/// the test panics for any other reason (its drop), so a failing run's table says how many
/// elements differed, not only where the first one was.
pub struct EqualityTable {
    name: &'static str,
}

impl EqualityTable {
    /// The table `<name>.csv`.
    pub const fn new(name: &'static str) -> Self {
        Self { name }
    }

    /// A tally of one case's comparisons (a regime, a shape) in the table's `part`.
    pub fn tally(&'static self, part: &str, case: &str) -> Tally {
        let dir = std::env::var_os("MOE_EQUALITY_DIR").map(std::path::PathBuf::from);
        self.tally_into(dir, part, case)
    }

    /// [`EqualityTable::tally`] writing into `dir` (or nowhere), whatever the environment says.
    pub fn tally_into(
        &'static self,
        dir: Option<std::path::PathBuf>,
        part: &str,
        case: &str,
    ) -> Tally {
        check_plain(part);
        check_plain(case);
        Tally {
            table: self,
            dir,
            part: part.into(),
            case: case.into(),
            lines: Vec::new(),
        }
    }

    fn write_to(&self, dir: &std::path::Path, tally: &Tally) {
        static LOCK: Mutex<()> = Mutex::new(());
        let _held = LOCK.lock().unwrap_or_else(|p| p.into_inner());
        let path = dir.join(format!("{}.csv", self.name));
        let mut text = String::new();
        if !path.exists() {
            text.push_str("part,case,comparison,elements,differing\n");
        }
        for (comparison, elements, differing) in &tally.lines {
            let (part, case) = (&tally.part, &tally.case);
            text.push_str(&format!(
                "{part},{case},{comparison},{elements},{differing}\n"
            ));
        }
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(dir)?;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)?;
            f.write_all(text.as_bytes())
        };
        if let Err(e) = write() {
            // Not a panic while one is unwinding (a drop during a failed test): say it instead.
            let msg = format!("cannot write {}: {e}", path.display());
            if std::thread::panicking() {
                eprintln!("{msg}");
            } else {
                panic!("{msg}");
            }
        }
    }
}

/// A name of an equality table's line must be plain CSV (the book's reader does no quoting).
/// [`EqualityTable::tally`] and [`Tally::add`] check their names; a test can check names it
/// makes only on a GPU machine with this, on every machine.
pub fn check_plain(field: &str) {
    assert!(
        !field.contains([',', '\n', '"']),
        "equality table: {field:?} would need quoting"
    );
}

/// One case's comparisons, summed by name (a test that compares in chunks adds each chunk to the
/// same line), written to its [`EqualityTable`] by [`Tally::record`], just before one of its
/// comparisons fails, or when it is dropped during a panic.
pub struct Tally {
    table: &'static EqualityTable,
    dir: Option<std::path::PathBuf>,
    part: String,
    case: String,
    lines: Vec<(String, usize, usize)>,
}

impl Tally {
    /// Adds `elements` compared, `differing` of them different, to the line `comparison`.
    pub fn add(&mut self, comparison: &str, elements: usize, differing: usize) {
        check_plain(comparison);
        match self.lines.iter_mut().find(|l| l.0 == comparison) {
            Some(l) => (l.1, l.2) = (l.1 + elements, l.2 + differing),
            None => self.lines.push((comparison.into(), elements, differing)),
        }
    }

    /// [`assert_same_bits`], counted on the line `comparison` (`what` names the data in the
    /// failure's message).
    pub fn same_bits<T: Copy + std::fmt::Debug>(
        &mut self,
        comparison: &str,
        what: &str,
        a: &[T],
        b: &[T],
    ) {
        assert_eq!(a.len(), b.len(), "{what}: lengths differ");
        self.counted(comparison, a.len(), count_differing_bits(a, b), || {
            assert_same_bits(what, a, b)
        });
    }

    /// [`assert_same_bits_up_to_nan_payload`], counted on the line `comparison`.
    pub fn same_bits_up_to_nan_payload(
        &mut self,
        comparison: &str,
        what: &str,
        a: &[f32],
        b: &[f32],
    ) {
        assert_eq!(a.len(), b.len(), "{what}: lengths differ");
        let d = count_differing_up_to_nan_payload(a, b);
        self.counted(comparison, a.len(), d, || {
            assert_same_bits_up_to_nan_payload(what, a, b);
        });
    }

    /// Adds the line, and where something differed writes the tally before `fail` panics with
    /// where the first difference is.
    fn counted(
        &mut self,
        comparison: &str,
        elements: usize,
        differing: usize,
        fail: impl FnOnce(),
    ) {
        self.add(comparison, elements, differing);
        if differing > 0 {
            self.record();
            fail();
        }
    }

    /// Writes the lines (where the tally has a folder) and clears them.
    pub fn record(&mut self) {
        if let Some(dir) = &self.dir {
            self.table.write_to(dir, self);
        }
        self.lines.clear();
    }
}

impl Drop for Tally {
    /// A test that panics between two records (an unwrap, an oracle's verdict) still leaves what
    /// it had counted.
    fn drop(&mut self) {
        if std::thread::panicking() && !self.lines.is_empty() {
            self.record();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static TABLE: EqualityTable = EqualityTable::new("t");

    fn temp(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("moe-equality-{name}-{}", std::process::id()));
        std::fs::remove_dir_all(&dir).ok();
        dir
    }

    /// A tally sums its lines by name, writes the header once, and appends.
    #[test]
    fn a_tally_sums_by_line_and_appends() {
        let dir = temp("sums");
        let mut t = TABLE.tally_into(Some(dir.clone()), "p", "case a");
        t.same_bits("ids", "ids", &[1, 2, 3], &[1, 2, 3]);
        t.same_bits("ids", "ids", &[4, 5], &[4, 5]);
        t.add("rows", 7, 0);
        t.record();
        let mut u = TABLE.tally_into(Some(dir.clone()), "p", "case b");
        u.same_bits_up_to_nan_payload("x", "x", &[f32::NAN, -0.0], &[-f32::NAN, -0.0]);
        u.add("y", 2, 1);
        u.record();
        drop(u); // nothing left: nothing written again
        let text = std::fs::read_to_string(dir.join("t.csv")).unwrap();
        assert_eq!(
            text,
            "part,case,comparison,elements,differing\n\
             p,case a,ids,5,0\np,case a,rows,7,0\np,case b,x,2,0\np,case b,y,2,1\n"
        );
        std::fs::remove_dir_all(&dir).ok();
    }

    /// A difference is counted and written, then fails the test as assert_same_bits does; a
    /// panic of another kind leaves the lines counted so far; a bad name fails where it is made.
    #[test]
    fn a_failure_leaves_its_counts() {
        assert_eq!(count_differing_bits(&[0.0f32, 1.0], &[-0.0, 1.0]), 1);
        assert_eq!(
            count_differing_up_to_nan_payload(&[0.0, f32::NAN], &[-0.0, 1.0]),
            2
        );
        let dir = temp("fails");
        let r = std::panic::catch_unwind(|| {
            let mut t = TABLE.tally_into(Some(dir.clone()), "p", "c");
            t.same_bits("ids", "the ids", &[1, 2], &[1, 3])
        });
        let msg = *r.unwrap_err().downcast::<String>().unwrap();
        assert!(msg.contains("the ids: 1 of 2 elements differ"), "{msg}");
        let r = std::panic::catch_unwind(|| {
            let mut t = TABLE.tally_into(Some(dir.clone()), "p", "d");
            t.add("rows", 3, 0);
            panic!("an oracle's verdict");
        });
        assert!(r.is_err());
        let text = std::fs::read_to_string(dir.join("t.csv")).unwrap();
        assert_eq!(
            text,
            "part,case,comparison,elements,differing\np,c,ids,2,1\np,d,rows,3,0\n"
        );
        let r = std::panic::catch_unwind(|| TABLE.tally_into(None, "p", "a, b"));
        let msg = *r.err().unwrap().downcast::<String>().unwrap();
        assert!(msg.contains("\"a, b\" would need quoting"), "{msg}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
