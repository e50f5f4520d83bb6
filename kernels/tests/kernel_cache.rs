//! The on-disk kernel cache (`moe_kernels::cuda::cache`): what its key depends on, that a second
//! get reads the file instead of compiling, that a damaged file is compiled again and never
//! handed back, that an unwritable folder or `MOE_KERNEL_CACHE=off` still gives a binary. Most
//! tests drive the cache with a stand-in compiler that counts its calls (no NVRTC needed); those
//! that compile for sm_90a need NVRTC; the last one needs a GPU. Every test works in a temporary
//! folder of its own.

use moe_kernels::cuda::cache::{self, KernelCache, Key, Miss, Outcome};
use moe_kernels::families::{FLOOR, SELFTEST};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A fresh, empty folder under the system's temporary folder, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!(
            "moe-kernel-cache-test-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn options(arch: &str) -> Vec<String> {
    vec![
        "--fmad=false".into(),
        "--include-path=/usr/local/cuda/include".into(),
        format!("--gpu-architecture={arch}"),
        "--std=c++17".into(),
    ]
}

fn key(source: &str) -> Key {
    Key::new("fam", source, "sm_90a", &options("sm_90a"), (13, 0), "h")
}

/// A stand-in for NVRTC: returns `image` and counts its calls.
struct Counting {
    calls: Cell<u32>,
}

impl Counting {
    fn new() -> Counting {
        Counting {
            calls: Cell::new(0),
        }
    }

    fn get(&self, key: &Key, cache: &KernelCache, image: &[u8]) -> cache::Binary {
        cache::get(key, cache, Duration::from_secs(60), || {
            self.calls.set(self.calls.get() + 1);
            Ok(image.to_vec())
        })
        .unwrap()
    }
}

fn only_file(dir: &Path) -> PathBuf {
    let files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(
        files.len(),
        1,
        "one cache file, and no temporary left: {files:?}"
    );
    files.into_iter().next().unwrap()
}

#[test]
fn the_key_changes_with_the_source_the_options_the_architecture_and_nvrtc() {
    let base = key("extern \"C\" __global__ void k() {}\n");
    assert_eq!(base, key("extern \"C\" __global__ void k() {}\n"));
    let others = [
        key("extern \"C\" __global__ void k() { }\n"),
        Key::new(
            "fam",
            "extern \"C\" __global__ void k() {}\n",
            "sm_90a",
            &["--fmad=true".to_string()],
            (13, 0),
            "h",
        ),
        Key::new(
            "fam",
            "extern \"C\" __global__ void k() {}\n",
            "sm_100",
            &options("sm_100"),
            (13, 0),
            "h",
        ),
        Key::new(
            "fam",
            "extern \"C\" __global__ void k() {}\n",
            "sm_90a",
            &options("sm_90a"),
            (13, 1),
            "h",
        ),
        Key::new(
            "fam",
            "extern \"C\" __global__ void k() {}\n",
            "sm_90a",
            &options("sm_90a"),
            (13, 0),
            "other headers",
        ),
    ];
    for other in &others {
        assert_ne!(other.text(), base.text());
        assert_ne!(other.file_name(), base.file_name(), "{}", other.text());
    }
    assert!(
        base.file_name().starts_with("fam-sm_90a-"),
        "{}",
        base.file_name()
    );
    assert!(base.text().contains("nvrtc 13.0\n"), "{}", base.text());
    assert!(
        base.text().contains("option --fmad=false\n"),
        "{}",
        base.text()
    );
    // The two halves of the hash are different functions: a one-byte change moves both.
    let (a, b) = (cache::hash128(b"abcdefgh1"), cache::hash128(b"abcdefgh2"));
    assert!(a[0] != b[0] && a[1] != b[1] && a[0] != a[1]);
}

#[test]
fn a_second_get_reads_the_file_and_compiles_nothing() {
    let dir = TempDir::new("hit");
    let cache = KernelCache::Dir(dir.0.join("kernels")); // made by the first store
    let c = Counting::new();
    let k = key("source one");
    let first = c.get(&k, &cache, b"\x7fELF one");
    assert_eq!(
        first.outcome,
        Outcome::Compiled {
            miss: Miss::Absent,
            stored: true
        }
    );
    let second = c.get(&k, &cache, b"never used");
    assert_eq!(second.outcome, Outcome::Hit);
    assert_eq!(second.image, b"\x7fELF one");
    assert_eq!(c.calls.get(), 1);
    let file = only_file(&dir.0.join("kernels"));
    assert_eq!(first.path.as_deref(), Some(file.as_path()));
    // Another source is another file, compiled once.
    let k2 = key("source two");
    assert_eq!(c.get(&k2, &cache, b"two").image, b"two");
    assert_eq!(c.get(&k2, &cache, b"never used").image, b"two");
    assert_eq!(c.calls.get(), 2);
}

