#!/usr/bin/env bash
# The GPU kernels run under the CPU emulator of CUDA (tools/emu), every output element
# against its CPU reference, in BF16 and FP32: fused flash attention forward and backward, the
# portable kernels and (BF16) the tensor-core ones on the emulator's WMMA (also against the
# materialized path and each other, each run twice for determinism), the classifier's forward
# (loss + logsumexp) / elementwise backward split and the device-side loss sum, the matmuls through
# the cached cuBLASLt plans (with the residual add and the bias gradient in their epilogues), the
# layernorm (its backward: a warp per row for dinp, a thread per channel vector for dweight/dbias),
# and the engine's shard math (gpu/shard_math.cuh): the one-launch multi-tensor AdamW over
# misaligned, odd segments (bitwise against the one-tensor kernel), the vectorized sum of squares
# (the same bits aligned or not), accumulate and casts at aligned and misaligned offsets, and ZeRO++'s
# block quantization (bitwise against the CPU backend's, round trip within half a step). The
# attention check runs a second time under another warp schedule (EMU_SCHED_SEED), since a missing
# __syncthreads shows up as a wrong result only under some schedules. No GPU and no nvcc needed.
. "$(dirname "$0")/lib.sh"
start=$(date +%s)
tools/emu/run_kernel_checks.sh attention classifier matmul layernorm adamw norm residual quantize || fail "emulated kernel checks"
for p in bf16 fp32; do
  EMU_SCHED_SEED=7 OMP_NUM_THREADS=2 tests/cuda/bin/emu/attention_$p > "$work/att_$p.log" 2>&1 ||
    { grep -E "FAIL|emulator|outside" "$work/att_$p.log" | head; fail "attention_$p under EMU_SCHED_SEED=7"; }
  echo "attention_$p under EMU_SCHED_SEED=7: $(grep -c '^KERNEL .* PASS' "$work/att_$p.log") PASS"
done
# a cuBLASLt without the GELU and bias-gradient epilogues (older libraries, some shapes): the
# trainer's fallbacks (separate GELU, bias_backward kernels) give the same results
for p in bf16 fp32; do
  EMU_LT_NO_GELU=1 EMU_LT_NO_BGRAD=1 OMP_NUM_THREADS=2 tests/cuda/bin/emu/matmul_$p > "$work/mm_$p.log" 2>&1 ||
    { grep -E "FAIL|emulator" "$work/mm_$p.log" | head; fail "matmul_$p without the GELU and BGRADB epilogues"; }
  echo "matmul_$p without the GELU and BGRADB epilogues: $(grep -c '^KERNEL .* PASS' "$work/mm_$p.log") PASS"
done
echo "emulated kernels: $(( $(date +%s) - start )) s"
