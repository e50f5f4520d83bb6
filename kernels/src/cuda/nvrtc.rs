//! NVRTC: compiling a kernel family's CUDA C for a GPU architecture at run time, with the
//! options every kernel of the book is built with. Needs only NVRTC and the CUDA headers (no
//! GPU), which is how CI checks every kernel for sm_90.

use crate::error::{KernelError, Result};
use crate::source::KernelSource;
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

/// Compiles one family to PTX for a GPU of architecture `arch` (for [`target_arch`] of it);
/// returns the PTX and the options used. Needs only NVRTC (no GPU), which is how CI checks every
/// kernel for sm_90 (sm_90a).
pub fn compile_ptx(src: &KernelSource, arch: &'static str) -> Result<(String, Vec<String>)> {
    let arch = target_arch(arch);
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(KernelError::NoGpu {
            why: "NVRTC 13 (libnvrtc.so.13) is not on the library path".into(),
        });
    }
    let opts = nvrtc_options(arch)?;
    let shown: Vec<String> = std::iter::once(format!("--gpu-architecture={arch}"))
        .chain(std::iter::once("--fmad=false".to_string()))
        .chain(opts.include_paths.iter().map(|p| format!("-I{p}")))
        .chain(opts.options.iter().cloned())
        .collect();
    let mut opts = opts;
    opts.name = Some(format!("{}.cu", src.family));
    match cudarc::nvrtc::compile_ptx_with_opts(src.cuda_source, opts) {
        Ok(ptx) => Ok((ptx.to_src(), shown)),
        Err(cudarc::nvrtc::CompileError::CompileError { log, .. }) => Err(KernelError::Compile {
            family: src.family.into(),
            options: shown,
            log: log.to_string_lossy().into_owned(),
        }),
        Err(e) => Err(KernelError::Compile {
            family: src.family.into(),
            options: shown,
            log: format!("{e:?}"),
        }),
    }
}
