// launch_shim.h -- the C++ self-tests launch through this: emu_launch of emu_abi.h, with its
// report's message copied into a caller's buffer (as the tests expect).
#ifndef MOE_EMU_TESTS_LAUNCH_SHIM_H
#define MOE_EMU_TESTS_LAUNCH_SHIM_H
#include <cstring>
#include "emu_abi.h"

static inline int emu_launch_msg(void (*fn)(void**), void** params, unsigned gx, unsigned gy, unsigned gz,
                                 unsigned bx, unsigned by, unsigned bz, size_t dyn, char* err, size_t err_len) {
    static EmuReport report;  // 4 KiB: not on a small stack
    int rc = emu_launch(fn, params, gx, gy, gz, bx, by, bz, dyn, 0, 20000, &report);
    if (err && err_len) {  // truncating copy (snprintf would warn about the truncation)
        size_t n = strnlen(report.message, sizeof report.message);
        if (n >= err_len) n = err_len - 1;
        memcpy(err, report.message, n);
        err[n] = 0;
    }
    return rc;
}
#endif
