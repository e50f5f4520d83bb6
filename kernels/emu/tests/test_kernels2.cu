// A second "kernel family", compiled in its own wrapper TU (checks that cuda_emu.h has no
// non-inline definitions and that __shared__ works across TUs).
__shared__ float ns_scratch[64];
extern "C" __global__ void k2_scale(float* x, float a, int n) {
    __shared__ float tile[64];
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    tile[threadIdx.x] = i < (unsigned)n ? x[i] : 0.0f;
    ns_scratch[threadIdx.x] = a;
    __syncthreads();
    if (i < (unsigned)n) x[i] = __fmul_rn(tile[threadIdx.x], ns_scratch[(threadIdx.x + 1) % blockDim.x]);
}
