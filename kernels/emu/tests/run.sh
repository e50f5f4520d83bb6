#!/bin/sh
# Builds and runs the emulator self-tests. Exit status non-zero on any failure.
#   EMU_TARGET=native        (default) build with $CXX (default g++) and run the binaries directly
#   EMU_TARGET=aarch64       cross-build with $AARCH64_CXX (default aarch64-linux-gnu-g++) and run
#                            every binary under $QEMU_AARCH64 (default qemu-aarch64) with the sysroot
#                            $AARCH64_SYSROOT (default /usr/aarch64-linux-gnu). Debian 12:
#                            apt-get install --no-install-recommends qemu-user g++-aarch64-linux-gnu
#   EMU_UCONTEXT=1           build with -DMOE_EMU_FORCE_UCONTEXT: the ucontext fallback instead of
#                            the assembly context switch (either target)
#   MOE_EMU_THREADS=n        number of worker threads
#   MOE_EMU_BF16_FULL=1      check all 2^32 float patterns for bf16 conversion (else step 7 + edges)
#   MOE_EMU_SPEED_LIMIT_S=s  limit of the speed check. Default 0.5 s for a native build with the
#                            assembly switch; x10 under QEMU and x10 for the ucontext fallback
#                            (printed when raised).
set -e
HERE=$(cd "$(dirname "$0")" && pwd)
EMU=$(dirname "$HERE")
TARGET=${EMU_TARGET:-native}
case $TARGET in
    native)
        CXX=${CXX:-g++}
        QEMU=
        ;;
    aarch64)
        CXX=${AARCH64_CXX:-aarch64-linux-gnu-g++}
        QEMU=${QEMU_AARCH64:-qemu-aarch64}
        SYSROOT=${AARCH64_SYSROOT:-/usr/aarch64-linux-gnu}
        for tool in "${CXX%% *}" "$QEMU"; do
            if ! command -v "$tool" >/dev/null 2>&1; then
                echo "run.sh: EMU_TARGET=aarch64 needs '$tool' (Debian: apt-get install --no-install-recommends qemu-user g++-aarch64-linux-gnu)" >&2
                exit 1
            fi
        done
        if [ ! -d "$SYSROOT/lib" ]; then
            echo "run.sh: EMU_TARGET=aarch64: no aarch64 sysroot at $SYSROOT (set AARCH64_SYSROOT)" >&2
            exit 1
        fi
        case $($CXX -dumpmachine) in
            aarch64*|arm64*) ;;
            *) echo "run.sh: EMU_TARGET=aarch64: $CXX targets $($CXX -dumpmachine), not aarch64" >&2; exit 1 ;;
        esac
        ;;
    *)
        echo "run.sh: unknown EMU_TARGET '$TARGET' (native or aarch64)" >&2
        exit 1
        ;;
esac
SWITCH=assembly
CTXFLAG=
if [ "${EMU_UCONTEXT:-0}" = 1 ]; then
    SWITCH=ucontext
    CTXFLAG=-DMOE_EMU_FORCE_UCONTEXT
fi
# Runs a built binary for the target (under QEMU for aarch64).
run() {
    if [ -n "$QEMU" ]; then
        "$QEMU" -L "$SYSROOT" "$@"
    else
        "$@"
    fi
}
START=$(date +%s)
if [ -n "$QEMU" ]; then
    echo "emu tests: target $TARGET ($CXX, $($CXX -dumpmachine)), $SWITCH context switch, run under $("$QEMU" --version | head -n 1) -L $SYSROOT"
else
    echo "emu tests: target native ($CXX, $($CXX -dumpmachine)), $SWITCH context switch"
fi
# The speed check's 0.5 s is calibrated for native code with the assembly switch (35-50 ms on 2
# cores). Measured on the same machine: up to 0.3 s under QEMU, 0.7 s with ucontext, 3.7 s for both.
limit=
case $TARGET-$SWITCH in
    native-ucontext) limit=5; why="ucontext fallback" ;;
    aarch64-assembly) limit=5; why="QEMU emulation" ;;
    aarch64-ucontext) limit=50; why="QEMU emulation + ucontext fallback" ;;
esac
if [ -n "$limit" ] && [ -z "${MOE_EMU_SPEED_LIMIT_S:-}" ]; then
    MOE_EMU_SPEED_LIMIT_S=$limit
    export MOE_EMU_SPEED_LIMIT_S
    echo "emu tests: speed limit raised from 0.5 s to $limit s ($why)"
