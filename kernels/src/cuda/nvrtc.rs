//! NVRTC: compiling a kernel family's CUDA C for a GPU architecture at run time, with the
//! options every kernel of the book is built with. Needs only NVRTC and the CUDA headers (no
//! GPU), which is how CI checks every kernel for sm_90.

use crate::error::{KernelError, Result};
use crate::source::KernelSource;
use std::ffi::{CStr, CString};
use std::path::PathBuf;

/// Where `<cuda_bf16.h>` and friends are: `CUDA_INCLUDE_DIR`, `/usr/local/cuda/include`, or the
/// pip wheel's `nvidia/cu13/include` (found through `python3`).
pub fn cuda_include_dir() -> Option<PathBuf> {
    let has_headers = |p: &PathBuf| p.join("cuda_bf16.h").is_file();
    if let Some(dir) = std::env::var_os("CUDA_INCLUDE_DIR").map(PathBuf::from) {
        if has_headers(&dir) {
            return Some(dir);
        }
    }
    let usual = PathBuf::from("/usr/local/cuda/include");
    if has_headers(&usual) {
        return Some(usual);
    }
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import site,os;print('\\n'.join(site.getsitepackages()+[site.getusersitepackages()]))",
        ])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| PathBuf::from(l.trim()).join("nvidia/cu13/include"))
        .find(has_headers)
}

/// The NVRTC options every kernel is compiled with. `--fmad=false`: no contraction of a*b+c
/// into one rounding, so the GPU rounds exactly as the emulator (built with -ffp-contract=off).
pub fn nvrtc_options(arch: &'static str) -> Result<cudarc::nvrtc::CompileOptions> {
    let include = cuda_include_dir().ok_or_else(|| KernelError::NoGpu {
        why: "the CUDA headers (cuda_bf16.h) were not found: set CUDA_INCLUDE_DIR, or install them in \
              /usr/local/cuda/include or with pip (nvidia-cuda-runtime==13.0.96)"
            .into(),
    })?;
    Ok(cudarc::nvrtc::CompileOptions {
        arch: Some(arch),
        fmad: Some(false),
        include_paths: vec![include.display().to_string()],
        options: vec!["--std=c++17".into()],
        ..Default::default()
    })
}

/// The architecture NVRTC compiles for on a GPU of architecture `arch`: the same, except that
/// compute capability 9.0 (the H100 and H200) gets `sm_90a`, the feature set that includes
/// Hopper's own instructions (`wgmma`, chapter 4's version 4). Code compiled for `sm_90a` runs
/// only on 9.0 devices, which is exactly where it is loaded; the portable kernels compile to the
/// same machine code either way.
pub fn target_arch(arch: &'static str) -> &'static str {
    match arch {
        "sm_90" => "sm_90a",
        other => other,
    }
}

/// What NVRTC is asked to hand back.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Output {
    Ptx,
    Cubin,
}

/// The version of the NVRTC library this process loaded (`(13, 0)`), or `None` without one.
pub fn nvrtc_version() -> Option<(i32, i32)> {
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return None;
    }
    let (mut major, mut minor) = (0, 0);
    unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .ok()?;
    Some((major, minor))
}

/// The exact option list NVRTC gets for `source` (a family's text, includes pasted in) and `arch`
/// (already [`target_arch`]), in the order `cudarc`'s `CompileOptions` writes it, so the PTX is
/// the one earlier versions made.
pub(crate) fn option_list(source: &str, arch: &'static str) -> Result<Vec<String>> {
    let opts = nvrtc_options(arch)?;
    let mut list = vec!["--fmad=false".to_string()];
    list.extend(
        opts.include_paths
            .iter()
            .map(|p| format!("--include-path={p}")),
    );
    list.push(format!("--gpu-architecture={arch}"));
    list.extend(opts.options.iter().cloned());
    list.extend(defines_for(
        source,
        experiment_defines(std::env::var("MOE_NVRTC_DEFINES").ok().as_deref())?,
    ));
    Ok(list)
}

/// The `-D` options of `defines` whose macro `source` names (as a whole word): a switch meant for
/// one kernel file leaves every other file's options, and so its cache key, as they were, so a
/// variant recompiles only the files it can change. (The macros are ours; CUDA's own headers,
/// not pasted into `source`, never read them.)
pub fn defines_for(source: &str, defines: Vec<String>) -> Vec<String> {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let names = |name: &str| {
        source.match_indices(name).any(|(at, _)| {
            let before = source[..at].chars().next_back();
            let after = source[at + name.len()..].chars().next();
            !before.is_some_and(is_word) && !after.is_some_and(is_word)
        })
    };
    defines
        .into_iter()
        .filter(|d| {
            let name = d.trim_start_matches("-D");
            names(name.split_once('=').map_or(name, |(n, _)| n))
        })
        .collect()
}

