// Builds kernels/ch12_parallel.cu for the emulator and embeds it for NVRTC (see
// moe-kernels-build), as chapter 8's build script does.
fn main() {
    use moe_kernels_build::{compile_family, CratePath};
    compile_family("ch12_parallel", CratePath::External);
}
