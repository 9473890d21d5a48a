#!/usr/bin/env bash
# The GPU kernels of issue 14 run under the CPU emulator of CUDA (dev/cuda/emu), every output element
# against its CPU reference, in BF16 and FP32: fused flash attention forward and backward (also
# against the materialized path), the classifier's forward (loss + logsumexp) / elementwise backward
# split and the device-side loss sum, the matmuls through the cached cuBLASLt plans (with the
# residual add and the bias gradient in their epilogues), the layernorm (its backward: a warp per
# row for dinp, a thread per channel vector for dweight/dbias) and the elementwise adds. The
# attention check runs a second time under another warp schedule (EMU_SCHED_SEED), since a missing
# __syncthreads shows up as a wrong result only under some schedules. No GPU and no nvcc needed.
. "$(dirname "$0")/lib.sh"
start=$(date +%s)
dev/cuda/emu/run_dev_checks.sh attention classifier matmul layernorm residual || fail "emulated kernel checks"
for p in bf16 fp32; do
  EMU_SCHED_SEED=7 OMP_NUM_THREADS=2 dev/cuda/bin/emu/attention_$p > "$work/att_$p.log" 2>&1 ||
    { grep -E "FAIL|emulator|outside" "$work/att_$p.log" | head; fail "attention_$p under EMU_SCHED_SEED=7"; }
  echo "attention_$p under EMU_SCHED_SEED=7: $(grep -c '^KERNEL .* PASS' "$work/att_$p.log") PASS"
done
echo "emulated kernels: $(( $(date +%s) - start )) s"
