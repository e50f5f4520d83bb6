// Builds the emulator's runtime and the runtime's own kernel families (floor, selftest).
use moe_kernels_build::{compile_emu_runtime, compile_family, CratePath};

fn main() {
    compile_emu_runtime();
    compile_family("floor", CratePath::Internal);
    compile_family("selftest", CratePath::Internal);
}