#[test]
fn a_damaged_file_is_compiled_again_and_replaced() {
    let dir = TempDir::new("damaged");
    let cache = KernelCache::Dir(dir.0.clone());
    let c = Counting::new();
    let k = key("source");
    let image: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
    c.get(&k, &cache, &image);
    let file = only_file(&dir.0);
    let good = std::fs::read(&file).unwrap();
    let header = good.len() - image.len();
    let mut damages: Vec<(&str, Vec<u8>)> = vec![
        ("truncated binary", good[..good.len() - 1].to_vec()),
        ("truncated header", good[..header / 2].to_vec()),
        ("empty", Vec::new()),
        ("one more byte", [good.as_slice(), b"x"].concat()),
        ("not a cache file", b"hello\n\nworld".to_vec()),
    ];
    for at in [header + 1, good.len() - 1, header + image.len() / 2] {
        let mut bad = good.clone();
        bad[at] ^= 0x5a;
        damages.push(("a byte of the binary flipped", bad));
    }
    for at in [3, header / 2, header - 3] {
        let mut bad = good.clone();
        bad[at] ^= 0x01;
        damages.push(("a byte of the header flipped", bad));
    }
    for (i, (what, bytes)) in damages.iter().enumerate() {
        std::fs::write(&file, bytes).unwrap();
        let got = c.get(&k, &cache, &image);
        assert!(got.image == image, "{what}: handed back a damaged binary");
        assert!(
            matches!(
                got.outcome,
                Outcome::Compiled {
                    miss: Miss::Damaged(_),
                    stored: true
                }
            ),
            "{what}: {:?}",
            got.outcome
        );
        assert_eq!(c.calls.get(), i as u32 + 2, "{what}: compiled again");
        assert!(
            std::fs::read(&file).unwrap() == good,
            "{what}: not replaced"
        );
        assert_eq!(c.get(&k, &cache, b"unused").outcome, Outcome::Hit, "{what}");
    }
    // A file of another key under this key's name (a collision of names) is not loaded.
    let other = key("another source");
    c.get(&other, &cache, b"other");
    let other_file = dir.0.join(other.file_name());
    std::fs::copy(&other_file, &file).unwrap();
    let got = c.get(&k, &cache, &image);
    assert!(got.image == image, "another key's binary handed back");
    assert_eq!(
        got.outcome,
        Outcome::Compiled {
            miss: Miss::Damaged("its header names another key".into()),
            stored: true
        }
    );
}

#[test]
fn an_unwritable_folder_still_gives_the_binary() {
    let dir = TempDir::new("unwritable");
    // A folder below a plain file cannot be made, even by root.
    let file = dir.0.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let cache = KernelCache::Dir(file.join("kernels"));
    let c = Counting::new();
    let k = key("source");
    for n in 1..=2 {
        let got = c.get(&k, &cache, b"image");
        assert_eq!(got.image, b"image");
        assert_eq!(
            got.outcome,
            Outcome::Compiled {
                miss: Miss::Absent,
                stored: false
            }
        );
        assert_eq!(c.calls.get(), n, "nothing stored: compiled every time");
    }
}

#[test]
fn moe_kernel_cache_names_the_folder_or_turns_it_off() {
    let dir = |s: &str| KernelCache::Dir(PathBuf::from(s));
    let from = KernelCache::from_vars;
    assert_eq!(from(Some("/tmp/k"), Some("/x"), Some("/h")), dir("/tmp/k"));
    assert!(matches!(
        from(Some("off"), Some("/x"), Some("/h")),
        KernelCache::Off { .. }
    ));
    assert!(matches!(
        from(Some(" OFF "), None, None),
        KernelCache::Off { .. }
    ));
    assert_eq!(
        from(None, Some("/x"), Some("/h")),
        dir("/x/moe-from-scratch/kernels")
    );
    assert_eq!(
        from(Some(""), Some(""), Some("/h")),
        dir("/h/.cache/moe-from-scratch/kernels")
    );
    // A relative XDG_CACHE_HOME is ignored, as the XDG specification says.
    assert_eq!(
        from(None, Some("rel"), Some("/h")),
        dir("/h/.cache/moe-from-scratch/kernels")
    );
    assert!(matches!(from(None, None, None), KernelCache::Off { .. }));

    // Off: compiled every time, nothing written anywhere.
    let tmp = TempDir::new("off");
    let off = from(Some("off"), Some(tmp.0.to_str().unwrap()), None);
    let c = Counting::new();
    let k = key("source");
    for n in 1..=2 {
        let got = c.get(&k, &off, b"image");
        assert_eq!(got.image, b"image");
        assert!(got.path.is_none());
        assert!(matches!(
            got.outcome,
            Outcome::Compiled {
                miss: Miss::Off(_),
                stored: false
            }
        ));
        assert_eq!(c.calls.get(), n);
    }
    assert_eq!(std::fs::read_dir(&tmp.0).unwrap().count(), 0);
}

