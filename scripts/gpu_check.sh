#!/usr/bin/env bash
# scripts/gpu_check.sh: the full GPU check (docs/DESIGN.md section 5), for a longer rental than the
# first run's (scripts/gpu_first.sh answers the most in nine minutes) or one's own GPU. The whole
# script stops itself after GPU_CHECK_BUDGET seconds (default 570),
# every command has its own cap under `timeout -k`, and each result is a line of the summary the
# moment it ends (a timeout loses nothing already measured). The sections (GPU_CHECK_SKIP names):
#   env        what is here: nvcc, GPU, NCCL and where, PyTorch, compute-sanitizer, the copied files
#   build      train_gpt2_zero3cu + test_gpt2cu in BF16, FP32 and DDP (USE_MPI=0), the trainer with
#              ATTENTION=materialized and =portable, and tests/cuda, all at once (a build_NAME line each)
#   kernels    every tests/cuda kernel check (attention timed at B=4 and at B=16), the attention_paths line
#   test_*     test_gpt2cu FP32 and BF16 on 1 rank against the copied small dump (V=1024), then
#              the head-size-64 dump
#   train      GPT-2 124M (d12) on tinyshakespeare, T=1024, stage 3 on one rank, bf16: tokens/s, MFU,
#              memory, epilogue fallback counters at B=16 and B=32 with the default attention, then
#              B=16 with the other attention paths, to pick the fastest
#   baseline   the same model, B and T in plain PyTorch on the same GPU (tools/bench/pytorch_baseline.py):
#              bf16 autocast, with and without torch.compile, and FSDP2 on one rank, at B=16 and 32;
#              then one `target_B*` line each: >= torch.compile, >= 1.3x eager, MFU >= 50% met or
#              MISSed (a MISS is a figure, not a failure)
#   n2         test_gpt2cu FP32 on 2 ranks of the one GPU (scripts/launch.sh, NCCL over loopback)
#   sanitizer  compute-sanitizer memcheck, racecheck, synccheck on a short run of the FP32 trainer
#              (portable attention) and on the BF16 test (tensor-core attention)
#   rest       the full-vocabulary tiny dump made here and tested, the DDP build's test, stage 0
#              speed and memory, two ranks on the one GPU: ZeRO-3 against DDP, and HSDP
# Output in GPU_CHECK_OUT (unset: the first free build/gpu_check_out, build/gpu_check_out.1, ...): gpu_check_summary.txt, gpu_check.log and
# gpu_check_logs.tgz (every command's own log, refreshed after each result).
#
# The GPU machine needs the files git does not track (scripts/gpu_first.sh --files lists them); the tiny dump
# is made there with PyTorch on the GPU. GPU_CHECK_EMULATE=1 runs it all on the CPU emulator at tiny
# sizes, to test this script (figures meaningless; the full-vocabulary test and 2-rank test SKIP).
# The helpers (record, run, the builds, each measurement) are in scripts/gpu_lib.sh.
set -uo pipefail
. "$(dirname "$0")/gpu_lib.sh"
[ $# -eq 0 ] || { echo "error: $1: gpu_check.sh takes no arguments (settings are GPU_CHECK_* variables)" >&2; exit 2; }
gpu_begin gpu_check gpu_check_summary.txt 570 1500

section env
probe_env

section build
start_build fp32 400 build_cfg fp32 FP32 0 flash both
start_build bf16 400 build_cfg bf16 BF16 0 flash both
start_build ddp 400 build_cfg ddp BF16 1 flash both
start_build bf16_materialized 400 build_cfg bf16_materialized BF16 0 materialized train
start_build bf16_portable 400 build_cfg bf16_portable BF16 0 portable train
[ "$EMU" = 1 ] || skipped kernels || start_build cuda_checks 400 build_cuda_checks
for n in fp32 bf16 ddp; do await_build "$n" "$B/train_$n" "$B/test_$n"; done
for n in bf16_materialized bf16_portable; do await_build "$n" "$B/train_$n"; done
[ "$EMU" = 1 ] || skipped kernels || await_build cuda_checks

section "kernels: tests/cuda kernel checks"
if skipped kernels; then record kernels SKIP 0 "GPU_CHECK_SKIP"; else
  export OMP_NUM_THREADS=$(pick "$NPROC" 1)  # the checks' CPU references use OpenMP
  if [ "$EMU" = 1 ]; then run kernels 240 tools/emu/run_kernel_checks.sh attention layernorm
  else run kernels 180 make -C tests/cuda run; fi
  record_kernels kernels paths
fi

section "test_gpt2cu on 1 rank (small dump, V=1024)"
run_tests_n1 "$(cap 60 200)" fp32 bf16

section "train: GPT-2 124M, tokens/s and memory"
if skipped train; then record train_z3 SKIP 0 "GPU_CHECK_SKIP"; else
  for bs in "${TRAIN_B[@]}"; do run_train "train_z3_b$bs" 90 "$B/train_bf16" "$bs" -z 3; done
  for att in materialized portable; do run_train "train_$att" 60 "$B/train_bf16_$att" "${TRAIN_B[0]}" -z 3; done
fi

section "baseline: the same model in PyTorch (eager, torch.compile, FSDP2)"
if skipped baseline; then record baseline SKIP 0 "GPU_CHECK_SKIP"; else
  run_baseline "${TRAIN_B[0]}" eager,compile,fsdp2 "train_z3_b${TRAIN_B[0]}" "$(cap 150 240)"
  run_baseline "${TRAIN_B[1]}" eager,compile "train_z3_b${TRAIN_B[1]}" "$(cap 150 240)"
fi

section "n2: 2 ranks on one GPU (NCCL over loopback sockets)"
if skipped n2; then record test_fp32_n2 SKIP 0 "GPU_CHECK_SKIP"
elif [ "$EMU" = 1 ]; then record test_fp32_n2 SKIP 0 "emulated NCCL needs MPI for N ranks: tests/test_emu_gpt2.sh runs them"
else run_test test_fp32_n2 90 "${LAUNCH2[@]}" "$B/test_fp32" "${SMALL[@]}"; fi

section "sanitizer: compute-sanitizer on the FP32 trainer (portable attention) and the BF16 test (tensor cores)"
if skipped sanitizer; then record sanitizer SKIP 0 "GPU_CHECK_SKIP"; else
  if [ "$EMU" != 1 ]; then
    for tool in memcheck racecheck synccheck; do
      run_sanitizer "$tool" 60 "$B/train_fp32" -e d2c64h2t64 -b 2 -t 32 -x 2 -v 0 -S 1337
    done
  fi
  sanitize_tensor_cores "$(cap 90 200)" memcheck racecheck synccheck
fi

section "the rest"
if skipped rest; then record rest SKIP 0 "GPU_CHECK_SKIP"; else
  # the DDP build's test (stage 0 only, gradients all-reduced)
  [ -x "$B/test_ddp" ] && [ $have_small = 1 ] && run_test test_ddp_n1 "$(cap 60 200)" "$B/test_ddp" "${SMALL[@]}"
  if [ "$EMU" = 1 ]; then
    record test_tiny SKIP 0 "GPT-2's full vocabulary takes ~15 min emulated (tools/emu/run_trainer_check.sh)"
  else
    # GPT-2's full vocabulary: the tiny dump (113 MB, not among the copied files) made here on the GPU
    [ -f tests/reference/dumps/tiny.dump ] || run dump_tiny 120 "$PY" tests/reference/gpt2_reference.py --preset tiny --device cuda
    # the token file the tiny reference trained on, beside it (the test reads NAME_tokens.bin)
    [ -f tests/reference/dumps/tiny_tokens.bin ] || cp "$VAL_TOKENS" tests/reference/dumps/tiny_tokens.bin
    if [ -f tests/reference/dumps/tiny.dump ]; then
      for p in fp32 bf16; do [ -x "$B/test_$p" ] && run_test "test_${p}_tiny" 60 "$B/test_$p" tests/reference/dumps/tiny.dump tests/reference/dumps/tiny_model.bin; done
    else record test_tiny FAIL "$SECS" "$(why)no tiny dump (tests/reference/gpt2_reference.py --preset tiny)"; fi
  fi
  # stage 0 (everything replicated) beside stage 3: the memory ZeRO-3 saves, the speed it costs
  run_train train_z0 120 "$B/train_bf16" "${TRAIN_B[0]}" -z 0
  pairs
fi

gpu_end
