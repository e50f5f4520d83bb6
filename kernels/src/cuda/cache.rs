//! The on-disk cache of compiled kernel families: one CUBIN per family, architecture and source,
//! so that only the first run of a family on a machine pays for NVRTC (the whole of chapter 4's
//! family takes about a minute on an H200's host), and later runs load the binary in
//! milliseconds. The driver's own JIT cache is not involved: the driver is handed machine code.
//!
//! - Where: `MOE_KERNEL_CACHE=DIR`, else `$XDG_CACHE_HOME/moe-from-scratch/kernels`, else
//!   `~/.cache/moe-from-scratch/kernels`; `MOE_KERNEL_CACHE=off` turns it off. The folder can be
//!   deleted at any time.
//! - Key: everything that decides the binary — the family's text with its includes pasted in,
//!   the NVRTC options (the CUDA include folder among them), a fingerprint of that folder's
//!   headers (name, size, modification time), the target architecture and NVRTC's version. The
//!   file's name carries a 128-bit hash of the key, and its header repeats the key, which is
//!   compared on every read.
//! - A file whose header differs from the key, whose binary is shorter than its header says, or
//!   whose binary does not match the checksum in its header is compiled again and replaced;
//!   nothing unchecked is ever handed to the driver. Files are written to a temporary name and
//!   renamed, so a reader never sees half a file, and two processes compiling the same family
//!   at once both end with a whole one.
//! - A folder that cannot be written is a one-line warning; the kernels are then compiled in
//!   every run, as without a cache.

use super::nvrtc::{compile_cubin, cuda_include_dir, nvrtc_version, option_list, target_arch};
use crate::error::Result;
use crate::source::KernelSource;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The first line of every cache file; a new format gets a new number.
const MAGIC: &str = "moe-from-scratch kernel cache 1";

/// Where compiled families are kept, if anywhere.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KernelCache {
    /// Nothing is read or written (`MOE_KERNEL_CACHE=off`, or no folder could be named).
    Off {
        /// Why, for the compile message: `MOE_KERNEL_CACHE=off`.
        why: String,
    },
    /// Binaries live in this folder (created when first written).
    Dir(PathBuf),
}

impl KernelCache {
    /// The cache this process's environment asks for.
    pub fn from_env() -> KernelCache {
        let var = |k: &str| std::env::var(k).ok();
        KernelCache::from_vars(
            var("MOE_KERNEL_CACHE").as_deref(),
            var("XDG_CACHE_HOME").as_deref(),
            var("HOME").as_deref(),
        )
    }

    /// The cache for these values of `MOE_KERNEL_CACHE`, `XDG_CACHE_HOME` and `HOME`: `off` (any
    /// case) turns it off; any other non-empty value is the folder; unset or empty, the XDG
    /// cache folder (when set to an absolute path, as the XDG specification wants) or
    /// `~/.cache`, with `moe-from-scratch/kernels` below it.
    pub fn from_vars(moe: Option<&str>, xdg: Option<&str>, home: Option<&str>) -> KernelCache {
        let set = |v: Option<&str>| {
            v.map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
        };
        if let Some(v) = set(moe) {
            return if v.eq_ignore_ascii_case("off") {
                KernelCache::Off {
                    why: format!("MOE_KERNEL_CACHE={v}"),
                }
            } else {
                KernelCache::Dir(PathBuf::from(v))
            };
        }
        let base = set(xdg)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| set(home).map(|h| PathBuf::from(h).join(".cache")));
        match base {
            Some(b) => KernelCache::Dir(b.join("moe-from-scratch").join("kernels")),
            None => KernelCache::Off {
                why: "neither MOE_KERNEL_CACHE, XDG_CACHE_HOME nor HOME is set".into(),
            },
        }
    }

    /// The folder, when the cache is on.
    pub fn dir(&self) -> Option<&Path> {
        match self {
            KernelCache::Dir(d) => Some(d),
            KernelCache::Off { .. } => None,
        }
    }
}

/// What decides a compiled binary, as the text every cache file starts with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Key {
    family: String,
    arch: String,
    text: String,
    hash: [u64; 2],
}

impl Key {
    /// The key of `source` (the family's whole text, includes pasted in) compiled by NVRTC
    /// `nvrtc` (major, minor) with `options` for `arch` (the architecture NVRTC is given, e.g.
    /// `sm_90a`); `headers` fingerprints the CUDA include folder ([`header_fingerprint`]).
    pub fn new(
        family: &str,
        source: &str,
        arch: &str,
        options: &[String],
        nvrtc: (i32, i32),
        headers: &str,
    ) -> Key {
        let mut text = format!(
            "{MAGIC}\nfamily {family}\narch {arch}\nnvrtc {}.{}\n",
            nvrtc.0, nvrtc.1
        );
        for o in options {
            // One option per line: a newline inside one would make two.
            text.push_str(&format!("option {}\n", o.replace('\n', "\\n")));
        }
        text.push_str(&format!("headers {headers}\n"));
        text.push_str(&format!(
            "source {} bytes {}\n",
            source.len(),
            hex(hash128(source.as_bytes()))
        ));
        let hash = hash128(text.as_bytes());
        Key {
            family: family.into(),
            arch: arch.into(),
            text,
            hash,
        }
    }

