// Builds kernels/ch04_fused_moe.cu, and the exercise's kernel (the stub, or with `--features
// answers` the answer), for the emulator and embeds them for NVRTC (see moe-kernels-build).
fn main() {
    moe_kernels_build::compile_family("ch04_fused_moe", moe_kernels_build::CratePath::External);
    let dir = moe_kernels_build::kernels_dir();
    println!("cargo:rerun-if-env-changed=CARGO_FEATURE_ANSWERS");
    let exercises = if std::env::var_os("CARGO_FEATURE_ANSWERS").is_some() {
        dir.join("answers/ch04_exercises.cu")
    } else {
        dir.join("ch04_exercises.cu")
    };
    moe_kernels_build::compile_family_from(
        "ch04_exercises",
        &exercises,
        moe_kernels_build::CratePath::External,
    );
}
