#!/bin/sh
# Builds and runs the emulator self-test. Exit status non-zero on any failure.
#   MOE_EMU_THREADS=n        number of worker threads
#   MOE_EMU_BF16_FULL=1      check all 2^32 float patterns for bf16 conversion (else step 7 + edges)
set -e
HERE=$(cd "$(dirname "$0")" && pwd)
EMU=$(dirname "$HERE")
OUT=${TMPDIR:-/tmp}/moe_emu_selftest.$$
mkdir -p "$OUT"
trap 'rm -rf "$OUT"' EXIT
CXX=${CXX:-g++}
FLAGS="-std=c++17 -O2 -ffp-contract=off -fno-strict-aliasing -pthread -Wall -Wextra -Wno-unused-parameter -DMOE_EMU=1 -I$EMU -I$HERE"
$CXX $FLAGS -c "$EMU/emu_runtime.cpp" -o "$OUT/emu_runtime.o"
$CXX $FLAGS -c "$HERE/wrapper2.cpp" -o "$OUT/wrapper2.o"
$CXX $FLAGS -c "$HERE/selftest_emu.cpp" -o "$OUT/selftest_emu.o"
$CXX -pthread "$OUT/selftest_emu.o" "$OUT/wrapper2.o" "$OUT/emu_runtime.o" -o "$OUT/selftest_emu"
"$OUT/selftest_emu"

# Stack guard: 100 frames of ~1 KiB fit in the default 256 KiB stack; 1000 frames must fault.
$CXX $FLAGS "$HERE/overflow_emu.cpp" "$OUT/emu_runtime.o" -o "$OUT/overflow_emu"
"$OUT/overflow_emu" 100
set +e
"$OUT/overflow_emu" 1000 >/dev/null 2>&1
rc=$?
set -e
if [ $rc -lt 128 ]; then
    echo "stack guard: FAILED (a 1 MiB recursion in a 256 KiB fiber stack did not fault, rc $rc)"
    exit 1
fi
echo "stack guard: PASSED (overflow faulted with status $rc)"
