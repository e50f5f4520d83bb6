// emu_abi.h -- what the emulator's runtime (emu_runtime.cpp) exports to the Rust side
// (kernels/src/emu/ffi.rs mirrors these declarations; change both together).
#ifndef MOE_EMU_ABI_H
#define MOE_EMU_ABI_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// What a launch reports. `kind`: 0 ok, 1 bad launch configuration, 2 a kernel broke a rule
// (barrier, warp collective, assert), 3 a thread faulted, 4 deadlock, 5 the CPU cannot run this
// build. `fault` (kind 3): 1 memory, 2 write outside a buffer (found after the launch),
// 3 stack overflow, 4 integer division, 5 illegal instruction.
typedef struct EmuReport {
    int kind;
    int fault;
    int has_thread;
    unsigned block[3];
    unsigned thread[3];
    int has_address;
    unsigned long long address;
    char message[4096];
} EmuReport;

typedef void (*emu_kernel_fn)(void** params);

// Runs one launch to completion. `device` tags the launch (buffer checks after the launch look
// only at that device's allocations); `deadlock_ms` is how long a block may make no progress
// while threads spin before the launch fails. Returns report->kind.
int emu_launch(emu_kernel_fn fn, void** params, unsigned grid_x, unsigned grid_y, unsigned grid_z,
               unsigned block_x, unsigned block_y, unsigned block_z, size_t dynamic_shared_bytes,
               unsigned device, unsigned long long deadlock_ms, EmuReport* report);

// Device memory: `bytes` at an address 16-byte aligned whose end touches a guard page, labelled
// `what` for fault reports. NULL (with `err` filled) when the memory limit or the host says no.
void* emu_alloc(size_t bytes, unsigned device, const char* what, char* err, size_t err_len);
void emu_free(void* ptr);
// The emulated device's memory size (MOE_EMU_MEMORY_GB, else half of the host's RAM) and use.
unsigned long long emu_memory_limit(void);
unsigned long long emu_memory_used(void);

unsigned emu_worker_count(void);

#ifdef __cplusplus
}
#endif

#endif  // MOE_EMU_ABI_H
