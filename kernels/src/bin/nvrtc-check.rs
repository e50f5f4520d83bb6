//! `nvrtc-check`: compiles every `kernels/*.cu` with NVRTC for a GPU architecture, exactly as the
//! CUDA backend does at run time (same options, includes pasted in), without needing a GPU.
//! CI runs it for sm_90, the H200's architecture.
//!
//!     cargo run -p moe-kernels --bin nvrtc-check -- --arch sm_90 [--dir kernels] [--ptx-dir DIR] [--cubin]
//!
//! `--cubin` compiles each file on to machine code (NVRTC's CUBIN, what the CUDA backend loads),
//! which also runs the assembler's checks, and says how long each file took.
//! `--cache DIR` compiles each file to CUBIN through the kernel cache in `DIR` (the CUDA backend's
//! `MOE_KERNEL_CACHE`), filling it: tools/gpu/build-pack ships such a folder so that a fresh GPU
//! machine loads the binaries instead of spending minutes in NVRTC.
//! `--include-dir` and `--nvrtc-version` print the CUDA include folder and NVRTC's version
//! (major.minor) that the backend would use, and exit.
//! `--ptx-dir DIR` also writes each file's PTX to `DIR/<file>.ptx`, for `ptxas -v` (registers,
//! spills, shared memory per kernel; tools/gpu/run's `tests` stage runs it on the GPU machine).

use moe_kernels::KernelSource;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut arch = "sm_90".to_string();
    let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut ptx_dir: Option<PathBuf> = None;
    let mut cubin = false;
    let mut cache: Option<PathBuf> = None;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--arch" => arch = it.next().unwrap_or_default(),
            "--dir" => dir = PathBuf::from(it.next().unwrap_or_default()),
            "--ptx-dir" => match it.next() {
                Some(d) => ptx_dir = Some(PathBuf::from(d)),
                None => {
                    eprintln!("nvrtc-check: --ptx-dir needs a folder");
                    return ExitCode::from(2);
                }
            },
            "--cubin" => cubin = true,
            "--cache" => match it.next() {
                Some(d) => cache = Some(PathBuf::from(d)),
                None => {
                    eprintln!("nvrtc-check: --cache needs a folder");
                    return ExitCode::from(2);
                }
            },
            "--include-dir" => {
                // The CUDA include folder NVRTC is given (as the CUDA backend finds it).
                return match moe_kernels::cuda::cuda_include_dir() {
                    Some(d) => {
                        println!("{}", d.display());
                        ExitCode::SUCCESS
                    }
                    None => {
                        eprintln!("nvrtc-check: no CUDA include folder found (CUDA_INCLUDE_DIR)");
                        ExitCode::FAILURE
                    }
                };
            }
            "--nvrtc-version" => {
                return match moe_kernels::cuda::nvrtc::nvrtc_version() {
                    Some((major, minor)) => {
                        println!("{major}.{minor}");
                        ExitCode::SUCCESS
                    }
                    None => {
                        eprintln!("nvrtc-check: NVRTC cannot be loaded");
                        ExitCode::FAILURE
                    }
                };
            }
            "-h" | "--help" => {
                println!(
                    "usage: nvrtc-check [--arch sm_90] [--dir kernels] [--ptx-dir DIR] [--cubin] [--cache DIR]\n       nvrtc-check --include-dir | --nvrtc-version"
                );
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("nvrtc-check: unknown argument {other:?} (try --help)");
                return ExitCode::from(2);
            }
        }
    }
    let arch: &'static str = Box::leak(arch.into_boxed_str());
    // kernels/*.cu, and the exercises' answers in kernels/answers/*.cu.
    let mut files: Vec<PathBuf> = Vec::new();
    for d in [dir.clone(), dir.join("answers")] {
        match std::fs::read_dir(&d) {
            Ok(rd) => files.extend(
                rd.filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|x| x == "cu")),
            ),
            Err(e) if d == dir => {
                eprintln!("nvrtc-check: cannot read {}: {e}", d.display());
                return ExitCode::from(2);
            }
            Err(_) => {}
        }
    }
    files.sort();
    // Files compile on every core at once (NVRTC programs are independent), the biggest first so
    // the two largest families do not end up one after the other; lines print in name order.
    let mut order: Vec<usize> = (0..files.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(std::fs::metadata(&files[i]).map_or(0, |m| m.len())));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<Checked>>> =
        files.iter().map(|_| std::sync::Mutex::new(None)).collect();
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(files.len().max(1));
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| loop {
                let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&i) = order.get(k) else { break };
                let r = check_file(
                    &files[i],
                    &dir,
                    arch,
                    cubin,
                    ptx_dir.as_deref(),
                    cache.as_deref(),
                );
                *results[i].lock().unwrap() = Some(r);
            });
        }
    });
    let mut failed = 0;
    for r in results {
        match r.into_inner().unwrap().expect("every file was checked") {
            Checked::Ok(line) => println!("{line}"),
            Checked::Failed(msg) => {
                eprintln!("{msg}");
                failed += 1;
            }
            Checked::Fatal(msg) => {
                eprintln!("{msg}");
                return ExitCode::from(2);
            }
        }
    }
    println!(
        "{} of {} kernel files compiled for {arch}",
        files.len() - failed,
        files.len()
    );
    if failed == 0 && !files.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// One file's outcome: its line, a failure (counted), or an error that stops the run (exit 2).
