// Builds kernels/ch11_merged_gate.cu for the emulator and embeds it for NVRTC (see
// moe-kernels-build), as chapter 5's build script does.
fn main() {
    use moe_kernels_build::{compile_family, CratePath};
    compile_family("ch11_merged_gate", CratePath::External);
}
