// cuda_check.h -- the probes' one error check: a failed CUDA runtime call prints where and why,
// and exits with status 1.
#pragma once
#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                                                  \
    do {                                                                                          \
        cudaError_t e_ = (x);                                                                     \
        if (e_ != cudaSuccess) {                                                                  \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));   \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)
