// Throwaway: where one row's time goes in fused_router_block (clock64 at phase boundaries).
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
__device__ long long g_probe[32][16];
__device__ unsigned g_dep[32][16];
#define FR_PROBE(n) do { long long _c; asm volatile("mov.u64 %0, %%clock64;" : "=l"(_c) :: "memory"); if ((threadIdx.x & 31) == 0) g_probe[threadIdx.x >> 5][n] = _c; } while (0)
#define FR_PROBE_DEP(n, v) do { asm volatile("st.volatile.global.u32 [%0], %1;" :: "l"(&g_dep[threadIdx.x >> 5][n]), "r"((unsigned)(v)) : "memory"); FR_PROBE(n); } while (0)
#include "ch05_fused_router.cu"
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)
int main() {
  struct Shape { const char* name; int E, scoring; bool bias; } shapes[] = {{"glm e288 sigmoid+bias", 288, 1, true}, {"qwen3 e128 softmax", 128, 0, false}};
  for (auto sh : shapes) {
    const int E = sh.E, k = 8, T = 1;
    std::vector<float> hl(E), hb(E);
    srand(1); for (int i = 0; i < E; ++i) { hl[i] = (rand() / (float)RAND_MAX) * 4 - 2; hb[i] = (rand() / (float)RAND_MAX) * 0.1f; }
    float *dl, *db, *dw; int* di;
    CK(cudaMalloc(&dl, E * 4)); CK(cudaMalloc(&db, E * 4)); CK(cudaMalloc(&dw, k * 4)); CK(cudaMalloc(&di, k * 4));
    CK(cudaMemcpy(dl, hl.data(), E * 4, cudaMemcpyHostToDevice)); CK(cudaMemcpy(db, hb.data(), E * 4, cudaMemcpyHostToDevice));
    const int threads = 32 * ((E + 31) / 32), warps = threads / 32;
    std::vector<std::vector<long long>> d(9);
    std::vector<long long> tot;
    for (int it = 0; it < 60; ++it) {
      fused_router_block<<<1, threads>>>(dl, sh.bias ? db : nullptr, di, dw, T, E, k, sh.scoring, 1, 1.0f);
      CK(cudaDeviceSynchronize());
      long long p[32][16]; CK(cudaMemcpyFromSymbol(p, g_probe, sizeof p));
      if (it < 10) continue;
      // phase n: the latest warp's time at probe n minus the earliest start (probe 0), per probe
      long long t0 = p[0][0]; for (int w = 0; w < warps; ++w) t0 = std::min(t0, p[w][0]);
      for (int n = 1; n <= 8; ++n) {
        long long m = 0; int ws = (n == 6 || n == 8) ? 1 : warps;  // 6, 8: only warps with candidates / picks (warp 0 at least)
        if (n == 6) ws = std::min(warps, (warps * k + 31) / 32);
        for (int w = 0; w < ws; ++w) m = std::max(m, p[w][n] - t0);
        d[n].push_back(m);
      }
    }
    cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
    for (int i = 0; i < 20; ++i) fused_router_block<<<1, threads>>>(dl, sh.bias ? db : nullptr, di, dw, T, E, k, sh.scoring, 1, 1.0f);
    CK(cudaEventRecord(a));
    for (int i = 0; i < 1000; ++i) fused_router_block<<<1, threads>>>(dl, sh.bias ? db : nullptr, di, dw, T, E, k, sh.scoring, 1, 1.0f);
    CK(cudaEventRecord(b)); CK(cudaEventSynchronize(b));
    float ms; CK(cudaEventElapsedTime(&ms, a, b));
    int clk; CK(cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0));
    printf("%s: %d threads, back-to-back launch %.3f us each; clock attr %d kHz\n", sh.name, threads, ms, clk);
    const char* names[] = {"", "wait", "logit load", "scores+key", "warp rank (32 shfl)", "sync 1", "candidate count", "sync 2", "weights+store"};
    for (int n = 1; n <= 8; ++n) { auto v = d[n]; std::sort(v.begin(), v.end()); printf("  probe %d %-22s cycles since start: median %lld (min %lld)\n", n, names[n], v[v.size() / 2], v[0]); }
  }
  // empty kernel for reference
  return 0;
}
