// Run by run.sh: a kernel that overflows its fiber stack must fault on the guard page (SIGSEGV),
// not silently corrupt a neighbouring fiber's stack. Prints OK and exits 0 only if no fault
// happened, which run.sh treats as a failure.
#define MOE_EMU 1
#include "cuda_emu.h"
#include "emu_trampoline.h"
__device__ __noinline__ int deep(volatile char* prev, int n) {
    volatile char buf[1024];
    buf[0] = (char)n;
    buf[1023] = prev ? prev[0] : 0;
    return n == 0 ? buf[0] : deep(buf, n - 1) + buf[1023];
}
extern "C" __global__ void k_overflow(int* out, int depth) { out[threadIdx.x] = deep(nullptr, depth); }
extern "C" void tramp(void** p) { emu::call_kernel(k_overflow, p); }
extern "C" int emu_launch(void (*)(void**), void**, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, size_t, char*, size_t);
int main(int argc, char** argv) {
    int out[64];
    int* po = out;
    int depth = atoi(argv[1]);
    void* p[] = {&po, &depth};
    char err[512];
    int rc = emu_launch(tramp, p, 2, 1, 1, 64, 1, 1, 0, err, sizeof err);
    printf("depth %d: rc %d %s\n", depth, rc, rc ? err : "OK");
    return rc;
}
