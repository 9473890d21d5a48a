#!/usr/bin/env bash
# Builds every tests/cuda kernel check for the CPU emulator, in BF16 and FP32, runs them all and
# prints the KERNEL summary. A logic check of the kernels on a machine without a GPU: sizes are
# reduced (SIZE() in tests/cuda/common.h) and the times are meaningless.
#   tools/emu/run_kernel_checks.sh [--asan] [name ...]      e.g. run_kernel_checks.sh layernorm attention
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
asan=(); if [ "${1:-}" = "--asan" ]; then asan=(--asan); shift; export ASAN_OPTIONS=detect_leaks=0; fi
names=("$@")
if [ ${#names[@]} -eq 0 ]; then for f in "$root"/tests/cuda/*.cu; do names+=("$(basename "$f" .cu)"); done; fi
bindir="$root/tests/cuda/bin/emu"
mkdir -p "$bindir"
bins=()
for n in "${names[@]}"; do
  for p in BF16 FP32; do
    b="$bindir/${n}_$(echo $p | tr A-Z a-z)"
    "$here/build.sh" "${asan[@]}" "$b" "tests/cuda/$n.cu" -DENABLE_$p & 
    bins+=("$b")
  done
done
wait
log="$bindir/run.log"; : > "$log"; failed=()
for b in "${bins[@]}"; do
  [ -x "$b" ] || { echo "=== $(basename "$b") did not build" | tee -a "$log"; failed+=("$b"); continue; }
  echo "=== $(basename "$b")" >> "$log"
  if ! OMP_NUM_THREADS=2 "$b" >> "$log" 2>&1; then failed+=("$(basename "$b")"); fi
done
grep '^KERNEL\|^\[cuda emulator\]\|  .*outside tolerance\|not deterministic\|nonzero' "$log"
echo "emulated kernel checks: $(grep -c '^KERNEL .* PASS' "$log") PASS, $(grep -c '^KERNEL .* FAIL' "$log") FAIL; programs failed: ${#failed[@]} ${failed[*]:-}"
[ ${#failed[@]} -eq 0 ]
