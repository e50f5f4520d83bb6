// emu_memory.cpp -- the emulated device's memory: every allocation in its own mapping, placed so
// that a guard page (no access) follows its end and another precedes its mapping. A thread that
// reads or writes past the end of a buffer by even one 16-byte word faults on the guard page at
// once, and emu_signals.cpp reports the thread, the address and the buffer (compute-sanitizer's
// memcheck, on the CPU). Allocations start 16-byte aligned (vector loads of uint4 stay legal),
// so up to 15 bytes of padding may sit between a buffer's end and its guard page, and 64 bytes
// before its start: both are filled with a pattern and checked after every launch, which
// catches a small overrun into them (without the thread, which is gone by then).
//
// A registry of live allocations names the buffer an address belongs to or is nearest to. The
// device has a memory size, like a GPU (MOE_EMU_MEMORY_GB, else half of the host's RAM), so a
// huge allocation is an error instead of the host's out-of-memory killer.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include <sys/mman.h>
#include <unistd.h>

#include "emu_internal.h"

namespace emu_rt {
namespace {

const unsigned char kPad = 0xCB;  // the padding's pattern
const size_t kLead = 64;          // checked padding before a buffer

struct Alloc {
    char* map;        // the whole mapping: [guard][lead + data + tail][guard]
    size_t map_len;
    char* start;      // what the kernel sees
    size_t bytes;     // what was asked for
    size_t tail;      // padding after the data, up to the guard page
    unsigned device;
    std::string what;
};

std::mutex g_mu;
std::map<uintptr_t, Alloc> g_allocs;  // by start address
unsigned long long g_used = 0;

size_t page() {
    static size_t p = (size_t)sysconf(_SC_PAGESIZE);
    return p;
}

std::string human(unsigned long long b) {
    if (b >= (1ull << 30)) return fmt("%.1f GiB", b / double(1ull << 30));
    if (b >= (1ull << 20)) return fmt("%.1f MiB", b / double(1ull << 20));
    if (b >= (1ull << 10)) return fmt("%.1f KiB", b / double(1ull << 10));
    return fmt("%llu bytes", b);
}

std::string name_of(const Alloc& a) {
    return fmt("%s (%zu bytes at %p)", a.what.c_str(), a.bytes, (void*)a.start);
}

}  // namespace

std::string describe_address(unsigned long long addr) {
    if (addr < 65536) return fmt("address %#llx is a null pointer plus an offset", addr);
    std::lock_guard<std::mutex> g(g_mu);
    if (g_allocs.empty()) return "";
    const Alloc* best = nullptr;
    long long best_dist = 0;  // > 0: past the end; < 0: before the start
    auto consider = [&](const Alloc& a) {
        unsigned long long s = (uintptr_t)a.start, e = s + a.bytes;
        long long d;
        if (addr >= e) d = (long long)(addr - e) + 1;  // 1 = the first byte past the end
        else if (addr < s) d = -(long long)(s - addr);
        else d = 0;
        if (!best || std::llabs(d) < std::llabs(best_dist)) best = &a, best_dist = d;
    };
    auto it = g_allocs.upper_bound((uintptr_t)addr);
    if (it != g_allocs.end()) consider(it->second);
    if (it != g_allocs.begin()) consider(std::prev(it)->second);
    if (!best) return "";
    unsigned long long s = (uintptr_t)best->start;
    if (best_dist == 0) return fmt("inside %s, at byte offset %llu", name_of(*best).c_str(), addr - s);
    const unsigned long long n = best_dist > 0 ? (unsigned long long)best_dist - 1 : (unsigned long long)-best_dist;
    // Far from any buffer: say so, and still name the nearest.
    if (n > page() * 16) return fmt("not near any device buffer (the nearest, %s, is %llu bytes away)", name_of(*best).c_str(), n);
    if (best_dist > 0) {
        if (n == 0) return "just past the end of " + name_of(*best);
        return fmt("%llu bytes past the end of %s", n, name_of(*best).c_str());
    }
    return fmt("%llu bytes before the start of %s", n, name_of(*best).c_str());
}

bool check_padding(unsigned device, std::string& msg) {
    std::lock_guard<std::mutex> g(g_mu);
    for (auto& kv : g_allocs) {
        Alloc& a = kv.second;
        if (a.device != device) continue;
        const char* regions[2] = {a.start - kLead, a.start + a.bytes};
        const size_t lens[2] = {kLead, a.tail};
        for (int r = 0; r < 2; ++r) {
            const unsigned char* p = (const unsigned char*)regions[r];
            size_t first = lens[r], last = 0;
            for (size_t i = 0; i < lens[r]; ++i)
                if (p[i] != kPad) {
                    if (first == lens[r]) first = i;
                    last = i;
                }
            if (first == lens[r]) continue;
            const char* tail = "(found after the launch, so the thread is not known; on a GPU this write would "
                               "have corrupted a neighbour or faulted)";
            if (r == 0)
                msg = fmt("the %zu bytes from %zu to %zu bytes before the start of %s were written %s", last - first + 1,
                          kLead - first, kLead - last, name_of(a).c_str(), tail);
            else
                msg = fmt("the %zu bytes from %zu to %zu bytes past the end of %s were written %s", last - first + 1,
                          first, last, name_of(a).c_str(), tail);
            memset((void*)regions[r], kPad, lens[r]);
            return false;
        }
    }
    return true;
}

}  // namespace emu_rt

