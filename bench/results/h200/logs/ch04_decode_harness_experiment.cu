// A standalone harness (session of 2026-12-01, fifth), not part of the book's code: chapter 4's
// decode kernels re-written small, timed beside reads of the same bytes, to learn where one token's
// time goes before changing the real kernels. Built and run on the H200 (tools/gpu has no Rust
// there; nvcc is in /usr/local/cuda/bin):
//     nvcc -arch=sm_90 -O3 -std=c++17 -o harness ch04_decode_harness_experiment.cu
//     for a in "2048 768 128 1" "4096 1024 288 1" "2048 768 128 8" "4096 1024 288 8"; do ./harness $a; done
//     NEURONS=1 ./harness 2048 768 128 1     # also the split over I ("neuron") variants
// Arguments: H I E T (k = 8). Each time: the median of 50 launches, each after a kernel that writes
// 256 MB (the L2 flushed), between two events on one stream; not the bench's graph replays, so its
// absolute times differ from bench ch04's by a launch's worth. The weights are constant bytes
// (the timing does not depend on their values) and nothing is checked: the real kernels' tests do
// that. Logs: ch04_decode_harness_experiment.log (this file's default run),
// ch04_decode_harness_neurons_experiment.log (an earlier revision of this file, the same neuron
// kernels, run with every variant on).
// probe2 (a flat read over the parts) is slow by its own fault (a search per load) and not used.
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cstring>
#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); exit(1);} } while (0)
#define THREADS 128  // 4 warps, 4 neurons each
__device__ __forceinline__ void ld8(const __nv_bfloat16* p, float v[8]) {
  const uint4 u = *reinterpret_cast<const uint4*>(p);
  const unsigned w[4] = {u.x, u.y, u.z, u.w};
  for (int i = 0; i < 4; ++i) { v[2*i] = __uint_as_float(w[i] << 16); v[2*i+1] = __uint_as_float(w[i] & 0xffff0000u); }
}
template <int MODE>  // 0 plain, 1 ld.global.nc, 2 ld.global.nc.L1::no_allocate, 3 ld.global.L1::no_allocate
__device__ __forceinline__ void ldm(const __nv_bfloat16* p, float v[8]) {
  uint4 u;
  if (MODE == 0) u = *reinterpret_cast<const uint4*>(p);
  else if (MODE == 1) asm volatile("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w) : "l"(p));
  else if (MODE == 2) asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w) : "l"(p));
  else asm volatile("ld.global.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(u.x), "=r"(u.y), "=r"(u.z), "=r"(u.w) : "l"(p));
  const unsigned w[4] = {u.x, u.y, u.z, u.w};
  for (int i = 0; i < 4; ++i) { v[2*i] = __uint_as_float(w[i] << 16); v[2*i+1] = __uint_as_float(w[i] & 0xffff0000u); }
}
__device__ __forceinline__ void ld8f(const float* p, float v[8]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0], b = reinterpret_cast<const float4*>(p)[1];
  const float f[8] = {a.x,a.y,a.z,a.w,b.x,b.y,b.z,b.w};
  for (int i = 0; i < 8; ++i) v[i] = __bfloat162float(__float2bfloat16(f[i]));
}
__device__ __forceinline__ void cp16(void* s, const void* g) {
  unsigned sa = (unsigned)__cvta_generic_to_shared(s);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(sa), "l"(g));
}
template <int NB, bool STAGE>
__global__ void __launch_bounds__(THREADS) neuron_kernel(const float* x, const int* ids, const __nv_bfloat16* w13,
    const __nv_bfloat16* w2t, float* partial, int T, int k, int H, int I) {
  asm volatile("griddepcontrol.launch_dependents;");
  extern __shared__ __align__(16) unsigned char smem[];
  __nv_bfloat16* sw = reinterpret_cast<__nv_bfloat16*>(smem);      // [NB][H]
  __shared__ float sact[NB];
  const int p = blockIdx.x, chunk = blockIdx.y, i0 = chunk * NB;
  const int e = ids[p], t = p / k;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  // 1. the chunk's down rows into shared memory, asynchronously
  const __nv_bfloat16* d = w2t + ((size_t)e * I + i0) * H;
  const int n16 = NB * H / 8;
  if (STAGE) for (int c = threadIdx.x; c < n16; c += THREADS) cp16(sw + c * 8, d + c * 8);
  asm volatile("cp.async.commit_group;\n" ::);
  // 2. gate and up of the warp's 4 neurons
  const float* xr = x + (size_t)t * H;
  constexpr int W = NB / 4;  // neurons per warp
  const __nv_bfloat16* rows[2 * W];
  for (int r = 0; r < W; ++r) {
    const int i = i0 + warp * W + r;
    rows[r] = w13 + ((size_t)e * 2 * I + i) * H;
    rows[W + r] = w13 + ((size_t)e * 2 * I + I + i) * H;
  }
  float s[2 * W];
  for (int r = 0; r < 2 * W; ++r) s[r] = 0.0f;
#pragma unroll 2
  for (int c = lane * 8; c < H; c += 256) {
    float av[8]; ld8f(xr + c, av);
#pragma unroll
    for (int r = 0; r < 2 * W; ++r) { float bv[8]; ld8(rows[r] + c, bv);
#pragma unroll
      for (int j = 0; j < 8; ++j) s[r] = fmaf(av[j], bv[j], s[r]); }
  }
#pragma unroll
  for (int r = 0; r < 2 * W; ++r) for (int off = 16; off; off >>= 1) s[r] += __shfl_xor_sync(0xffffffffu, s[r], off);
  if (lane == 0) for (int r = 0; r < W; ++r) {
    const float g = __bfloat162float(__float2bfloat16(s[r])), u = __bfloat162float(__float2bfloat16(s[W + r]));
    sact[warp * W + r] = __bfloat162float(__float2bfloat16((g / (1.0f + __expf(-g))) * u));
  }
  asm volatile("cp.async.wait_all;\n" ::);
  __syncthreads();
  // 3. partial[p][chunk][n] = sum_i act_i * down_i[n]; thread: 8 columns at n = 8*tid + 1024*h
  float* out = partial + ((size_t)p * gridDim.y + chunk) * H;
  for (int n0 = threadIdx.x * 8; n0 < H; n0 += THREADS * 8) {
    float acc[8] = {0,0,0,0,0,0,0,0};
#pragma unroll
    for (int i = 0; i < NB; ++i) { float dv[8]; ld8(STAGE ? sw + i * H + n0 : d + (size_t)i * H + n0, dv); const float a = sact[i];
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[j] = fmaf(a, dv[j], acc[j]); }
    reinterpret_cast<float4*>(out + n0)[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
    reinterpret_cast<float4*>(out + n0)[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
  }
}
// the decode GEMM 1 (w4_c1): SWAP: blockIdx.x = column block, blockIdx.y = pair; UNR: chunks per batch;
// NC: weight loads with ld.global.nc.L1::no_allocate
template <bool SWAP, int UNR, int NC>
__global__ void __launch_bounds__(128) gemm1_kernel(const float* x, const int* ids, const __nv_bfloat16* w13, __nv_bfloat16* act, int T, int k, int H, int I) {
  const int p = SWAP ? blockIdx.y : blockIdx.x, cb = SWAP ? blockIdx.x : blockIdx.y;
  const int e = ids[p], t = p / k, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int i = cb * 4 + warp;
  const __nv_bfloat16* g = w13 + ((size_t)e * 2 * I + i) * H; const __nv_bfloat16* u = g + (size_t)I * H;
  const float* xr = x + (size_t)t * H; float s0 = 0, s1 = 0;
#pragma unroll UNR
  for (int c = lane * 8; c < H; c += 256) { float av[8], gv[8], uv[8]; ld8f(xr + c, av);
    ldm<NC>(g + c, gv); ldm<NC>(u + c, uv);
    for (int j = 0; j < 8; ++j) { s0 = fmaf(av[j], gv[j], s0); s1 = fmaf(av[j], uv[j], s1); } }
  for (int off = 16; off; off >>= 1) { s0 += __shfl_xor_sync(0xffffffffu, s0, off); s1 += __shfl_xor_sync(0xffffffffu, s1, off); }
  if (lane == 0) act[(size_t)p * I + i] = __float2bfloat16(s0 * s1);
}
// a flat probe: block b reads 16 KB of the parts' concatenation (4 loads of 16 B per thread in flight)
__global__ void probe2_kernel(const uint4* const* parts, const size_t* starts, int nparts, size_t total, unsigned* sink) {
  unsigned acc = 0;
  for (size_t base = (size_t)blockIdx.x * 1024; base < total; base += (size_t)gridDim.x * 1024) {
    uint4 v[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) { size_t g = base + q * 256 + threadIdx.x; v[q] = make_uint4(0,0,0,0);
      if (g < total) { int pi = 0; while (pi + 1 < nparts && starts[pi + 1] <= g) ++pi; v[q] = __ldcs(parts[pi] + (g - starts[pi])); } }
#pragma unroll
    for (int q = 0; q < 4; ++q) acc ^= v[q].x ^ v[q].y ^ v[q].z ^ v[q].w;
  }
  if (acc == 0x12345678u) sink[0] = acc;
}
// probe3: block (b, q) reads a contiguous share of expert ids[q]'s w13 (6 MB), 4 x 16 B in flight per thread
__global__ void probe3_kernel(const int* ids, const uint4* w13, size_t per_expert, unsigned* sink) {
  const uint4* base = w13 + (size_t)ids[blockIdx.y] * per_expert;
  const size_t share = (per_expert + gridDim.x - 1) / gridDim.x, lo = blockIdx.x * share, hi = min(per_expert, lo + share);
  unsigned acc = 0;
  for (size_t i = lo + threadIdx.x; i < hi; i += 4 * blockDim.x) {
    uint4 v[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) { const size_t g = i + q * blockDim.x; v[q] = g < hi ? __ldcs(base + g) : make_uint4(0,0,0,0); }
#pragma unroll
    for (int q = 0; q < 4; ++q) acc ^= v[q].x ^ v[q].y ^ v[q].z ^ v[q].w;
  }
  if (acc == 0x12345678u) sink[0] = acc;
}
// the decode GEMM 2 (unfused): y[p, n] = weight[p] * (act[p] . w2[e, n]) over I; a warp owns R
// columns whose loads go out together (sharing act's); grid (P, H / (4 R)), 128 threads
template <int R, int MODE>
__global__ void __launch_bounds__(128) gemm2_kernel(const __nv_bfloat16* act, const int* ids, const float* weight,
    const __nv_bfloat16* w2, float* y, int T, int k, int H, int I) {
  const int p = blockIdx.x, e = ids[p], warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int n0 = (blockIdx.y * 4 + warp) * R;
  const __nv_bfloat16* a = act + (size_t)p * I;
  const __nv_bfloat16* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = w2 + ((size_t)e * H + n0 + r) * I;
  float s[R];
  for (int r = 0; r < R; ++r) s[r] = 0.0f;
#pragma unroll 2
  for (int c = lane * 8; c < I; c += 256) {
    float av[8]; ld8(a + c, av);
#pragma unroll
    for (int r = 0; r < R; ++r) { float bv[8]; ldm<MODE>(rows[r] + c, bv);
#pragma unroll
      for (int j = 0; j < 8; ++j) s[r] = fmaf(av[j], bv[j], s[r]); }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) for (int off = 16; off; off >>= 1) s[r] += __shfl_xor_sync(0xffffffffu, s[r], off);
  if (lane == 0) for (int r = 0; r < R; ++r) y[(size_t)p * H + n0 + r] = weight[p] * s[r];
}
// out[t][n] = sum_j w_j * sum_c partial[t*k+j][c][n]; block (t, 32 columns), warp j
__global__ void reduce_kernel(const float* partial, const float* weight, float* out, int T, int k, int H, int chunks) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  __shared__ float sj[32][33];
  const int t = blockIdx.x, n = blockIdx.y * 32 + (threadIdx.x & 31), j = threadIdx.x >> 5;
  if (j < k) {
    const float* pp = partial + ((size_t)(t * k + j) * chunks) * H + n;
    float s = 0.0f;
#pragma unroll 16
    for (int c = 0; c < chunks; ++c) s += __ldcg(pp + (size_t)c * H);
    sj[j][threadIdx.x & 31] = s;
  }
  __syncthreads();
  if (j == 0) { float o = 0.0f; for (int q = 0; q < k; ++q) o += weight[t * k + q] * sj[q][threadIdx.x & 31]; out[(size_t)t * H + n] = o; }
}
__global__ void probe_kernel(const uint4* const* parts, const size_t* lens, int nparts, unsigned* sink) {
  unsigned acc = 0;
  for (int q = 0; q < nparts; ++q) {
    const uint4* b = parts[q]; const size_t n = lens[q];
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) { uint4 v = __ldcs(b + i); acc ^= v.x ^ v.y ^ v.z ^ v.w; }
  }
  if (acc == 0x12345678u) sink[0] = acc;
}
__global__ void flush_kernel(float* p, size_t n) { for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) p[i] = p[i] * 0.5f + 1.0f; }
__global__ void empty_kernel() {}
int main(int argc, char** argv) {
  const int H = atoi(argv[1]), I = atoi(argv[2]), E = atoi(argv[3]), k = 8, T = atoi(argv[4]);
  const int P = T * k, chunks = I / 4;
  printf("H %d I %d E %d T %d\n", H, I, E, T);
  std::vector<int> ids(P); srand(7);
  for (int t = 0; t < T; ++t) { std::vector<int> all(E); for (int e = 0; e < E; ++e) all[e] = e; std::random_shuffle(all.begin(), all.end()); for (int j = 0; j < k; ++j) ids[t*k+j] = all[j]; }
  size_t n13 = (size_t)E * 2 * I * H, n2 = (size_t)E * I * H;
  __nv_bfloat16 *w13, *w2t; float *x, *partial, *out, *wt, *fl; int* dids; unsigned* sink;
  CK(cudaMalloc(&w13, n13 * 2)); CK(cudaMalloc(&w2t, n2 * 2)); CK(cudaMemset(w13, 0x3c, n13 * 2)); CK(cudaMemset(w2t, 0x3c, n2 * 2));
  CK(cudaMalloc(&x, (size_t)T * H * 4)); CK(cudaMemset(x, 0, (size_t)T * H * 4));
  CK(cudaMalloc(&partial, (size_t)P * chunks * H * 4)); CK(cudaMalloc(&out, (size_t)T * H * 4)); CK(cudaMalloc(&wt, P * 4)); CK(cudaMemset(wt, 0, P * 4));
  CK(cudaMalloc(&dids, P * 4)); CK(cudaMemcpy(dids, ids.data(), P * 4, cudaMemcpyHostToDevice)); CK(cudaMalloc(&sink, 4));
  const size_t nfl = 256ull << 20 >> 2; CK(cudaMalloc(&fl, nfl * 4)); CK(cudaMemset(fl, 0, nfl * 4));
  // probe parts: each distinct expert's w13 and w2t slices
  std::vector<int> distinct(ids); std::sort(distinct.begin(), distinct.end()); distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  std::vector<const uint4*> parts; std::vector<size_t> lens; size_t bytes = 0;
  for (int e : distinct) { parts.push_back((const uint4*)(w13 + (size_t)e * 2 * I * H)); lens.push_back((size_t)2 * I * H * 2 / 16);
    parts.push_back((const uint4*)(w2t + (size_t)e * I * H)); lens.push_back((size_t)I * H * 2 / 16); bytes += (size_t)3 * I * H * 2; }
  const uint4** dparts; size_t* dlens; CK(cudaMalloc(&dparts, parts.size() * 8)); CK(cudaMalloc(&dlens, lens.size() * 8));
  CK(cudaMemcpy(dparts, parts.data(), parts.size() * 8, cudaMemcpyHostToDevice)); CK(cudaMemcpy(dlens, lens.data(), lens.size() * 8, cudaMemcpyHostToDevice));
  printf("%zu distinct experts, %.1f MB of weights\n", distinct.size(), bytes / 1e6);
  std::vector<size_t> starts; size_t total = 0; for (size_t L : lens) { starts.push_back(total); total += L; }
  size_t* dstarts; CK(cudaMalloc(&dstarts, starts.size() * 8)); CK(cudaMemcpy(dstarts, starts.data(), starts.size() * 8, cudaMemcpyHostToDevice));
  __nv_bfloat16* act; CK(cudaMalloc(&act, (size_t)P * I * 2));
  cudaStream_t st; CK(cudaStreamCreate(&st));
  cudaEvent_t a, b; CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
  auto time = [&](const char* name, auto&& f) {
    std::vector<float> v;
    for (int r = 0; r < 60; ++r) {
      flush_kernel<<<1056, 256, 0, st>>>(fl, nfl);
      CK(cudaEventRecord(a, st)); f(); CK(cudaEventRecord(b, st)); CK(cudaEventSynchronize(b));
      float ms; CK(cudaEventElapsedTime(&ms, a, b)); if (r >= 10) v.push_back(ms * 1000);
    }
    std::sort(v.begin(), v.end()); printf("%-34s median %8.2f us  p10 %8.2f  p90 %8.2f\n", name, v[v.size()/2], v[v.size()/10], v[v.size()*9/10]);
    CK(cudaGetLastError());
    return v[v.size()/2];
  };
  auto reduce = [&](int chunks) {
    cudaLaunchConfig_t cfg = {}; cfg.gridDim = dim3(T, H / 32); cfg.blockDim = dim3(32 * k); cfg.stream = st;
    cudaLaunchAttribute at[1]; at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization; at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at; cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, reduce_kernel, (const float*)partial, (const float*)wt, out, T, k, H, chunks));
  };
  const float te = time("empty", [&] { empty_kernel<<<1, 32, 0, st>>>(); });
  time("probe3 w13 of the pairs (T=1 only)", [&] { probe3_kernel<<<dim3(132 * 8 / P, P), 256, 0, st>>>(dids, (const uint4*)w13, (size_t)2 * I * H / 8, sink); });
