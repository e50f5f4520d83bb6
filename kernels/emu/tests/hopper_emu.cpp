// hopper_emu.cpp -- self-test of the emulator's Hopper machinery (kernels/emu/hopper.h): wgmma
// against tc_model.h on both shared-memory layouts, TMA boxes with zero fill and the 128-byte
// swizzle on mbarrier phases, a producer/consumer pipeline on mbarriers and a named barrier,
// elect.sync and setmaxnreg, and each misuse the emulator reports, with its message. Built and run
// by run.sh.
#include "cuda_emu.h"
#include "test_hopper.cu"
#include "emu_trampoline.h"
#include "launch_shim.h"
#include "tc_model.h"

#include <cstdlib>
#include <string>
#include <vector>

#define TRAMP(k) extern "C" void tramp_##k(void** p) { emu::call_kernel(k, p); }
TRAMP(k_wgmma) TRAMP(k_tma) TRAMP(k_pipeline) TRAMP(k_err_mbar_deadlock) TRAMP(k_err_tx) TRAMP(k_err_tma_outside)
TRAMP(k_err_acc_write) TRAMP(k_acc_read_early) TRAMP(k_err_static_desc) TRAMP(k_err_half_warpgroup)
TRAMP(k_cluster) TRAMP(k_cluster_ring) TRAMP(k_cluster_late) TRAMP(k_no_cluster) TRAMP(k_err_multicast) TRAMP(k_err_remote_rank) TRAMP(k_err_cluster_deadlock)
TRAMP(k_err_exited_partner) TRAMP(k_err_no_proxy_fence)
TRAMP(k_err_overwrite_in_flight) TRAMP(k_cp_async_fenced) TRAMP(k_err_cp_async_no_fence) TRAMP(k_elect)