using namespace emu_rt;

extern "C" unsigned long long emu_memory_limit(void) {
    static unsigned long long limit = [] {
        if (const char* s = getenv("MOE_EMU_MEMORY_GB")) {
            double gb = strtod(s, nullptr);
            if (gb > 0) return (unsigned long long)(gb * (double)(1ull << 30));
        }
        long pages = sysconf(_SC_PHYS_PAGES);
        unsigned long long ram = pages > 0 ? (unsigned long long)pages * page() : (8ull << 30);
        return ram / 2;
    }();
    return limit;
}

extern "C" unsigned long long emu_memory_used(void) {
    std::lock_guard<std::mutex> g(g_mu);
    return g_used;
}

extern "C" void* emu_alloc(size_t bytes, unsigned device, const char* what, char* err, size_t err_len) {
    auto fail = [&](const std::string& m) -> void* {
        if (err && err_len) {
            size_t n = std::min(m.size(), err_len - 1);
            memcpy(err, m.data(), n);
            err[n] = 0;
        }
        return nullptr;
    };
    const size_t pg = page();
    const size_t data = (bytes + 15) / 16 * 16;
    if (bytes > ((size_t)1 << 56)) return fail("larger than any device memory");
    const size_t body = (kLead + data + pg - 1) / pg * pg;
    const size_t map_len = body + 2 * pg;
    {
        std::lock_guard<std::mutex> g(g_mu);
        if (g_used + body > emu_memory_limit())
            return fail(fmt("the emulated device has %s (MOE_EMU_MEMORY_GB), %s in use", human(emu_memory_limit()).c_str(),
                            human(g_used).c_str()));
    }
    void* m = mmap(nullptr, map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANON, -1, 0);
    if (m == MAP_FAILED) return fail(fmt("the host refused %s: %s", human(map_len).c_str(), strerror(errno)));
    char* map = static_cast<char*>(m);
    mprotect(map, pg, PROT_NONE);                  // guard before
    mprotect(map + pg + body, pg, PROT_NONE);      // guard after
    Alloc a;
    a.map = map;
    a.map_len = map_len;
    a.start = map + pg + body - data;
    a.bytes = bytes;
    a.tail = data - bytes;
    a.device = device;
    a.what = what ? what : "a device buffer";
    memset(a.start - kLead, kPad, kLead);
    memset(a.start + bytes, kPad, a.tail);
    std::lock_guard<std::mutex> g(g_mu);
    g_used += body;
    char* start = a.start;
    g_allocs.emplace((uintptr_t)start, std::move(a));
    return start;
}

extern "C" void emu_free(void* ptr) {
    if (!ptr) return;
    Alloc a;
    {
        std::lock_guard<std::mutex> g(g_mu);
        auto it = g_allocs.find((uintptr_t)ptr);
        if (it == g_allocs.end()) return;
        a = std::move(it->second);
        g_allocs.erase(it);
        g_used -= a.map_len - 2 * page();
    }
    munmap(a.map, a.map_len);
}