#define G(SW, U, N) time("gemm1 unroll " #U " load mode " #N, [&] { gemm1_kernel<SW, U, N><<<SW ? dim3(I / 4, P) : dim3(P, I / 4), 128, 0, st>>>(x, dids, w13, act, T, k, H, I); });
  G(false, 4, 0) G(false, 4, 1) G(false, 4, 2) G(false, 4, 3)
  float* y2; CK(cudaMalloc(&y2, (size_t)P * H * 4));
#define G2(R, NA) time("gemm2 cols together " #R " load mode " #NA, [&] { gemm2_kernel<R, NA><<<dim3(P, H / (4 * R)), 128, 0, st>>>(act, dids, wt, w2t, y2, T, k, H, I); });
  G2(1, 0) G2(1, 1) G2(1, 2) G2(1, 3) G2(2, 1) G2(2, 2)
  time("probe3 on w2 (the pairs' w2)", [&] { probe3_kernel<<<dim3(132 * 8 / P > 0 ? 132 * 8 / P : 1, P), 256, 0, st>>>(dids, (const uint4*)w2t, (size_t)I * H / 8, sink); });
  if (getenv("NEURONS")) {
#define V(NBV, STG) { const int sm = STG ? NBV * H * 2 : 0; \
    CK(cudaFuncSetAttribute(neuron_kernel<NBV, STG>, cudaFuncAttributeMaxDynamicSharedMemorySize, sm)); \
    char nm[64]; snprintf(nm, 64, "neuron NB %d %s", NBV, STG ? "staged" : "direct"); \
    time(nm, [&] { neuron_kernel<NBV, STG><<<dim3(P, I / NBV), THREADS, sm, st>>>(x, dids, w13, w2t, partial, T, k, H, I); }); \
    snprintf(nm, 64, "  + reduce (PDL)"); \
    time(nm, [&] { neuron_kernel<NBV, STG><<<dim3(P, I / NBV), THREADS, sm, st>>>(x, dids, w13, w2t, partial, T, k, H, I); reduce(I / NBV); }); }
  V(16, true) V(16, false) V(8, true) V(8, false) V(32, false) V(4, false)
  }
  printf("floor (empty + bytes at 4172 GB/s) %.2f us\n", te + bytes / 4172e3);
  CK(cudaGetLastError()); CK(cudaDeviceSynchronize());
  return 0;
}
