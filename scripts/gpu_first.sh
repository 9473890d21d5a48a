#!/usr/bin/env bash
# scripts/gpu_first.sh: a time-boxed first run on one GPU machine, one's own or rented by the hour
# (sized for an H200): every question this project has of a GPU, builds included, answered in
# GPU_CHECK_BUDGET seconds (default 540, nine minutes). Copy a checkout and the files git does not
# track (--files lists them) to the GPU machine and run it there. The stages come in the order of
# what matters most, each under its own cap (the STAGES table below: together they fit the budget),
# and each result is a line of summary.txt the moment it ends (NAME STATUS SECONDS of CAP DETAIL):
#   env        GPU, nvcc, gcc, make, where cuBLASLt, NCCL and nvtx3 were found, PyTorch,
#              compute-sanitizer, the runtime switches, the copied files (capped); then gemm_peak:
#              the bf16 GEMM rate measured here (MFU's second peak)
#   build      train_gpt2_zero3cu + test_gpt2cu BF16, test_gpt2cu FP32, the DDP trainer and every
#              tests/cuda check, all at once (one build_NAME line each); beside them compile_warmup:
#              torch.compile of the baseline model, filling its caches for the timed baseline
#   train      GPT-2 124M, T=1024, B=16, stage 3, bf16, 20 steps: it must learn (the last loss below
#              LEARN_FRACTION of the first); tok/s, MFU against the datasheet and the measured peak
#   host       the same training with -oo host (the optimizer shard in pinned host memory, AdamW on
#              the host) for 5 steps: the same losses digit for digit; tok/s beside the run without it
#   baseline   the same model in PyTorch at B=16, eager and torch.compile; this trainer's ratios and
#              the target_b16 verdict
#   tests      test_gpt2cu BF16 and FP32 on one rank against the small dump (V=1024, head size 24),
#              then against the head-size-64 dump (C=128, NH=2)
#   kernels    every kernel at GPT-2 124M shapes: the attention check (every path, head size 64,
#              timed at B=4 and at the training batch), then the other tests/cuda checks
#   b32        the trainer at B=32
#   pairs      two ranks on the one GPU (NCCL over loopback), a 6-layer model for 4 steps: ZeRO-3
#              against DDP, and HSDP
#   sanitizer  compute-sanitizer memcheck, and racecheck on the attention kernels, on the BF16 test
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
#   scripts/gpu_first.sh --caps       the budgets, then the STAGES table with each cap worked out
#                                     (tests/test_gpu_first.sh holds it to the budgets)
#   GPU_CHECK_EMULATE=1 scripts/gpu_first.sh    every stage at tiny sizes on the CPU emulator (tests
#                                     this script; about 3 minutes on 2 cores; figures meaningless)
# scripts/gpu_check.sh is the full check, for a longer rental or one's own GPU. Helpers: gpu_lib.sh.
set -uo pipefail
. "$(dirname "$0")/gpu_lib.sh"

