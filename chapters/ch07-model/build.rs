// Builds kernels/ch07_decoder.cu (the decode step's plain kernels around chapter 6's layer) for
// the emulator and embeds it for NVRTC (see moe-kernels-build).
fn main() {
    use moe_kernels_build::{compile_family, CratePath};
    compile_family("ch07_decoder", CratePath::External);
}