fi
OUT=${TMPDIR:-/tmp}/moe_emu_selftest.$$
mkdir -p "$OUT"
trap 'rm -rf "$OUT"' EXIT
# The binaries run in $OUT, so that a core dump of the stack guard check (native or QEMU's) lands
# there and is removed with it.
cd "$OUT"
FLAGS="-std=c++17 -O2 -ffp-contract=off -fno-strict-aliasing -fno-omit-frame-pointer -fno-optimize-sibling-calls -pthread -Wall -Wextra -Wno-unused-parameter -DMOE_EMU=1 $CTXFLAG -I$EMU -I$HERE"
# The runtime is four files (scheduler, memory, signals, tensor cores), linked as one object set.
RUNTIME=
for f in emu_runtime emu_memory emu_signals emu_tensor; do
    $CXX $FLAGS -c "$EMU/$f.cpp" -o "$OUT/$f.o"
    RUNTIME="$RUNTIME $OUT/$f.o"
done
$CXX $FLAGS -c "$HERE/wrapper2.cpp" -o "$OUT/wrapper2.o"
$CXX $FLAGS -c "$HERE/selftest_emu.cpp" -o "$OUT/selftest_emu.o"
$CXX -pthread "$OUT/selftest_emu.o" "$OUT/wrapper2.o" $RUNTIME -o "$OUT/selftest_emu"
run "$OUT/selftest_emu"

# Hopper (hopper.h): wgmma against tc_model, TMA, mbarriers, named barriers, and the misuses.
# glibc fills freed memory (perturb) and keeps no per-thread cache of freed chunks (tcache), so
# that a use after free in the runtime reads garbage at once instead of a stale copy (the cluster
# groups freed while another group still ran did not crash without it).
# Twice: on four workers (the self-test's default: two groups of workers for clusters of two)
# and on two (one group, whose other rank may still be leaving its last gathering when the
# launching thread returns).
FREED_FILLED=glibc.malloc.tcache_count=0:glibc.malloc.perturb=165
$CXX $FLAGS "$HERE/hopper_emu.cpp" $RUNTIME -o "$OUT/hopper_emu"
GLIBC_TUNABLES=$FREED_FILLED run "$OUT/hopper_emu"
MOE_EMU_THREADS=2 GLIBC_TUNABLES=$FREED_FILLED run "$OUT/hopper_emu" \
    > "$OUT/hopper_emu_2.log" || { cat "$OUT/hopper_emu_2.log"; exit 1; }
echo "on 2 workers, $(tail -n 1 "$OUT/hopper_emu_2.log")"

# A worker thread the OS will not start (failthread_shim): a launch of clusters of two on four
# workers starts three threads; whichever fails, at once or 100 ms late (when the threads before
# it already wait at their first gathering), the launch ends with the runtime's report instead of
# waiting for a rank that never comes. The fourth start never happens: that run must succeed.
# Native builds only: under QEMU the host's LD_PRELOAD would reach qemu, not the program.
if [ -z "$QEMU" ]; then
    $CXX $FLAGS -shared -fPIC "$HERE/failthread_shim.cpp" -o "$OUT/failthread_shim.so" -ldl
    $CXX $FLAGS "$HERE/threadfail_emu.cpp" $RUNTIME -o "$OUT/threadfail_emu"
    for delay in 0 100; do
        for n in 1 2 3 4; do
            LD_PRELOAD="$OUT/failthread_shim.so" MOE_TEST_FAIL_THREAD=$n MOE_TEST_FAIL_DELAY_MS=$delay \
                MOE_EMU_THREADS=4 timeout 60 "$OUT/threadfail_emu"
        done
    done
else
    echo "thread-start check: skipped under QEMU (an LD_PRELOAD would reach qemu, not the program)"
fi

# What the context switch must preserve: callee-saved registers, FP control state, stack alignment.
$CXX $FLAGS "$HERE/ctxswitch_emu.cpp" $RUNTIME -o "$OUT/ctxswitch_emu"
run "$OUT/ctxswitch_emu"

# Stack guard: 100 frames of ~1 KiB fit in the default 256 KiB stack; 1000 frames run into the
# guard page, which the emulator must report as a stack overflow of that thread (status 3), not
# crash on.
$CXX $FLAGS "$HERE/overflow_emu.cpp" $RUNTIME -o "$OUT/overflow_emu"
run "$OUT/overflow_emu" 100
set +e
msg=$(run "$OUT/overflow_emu" 1000 2>&1)
rc=$?
set -e
case "$rc:$msg" in
    3:*"ran past the end of its"*"stack"*) echo "stack guard: PASSED (reported: ${msg#*: })" ;;
    *) echo "stack guard: FAILED (a 1 MiB recursion in a 256 KiB fiber stack gave status $rc: $msg)"; exit 1 ;;
esac
echo "emu tests: all PASSED on target $TARGET ($SWITCH context switch) in $(($(date +%s) - START)) s"