#[test]
fn the_compile_message_says_what_where_and_why() {
    let k = Key::new(
        "ch04_fused_moe",
        "s",
        "sm_90a",
        &options("sm_90a"),
        (13, 0),
        "h",
    );
    let d = Path::new("/c/kernels");
    assert_eq!(
        cache::compile_message(&k, &Miss::Absent, Some(d)),
        "compiling ch04_fused_moe for sm_90a (first run; cached in /c/kernels)"
    );
    assert_eq!(
        cache::compile_message(&k, &Miss::Off("MOE_KERNEL_CACHE=off".into()), None),
        "compiling ch04_fused_moe for sm_90a (kernel cache off: MOE_KERNEL_CACHE=off)"
    );
    assert!(
        cache::compile_message(&k, &Miss::Damaged("x".into()), Some(d)).contains("unusable (x)")
    );
}

/// Compiles two families for sm_90a (an H200's architecture) with NVRTC: a real CUBIN (an ELF
/// file), stored, and read back on the second get with no compile.
#[test]
#[cfg_attr(
    not(moe_nvrtc_present),
    ignore = "needs NVRTC (libnvrtc.so.13 on LD_LIBRARY_PATH)"
)]
fn nvrtc_compiles_cubins_for_sm_90a_once() {
    assert!(
        moe_kernels::cuda::nvrtc_version().is_some(),
        "the build saw libnvrtc.so.13 but it cannot be loaded now"
    );
    if moe_kernels::cuda::cuda_include_dir().is_none() {
        panic!("needs the CUDA headers: set CUDA_INCLUDE_DIR");
    }
    let dir = TempDir::new("nvrtc");
    let cache = KernelCache::Dir(dir.0.clone());
    for src in [&FLOOR, &SELFTEST] {
        let first = cache::cubin(src, "sm_90", &cache).unwrap();
        assert_eq!(&first.image[..4], b"\x7fELF", "{}: a CUBIN", src.family);
        assert!(matches!(
            first.outcome,
            Outcome::Compiled { stored: true, .. }
        ));
        let name = first.path.as_ref().unwrap().file_name().unwrap();
        assert!(
            name.to_string_lossy()
                .starts_with(&format!("{}-sm_90a-", src.family)),
            "{name:?}"
        );
        let second = cache::cubin(src, "sm_90", &cache).unwrap();
        assert_eq!(second.outcome, Outcome::Hit, "{}", src.family);
        assert!(
            second.image == first.image,
            "{}: another binary read back",
            src.family
        );
        // The cache stored what NVRTC makes for these options, byte for byte.
        let (fresh, options) = moe_kernels::cuda::compile_cubin(src, "sm_90").unwrap();
        assert!(
            fresh == first.image,
            "{}: NVRTC made another binary",
            src.family
        );
        assert!(options.iter().any(|o| o == "--fmad=false"), "{options:?}");
        assert!(options.iter().any(|o| o == "--gpu-architecture=sm_90a"));
    }
    let header = std::fs::read(
        dir.0.join(
            std::fs::read_dir(&dir.0)
                .unwrap()
                .next()
                .unwrap()
                .unwrap()
                .file_name(),
        ),
    )
    .unwrap();
    let (major, minor) = moe_kernels::cuda::nvrtc_version().unwrap();
    let want = format!("nvrtc {major}.{minor}\n");
    assert!(
        header.windows(want.len()).any(|w| w == want.as_bytes()),
        "the header names NVRTC's version"
    );
}

