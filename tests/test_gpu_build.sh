#!/usr/bin/env bash
# Every GPU target compiles for sm_90 (H100/H200) without errors and without register spills:
# the tests/cuda kernel checks (BF16 and FP32), and train_gpt2_zero3cu / test_gpt2cu in BF16, FP32
# and DDP=1 (USE_MPI=0, as on the GPU machine), the trainer with ATTENTION=portable and materialized. Nothing runs: CI has no GPU. Without nvcc: SKIP.
# The builds go to a scratch copy of the sources, so the repository's own binaries are untouched.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
if [ ! -x "$NVCC" ]; then echo "SKIP: $NVCC not found (no CUDA toolkit)"; exit 0; fi
root="$PWD"
scratch="$(mktemp -d "${TMPDIR:-/tmp}/gpu_build.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
# the sources the GPU targets need, nothing else (no data, no dumps; the library finder the Makefile runs)
tar -cf - --exclude=tests/cuda/bin Makefile ./*.h ./*.c ./*.cu host cpu proc observe tests/test_checks.h tests/dump.h gpu tests/cuda scripts/gpu_find_libs.sh 2>/dev/null | (cd "$scratch" && tar -xf -)
jobs=$(nproc 2>/dev/null || echo 2)
fail=0
start=$(date +%s)

# tests/cuda: all programs, both precisions, in parallel
if ! make -C "$scratch/tests/cuda" -j"$jobs" NVCC="$NVCC" all > "$scratch/cuda_checks.log" 2>&1; then
  echo "FAIL: tests/cuda build"; grep -E "error|Error" "$scratch/cuda_checks.log" | head -20; fail=1
else
  echo "ok: tests/cuda ($(ls "$scratch/tests/cuda/bin" | wc -l) programs)"
fi

# the trainer and its test, one configuration after the other (they share output names)
if [ -f train_gpt2_zero3.cu ] && [ -f test_gpt2.cu ]; then
  for cfg in "BF16 0" "FP32 0" "BF16 1"; do
    set -- $cfg
    rm -f "$scratch/train_gpt2_zero3cu" "$scratch/test_gpt2cu"
    if make -C "$scratch" -j"$jobs" NVCC="$NVCC" PRECISION="$1" DDP="$2" USE_MPI=0 train_gpt2_zero3cu test_gpt2cu \
         > "$scratch/build_$1_$2.log" 2>&1 && [ -x "$scratch/train_gpt2_zero3cu" ] && [ -x "$scratch/test_gpt2cu" ]; then
      echo "ok: train_gpt2_zero3cu test_gpt2cu PRECISION=$1 DDP=$2 USE_MPI=0"
    else
      echo "FAIL: PRECISION=$1 DDP=$2 USE_MPI=0"; grep -E "error|Error" "$scratch/build_$1_$2.log" | head -20; fail=1
    fi
  done
fi

# the trainer with the other attention paths (BF16): only their call sites differ, the kernels are
# compiled above in tests/cuda/attention.cu. One target each: the two side by side, each in its own
# copy of the sources (their outputs share a name)
if [ -f train_gpt2_zero3.cu ]; then
  for att in portable materialized; do
    mkdir "$scratch/att_$att" && (cd "$scratch" && tar -cf - --exclude='./att_*' --exclude='./*.log' --exclude=./tests/cuda/bin \
      --exclude=./train_gpt2_zero3cu --exclude=./test_gpt2cu .) | (cd "$scratch/att_$att" && tar -xf -)
    ( make -C "$scratch/att_$att" NVCC="$NVCC" PRECISION=BF16 ATTENTION="$att" USE_MPI=0 train_gpt2_zero3cu \
        > "$scratch/build_att_$att.log" 2>&1; echo $? > "$scratch/att_$att.rc" ) &
  done
  wait
  for att in portable materialized; do
    if [ "$(cat "$scratch/att_$att.rc")" = 0 ] && [ -x "$scratch/att_$att/train_gpt2_zero3cu" ]; then
      echo "ok: train_gpt2_zero3cu PRECISION=BF16 ATTENTION=$att USE_MPI=0"
    else
      echo "FAIL: ATTENTION=$att"; grep -E "error|Error" "$scratch/build_att_$att.log" | head -20; fail=1
    fi
  done
fi

# ptxas warns about every kernel that spills registers to local memory (--warn-on-spills)
if grep -h "Registers are spilled" "$scratch"/*.log | grep -q .; then
  echo "FAIL: register spills:"; grep -h "Registers are spilled" "$scratch"/*.log | sort -u | head; fail=1
fi
echo "gpu build: $(( $(date +%s) - start )) s"
exit $fail
