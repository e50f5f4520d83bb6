// failthread_shim.cpp -- LD_PRELOAD library for run.sh's thread-start check: the Nth call of
// pthread_create in the process (N = MOE_TEST_FAIL_THREAD, counted from 1) fails with EAGAIN, as
// it does when the OS has no thread left to give, after MOE_TEST_FAIL_DELAY_MS milliseconds
// (default 0: the threads started before it then have time to reach their first gathering);
// every other call goes to the C library's.
#include <dlfcn.h>
#include <pthread.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <thread>

extern "C" int pthread_create(pthread_t* t, const pthread_attr_t* a, void* (*fn)(void*), void* arg) {
    using Create = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
    static Create real = reinterpret_cast<Create>(dlsym(RTLD_NEXT, "pthread_create"));
    static std::atomic<int> calls{0};
    const char* s = getenv("MOE_TEST_FAIL_THREAD");
    if (s && ++calls == atoi(s)) {
        const char* d = getenv("MOE_TEST_FAIL_DELAY_MS");
        if (d) std::this_thread::sleep_for(std::chrono::milliseconds(atoi(d)));
        return EAGAIN;
    }
    return real(t, a, fn, arg);
}