    /// The file this key's binary is kept in: `<family>-<arch>-<32 hex digits>.cubin`.
    pub fn file_name(&self) -> String {
        format!("{}-{}-{}.cubin", self.family, self.arch, hex(self.hash))
    }

    /// The key as the cache file's header writes it (every line of it is checked on a read).
    pub fn text(&self) -> &str {
        &self.text
    }
}

/// Why a family was compiled instead of read from the cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Miss {
    /// No file for this key yet: the first run of this source, options and architecture.
    Absent,
    /// A file was there but could not be used (why); it is replaced.
    Damaged(String),
    /// The cache is off (why).
    Off(String),
}

/// How a binary was obtained.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Read from the cache: nothing was compiled.
    Hit,
    /// Compiled; `stored` says whether the binary is now in the cache.
    Compiled { miss: Miss, stored: bool },
}

/// A family's binary and where it came from.
pub struct Binary {
    pub image: Vec<u8>,
    pub outcome: Outcome,
    /// The cache file (whether or not it could be written); `None` with the cache off.
    pub path: Option<PathBuf>,
}

/// Families compile longer than this before the compile message is printed.
const QUIET: Duration = Duration::from_secs(1);

/// The CUBIN of `src` for a GPU of architecture `arch` (`sm_90`; NVRTC gets [`target_arch`] of
/// it), from `cache` when it holds one for exactly this key, else compiled by NVRTC and stored.
/// A compile that takes more than a second says on stderr what it compiles and then how long it
/// took.
pub fn cubin(src: &KernelSource, arch: &'static str, cache: &KernelCache) -> Result<Binary> {
    let target = target_arch(arch);
    let options = option_list(src.cuda_source, target)?;
    let headers = cuda_include_dir()
        .map(|d| header_fingerprint(&d))
        .unwrap_or_default();
    let key = Key::new(
        src.family,
        src.cuda_source,
        target,
        &options,
        nvrtc_version().unwrap_or((0, 0)),
        &headers,
    );
    get(&key, cache, QUIET, || {
        compile_cubin(src, arch).map(|(b, _)| b)
    })
}

/// [`cubin`] with the compiler given: `compile` runs only on a miss. Announces a compile that
/// outlasts `quiet` on stderr. (The tests drive this with a compiler that counts its calls.)
pub fn get(
    key: &Key,
    cache: &KernelCache,
    quiet: Duration,
    compile: impl FnOnce() -> Result<Vec<u8>>,
) -> Result<Binary> {
    let path = cache.dir().map(|d| d.join(key.file_name()));
    let miss = match (&path, cache) {
        (_, KernelCache::Off { why }) => Miss::Off(why.clone()),
        (Some(p), _) => match std::fs::read(p) {
            Ok(bytes) => match check_entry(&bytes, key) {
                Ok(image) => {
                    return Ok(Binary {
                        image,
                        outcome: Outcome::Hit,
                        path,
                    })
                }
                Err(why) => Miss::Damaged(why),
            },
            // No such file, or no such folder (or a plain file where the folder should be).
            Err(_) if !p.exists() => Miss::Absent,
            Err(e) => Miss::Damaged(format!("it cannot be read: {e}")),
        },
        (None, _) => Miss::Absent,
    };
    let message = compile_message(key, &miss, cache.dir());
    let (image, took) = announced(&message, quiet, compile);
    let image = image?;
    if let Some(d) = took {
        eprintln!(
            "compiled {} for {} in {:.1} s",
            key.family,
            key.arch,
            d.as_secs_f64()
        );
    }
    let stored = match &path {
        Some(p) => match store(p, key, &image) {
            Ok(()) => true,
            Err(e) => {
                warn_unwritable(p, &e);
                false
            }
        },
        None => false,
    };
    Ok(Binary {
        image,
        outcome: Outcome::Compiled { miss, stored },
        path,
    })
}

/// The line printed when a compile outlasts a second: `compiling ch04_fused_moe for sm_90a
/// (first run; cached in /home/me/.cache/moe-from-scratch/kernels)`.
pub fn compile_message(key: &Key, miss: &Miss, dir: Option<&Path>) -> String {
    let why = match (miss, dir) {
        (Miss::Off(why), _) => format!("kernel cache off: {why}"),
        (Miss::Absent, Some(d)) => format!("first run; cached in {}", d.display()),
        (Miss::Damaged(why), Some(d)) => format!(
            "the cached binary was unusable ({why}); cached again in {}",
            d.display()
        ),
        (_, None) => "not cached".into(),
    };
    format!("compiling {} for {} ({why})", key.family, key.arch)
}

