// Builds kernels/ch01_router.cu for the emulator and embeds it for NVRTC (see moe-kernels-build).
fn main() {
    moe_kernels_build::compile_family("ch01_router", moe_kernels_build::CratePath::External);
}