/// `-D` options from `MOE_NVRTC_DEFINES` (space-separated `NAME` or `NAME=VALUE`): the switches a
/// speed experiment flips in the kernel source (`#ifdef MOE_X_...`), so that several variants
/// run in one GPU call, one process each. A file gets the ones it names ([`defines_for`]); they
/// are part of its cache key, like every option.
/// The CUDA backend only: the emulator's kernels are compiled once, when the crate is built.
/// Unset or empty: none, and the option list is the one every earlier version used.
pub fn experiment_defines(value: Option<&str>) -> Result<Vec<String>> {
    let Some(value) = value else {
        return Ok(Vec::new());
    };
    let defines =
        moe_kernels_build::parse_defines(value).map_err(|why| KernelError::BadDefines {
            value: value.to_string(),
            why,
        })?;
    Ok(defines
        .into_iter()
        .map(|(name, val)| format!("-D{name}={val}"))
        .collect())
}

/// How many times this process has run NVRTC (PTX and CUBIN alike): what the cache's tests
/// count to tell a hit from a compile.
pub fn nvrtc_compiles() -> u64 {
    COMPILES.load(std::sync::atomic::Ordering::Relaxed)
}

static COMPILES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Runs NVRTC on `src` with `options` and returns PTX or CUBIN. The program's text and name
/// live until it is destroyed.
fn run_nvrtc(src: &KernelSource, options: &[String], out: Output) -> Result<Vec<u8>> {
    use cudarc::nvrtc::{result as rtc, sys};
    if !unsafe { sys::is_culib_present() } {
        return Err(KernelError::NoGpu {
            why: "NVRTC 13 (libnvrtc.so.13) is not on the library path".into(),
        });
    }
    let fail = |log: String| KernelError::Compile {
        family: src.family.into(),
        options: options.to_vec(),
        log,
    };
    let text = CString::new(src.cuda_source).map_err(|_| fail("the source holds a NUL".into()))?;
    let name = CString::new(format!("{}.cu", src.family)).expect("a family name has no NUL");
    let prog = rtc::create_program(&text, Some(&name)).map_err(|e| fail(format!("{e:?}")))?;
    COMPILES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let got = unsafe { compiled(prog, options, out) };
    let _ = unsafe { rtc::destroy_program(prog) };
    got.map_err(fail)
}

/// Compiles `prog` and reads back its image, or NVRTC's log (or the failing call) as the error.
unsafe fn compiled(
    prog: cudarc::nvrtc::sys::nvrtcProgram,
    options: &[String],
    out: Output,
) -> std::result::Result<Vec<u8>, String> {
    use cudarc::nvrtc::{result as rtc, sys};
    if let Err(e) = rtc::compile_program(prog, options) {
        let log = rtc::get_program_log(prog).map_err(|l| format!("{e:?}; no log: {l:?}"))?;
        let log = CStr::from_ptr(log.as_ptr()).to_string_lossy().into_owned();
        return Err(log);
    }
    match out {
        Output::Ptx => {
            let ptx = rtc::get_ptx(prog).map_err(|e| format!("nvrtcGetPTX: {e:?}"))?;
            Ok(CStr::from_ptr(ptx.as_ptr()).to_bytes().to_vec())
        }
        Output::Cubin => {
            let mut size = 0usize;
            sys::nvrtcGetCUBINSize(prog, &mut size)
                .result()
                .map_err(|e| format!("nvrtcGetCUBINSize: {e:?}"))?;
            if size == 0 {
                return Err(
                    "nvrtcGetCUBINSize: NVRTC made no CUBIN (a virtual architecture?)".into(),
                );
            }
            let mut image = vec![0u8; size];
            sys::nvrtcGetCUBIN(prog, image.as_mut_ptr() as *mut std::ffi::c_char)
                .result()
                .map_err(|e| format!("nvrtcGetCUBIN: {e:?}"))?;
            Ok(image)
        }
    }
}

/// Compiles one family to PTX for a GPU of architecture `arch` (for [`target_arch`] of it);
/// returns the PTX and the options used. Needs only NVRTC (no GPU), which is how CI checks every
/// kernel for sm_90 (sm_90a).
pub fn compile_ptx(src: &KernelSource, arch: &'static str) -> Result<(String, Vec<String>)> {
    let options = option_list(src.cuda_source, target_arch(arch))?;
    let ptx = run_nvrtc(src, &options, Output::Ptx)?;
    Ok((String::from_utf8_lossy(&ptx).into_owned(), options))
}

/// Compiles one family straight to a binary for `arch` (for [`target_arch`] of it): NVRTC runs
/// the whole tool chain, PTX and the assembler, so loading the result asks nothing of the
/// driver's JIT compiler. Same options as [`compile_ptx`]; returns the CUBIN and the options.
pub fn compile_cubin(src: &KernelSource, arch: &'static str) -> Result<(Vec<u8>, Vec<String>)> {
    let options = option_list(src.cuda_source, target_arch(arch))?;
    let image = run_nvrtc(src, &options, Output::Cubin)?;
    Ok((image, options))
}
