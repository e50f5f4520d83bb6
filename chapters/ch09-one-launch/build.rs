// Builds kernels/ch09_one_launch.cu (with the chapter 5 and chapter 3 headers it includes) for the
// emulator and embeds it for NVRTC (see moe-kernels-build).
fn main() {
    use moe_kernels_build::{compile_family, CratePath};
    compile_family("ch09_one_launch", CratePath::External);
}
