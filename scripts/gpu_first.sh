#!/usr/bin/env bash
# scripts/gpu_first.sh: a time-boxed first run on a GPU you rent by the hour (written for one H200):
# every question this project has of a GPU, builds included, answered in GPU_CHECK_BUDGET seconds
# (default 540, nine minutes). Copy a checkout and the files git does not track (--files lists them)
# to the GPU machine and run it there. The stages come in the order of what matters most, each gets
# its own cap (CAPS below; together they fit the budget), and each result is a line of summary.txt
# the moment it ends:
#   env        GPU, nvcc, gcc, make, where cuBLASLt, NCCL and nvtx3 were found, PyTorch,
#              compute-sanitizer, the runtime switches, the copied files; then gemm_peak: the bf16
#              GEMM rate measured here (MFU's second peak)
#   build      train_gpt2_zero3cu + test_gpt2cu BF16, test_gpt2cu FP32, the DDP trainer and every
#              tests/cuda check, all at once (one build_NAME line each)
#   kernels    every kernel at GPT-2 124M shapes: the attention check (every path, head sizes 24 and
#              64, timed at B=4 and at the training batch), then the other tests/cuda checks
#   tests      test_gpt2cu BF16 and FP32 on one rank against the small dump (V=1024), then against
#              the head-size-64 dump (C=128, NH=2)
#   train      GPT-2 124M, T=1024, B=16, stage 3, bf16, 20 steps: it must learn (the last loss below
#              LEARN_FRACTION of the first); tok/s, MFU against the datasheet and the measured peak
#   b32        the same at B=32
#   sanitizer  compute-sanitizer memcheck and racecheck on the BF16 test (tensor-core attention)
#   pairs      two ranks on the one GPU (NCCL over loopback): ZeRO-3 against DDP, and HSDP
#   baseline   the same model in PyTorch at B=16, eager and torch.compile; this trainer's ratios and
#              the target_b16 verdict
# A line's STATUS: PASS, FAIL, TIMEOUT (cut off by its cap, with how far it got), UNKNOWN (no verdict
# possible), MISS (a speed target not met), SKIP (GPU_CHECK_SKIP); scripts/gpu_lib.sh says more, and
# lists the environment (GPU_CHECK_BUDGET, GPU_CHECK_OUT, GPU_CHECK_SKIP, GPU_CHECK_CAPS,
# GPU_CHECK_REUSE, the runtime switches ZERO3_GPU_EPILOGUES=0 and ZERO3_GPU_ATTENTION=portable).
# Output in GPU_CHECK_OUT (unset: the first free build/gpu_first_out, build/gpu_first_out.1, ...):
# summary.txt, gpu_first.log (everything), gpu_first_logs.tgz (every command's own log, refreshed
# after each line).
#
#   scripts/gpu_first.sh --files      the files git does not track that the run needs, with sizes: copy
#                                     them to the GPU machine (make data dumps makes them)
#   scripts/gpu_first.sh --caps       the CAPS table (tests/test_gpu_first.sh holds it to the budget)
#   GPU_CHECK_EMULATE=1 scripts/gpu_first.sh    every stage at tiny sizes on the CPU emulator (tests
#                                     this script; about 3 minutes on 2 cores; figures meaningless)
# scripts/gpu_check.sh is the full check, for a longer rental or one's own GPU. Helpers: gpu_lib.sh.
set -uo pipefail
. "$(dirname "$0")/gpu_lib.sh"

# CAPS: each line's command, its cap in seconds on the GPU and under the emulator. The GPU caps add
# up to the budget (every stage gets its time; the builds run side by side under one cap); each is
# about 2-3 times the time the stage is expected to take on an H200 (an estimate: no GPU run has
# measured it yet), and the emulated caps about twice the times measured on 2 loaded cores.
CAPS="
gemm_peak          12  120
build              110 450
kernels_attention  40  300
kernels_other      50  200
test_bf16_n1       12  150
test_fp32_n1       12  150
test_bf16_hs64     12  150
test_fp32_hs64     12  150
train_z3_b16       35  150
train_z3_b32       25  150
san_memcheck       25  150
san_racecheck      35  150
n2                 20  240
baseline           90  240
"
# c NAME: NAME's cap in this mode (GPU_CHECK_CAPS overrides; the emulator's B=2 and 4 lines take
# the B=16 and 32 lines' caps)
c() {
  local key=$1 gpu emu
  case "$key" in train_z3_b2) key=train_z3_b16 ;; train_z3_b4) key=train_z3_b32 ;; esac
  read -r _ gpu emu <<< "$(echo "$CAPS" | awk -v k="$key" '$1 == k')"
  stage_cap "$1" "$gpu" "$emu"
}
case "${1:-}" in
  --files) cd "$(dirname "$0")/.." && print_files; exit ;;
  --caps) echo "$CAPS" | awk 'NF == 3'; exit ;;
  '') ;;
  *) echo "error: $1: unknown argument (gpu_first.sh takes --files, --caps or nothing; settings are GPU_CHECK_* variables)" >&2; exit 2 ;;