# STAGES: the run's budget, one row per capped command, in the order they run:
#   stage   the summary line (or command) the cap is for
#   emu_s   the seconds it took in the emulated run (GPU_CHECK_EMULATE=1, tiny sizes, 2 cores at load ~5)
#   gpu_x   the factor: its GPU cap = emu_s * gpu_x, rounded (0: the emulator only)
#   with    "-": it runs alone, its cap counts toward the budget; a stage's name: it runs beside that
#           stage, within its cap
# Each emulated cap is emu_s * EMU_MARGIN (at least EMU_MIN_CAP): the same run on a machine three times
# as loaded. The GPU caps plus RESERVE add up to at most the GPU budget, the emulated caps plus
# RESERVE to the emulated one (tests/test_gpu_first.sh checks both from this table, --caps).
# The factors, stage by stage. The emulator is some thousand times slower than an H200 per FLOP
# but runs models some thousand times smaller, so no one factor fits: each says what the GPU does
# more or less of than the emulator in that stage, and leaves about 2x over the estimate.
#   env 4, gemm_peak 10: a cold PyTorch import with CUDA on a fresh disk (10-20 s) where the
#     emulator's imports a CPU-only one warm; the 8192^3 GEMMs themselves take milliseconds
#   build 1.15: the same sources; nvcc's device and host passes against g++'s one, on 16 cores
#     against 2 loaded ones: about even
#   compile_warmup 100: torch.compile of GPT-2 124M, 45-75 s cold; the emulator's PyTorch has no
#     torch.compile (1 s to say so); beside the builds, which leave the GPU idle
#   train 1.2 and 0.6, baseline 30: 124M's host init and 20 (PyTorch: 2 x 13) steps of ~0.2 s
#     against a 2-layer model's; PyTorch's compile reads the warm-up's caches
#   train_z3_host 1.5: 124M's host init and 5 steps of ~0.5 s (the device's ~0.2 s, the gradients and
#     params over PCIe, ~0.5 GB each way, and the host AdamW over 124M parameters on 16 cores)
#   test_* 0.12-0.43: every test case in milliseconds on the GPU, the start-up (5-10 s) left
#   kernels_attention 0.65, kernels_other 2: the CPU references (at 124M shapes, all 16 cores)
#     dominate; the GPU runs every check program, the emulator two
#   n2_* 3.3-5: two ranks of a 6-layer model over loopback, 4 steps, each a 124M-class init
#   san_memcheck 1.8, san_racecheck 15: the sanitizer slows the GPU test 10-50x; racecheck only on
#     the attention kernels (SAN_KERNELS); the emulator's counterparts are short trainer runs
STAGES="
env                5    4     -
gemm_peak          2    10    -
build              97   1.15  -
compile_warmup     1    100   build
build_asan         38   0     -
build_mpi          37   0     -
train_z3_b16       25   1.2   -
train_z3_host_b16  10   1.5   -
baseline           2    30    -
test_bf16_n1       100  0.12  -
test_fp32_n1       39   0.3   -
test_bf16_hs64     36   0.33  -
test_fp32_hs64     28   0.43  -
kernels_attention  46   0.65  -
kernels_other      22   2     -
train_z3_b32       35   0.6   -
n2_z3              6    3.3   -
n2_ddp             5    4     -
n2_hsdp            4    5     -
san_memcheck       14   1.8   -
san_racecheck      2    15    -
"
GPU_BUDGET=540 EMU_BUDGET=2000 RESERVE=25 EMU_MARGIN=3 EMU_MIN_CAP=30
# caps_table: STAGES with the caps worked out: stage emu_s gpu_x with gpu_cap emu_cap
caps_table() {
  echo "$STAGES" | awk -v m="$EMU_MARGIN" -v lo="$EMU_MIN_CAP" 'NF == 4 {
    g = int($2 * $3 + 0.5); e = int($2 * m + 0.5); if (e < lo) e = lo
    print $1, $2, $3, $4, g, e }'
}
# c NAME: NAME's cap in this mode (GPU_CHECK_CAPS overrides), from its STAGES row: the emulator's
# B=2 and 4 lines take the B=16 and 32 rows, a sanitizer line its tool's, a baseline line baseline's
c() {
  local key=$1 gpu emu
  case "$key" in
    train_z3_b2) key=train_z3_b16 ;; train_z3_b4) key=train_z3_b32 ;; train_z3_host_b2) key=train_z3_host_b16 ;;
    san_memcheck_*) key=san_memcheck ;; san_racecheck_*) key=san_racecheck ;; baseline_*) key=baseline ;;
  esac
  read -r _ _ _ _ gpu emu <<< "$(caps_table | awk -v k="$key" '$1 == k')"
  [ -n "$gpu" ] || { echo "gpu_first.sh: no STAGES row for $1" >&2; echo 1; return; }
  stage_cap "$1" "$gpu" "$emu"
}
case "${1:-}" in
  --files) cd "$(dirname "$0")/.." && print_files; exit ;;
  --caps) echo "budget $GPU_BUDGET $EMU_BUDGET reserve $RESERVE margin $EMU_MARGIN min $EMU_MIN_CAP"; caps_table; exit ;;
  '') ;;
  *) echo "error: $1: unknown argument (gpu_first.sh takes --files, --caps or nothing; settings are GPU_CHECK_* variables)" >&2; exit 2 ;;
