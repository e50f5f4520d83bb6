// ch05_handoff.cu -- what it costs chapter 5's pair to hand the logits from the tiny GEMM to the
// router at one row, and what four other handoffs would cost. The producer is the chapter's own
// tiny_gemm<1> (kernels/ch05_tiny_gemm.cu); the consumer a stand-in for the router's first step
// (a block loads the row's logits from the L2, takes their maximum and stores it: one thread per
// expert in the consumer's own launch, the producer's 256 threads in turn in `last`), so that
// only the handoff differs between the variants:
//   plain   the consumer a plain launch after the producer (stream order);
//   pdl     the consumer a programmatic dependent launch that waits with griddepcontrol.wait
//           (the chapter's pair);
//   flag    the consumer a programmatic dependent launch that spins instead on a counter which
//           each producer block raises once its logits are stored (a fence, a barrier, an atomic);
//   release the same, each logit counted by the thread that stored it, with a release add;
//   last    one launch: the producer block that raises the counter last does the consumer's work.
// Timed as CUDA-graph replays of 20 pairs, caches warm (the handoff does not read DRAM), median of
// 200 replays. Then, replaying a graph of one pair after a memset that fills the logits with a
// marker (200 times; a consumer that read them before the producer's stores would return the
// marker, and the run says WRONG), the gap on the global timer (%globaltimer, which moves in steps
// of 32 ns on the H200) from the last logit stored, stamped by each storing thread right after its
// store in every variant, to the consumer's first load, stamped just before it.
//
// Built and run by tools/gpu/run's probes stage; writes ch05_handoff.txt.
#include <algorithm>
#include <cstdio>
#include <vector>
#include "cuda_check.h"
#include "../../../kernels/ch05_tiny_gemm.cu"

__device__ unsigned long long g_prod_end;   // the latest producer block's end, ns
__device__ unsigned long long g_cons_start; // the consumer's first load, ns

__device__ __forceinline__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
    return t;
}
__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// The consumer's work: the block's threads load the E logits (through the L2: ld.global.cg), a
// block max, thread 0 stores it.
__device__ __forceinline__ void consume(const float* logits, float* out, int E, bool stamp) {
    __shared__ float part[32];
    if (stamp && threadIdx.x == 0) g_cons_start = now_ns();
    float v = -1e30f;
    for (int i = threadIdx.x; i < E; i += blockDim.x) v = fmaxf(v, __ldcg(logits + i));
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x / 32); ++w) v = fmaxf(v, part[w]);
        out[0] = v;
    }
}

template <bool FLAG, bool LAST, bool RELEASE = false>
__global__ void __launch_bounds__(TINY_THREADS) producer(const __nv_bfloat16* hidden, const __nv_bfloat16* gate,
                                                         float* logits, int H, int E, unsigned* counter,
                                                         float* out, bool stamp) {
    tiny_gemm<1>(hidden, gate, logits, 1, H, E);
    // tiny_gemm<1>'s thread q stored expert 2 * blockIdx.x + q's logit (q < 2).
    const bool stored =
        threadIdx.x < TINY_EXPERTS_PER_BLOCK && TINY_EXPERTS_PER_BLOCK * blockIdx.x + threadIdx.x < E;
    if (stamp && stored) atomicMax(&g_prod_end, now_ns());
    if (RELEASE) {
        // Each storing thread counts its own logit with a release add (no fence, no barrier).
        if (stored) asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(counter) : "memory");
        return;
    }
    if (!FLAG && !LAST) return;
    __shared__ bool last;
    __threadfence();  // this thread's logits visible before the count
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned old = atomicAdd(counter, 1u);
        last = LAST && old == gridDim.x - 1;
    }
    __syncthreads();
    if (LAST && last) {
        __threadfence();
        consume(logits, out, E, stamp);
        if (threadIdx.x == 0) *counter = 0;
    }
}

__global__ void consumer_pdl(const float* logits, float* out, int E, bool stamp) {
    moe_grid_wait();
    consume(logits, out, E, stamp);
}