/// Runs `f`; if it is still running after `quiet`, prints `message` to stderr and returns how
/// long `f` took in all, for the line that says it has finished.
fn announced<T>(message: &str, quiet: Duration, f: impl FnOnce() -> T) -> (T, Option<Duration>) {
    let start = Instant::now();
    let (done, wait) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        let watcher = s.spawn(move || match wait.recv_timeout(quiet) {
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                let _ = writeln!(std::io::stderr(), "{message}");
                true
            }
            _ => false,
        });
        let out = f();
        let _ = done.send(());
        let said = watcher.join().unwrap_or(false);
        (out, said.then(|| start.elapsed()))
    })
}

/// The binary of a cache file read back, if the file is whole and was written for `key`;
/// otherwise why not.
fn check_entry(bytes: &[u8], key: &Key) -> std::result::Result<Vec<u8>, String> {
    let Some(end) = bytes.windows(2).position(|w| w == b"\n\n") else {
        return Err("no header".into());
    };
    let header = std::str::from_utf8(&bytes[..end + 1]).map_err(|_| "a garbled header")?;
    let body = &bytes[end + 2..];
    let Some(rest) = header.strip_prefix(key.text()) else {
        return Err(if header.starts_with(MAGIC) {
            "its header names another key".into()
        } else {
            "not a cache file of this version".into()
        });
    };
    let fields: Vec<&str> = rest.trim_end().split(' ').collect();
    let [tag, len, sum] = fields[..] else {
        return Err("a garbled header".into());
    };
    let len: usize = len.parse().map_err(|_| "a garbled header")?;
    if tag != "image" {
        return Err("a garbled header".into());
    }
    if body.len() != len {
        return Err(format!(
            "{} bytes of binary where its header says {len}",
            body.len()
        ));
    }
    if hex(hash128(body)) != sum {
        return Err("its binary does not match its checksum".into());
    }
    Ok(body.to_vec())
}

/// Writes `key`'s entry to `path` through a temporary file in the same folder and a rename.
fn store(path: &Path, key: &Key, image: &[u8]) -> std::io::Result<()> {
    static SERIAL: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.{}.{}.tmp",
        key.file_name(),
        std::process::id(),
        SERIAL.fetch_add(1, Ordering::Relaxed)
    ));
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(key.text().as_bytes())?;
        writeln!(f, "image {} {}\n", image.len(), hex(hash128(image)))?;
        f.write_all(image)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// One line per process for a cache that cannot be written.
fn warn_unwritable(path: &Path, e: &std::io::Error) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        let dir = path.parent().unwrap_or(path);
        eprintln!(
            "warning: the kernel cache {} cannot be written ({e}); kernels are compiled again in \
             every run (set MOE_KERNEL_CACHE to another folder, or to off)",
            dir.display()
        );
    }
}

/// The CUDA include folder's headers as the key sees them: the name, size and modification
/// time of every file directly in it, hashed (a different set of headers, even under the same
/// folder name, gives a different key).
pub fn header_fingerprint(dir: &Path) -> String {
    let mut entries: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            let t = m
                .modified()
                .ok()?
                .duration_since(std::time::UNIX_EPOCH)
                .ok()?;
            m.is_file().then(|| {
                format!(
                    "{} {} {}",
                    e.file_name().to_string_lossy(),
                    m.len(),
                    t.as_nanos()
                )
            })
        })
        .collect();
    entries.sort();
    hex(hash128(entries.join("\n").as_bytes()))
}

/// Two independent 64-bit hashes of `bytes` (FNV-1a, and a multiply-rotate hash over 8-byte
/// words with xxHash's constants and finaliser): not cryptographic, but a damaged or foreign
/// file matching both by chance is out of reach, and the header is compared in full anyway.
pub fn hash128(bytes: &[u8]) -> [u64; 2] {
    [fnv1a(bytes), words(bytes)]
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn words(bytes: &[u8]) -> u64 {
    const P1: u64 = 0x9E37_79B1_85EB_CA87;
    const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
    const P3: u64 = 0x1656_67B1_9E37_79F9;
    const P4: u64 = 0x85EB_CA77_C2B2_AE63;
    let mut h = P4 ^ (bytes.len() as u64).wrapping_mul(P1);
    for chunk in bytes.chunks(8) {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        let k = u64::from_le_bytes(w)
            .wrapping_mul(P2)
            .rotate_left(31)
            .wrapping_mul(P1);
        h = (h ^ k).rotate_left(27).wrapping_mul(P1).wrapping_add(P4);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(P2);
    h ^= h >> 29;
    h = h.wrapping_mul(P3);
    h ^ (h >> 32)
}

fn hex(h: [u64; 2]) -> String {
    format!("{:016x}{:016x}", h[0], h[1])
}
