// Builds kernels/ch02_grouped.cu, and the exercise's kernel (the stub, or with `--features
// answers` the answer), for the emulator and embeds them for NVRTC (see moe-kernels-build).
fn main() {
    use moe_kernels_build::{compile_family, compile_family_from, CratePath};
    compile_family("ch02_grouped", CratePath::External);
    let dir = moe_kernels_build::kernels_dir();
    println!("cargo:rerun-if-env-changed=CARGO_FEATURE_ANSWERS");
    let exercises = if std::env::var_os("CARGO_FEATURE_ANSWERS").is_some() {
        dir.join("answers/ch02_exercises.cu")
    } else {
        dir.join("ch02_exercises.cu")
    };
    compile_family_from("ch02_exercises", &exercises, CratePath::External);
}
