// Builds kernels/ch01_router.cu, and the exercises' kernels (the stubs, or with `--features
// answers` the answers), for the emulator and embeds them for NVRTC (see moe-kernels-build).
fn main() {
    use moe_kernels_build::{compile_family, compile_family_from, CratePath};
    compile_family("ch01_router", CratePath::External);
    let dir = moe_kernels_build::kernels_dir();
    println!("cargo:rerun-if-env-changed=CARGO_FEATURE_ANSWERS");
    let exercises = if std::env::var_os("CARGO_FEATURE_ANSWERS").is_some() {
        dir.join("answers/ch01_exercises.cu")
    } else {
        dir.join("ch01_exercises.cu")
    };
    compile_family_from("ch01_exercises", &exercises, CratePath::External);
}
