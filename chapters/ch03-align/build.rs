// Builds kernels/ch03_align_block_size.cu, and the exercise's kernel (the stub, or with
// `--features answers` the answer), for the emulator and embeds them for NVRTC (see
// moe-kernels-build).
fn main() {
    use moe_kernels_build::{compile_family, compile_family_from, CratePath};
    compile_family("ch03_align_block_size", CratePath::External);
    let dir = moe_kernels_build::kernels_dir();
    println!("cargo:rerun-if-env-changed=CARGO_FEATURE_ANSWERS");
    let exercises = if std::env::var_os("CARGO_FEATURE_ANSWERS").is_some() {
        dir.join("answers/ch03_exercises.cu")
    } else {
        dir.join("ch03_exercises.cu")
    };
    compile_family_from("ch03_exercises", &exercises, CratePath::External);
}
