#!/usr/bin/env bash
# scripts/gpu_first.sh: the first visit to a GPU, in at most five minutes of wall time on one H200,
# builds included (GPU_CHECK_BUDGET, default 285 s; dev/GPU_LOG.md has the device tool's call).
# Results come in the order of what they teach per second, each one a line of $OUT/summary.txt the
# moment it ends, so a run cut short still tells the most. The sections (GPU_CHECK_SKIP names):
#   env        GPU, nvcc, where NCCL was found, PyTorch, compute-sanitizer, the carried files
#   build      train_gpt2_zero3cu + test_gpt2cu BF16, test_gpt2cu FP32, the DDP trainer and every
#              dev/cuda check, all at once (one build_NAME line each)
#   tests      test_gpt2cu BF16 and FP32 on one rank against the carried small dump (V=1024)
#   train      GPT-2 124M, T=1024, B=16, stage 3, bf16: tok/s, MFU, memory, epilogue fallback counters
#   kernels    the attention check (every path, timed at B=4 and at the training batch, B=16), then
#              the other dev/cuda checks
#   baseline   the same model in PyTorch at B=16, eager and torch.compile; this trainer's ratios and
#              the target_b16 verdict
#   sanitizer  compute-sanitizer memcheck and racecheck on the BF16 test (tensor-core attention)
#   b32        the trainer at B=32
#   pairs      two ranks on the one GPU: ZeRO-3 against DDP, and HSDP
# Every command runs under `timeout -k` with its own cap and never past the budget. Output in $OUT
# (unset: build/gpu_first/out): summary.txt, gpu_first.log (everything), gpu_first_logs.tgz (every
# command's own log, refreshed after each line).
#
#   scripts/gpu_first.sh --carry      the ignored files the device needs (the `carry` list), with sizes
#   GPU_CHECK_EMULATE=1 scripts/gpu_first.sh    every section at tiny sizes on the CPU emulator (tests
#                                     this script; about 4 minutes on 2 cores; figures meaningless)
# scripts/gpu_check.sh is the full check, for a longer visit or one's own GPU. Helpers: gpu_lib.sh.
set -uo pipefail
. "$(dirname "$0")/gpu_lib.sh"
if [ "${1:-}" = --carry ]; then cd "$(dirname "$0")/.." && print_carry; exit; fi
gpu_begin gpu_first summary.txt 285 900

# want SECTION LINE: false (and a SKIP line) when GPU_CHECK_SKIP names the section
want() { skipped "$1" && { record "$2" SKIP 0 "GPU_CHECK_SKIP"; return 1; }; return 0; }

section env
probe_env

section "build: BF16 (trainer + test), FP32 test, DDP trainer, dev/cuda, in parallel"
start_build bf16 "$(cap 200 300)" build_cfg bf16 BF16 0 flash both
start_build fp32 "$(cap 200 300)" build_cfg fp32 FP32 0 flash test
if [ "$EMU" != 1 ]; then  # (the emulator: its run_dev_checks.sh builds the checks; the pairs build MPI trainers)
  start_build ddp 200 build_cfg ddp BF16 1 flash train
  start_build dev_cuda 200 build_dev_cuda
fi
await_build bf16 "$B/train_bf16" "$B/test_bf16"
await_build fp32 "$B/test_fp32"

section "tests: test_gpt2cu on 1 rank (small dump, V=1024)"
run_tests_n1 "$(cap 60 200)" bf16 fp32

if [ "$EMU" != 1 ]; then  # the timed runs start on a quiet machine: every build has ended
  await_build ddp "$B/train_ddp"
  await_build dev_cuda $(for f in dev/cuda/*.cu; do n=$(basename "$f" .cu); echo "dev/cuda/bin/${n}_bf16 dev/cuda/bin/${n}_fp32"; done)
fi

section "train: GPT-2 124M, B=16, stage 3, bf16"
want train "train_z3_b${TRAIN_B[0]}" && run_train "train_z3_b${TRAIN_B[0]}" "$(cap 60 150)" "$B/train_bf16" "${TRAIN_B[0]}" -z 3

section "kernels: attention (B=4 and the training batch), then the other dev/cuda checks"
if want kernels kernels_attention; then
  export OMP_NUM_THREADS=$(pick "$NPROC" 1)  # the checks' CPU references use OpenMP
  if [ "$EMU" = 1 ]; then run kernels_attention 300 dev/cuda/emu/run_dev_checks.sh attention
  else run kernels_attention 90 env OUT= bash dev/cuda/run_all.sh bin/attention_bf16 bin/attention_fp32; fi
  record_kernels kernels_attention paths
  if [ "$EMU" = 1 ]; then run kernels_other 200 dev/cuda/emu/run_dev_checks.sh residual
  else
    # matmul first: its note says whether cuBLASLt had the GELU and bias-gradient epilogues
    others=(bin/matmul_bf16 bin/matmul_fp32)
    for f in dev/cuda/*.cu; do n=$(basename "$f" .cu); [[ $n == attention || $n == matmul ]] || others+=("bin/${n}_bf16" "bin/${n}_fp32"); done
    run kernels_other 40 env OUT= bash dev/cuda/run_all.sh "${others[@]}"
  fi
  record_kernels kernels_other
fi

section "baseline: the same model in PyTorch, eager and torch.compile"
want baseline "baseline_b${TRAIN_B[0]}" && run_baseline "${TRAIN_B[0]}" eager,compile "train_z3_b${TRAIN_B[0]}"

section "sanitizer: the BF16 test (tensor-core attention), stage 3"
want sanitizer san_test_bf16 && sanitize_tensor_cores "$(cap 45 200)" memcheck racecheck

section "b32: the trainer at B=32"
want b32 "train_z3_b${TRAIN_B[1]}" && run_train "train_z3_b${TRAIN_B[1]}" "$(cap 45 150)" "$B/train_bf16" "${TRAIN_B[1]}" -z 3

section "pairs: two ranks on the one GPU (ZeRO-3 against DDP; HSDP)"
want pairs zero3_vs_ddp_n2 && pairs

gpu_end
