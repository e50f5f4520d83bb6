// Run by run.sh: a kernel that overflows its fiber stack must run into the guard page, and the
// emulator must report it as that thread's stack overflow (launch status 3), not silently corrupt
// a neighbouring fiber's stack and not end the process. Exits with the launch's status.
#define MOE_EMU 1
#include "cuda_emu.h"
#include "emu_trampoline.h"
#include "launch_shim.h"
__device__ __noinline__ int deep(volatile char* prev, int n) {
    volatile char buf[1024];
    buf[0] = (char)n;
    buf[1023] = prev ? prev[0] : 0;
    return n == 0 ? buf[0] : deep(buf, n - 1) + buf[1023];
}
extern "C" __global__ void k_overflow(int* out, int depth) { out[threadIdx.x] = deep(nullptr, depth); }
extern "C" void tramp(void** p) { emu::call_kernel(k_overflow, p); }
int main(int argc, char** argv) {
    int out[64];
    int* po = out;
    int depth = atoi(argv[1]);
    void* p[] = {&po, &depth};
    char err[512];
    int rc = emu_launch_msg(tramp, p, 2, 1, 1, 64, 1, 1, 0, err, sizeof err);
    printf("depth %d: rc %d %s\n", depth, rc, rc ? err : "OK");
    return rc;
}
