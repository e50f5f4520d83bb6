// libm_probe.cu -- how often CUDA's expf, logf and a sigmoid built on expf give other bits than
// the host's glibc, over 2^22 evenly spaced inputs. This is the measurement behind the rule that
// kernels take their exponentials from kernels/common.cuh (book/src/runtime.md). A tool for the
// GPU machine, built there with nvcc, FMA contraction off as in the book's kernels:
//
//     nvcc -O2 -fmad=false -arch=sm_90 -o /tmp/libm_probe tools/gpu/probes/libm_probe.cu
//     /tmp/libm_probe OUT_DIR/libm.csv
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

enum Fn { EXP = 0, SIGMOID = 1, LOG = 2 };

__global__ void apply(const float* x, float* y, int n, int fn) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = x[i];
    y[i] = fn == EXP ? expf(v) : fn == SIGMOID ? 1.0f / (1.0f + expf(-v)) : logf(v);
}

static float host(float v, int fn) {
    return fn == EXP ? expf(v) : fn == SIGMOID ? 1.0f / (1.0f + expf(-v)) : logf(v);
}

static int64_t ulps(float a, float b) {
    int32_t x, y;
    std::memcpy(&x, &a, 4);
    std::memcpy(&y, &b, 4);
    int64_t kx = x < 0 ? (int64_t)INT32_MIN - x : x, ky = y < 0 ? (int64_t)INT32_MIN - y : y;
    return std::llabs(kx - ky);
}

int main(int argc, char** argv) {
    const char* path = argc > 1 ? argv[1] : "libm.csv";
    const int n = 1 << 22;
    struct Case { const char* name; int fn; float lo, hi; };
    const Case cases[] = {{"expf", EXP, -20.0f, 20.0f},
                          {"sigmoid_expf", SIGMOID, -20.0f, 20.0f},
                          {"logf", LOG, 1e-3f, 1e3f}};
    std::vector<float> x(n), y(n);
    float *dx, *dy;
    if (cudaMalloc(&dx, n * 4) != cudaSuccess || cudaMalloc(&dy, n * 4) != cudaSuccess) return 1;
    FILE* f = fopen(path, "w");
    if (!f) return 1;
    fprintf(f, "function,inputs,lo,hi,differ,max_ulps\n");
    for (const Case& c : cases) {
        for (int i = 0; i < n; ++i) x[i] = c.lo + (c.hi - c.lo) * (float)((double)i / (n - 1));
        cudaMemcpy(dx, x.data(), n * 4, cudaMemcpyHostToDevice);
        apply<<<(n + 255) / 256, 256>>>(dx, dy, n, c.fn);
        if (cudaMemcpy(y.data(), dy, n * 4, cudaMemcpyDeviceToHost) != cudaSuccess) return 1;
        long differ = 0;
        int64_t worst = 0;
        for (int i = 0; i < n; ++i) {
            float h = host(x[i], c.fn);
            if (std::memcmp(&h, &y[i], 4) != 0) {
                ++differ;
                int64_t u = ulps(h, y[i]);
                if (u > worst) worst = u;
            }
        }
        fprintf(f, "%s,%d,%g,%g,%ld,%lld\n", c.name, n, c.lo, c.hi, differ, (long long)worst);
        printf("%-13s %d inputs in [%g, %g]: %ld differ from glibc, at most %lld ulp\n", c.name, n, c.lo,
               c.hi, differ, (long long)worst);
    }
    fclose(f);
    return 0;
}