enum Checked {
    Ok(String),
    Failed(String),
    Fatal(String),
}

/// Compiles one kernel file as the CUDA backend would, and checks that every kernel it declares
/// is in the PTX (or, with `cubin`, that the CUBIN builds; with `cache`, the CUBIN is taken from
/// or stored in that kernel cache).
fn check_file(
    path: &Path,
    dir: &Path,
    arch: &'static str,
    cubin: bool,
    ptx_dir: Option<&Path>,
    cache: Option<&Path>,
) -> Checked {
    let family: &'static str = Box::leak(
        path.file_stem()
            .unwrap()
            .to_string_lossy()
            .into_owned()
            .into_boxed_str(),
    );
    let (text, _) = match moe_kernels_build::inline_includes(path, &[dir.to_path_buf()]) {
        Ok(t) => t,
        Err(e) => return Checked::Failed(format!("FAIL {family}: {e}")),
    };
    let names = moe_kernels_build::kernel_names(&text);
    let source = KernelSource {
        family,
        cuda_source: Box::leak(text.into_boxed_str()),
        emu: &[],
    };
    let shown = path.strip_prefix(dir).unwrap_or(path).display();
    let start = std::time::Instant::now();
    if let Some(c) = cache {
        let c = moe_kernels::cuda::KernelCache::Dir(c.to_path_buf());
        return match moe_kernels::cuda::cache::cubin(&source, arch, &c) {
            Ok(_) => Checked::Ok(format!(
                "ok   {shown}  {}  {} kernels, CUBIN in the cache in {:.1} s",
                moe_kernels::cuda::target_arch(arch),
                names.len(),
                start.elapsed().as_secs_f64()
            )),
            Err(e) => Checked::Failed(format!("FAIL {e}")),
        };
    }
    if cubin {
        return match moe_kernels::cuda::compile_cubin(&source, arch) {
            Ok((image, _)) => Checked::Ok(format!(
                "ok   {shown}  {}  {} kernels, {} bytes of CUBIN in {:.1} s",
                moe_kernels::cuda::target_arch(arch),
                names.len(),
                image.len(),
                start.elapsed().as_secs_f64()
            )),
            Err(e) => Checked::Failed(format!("FAIL {e}")),
        };
    }
    match moe_kernels::cuda::compile_ptx(&source, arch) {
        Ok((ptx, _)) => {
            if let Some(d) = ptx_dir {
                let out = d.join(format!("{family}.ptx"));
                if let Err(e) = std::fs::create_dir_all(d).and_then(|_| std::fs::write(&out, &ptx))
                {
                    return Checked::Fatal(format!(
                        "nvrtc-check: cannot write {}: {e}",
                        out.display()
                    ));
                }
            }
            let missing: Vec<&String> = names
                .iter()
                .filter(|n| !ptx.contains(&format!(".entry {n}(")))
                .collect();
            if missing.is_empty() {
                Checked::Ok(format!(
                    "ok   {shown}  {arch}  {} kernels, {} bytes of PTX in {:.1} s",
                    names.len(),
                    ptx.len(),
                    start.elapsed().as_secs_f64()
                ))
            } else {
                Checked::Failed(format!(
                    "FAIL {family}: kernels missing from the PTX: {missing:?}"
                ))
            }
        }
        Err(e) => Checked::Failed(format!("FAIL {e}")),
    }
}