__global__ void consumer_flag(const float* logits, float* out, int E, unsigned* counter, unsigned target,
                              bool stamp) {
    if (threadIdx.x == 0)
        while (ld_acquire(counter) < target) {
        }
    __syncthreads();
    consume(logits, out, E, stamp);
    __syncthreads();
    if (threadIdx.x == 0) *counter = 0;  // the next producer is a plain launch: it starts after this
}

enum Variant { ALONE, PLAIN, PDL, FLAG, RELEASE, LAST, N_VARIANTS };
const char* names[] = {"producer alone (tiny_gemm<1>)",  "plain: stream order",
                       "pdl: griddepcontrol.wait",       "flag: fence, barrier, count a block",
                       "release: count each logit",      "last: the last block consumes"};

struct Bufs {
    __nv_bfloat16 *hidden, *gate;
    float *logits, *out;
    unsigned* counter;
    int H, E;
};

void enqueue(Variant v, const Bufs& b, cudaStream_t s, bool stamp) {
    dim3 grid((b.E + TINY_EXPERTS_PER_BLOCK - 1) / TINY_EXPERTS_PER_BLOCK, 1);
    const int cthreads = 32 * ((b.E + 31) / 32);
    if (v == LAST) {
        producer<false, true><<<grid, TINY_THREADS, 0, s>>>(b.hidden, b.gate, b.logits, b.H, b.E, b.counter, b.out, stamp);
        CHECK(cudaGetLastError());
        return;
    }
    if (v == FLAG)
        producer<true, false><<<grid, TINY_THREADS, 0, s>>>(b.hidden, b.gate, b.logits, b.H, b.E, b.counter, b.out, stamp);
    else if (v == RELEASE)
        producer<false, false, true><<<grid, TINY_THREADS, 0, s>>>(b.hidden, b.gate, b.logits, b.H, b.E, b.counter, b.out, stamp);
    else
        producer<false, false><<<grid, TINY_THREADS, 0, s>>>(b.hidden, b.gate, b.logits, b.H, b.E, b.counter, b.out, stamp);
    CHECK(cudaGetLastError());
    if (v == ALONE) return;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(1);
    cfg.blockDim = dim3(cthreads);
    cfg.stream = s;
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = v == PLAIN ? 0 : 1;
    if (v == FLAG || v == RELEASE)
        CHECK(cudaLaunchKernelEx(&cfg, consumer_flag, (const float*)b.logits, b.out, b.E, b.counter,
                                 v == FLAG ? grid.x : (unsigned)b.E, stamp));
    else
        CHECK(cudaLaunchKernelEx(&cfg, consumer_pdl, (const float*)b.logits, b.out, b.E, stamp));
}