esac
gpu_begin gpu_first summary.txt "$GPU_BUDGET" "$EMU_BUDGET"

# want SECTION LINE: false (and a SKIP line) when GPU_CHECK_SKIP names the section
want() { skipped "$1" && { record "$2" SKIP 0 "GPU_CHECK_SKIP"; return 1; }; return 0; }
B16=${TRAIN_B[0]} B32=${TRAIN_B[1]}

section env
probe_env "$(c env)"
want env gemm_peak && measure_gemm_peak "$(c gemm_peak)"

section "build: BF16 (trainer + test), FP32 test, DDP trainer, tests/cuda, in parallel; torch.compile's caches beside them"
start_build bf16 "$(c build)" build_cfg bf16 BF16 0 flash both
start_build fp32 "$(c build)" build_cfg fp32 FP32 0 flash test
if [ "$EMU" != 1 ]; then  # (the emulator: its run_kernel_checks.sh builds the checks; the pairs build MPI trainers)
  start_build ddp "$(c build)" build_cfg ddp BF16 1 flash train
  start_build cuda_checks "$(c build)" build_cuda_checks
fi
skipped baseline || start_compile_warmup "$B16" "$(c compile_warmup)"
await_build bf16 "$B/train_bf16" "$B/test_bf16"
await_build fp32 "$B/test_fp32"
if [ "$EMU" != 1 ]; then  # the timed runs start on a quiet machine: every build has ended
  await_build ddp "$B/train_ddp"
  await_build cuda_checks $(for f in tests/cuda/*.cu; do n=$(basename "$f" .cu); echo "tests/cuda/bin/${n}_bf16 tests/cuda/bin/${n}_fp32"; done)
fi
skipped baseline || await_compile_warmup

section "train: GPT-2 124M, B=$B16, stage 3, bf16: learns, tok/s, MFU"
want train "train_z3_b$B16" && run_train "train_z3_b$B16" "$(c "train_z3_b$B16")" "$B/train_bf16" "$B16" -z 3

section "host: the same training with -oo host (the optimizer shard in host memory, AdamW on the host)"
want host "train_z3_host_b$B16" && run_train_host "train_z3_host_b$B16" "$(c "train_z3_host_b$B16")" "$B/train_bf16" "$B16" "train_z3_b$B16" -z 3

section "baseline: the same model in PyTorch, eager and torch.compile (from the warm-up's caches)"
want baseline "baseline_b$B16" && run_baseline "$B16" eager,compile "train_z3_b$B16" "$(c baseline)"

section "tests: test_gpt2cu on 1 rank (small dump, V=1024; head-size-64 dump)"
run_tests_n1 c bf16 fp32

section "kernels: attention (B=4 and the training batch), then the other tests/cuda checks"
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

section "b32: the trainer at B=$B32"
want b32 "train_z3_b$B32" && run_train "train_z3_b$B32" "$(c "train_z3_b$B32")" "$B/train_bf16" "$B32" -z 3

section "pairs: two ranks on the one GPU (ZeRO-3 against DDP; HSDP), a 6-layer model"
want pairs zero3_vs_ddp_n2 && pairs c

section "sanitizer: the BF16 test (tensor-core attention), stage 3"
if want sanitizer san_test_bf16; then
  if [ "$EMU" = 1 ]; then sanitize_tensor_cores c memcheck racecheck
  else
    TEST_STAGES=3 run_sanitizer memcheck c "$B/test_bf16" "${SMALL[@]}"
    # racecheck: this project's shared-memory tile kernels, the attention's (cuBLASLt's own untouched)
    TEST_STAGES=3 SAN_KERNELS=flash_attention run_sanitizer racecheck c "$B/test_bf16" "${SMALL[@]}"
  fi
fi

gpu_end
