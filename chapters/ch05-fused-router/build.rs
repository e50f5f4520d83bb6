// Builds kernels/ch05_tiny_gemm.cu and kernels/ch05_fused_router.cu, and the exercises' kernels
// (the stubs, or with `--features answers` the answers), for the emulator and embeds them for
// NVRTC (see moe-kernels-build).
fn main() {
    use moe_kernels_build::{compile_family, compile_family_from, CratePath};
    compile_family("ch05_tiny_gemm", CratePath::External);
    compile_family("ch05_fused_router", CratePath::External);
    let dir = moe_kernels_build::kernels_dir();
    println!("cargo:rerun-if-env-changed=CARGO_FEATURE_ANSWERS");
    let exercises = if std::env::var_os("CARGO_FEATURE_ANSWERS").is_some() {
        dir.join("answers/ch05_exercises.cu")
    } else {
        dir.join("ch05_exercises.cu")
    };
    compile_family_from("ch05_exercises", &exercises, CratePath::External);
}
