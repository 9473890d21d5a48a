#!/usr/bin/env bash
# Builds test_gpt2cu for the CPU emulator (BF16 and FP32) and runs it against a reference dump:
# the whole GPU trainer (model, engine, backend, every kernel) checked without a GPU.
#   tools/emu/run_trainer_check.sh [--asan] [DUMP MODEL]   default: tests/reference/dumps/small.dump (V=1024, ~5 min
#   per precision on 2 cores); tests/reference/dumps/tiny.dump takes ~15. Needs the dump (make dumps, or
#   tests/reference/gpt2_reference.py). EMU_LT_NO_GELU=1 / ZERO3_FORCE_NCCL=1 exercise the fallback / NCCL paths.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cd "$root" || exit 1
asan=(); if [ "${1:-}" = "--asan" ]; then asan=(--asan); shift; export ASAN_OPTIONS=detect_leaks=0; fi
dump=${1:-tests/reference/dumps/small.dump}; model=${2:-tests/reference/dumps/small_model.bin}
[ -f "$dump" ] && [ -f "$model" ] || { echo "run_trainer_check: $dump or $model missing (tests/reference/gpt2_reference.py makes them)" >&2; exit 2; }
fail=0
for p in FP32 BF16; do
  bin="tests/cuda/bin/emu/test_gpt2cu_$p"
  "$here/build.sh" "${asan[@]}" "$bin" test_gpt2.cu -DENABLE_$p --library || { fail=1; continue; }
  "$bin" "$dump" "$model" || fail=1
done
exit $fail
