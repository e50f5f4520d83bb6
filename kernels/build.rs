// Builds the emulator's runtime and the runtime's own kernel families, and tells the tests
// whether NVRTC can be loaded here (a test that needs it is then ignored, not passed, without it).
use moe_kernels_build::{compile_emu_runtime, compile_family, CratePath};
use std::path::Path;

fn main() {
    compile_emu_runtime();
    compile_family("floor", CratePath::Internal);
    compile_family("selftest", CratePath::Internal);
    compile_family("adversarial", CratePath::Internal);
    compile_family("primer", CratePath::Internal);

    println!("cargo::rustc-check-cfg=cfg(moe_nvrtc_present)");
    println!("cargo:rerun-if-env-changed=LD_LIBRARY_PATH");
    let lib_path = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
    let dirs = lib_path
        .split(':')
        .filter(|d| !d.is_empty())
        .map(str::to_string)
        .chain([
            "/usr/local/cuda/lib64".to_string(),
            "/usr/lib/x86_64-linux-gnu".to_string(),
        ]);
    let present = dirs.into_iter().any(|d| {
        Path::new(&d).join("libnvrtc.so.13").exists() || Path::new(&d).join("libnvrtc.so").exists()
    });
    if present {
        println!("cargo::rustc-cfg=moe_nvrtc_present");
    }
}