esac
gpu_begin gpu_first summary.txt 540 1200

# want SECTION LINE: false (and a SKIP line) when GPU_CHECK_SKIP names the section
want() { skipped "$1" && { record "$2" SKIP 0 "GPU_CHECK_SKIP"; return 1; }; return 0; }
B16=${TRAIN_B[0]} B32=${TRAIN_B[1]}

section env
probe_env
want env gemm_peak && measure_gemm_peak

section "build: BF16 (trainer + test), FP32 test, DDP trainer, tests/cuda, in parallel"
start_build bf16 "$(c build)" build_cfg bf16 BF16 0 flash both
start_build fp32 "$(c build)" build_cfg fp32 FP32 0 flash test
if [ "$EMU" != 1 ]; then  # (the emulator: its run_kernel_checks.sh builds the checks; the pairs build MPI trainers)
  start_build ddp "$(c build)" build_cfg ddp BF16 1 flash train
  start_build cuda_checks "$(c build)" build_cuda_checks
fi
await_build bf16 "$B/train_bf16" "$B/test_bf16"
await_build fp32 "$B/test_fp32"
if [ "$EMU" != 1 ]; then  # the checks and the timed runs start on a quiet machine: every build has ended
  await_build ddp "$B/train_ddp"
  await_build cuda_checks $(for f in tests/cuda/*.cu; do n=$(basename "$f" .cu); echo "tests/cuda/bin/${n}_bf16 tests/cuda/bin/${n}_fp32"; done)
fi

section "kernels: attention (head sizes 24 and 64; B=4 and the training batch), then the other tests/cuda checks"
if want kernels kernels_attention; then
  export OMP_NUM_THREADS=$(pick "$NPROC" 1)  # the checks' CPU references use OpenMP
  if [ "$EMU" = 1 ]; then run kernels_attention "$(c kernels_attention)" tools/emu/run_kernel_checks.sh attention
  else run kernels_attention "$(c kernels_attention)" bash tests/cuda/run_all.sh bin/attention_bf16 bin/attention_fp32; fi
  record_kernels kernels_attention paths
  if [ "$EMU" = 1 ]; then run kernels_other "$(c kernels_other)" tools/emu/run_kernel_checks.sh residual
  else
    # matmul first: its note says whether cuBLASLt had the GELU and bias-gradient epilogues
    others=(bin/matmul_bf16 bin/matmul_fp32)
    for f in tests/cuda/*.cu; do n=$(basename "$f" .cu); [[ $n == attention || $n == matmul ]] || others+=("bin/${n}_bf16" "bin/${n}_fp32"); done
    run kernels_other "$(c kernels_other)" bash tests/cuda/run_all.sh "${others[@]}"
  fi
  record_kernels kernels_other
fi

section "tests: test_gpt2cu on 1 rank (small dump, V=1024; head-size-64 dump)"
run_tests_n1 "$(c test_bf16_n1)" bf16 fp32

section "train: GPT-2 124M, B=$B16, stage 3, bf16: learns, tok/s, MFU"
want train "train_z3_b$B16" && run_train "train_z3_b$B16" "$(c "train_z3_b$B16")" "$B/train_bf16" "$B16" -z 3

section "b32: the trainer at B=$B32"
want b32 "train_z3_b$B32" && run_train "train_z3_b$B32" "$(c "train_z3_b$B32")" "$B/train_bf16" "$B32" -z 3

section "sanitizer: the BF16 test (tensor-core attention), stage 3"
if want sanitizer san_test_bf16; then
  if [ "$EMU" = 1 ]; then sanitize_tensor_cores "$(c san_memcheck)" memcheck racecheck
  else
    TEST_STAGES=3 run_sanitizer memcheck "$(c san_memcheck)" "$B/test_bf16" "${SMALL[@]}"
    TEST_STAGES=3 run_sanitizer racecheck "$(c san_racecheck)" "$B/test_bf16" "${SMALL[@]}"
  fi
fi

section "pairs: two ranks on the one GPU (ZeRO-3 against DDP; HSDP)"
want pairs zero3_vs_ddp_n2 && pairs "$(c n2)"

section "baseline: the same model in PyTorch, eager and torch.compile"
want baseline "baseline_b$B16" && run_baseline "$B16" eager,compile "train_z3_b$B16" "$(c baseline)"

gpu_end