/// On a GPU: loads the self-test family from an empty cache (NVRTC compiles it), from the warm
/// cache (nothing compiled) and from a damaged one (compiled again), each in a fresh process
/// (this test run again with `MOE_KERNEL_CACHE_CHILD` set, its own cache folder, and the
/// driver's JIT cache off), and runs one of its kernels each time.
#[test]
#[ignore = "needs a GPU"]
fn gpu_loads_a_family_from_a_cold_and_a_warm_cache_and_runs_it() {
    if std::env::var_os("MOE_KERNEL_CACHE_CHILD").is_some() {
        return child();
    }
    let dir = TempDir::new("gpu");
    let run = |what: &str| -> (u64, String) {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "gpu_loads_a_family_from_a_cold_and_a_warm_cache_and_runs_it",
                "--include-ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("MOE_KERNEL_CACHE_CHILD", "1")
            .env("MOE_KERNEL_CACHE", &dir.0)
            .env("MOE_BACKEND", "cuda")
            .env("CUDA_CACHE_DISABLE", "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{what}:\n{stdout}\n{stderr}");
        let line = stdout
            .lines()
            // libtest prints "test NAME ... " on the same line, before the child's report.
            .find_map(|l| l.split_once("child: ").map(|(_, report)| report))
            .unwrap_or_else(|| panic!("{what}: no report\n{stdout}\n{stderr}"));
        eprintln!("{what}: {line}");
        let compiles = line.split(' ').nth(1).unwrap().parse().unwrap();
        (compiles, line.to_string())
    };
    let (cold, _) = run("cold cache");
    assert_eq!(cold, 1, "the cold run compiles the family once");
    let file = only_file(&dir.0);
    let (warm, _) = run("warm cache");
    assert_eq!(warm, 0, "the warm run compiles nothing");
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&file, &bytes).unwrap();
    let (damaged, _) = run("damaged cache");
    assert_eq!(damaged, 1, "a damaged file is compiled again");
    let (again, _) = run("repaired cache");
    assert_eq!(again, 0);
}

/// The child's part: load, run `selftest_bf16`, print `child: compiles N load S s`.
fn child() {
    use moe_kernels::{args, Device, LaunchConfig};
    let dev = Device::cuda().unwrap();
    let start = std::time::Instant::now();
    let m = dev.load(&SELFTEST).unwrap();
    let took = start.elapsed().as_secs_f64();
    let x = dev.upload(&[1.0f32, -2.0, 3.5]).unwrap();
    let bits = dev.alloc::<u16>(3).unwrap();
    let back = dev.alloc::<f32>(3).unwrap();
    m.launch(
        "selftest_bf16",
        LaunchConfig::for_elements(3, 128),
        &args![&x, &bits, &back, 3i32],
    )
    .unwrap();
    assert_eq!(back.to_vec().unwrap(), vec![1.0, -2.0, 3.5]);
    println!(
        "child: compiles {} load {took:.3} s",
        moe_kernels::cuda::nvrtc_compiles()
    );
}

/// `MOE_NVRTC_DEFINES`: each macro becomes one `-D` option (part of the cache key like every
/// option); unset gives none; anything but macro names and plain values is refused by name.
#[test]
fn experiment_defines_become_options_or_a_typed_error() {
    use moe_kernels::cuda::experiment_defines;
    assert!(experiment_defines(None).unwrap().is_empty());
    assert!(experiment_defines(Some("  ")).unwrap().is_empty());
    assert_eq!(
        experiment_defines(Some("MOE_X_NO_WS_FENCE  DEPTH=3")).unwrap(),
        ["-DMOE_X_NO_WS_FENCE=1", "-DDEPTH=3"]
    );
    for (bad, names) in [
        ("-O3", "\"-O3\" is not a macro name"),
        ("3D", "\"3D\" is not a macro name"),
        ("A=\"x y\"", "the value of A"),
        ("A=", "the value of A"),
    ] {
        let e = experiment_defines(Some(bad)).unwrap_err().to_string();
        assert!(e.starts_with("MOE_NVRTC_DEFINES="), "{e}");
        assert!(e.contains(names), "{bad}: {e}");
    }
}

/// A define reaches only the files that name its macro as a whole word, so that a variant's
/// cache keys for every other file are the default's (and the pack's kernel cache serves them).
#[test]
fn a_define_reaches_only_the_files_that_name_it() {
    use moe_kernels::cuda::defines_for;
    let defs = || vec!["-DSTAGE_SCREEN=0".to_string(), "-DRS_X=32".to_string()];
    let src = "#ifndef STAGE_SCREEN\n#define STAGE_SCREEN 1\n#endif\nint RS_XY; // RS_X_\n";
    assert_eq!(defines_for(src, defs()), ["-DSTAGE_SCREEN=0"]);
    assert_eq!(defines_for("int x = (RS_X);", defs()), ["-DRS_X=32"]);
    assert!(defines_for("// neither", defs()).is_empty());
    assert_eq!(
        defines_for("STAGE_SCREEN RS_X", defs()),
        ["-DSTAGE_SCREEN=0", "-DRS_X=32"]
    );
}
