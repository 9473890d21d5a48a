#!/usr/bin/env bash
# The CPU kernels (cpu/kernels.h) against PyTorch float64 autograd: every output element of every
# forward and backward kernel, on four sets of shapes (awkward ones included), accumulation of
# gradients, no reads of unwritten memory or scratch, no stray writes, and bitwise-identical results
# on 1, 2 and 3 threads. See tests/unit/test_cpu_kernels.c for the tolerance. The C test is built and run
# three times: -march=native, and where the CPU allows, AVX2 and baseline x86-64, which use the
# other SIMD widths and matmul tiles of the header. The benchmark is compiled (not run), so it cannot rot.
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-}"
if [ -z "$PY" ]; then
  for p in python3 /usr/bin/python3; do
    if "$p" -c 'import torch' >/dev/null 2>&1; then PY="$p"; break; fi
  done
fi
[ -n "$PY" ] || { echo "test_cpu_kernels: no python3 with torch found (set PYTHON=...)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

CFLAGS_TEST="-O3 -fopenmp -std=gnu11 -Wall -Wextra -Werror"
targets=(native)
if [ "$(uname -m)" = x86_64 ]; then
  grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && targets+=(haswell)
  targets+=(x86-64)
fi

# compile while PyTorch computes the references
pids=()
for march in "${targets[@]}"; do
  gcc $CFLAGS_TEST -march="$march" -o "$tmp/test_cpu_kernels_$march" tests/unit/test_cpu_kernels.c -lm &
  pids+=($!)
done
gcc $CFLAGS_TEST -march=native -o "$tmp/bench_cpu_kernels" tools/bench/bench_cpu_kernels.c -lm &
pids+=($!)
"$PY" tests/unit/cpu_kernels_ref.py "$tmp/ref.bin"
for pid in "${pids[@]}"; do
  wait "$pid" || { echo "test_cpu_kernels: compiling the test or the benchmark failed" >&2; exit 1; }
done
echo "test_cpu_kernels: test and benchmark compile cleanly (-Wall -Wextra -Werror)"

for march in "${targets[@]}"; do
  echo "-- -march=$march"
  "$tmp/test_cpu_kernels_$march" "$tmp/ref.bin"
done
