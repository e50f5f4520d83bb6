// threadfail_emu.cpp -- what a cluster launch does when a worker thread cannot be started: run by
// run.sh under failthread_shim (LD_PRELOAD), which fails the Nth pthread_create. Clusters of two
// on four workers start three threads besides the launching one (group 0's rank 1, group 1's two
// ranks); whichever fails, the launch must end with the runtime's report, not wait for a rank that
// will never come. Exit status 0 when it does.
#include "cuda_emu.h"
#include "test_hopper.cu"
#include "emu_trampoline.h"
#include "launch_shim.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" void tramp_k_cluster_late(void** p) { emu::call_kernel(k_cluster_late, p); }

int main() {
    setenv("MOE_EMU_THREADS", "4", 0);
    std::vector<int> out(4, -1);
    int* po = out.data();
    int slow = -1, ms = 0;  // no cluster late
    void* params[] = {&po, &slow, &ms};
    char err[4096];
    const int rc = emu_launch_msg(tramp_k_cluster_late, params, 4, 1, 1, 32, 1, 1, 0, err, sizeof err);
    const char* fail = getenv("MOE_TEST_FAIL_THREAD");
    const bool want_error = fail && atoi(fail) >= 1 && atoi(fail) <= 3;
    const bool ok = want_error ? rc == 1 && strstr(err, "could not start the 2 worker threads") : rc == 0;
    const char* delay = getenv("MOE_TEST_FAIL_DELAY_MS");
    if (want_error)
        printf("thread start %s fails after %s ms: rc %d, %s -- %s\n", fail, delay ? delay : "0", rc, err,
               ok ? "PASSED" : "FAILED");
    else
        printf("thread start %s never comes (the launch makes three): rc %d%s%s -- %s\n", fail ? fail : "none", rc,
               rc ? ", " : "", rc ? err : "", ok ? "PASSED" : "FAILED");
    return ok ? 0 : 1;
}