static int g_checks = 0, g_failures = 0;
#define CHECK(cond, ...)                                                              \
    do {                                                                              \
        ++g_checks;                                                                   \
        if (!(cond)) {                                                                \
            ++g_failures;                                                             \
            printf("FAIL %s:%d: %s -- ", __FILE__, __LINE__, #cond);                  \
            printf(__VA_ARGS__);                                                      \
            printf("\n");                                                             \
        }                                                                             \
    } while (0)

struct Res {
    int rc;
    std::string err;
};
static Res launch(void (*fn)(void**), std::vector<void*> params, unsigned threads, size_t dyn, unsigned blocks = 1) {
    char err[4096];
    const int rc = emu_launch_msg(fn, params.data(), blocks, 1, 1, threads, 1, 1, dyn, err, sizeof err);
    return Res{rc, rc ? std::string(err) : std::string()};
}
static bool contains(const std::string& s, const char* sub) { return s.find(sub) != std::string::npos; }

static unsigned long long g_rng = 88172645463325252ull;
static unsigned next_u32() {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return (unsigned)(g_rng >> 16);
}
static unsigned short random_bf16() {  // random sign and significand, exponent in [-8, 8]
    const unsigned r = next_u32();
    return (unsigned short)(((r & 1) << 15) | ((unsigned)(120 + (r >> 1) % 17) << 7) | ((r >> 8) & 0x7f));
}
static unsigned bits(float f) {
    unsigned u;
    memcpy(&u, &f, 4);
    return u;
}

// The emulator's tensor map of a row-major bf16 matrix (what the host encodes).
static emu_tensor_map map_of(const unsigned short* m, unsigned long long rows, unsigned long long cols,
                             unsigned long long box_rows) {
    emu_tensor_map t;
    memset(&t, 0, sizeof t);
    t.magic = EMU_TENSOR_MAP_MAGIC;
    t.base = (unsigned long long)(uintptr_t)m;
    t.rows = rows;
    t.cols = cols;
    t.row_bytes = cols * 2;
    t.box_rows = box_rows;
    t.box_cols = 64;
    t.elem_bytes = 2;
    t.swizzle = 128;
    return t;
}

static void test_wgmma() {
    std::vector<unsigned short> a(64 * HT_K), b(128 * HT_K);
    std::vector<float> c(64 * 128), want(64 * 128);
    for (auto& v : a) v = random_bf16();
    for (auto& v : b) v = random_bf16();
    for (auto& v : c) v = (float)(int)(next_u32() % 201) - 100.0f;
    for (int m = 0; m < 64; ++m)
        for (int n = 0; n < 128; ++n) {
            float acc = c[m * 128 + n];
            for (int kk = 0; kk < HT_KS; ++kk)
                acc = tc_model::dot(&a[m * HT_K + 16 * kk], &b[n * HT_K + 16 * kk], 16, acc, tc_model::H100);
            want[m * 128 + n] = acc;
        }
    for (int swz = 0; swz < 2; ++swz) {
        std::vector<float> d(64 * 128, -1.0f);
        const unsigned short* pa = a.data();
        const unsigned short* pb = b.data();
        const float* pc = c.data();
        float* pd = d.data();
        Res r = launch(tramp_k_wgmma, {&pa, &pb, &pc, &pd, &swz}, 128, (64 + 128) * HT_K * 2);
        CHECK(r.rc == 0, "wgmma launch: %s", r.err.c_str());
        int differ = 0;
        for (int i = 0; i < 64 * 128; ++i) differ += bits(d[i]) != bits(want[i]);
        CHECK(differ == 0, "wgmma m64n128k16 x %d, %s layout: %d of 8192 outputs differ from tc_model", HT_KS,
              swz ? "swizzled" : "flat", differ);
        printf("  wgmma m64n128k16 x %d k-steps, %s layout: %d of 8192 outputs differ from tc_model\n", HT_KS,
               swz ? "128-byte swizzled" : "flat", differ);
    }
}

static void test_tma() {
    const int rows = 100, cols = 72, box_rows = 64, c0 = 32, c1 = 50;
    std::vector<unsigned short> m(rows * cols);
    for (auto& v : m) v = random_bf16();
    emu_tensor_map map = map_of(m.data(), rows, cols, box_rows);
    std::vector<unsigned short> out(2 * box_rows * 64, 0xdead);
    const void* pm = &map;
    unsigned short* po = out.data();
    int a0 = c0, a1 = c1, br = box_rows;
    Res r = launch(tramp_k_tma, {&pm, &a0, &a1, &po, &br}, 96, box_rows * 128);
    CHECK(r.rc == 0, "tma launch: %s", r.err.c_str());
    int wrong = 0, zeros = 0;
    for (int phase = 0; phase < 2; ++phase)
        for (int i = 0; i < box_rows * 64; ++i) {
            const int gr = c1 + 64 * phase + i / 64, gc = c0 + i % 64;
            const bool in = gr < rows && gc < cols;
            const unsigned short w = in ? m[gr * cols + gc] : 0;
            wrong += out[phase * box_rows * 64 + i] != w;
            zeros += !in;
        }
    CHECK(wrong == 0, "TMA boxes: %d elements wrong", wrong);
    printf("  TMA: two boxes of 64 x 64 bf16 on two phases of one mbarrier, %d of %d elements past the "
           "tensor filled with zeros, %d wrong\n",
           zeros, 2 * box_rows * 64, wrong);
}

static void test_pipeline() {
    const int n = 50;
    std::vector<int> out(n + 1, -1);
    int* po = out.data();
    int nn = n;
    Res r = launch(tramp_k_pipeline, {&po, &nn}, 64, 0);
    CHECK(r.rc == 0, "pipeline launch: %s", r.err.c_str());
    int wrong = out[n] != 1;
    for (int i = 0; i < n; ++i) wrong += out[i] != 7 * i + 1;
    CHECK(wrong == 0, "pipeline: %d values wrong", wrong);
    printf("  mbarrier pipeline: %d values through one slot (full/empty phases), then a named barrier: %d wrong\n",
           n, wrong);
}

static void test_elect() {
    const int warps = 4;
    std::vector<int> out(2 * warps, -1), count(warps, 0);
    int *po = out.data(), *pc = count.data();
    Res r = launch(tramp_k_elect, {&po, &pc}, 32 * warps, 0);
    CHECK(r.rc == 0, "elect launch: %s", r.err.c_str());
    int wrong = 0;
    for (int w = 0; w < warps; ++w) wrong += out[2 * w] != 0 || out[2 * w + 1] != 1 || count[w] != 2;
    CHECK(wrong == 0, "elect: %d warps wrong (lanes %d, %d; count %d in warp 0)", wrong, out[0], out[1], count[0]);
    printf("  elect.sync: lane 0 of a full warp and lane 1 of its odd lanes, once each, in %d warps; setmaxnreg "
           "accepted: %d wrong\n",
           warps, wrong);
}

static void expect_error(const char* what, void (*fn)(void**), std::vector<void*> params, unsigned threads,
                         size_t dyn, std::vector<const char*> subs, unsigned blocks = 1) {
    const auto t0 = std::chrono::steady_clock::now();
    Res r = launch(fn, params, threads, dyn, blocks);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    bool ok = r.rc != 0;
    for (const char* s : subs) ok = ok && contains(r.err, s);
    CHECK(ok, "%s: rc %d, message '%s'", what, r.rc, r.err.c_str());
    CHECK(secs < 5.0, "%s: reported after %.1f s (not by the deadlock timer)", what, secs);
    printf("  [%s] -> %s\n", what, r.err.c_str());
}

static void test_misuse() {
    std::vector<unsigned short> m(64 * 64, 0x3f80);
    emu_tensor_map map = map_of(m.data(), 64, 64, 64);
    emu_tensor_map bad = map;
    bad.magic = 0;
    const void* pm = &map;
    const void* pbad = &bad;
    std::vector<float> out(256, 0.0f);
    float* pf = out.data();
    int* pi = nullptr;
    int more = 1024, fewer = -1024;
    std::vector<unsigned short> ab((64 + 128) * HT_K, 0x3f80);
    std::vector<float> cd(2 * 64 * 128, 0.0f);
    const unsigned short* pa = ab.data();
    const unsigned short* pb = ab.data() + 64 * HT_K;
    const float* pc = cd.data();
    float* pd = cd.data() + 64 * 128;
    int flat = 0;
    // ANCHOR: misuse
    expect_error("mbarrier phase that never completes", tramp_k_err_mbar_deadlock, {&pi}, 64, 0,
                 {"deadlock", "threads 0-63 wait for the phase of parity 0", "1 of its 2 arrivals still to come"});
    expect_error("more transaction bytes announced than copied", tramp_k_err_tx, {&pm, &more}, 32, 8192,
                 {"deadlock", "1024 transaction bytes announced with expect_tx that no copy will deliver"});
    expect_error("fewer transaction bytes announced than copied", tramp_k_err_tx, {&pm, &fewer}, 32, 8192,
                 {"moe_tma_load_2d at test_hopper.cu:", "1024 transaction bytes more than were announced"});
    expect_error("TMA box past shared memory", tramp_k_err_tma_outside, {&pm}, 32, 4096,
                 {"moe_tma_load_2d", "runs past the block's 4096 bytes of dynamic shared memory"});
    expect_error("not a tensor map", tramp_k_err_tx, {&pbad, &more}, 32, 8192, {"is not a tensor map encoded for the emulator"});
    expect_error("accumulators written before wgmma.wait_group", tramp_k_err_acc_write, {&pf}, 128, 8192,
                 {"moe_wgmma_bf16 at test_hopper.cu:", "written while it was in flight"});
    expect_error("descriptor of static shared memory", tramp_k_err_static_desc, {&pf}, 128, 0,
                 {"__cvta_generic_to_shared at test_hopper.cu:", "not in the block's dynamic shared memory"});
    expect_error("wgmma in half a warpgroup", tramp_k_err_half_warpgroup, {&pf}, 64, 8192, {"whole warpgroups of 128 threads"});
    // ANCHOR_END: misuse
    // ANCHOR: cluster_misuse
    expect_error("stores read by wgmma with no proxy fence", tramp_k_err_no_proxy_fence, {&pa, &pb, &pc, &pd, &flat},
                 128, (64 + 128) * HT_K * 2,
                 {"moe_wgmma_bf16 at test_hopper.cu:", "operand A reads shared bytes 0 to 15",
                  "changed after the block's last fence.proxy.async"});
    expect_error("cp.async copies read by wgmma with no proxy fence", tramp_k_err_cp_async_no_fence, {&pa, &pf}, 128,
                 8192, {"moe_wgmma_bf16 at test_hopper.cu:", "changed after the block's last fence.proxy.async"});
    expect_error("operand overwritten while the wgmma is in flight", tramp_k_err_overwrite_in_flight, {&pf}, 128, 8192,
                 {"moe_wgmma_bf16 at test_hopper.cu:", "changed between the wgmma and the moe_wgmma_wait"});
    expect_error("multicast to a rank outside the cluster", tramp_k_err_multicast, {&pm}, 32, 8192,
                 {"moe_tma_load_2d_multicast at test_hopper.cu:", "mask 0x7 names rank 2, outside the cluster",
                  "rank 0]"},
                 2);
    expect_error("arrival on a rank outside the cluster", tramp_k_err_remote_rank, {&pi}, 32, 0,
                 {"moe_mbar_arrive_cluster at test_hopper.cu:", "rank 2 is outside the cluster"}, 2);
    expect_error("cluster barrier one block never reaches", tramp_k_err_cluster_deadlock, {&pi}, 64, 0,
                 {"cluster of blocks (0,0,0) to (1,0,0)", "deadlock",
                  "block (0,0,0), rank 0: threads 0-63 wait at barrier.cluster (moe_cluster_sync) at test_hopper.cu:",
                  "where 64 of the cluster's 128 threads arrived",
                  "block (1,0,0), rank 1: threads 0-63 wait for the phase of parity 0"},
                 2);
    expect_error("arrival on a block that has exited", tramp_k_err_exited_partner, {&pi}, 32, 0,
                 {"moe_mbar_arrive_cluster at test_hopper.cu:", "block (1,0,0), rank 1 of the cluster, has exited"}, 2);
    expect_error("grid not a whole number of clusters", tramp_k_err_exited_partner, {&pi}, 32, 0,
                 {"invalid launch configuration", "clusters of (2,1,1) blocks", "not a whole number of clusters"}, 3);
    // ANCHOR_END: cluster_misuse
    // The same copies with the fence: no error, the product.
    {
        Res r = launch(tramp_k_cp_async_fenced, {&pa, &pf}, 128, 8192);
        int right = 0;
        for (int t = 0; t < 128; ++t) right += out[t] == 16.0f;
        CHECK(r.rc == 0 && right == 128, "cp.async then the proxy fence: rc %d (%s), %d of 128 right", r.rc,
              r.err.c_str(), right);
        printf("  [cp.async copies, the proxy fence, wgmma] -> no error, %d of 128 threads hold the product\n", right);
    }
    // Reading the accumulators before the wait is not an error the emulator can see: it reads the
    // poison NaN, and after the wait the product.
    Res r = launch(tramp_k_acc_read_early, {&pf}, 128, 8192);
    int poison = 0, right = 0;
    for (int t = 0; t < 128; ++t) poison += bits(out[t]) == EMU_WGMMA_POISON, right += out[128 + t] == 16.0f;
    CHECK(r.rc == 0 && poison == 128 && right == 128, "read before the wait: rc %d, %d poison, %d right (%s)", r.rc,
          poison, right, r.err.c_str());
    printf("  [accumulators read before wgmma.wait_group] -> %d of 128 threads read the poison NaN 0x%08x, then %d "
           "the product after the wait\n",
           poison, EMU_WGMMA_POISON, right);
}

static void test_clusters() {
    const int rows = 300, cols = 72, c0 = 8, c1 = 20, blocks = 4;
    std::vector<unsigned short> m(rows * cols);
    for (auto& v : m) v = random_bf16();
    emu_tensor_map map = map_of(m.data(), rows, cols, 64);
    const void* pm = &map;
    std::vector<int> out(4 * blocks, -1);
    std::vector<unsigned short> boxes(blocks * 2 * 64 * 64, 0xdead);
    int* po = out.data();
    unsigned short* pb = boxes.data();
    int a0 = c0, a1 = c1;
    Res r = launch(tramp_k_cluster, {&pm, &a0, &a1, &po, &pb}, 96, 2 * 64 * 128, blocks);
    CHECK(r.rc == 0, "cluster launch: %s", r.err.c_str());
    int ranks_wrong = 0, wrong = 0;
    for (int b = 0; b < blocks; ++b) ranks_wrong += out[4 * b] != b % 2 || out[4 * b + 1] != 1;
    for (int b = 0; b < blocks; ++b)
        for (int i = 0; i < 2 * 64 * 64; ++i) {
            const int h = i / (64 * 64), gr = c1 + 64 * h + (i / 64) % 64, gc = c0 + i % 64;
            const unsigned short w = gr < rows && gc < cols ? m[gr * cols + gc] : 0;
            wrong += boxes[b * 2 * 64 * 64 + i] != w;
        }
    CHECK(ranks_wrong == 0 && wrong == 0, "clusters: %d blocks with a wrong rank or no remote arrival, %d elements wrong",
          ranks_wrong, wrong);
    printf("  clusters: 2 clusters of 2 blocks: ranks, barrier.cluster, an arrival on the other block's mbarrier, "
           "two boxes multicast to both blocks (%d of %d elements wrong)\n",
           wrong, blocks * 2 * 64 * 64);
    // Clusters of 2 x 2 blocks on a grid of 4 x 2: ranks x first, a ring of remote arrivals.
    {
        std::vector<int> ring(2 * 8, -1);
        int* pr = ring.data();
        char err[4096];
        void* params[] = {&pr};
        const int rc = emu_launch_msg(tramp_k_cluster_ring, params, 4, 2, 1, 64, 1, 1, 0, err, sizeof err);
        int bad = 0;
        for (int by = 0; by < 2; ++by)
            for (int bx = 0; bx < 4; ++bx) {
                const int b = bx + 4 * by, rank = bx % 2 + 2 * (by % 2);
                bad += ring[2 * b] != rank || ring[2 * b + 1] != 1;
            }
        CHECK(rc == 0 && bad == 0, "clusters of 2 x 2: rc %d (%s), %d blocks wrong", rc, rc ? err : "", bad);
        printf("  clusters of 2 x 2 blocks on a grid of 4 x 2: ranks x first, a ring of arrivals on the next rank's "
               "mbarrier (%d of 8 blocks wrong)\n",
               bad);
    }
    // Clusters that end far apart, on two groups of workers at once when there are four workers
    // (main's default; run.sh runs this again on two, one group): the group that finishes first
    // must leave the other's state alone. The runtime
    // once freed every group when the launching thread's worker returned, while the other ranks
    // of its own group could still be leaving their last gathering and the late cluster still
    // ran; with glibc filling freed memory (run.sh) that fails on two workers as well as four.
    {
        int late_bad = 0, late_rc = 0;
        std::string late_err;
        for (int rep = 0; rep < 4; ++rep) {
            std::vector<int> late(4, -1);
            int* pl = late.data();
            int slow = rep % 2, ms = 50;  // either cluster late: whichever group the launching thread is in
            const Res lr = launch(tramp_k_cluster_late, {&pl, &slow, &ms}, 32, 0, 4);
            if (lr.rc) late_rc = lr.rc, late_err = lr.err;
            for (int b = 0; b < 4; ++b) late_bad += late[b] != b % 2 + 1;
        }
        CHECK(late_rc == 0 && late_bad == 0, "clusters ending apart: rc %d (%s), %d of 16 blocks wrong", late_rc,
              late_err.c_str(), late_bad);
        printf("  2 clusters of 2 blocks ending 50 ms apart on %u workers, 4 launches (%d of 16 blocks wrong)\n",
               emu_worker_count(), late_bad);
    }
    std::vector<int> ranks(3, -1);
    int* pr = ranks.data();
    r = launch(tramp_k_no_cluster, {&pr}, 64, 0, 3);
    CHECK(r.rc == 0 && ranks[0] == 0 && ranks[1] == 0 && ranks[2] == 0, "no cluster: rc %d (%s), ranks %d %d %d", r.rc,
          r.err.c_str(), ranks[0], ranks[1], ranks[2]);
}

int main() {
    // Four workers unless the caller chose (run.sh runs this again on two): two clusters of two
    // at once (test_clusters), which a two-core machine's default of two workers never runs; a
    // machine with more cores runs these tests on four too.
    setenv("MOE_EMU_THREADS", "4", 0);
    const auto t0 = std::chrono::steady_clock::now();
    test_wgmma();
    test_tma();
    test_pipeline();
    test_elect();
    test_clusters();
    test_misuse();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("hopper selftest: %s -- %d checks, %d failures, %.1f s\n", g_failures ? "FAILED" : "PASSED", g_checks,
           g_failures, secs);
    return g_failures ? 1 : 0;
}