int main() {
    struct Shape {
        const char* name;
        int H, E;
    } shapes[] = {{"Qwen3-like: H 2048, 128 experts", 2048, 128}, {"GLM-like: H 4096, 288 experts", 4096, 288}};
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    printf("chapter 5's handoff at one row: the tiny GEMM, then a stand-in for the router's first step; caches warm\n");
    for (const Shape& sh : shapes) {
        Bufs b;
        b.H = sh.H;
        b.E = sh.E;
        std::vector<unsigned short> h(sh.H), g((size_t)sh.E * sh.H);
        unsigned x = 12345u;
        for (auto& v : h) v = 0x3f80 | ((x = x * 1664525u + 1013904223u) >> 25);  // 1.0 .. 2.0
        for (auto& v : g) v = 0x3c00 | ((x = x * 1664525u + 1013904223u) >> 25);  // 0.0078 .. 0.0156
        CHECK(cudaMalloc(&b.hidden, h.size() * 2));
        CHECK(cudaMalloc(&b.gate, g.size() * 2));
        CHECK(cudaMalloc(&b.logits, sh.E * sizeof(float)));
        CHECK(cudaMalloc(&b.out, sizeof(float)));
        CHECK(cudaMalloc(&b.counter, sizeof(unsigned)));
        CHECK(cudaMemset(b.counter, 0, sizeof(unsigned)));
        CHECK(cudaMemcpy(b.hidden, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(b.gate, g.data(), g.size() * 2, cudaMemcpyHostToDevice));
        printf("\n%s\n", sh.name);
        float reference = 0;
        for (int v = ALONE; v < N_VARIANTS; ++v) {
            const int reps = 20, replays = 200;
            cudaGraph_t graph;
            cudaGraphExec_t exec;
            CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
            for (int i = 0; i < reps; ++i) enqueue((Variant)v, b, s, false);
            CHECK(cudaStreamEndCapture(s, &graph));
            CHECK(cudaGraphInstantiate(&exec, graph, 0));
            cudaEvent_t e0, e1;
            CHECK(cudaEventCreate(&e0));
            CHECK(cudaEventCreate(&e1));
            std::vector<float> us;
            for (int r = 0; r < replays + 10; ++r) {
                CHECK(cudaEventRecord(e0, s));
                CHECK(cudaGraphLaunch(exec, s));
                CHECK(cudaEventRecord(e1, s));
                CHECK(cudaEventSynchronize(e1));
                float ms;
                CHECK(cudaEventElapsedTime(&ms, e0, e1));
                if (r >= 10) us.push_back(ms * 1000.0f / reps);
            }
            std::sort(us.begin(), us.end());
            CHECK(cudaEventDestroy(e0));
            CHECK(cudaEventDestroy(e1));
            // The consumer's result must be the max of the logits, whatever the handoff (the
            // replays above, with the same inputs each time; the marked ones below check more).
            float got = 0;
            CHECK(cudaMemcpy(&got, b.out, sizeof got, cudaMemcpyDeviceToHost));
            if (v == PLAIN) reference = got;
            int wrong = v > PLAIN && got != reference;
            // The gap on the global timer, one pair at a time, as a graph of that one pair (a
            // second launch from the host would arrive microseconds after the first ends).
            std::vector<long long> gap;
            if (v != ALONE) {
                cudaGraph_t g1;
                cudaGraphExec_t x1;
                CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
                // 0x7f bytes: 3.4e38 in every logit, larger than any the GEMM writes (under 100
                // here), so a consumer that reads any logit before its store returns it.
                CHECK(cudaMemsetAsync(b.logits, 0x7f, b.E * sizeof(float), s));
                enqueue((Variant)v, b, s, true);
                CHECK(cudaStreamEndCapture(s, &g1));
                CHECK(cudaGraphInstantiate(&x1, g1, 0));
                for (int r = 0; r < 210; ++r) {
                    const unsigned long long zero = 0;
                    CHECK(cudaMemcpyToSymbolAsync(g_prod_end, &zero, sizeof zero, 0, cudaMemcpyHostToDevice, s));
                    CHECK(cudaMemcpyToSymbolAsync(g_cons_start, &zero, sizeof zero, 0, cudaMemcpyHostToDevice, s));
                    CHECK(cudaGraphLaunch(x1, s));
                    CHECK(cudaStreamSynchronize(s));
                    unsigned long long pe, cs;
                    CHECK(cudaMemcpyFromSymbol(&pe, g_prod_end, sizeof pe));
                    CHECK(cudaMemcpyFromSymbol(&cs, g_cons_start, sizeof cs));
                    CHECK(cudaMemcpy(&got, b.out, sizeof got, cudaMemcpyDeviceToHost));
                    wrong += got != reference;
                    if (r >= 10) gap.push_back((long long)cs - (long long)pe);
                }
                std::sort(gap.begin(), gap.end());
                CHECK(cudaGraphExecDestroy(x1));
                CHECK(cudaGraphDestroy(g1));
            }
            printf("  %-36s %6.2f us per call (p10 %.2f, p90 %.2f)", names[v], us[us.size() / 2],
                   us[us.size() / 10], us[us.size() * 9 / 10]);
            if (!gap.empty())
                printf("; last producer store -> consumer's load: median %lld ns (p10 %lld, p90 %lld)",
                       gap[gap.size() / 2], gap[gap.size() / 10], gap[gap.size() * 9 / 10]);
            if (wrong) printf("  WRONG: %d results not the logits' maximum", wrong);
            printf("\n");
            CHECK(cudaGraphExecDestroy(exec));
            CHECK(cudaGraphDestroy(graph));
        }
        CHECK(cudaFree(b.hidden));
        CHECK(cudaFree(b.gate));
        CHECK(cudaFree(b.logits));
        CHECK(cudaFree(b.out));
        CHECK(cudaFree(b.counter));
    }
    return 0;
}
