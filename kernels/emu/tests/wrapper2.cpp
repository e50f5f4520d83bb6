#define MOE_EMU 1
#include "cuda_emu.h"
#include "test_kernels2.cu"
#include "emu_trampoline.h"
extern "C" void emu_tramp__test2__k2_scale(void** p) { emu::call_kernel(k2_scale, p); }
