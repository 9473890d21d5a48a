#!/usr/bin/env bash
# scripts/gpu_check.sh: the one command a session with a GPU runs (docs/DESIGN.md section 5), built for
# one short visit: 15 minutes of device time in all, machine start and a rerun included. So the
# whole script stops itself after GPU_CHECK_BUDGET seconds (default 420), every section has its own
# time cap, sections run in order of value, and each appends its result line to the summary the
# moment it ends (a timeout loses nothing already measured). The sections:
#   env        what is here: nvcc, GPU, NCCL, PyTorch, compute-sanitizer, the carried data and dump
#   build      train_gpt2_zero3cu + test_gpt2cu in BF16, FP32 and DDP (USE_MPI=0), and dev/cuda,
#              all at once, each in its own copy of the sources
#   kernels    every dev/cuda kernel check
#   test_*_n1  test_gpt2cu FP32 and BF16 on 1 rank against the carried small dump (V=1024)
#   train      GPT-2 124M (d12) on tinyshakespeare, T=1024, stage 3 on one rank, bf16: tokens/s, MFU,
#              memory at B=16 and B=32 with the default attention, then B=16 with the other attention
#              paths (ATTENTION=materialized, ATTENTION=portable builds) to pick the fastest
#   baseline   the same model, B and T in plain PyTorch on the same GPU (dev/pytorch_baseline.py):
#              bf16 autocast, with and without torch.compile, and FSDP2 on one rank, at B=16 and 32;
#              then one `target_B*` line each: issue 14's targets (>= torch.compile, >= 1.3x eager,
#              MFU >= 50%) met or MISSed (a MISS is a figure, not a failure)
#   n2         test_gpt2cu FP32 on 2 ranks of the one GPU (scripts/launch.sh, NCCL over loopback)
#   sanitizer  compute-sanitizer memcheck, racecheck, synccheck on a short run of the trainer
#   the rest   the full-vocabulary tiny dump made here and tested, the DDP build's test, stage 0
#              speed and memory, ZeRO-3 against DDP on 2 ranks
# Output: $OUT/gpu_check_summary.txt (one line per result, written as it comes), $OUT/gpu_check.log
# (everything, written as it comes) and $OUT/gpu_check_logs.tgz (every command's own log, refreshed
# after each result): three files, within what the device tool brings back. OUT unset: build/gpu_check/out.
#
# The GPU machine has the git checkout plus the ignored paths carried to it, and nothing else (no
# ../shared, no internet, no MPI): data/tinyshakespeare (tokens and tokenizer) and
# dev/ref/small.dump + dev/ref/small_model.bin must be carried (dev/GPU_LOG.md has the command);
# the tiny and d12 dumps are made there with PyTorch on the GPU.
#
#   GPU_CHECK_SKIP="sanitizer rest"   skips sections by name
#   GPU_CHECK_BUDGET=300              seconds for the whole run (sections that do not fit are SKIPped)
#   GPU_CHECK_EMULATE=1               no GPU: builds with dev/cuda/emu/build.sh and runs everything
#                                     at tiny sizes on the CPU emulator, to test this script itself
#                                     (221 s on 2 shared cores; the figures mean nothing)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root="$PWD"
EMU=${GPU_CHECK_EMULATE:-0}
BUDGET=${GPU_CHECK_BUDGET:-$([ "$EMU" = 1 ] && echo 1200 || echo 420)}
work="$root/build/gpu_check"
rm -rf "$work"
mkdir -p "$work/bin" "$work/logs"
OUTDIR=${OUT:-$work/out}
mkdir -p "$OUTDIR"
SUMMARY="$OUTDIR/gpu_check_summary.txt"
exec > >(tee "$OUTDIR/gpu_check.log") 2>&1
t0=$(date +%s)
NPROC=$(nproc 2>/dev/null || echo 4)
failures=0

elapsed() { echo $(( $(date +%s) - t0 )); }
left() { echo $(( BUDGET - $(elapsed) )); }
skipped() { [[ " ${GPU_CHECK_SKIP:-} " == *" $1 "* ]]; }
section() { echo; echo "==================== [$(elapsed) s] $*"; }

# record NAME PASS|FAIL|SKIP SECONDS DETAIL: one summary line, written at once, and the logs so far
record() {
  local line
  line=$(printf '%-18s %-4s %4ss  %s' "$1" "$2" "$3" "$4")
  echo "$line" >> "$SUMMARY"
  echo ">>> $line"
  [ "$2" = FAIL ] && failures=$((failures + 1))
  tar -czf "$OUTDIR/gpu_check_logs.tgz" -C "$work" logs 2>/dev/null
}

# run NAME CAP COMMAND...: runs COMMAND with its output in logs/NAME.log under min(CAP, time left);
# sets RC (124: timed out) and SECS. Too little time left: RC=125 and nothing runs.
run() {
  local name=$1 cap=$2; shift 2
  local l; l=$(left)
  [ "$l" -lt "$cap" ] && cap=$l
  SECS=0
  if [ "$cap" -lt 5 ]; then RC=125; return; fi
  echo "--- $name (cap ${cap}s): $*"
  local s; s=$(date +%s)
  timeout "$cap" "$@" > "$work/logs/$name.log" 2>&1
  RC=$?
  SECS=$(( $(date +%s) - s ))
  tail -n 8 "$work/logs/$name.log"
}

# status from RC (and a detail for the summary when the command did not finish)
status() { [ "$RC" -eq 0 ] && echo PASS || { [ "$RC" -eq 125 ] && echo SKIP || echo FAIL; }; }
why() { case "$RC" in 124) echo "timed out; " ;; 125) echo "no time left; " ;; 0) ;; *) echo "exit $RC; " ;; esac; }

# a test_gpt2cu run: its "N of M cases passed" line
run_test() {
  local name=$1 cap=$2; shift 2
  run "$name" "$cap" "$@"
  grep -m5 MISMATCH "$work/logs/$name.log" 2>/dev/null
  record "$name" "$(status)" "$SECS" "$(why)$(grep 'cases passed' "$work/logs/$name.log" 2>/dev/null | tail -1)"
}

# step_stats LOG: mean ms/step and tok/s over the steps after the first, last MFU, loss and peak
step_stats() {
  awk -F'|' '/^step /{n++; for(i=1;i<=NF;i++){f=$i; gsub(/^ +| +$/,"",f);
      if(f ~ /^loss /){split(f,a," "); loss=a[2]} if(f ~ / ms$/){split(f,a," "); ms=a[1]}
      if(f ~ /tok\/s$/){split(f,a," "); tok=a[1]} if(f ~ /^MFU /){split(f,a," "); mfu=a[2]}
      if(f ~ /^peak /){sub(/^peak /,"",f); peak=f}}
      if(n>1){sms+=ms; stok+=tok; k++}}
    END{if(k==0){print "no steps"; exit} printf "%.0f tok/s, %.1f ms/step, MFU %s, loss %s, peak %s\n", stok/k, sms/k, mfu, loss, peak}' "$1" 2>/dev/null
}

# ------------------------------------------------------------------------------------------------
section "env"
PY=""
for p in python3 /usr/bin/python3; do
  if $p -c 'import torch' >/dev/null 2>&1; then PY=$p; break; fi
done
[ -n "$PY" ] || PY=python3
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC")")}
SANITIZER=$(command -v compute-sanitizer || ls "$CUDA_HOME/bin/compute-sanitizer" 2>/dev/null || true)
NCCL_HOME_ARG=""
if [ "$EMU" = 1 ]; then
  echo "mode:     EMULATED (GPU_CHECK_EMULATE=1): dev/cuda/emu on the CPU, tiny sizes, figures meaningless"
  gpu_name="CPU emulator"
else
  echo "nvcc:     $NVCC: $("$NVCC" --version 2>/dev/null | grep -o 'release [0-9.]*' || echo MISSING)"
  gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  echo "GPU:      $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo 'nvidia-smi failed')"
  # NCCL: the toolkit's, else the one inside PyTorch's wheels (nvidia/nccl under site-packages)
  if [ -f "$CUDA_HOME/include/nccl.h" ] && ls "$CUDA_HOME"/lib64/libnccl.so* >/dev/null 2>&1; then
    echo "NCCL:     toolkit, $(ls "$CUDA_HOME"/lib64/libnccl.so* | head -1)"
  else
    nccl_dir=$($PY -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
    if [ -n "$nccl_dir" ] && [ -f "$nccl_dir/include/nccl.h" ]; then
      NCCL_HOME_ARG="NCCL_HOME=$nccl_dir"
      export LD_LIBRARY_PATH="$nccl_dir/lib:${LD_LIBRARY_PATH:-}"
      echo "NCCL:     PyTorch wheel, $nccl_dir"
    else
      echo "NCCL:     NOT FOUND (toolkit has no nccl.h; python has no nvidia.nccl)"
    fi
  fi
fi
echo "python:   $PY: $($PY -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available())' 2>&1 | tail -1)"
echo "sanitizer: ${SANITIZER:-not found}"
echo "cpus:     $NPROC; budget ${BUDGET}s; OUT=${OUT:-unset}"
SMALL=(dev/ref/small.dump dev/ref/small_model.bin)
have_data=0; [ -f data/tinyshakespeare/tiny_shakespeare_train.bin ] && [ -f data/tinyshakespeare/tiny_shakespeare_val.bin ] && have_data=1
if [ ! -f dev/ref/small.dump ] && [ "$have_data" = 1 ]; then  # not carried: made here (PyTorch, ~20 s)
  make dev/ref/small.dump PYTHON="$PY" > "$work/logs/make_small_dump.log" 2>&1
fi
have_small=0; [ -f "${SMALL[0]}" ] && [ -f "${SMALL[1]}" ] && [ -f dev/ref/small_tokens.bin ] && have_small=1
record env "$([ $have_data = 1 ] && [ $have_small = 1 ] && echo PASS || echo FAIL)" "$(elapsed)" \
  "${gpu_name:-no GPU found}; data $([ $have_data = 1 ] && echo ok || echo MISSING: carry data/tinyshakespeare); small dump $([ $have_small = 1 ] && echo ok || echo MISSING: carry dev/ref/small.dump dev/ref/small_model.bin dev/ref/small_tokens.bin)"

# ------------------------------------------------------------------------------------------------
section "build"
# build_cfg NAME PRECISION DDP ATTENTION [train]: train_NAME and (without `train`) test_NAME in $work/bin
# (log: logs/build_NAME.log); ATTENTION is the Makefile's switch (flash, portable, materialized)
build_cfg() {
  local name=$1 prec=$2 ddp=$3 att=$4 only=${5:-}
  if [ "$EMU" = 1 ]; then
    local defs=(-DENABLE_"$prec"); [ "$ddp" = 1 ] && defs+=(-DZERO3_DDP_ONLY)
    case "$att" in materialized) defs+=(-DATTENTION_MATERIALIZED) ;; portable) defs+=(-DATTENTION_PORTABLE) ;; esac
    { [ "$only" = train ] || dev/cuda/emu/build.sh "$work/bin/test_$name" test_gpt2.cu "${defs[@]}" zero3.c host/*.c; } &&
      dev/cuda/emu/build.sh "$work/bin/train_$name" train_gpt2_zero3.cu "${defs[@]}" zero3.c host/*.c
  else
    # a copy of the sources per configuration: they build side by side (the outputs share names)
    local src="$work/src_$name" targets=(train_gpt2_zero3cu)
    [ "$only" = train ] || targets+=(test_gpt2cu)
    mkdir -p "$src"
    tar -cf - --exclude=./.git --exclude=./build --exclude=./data --exclude=./dev/ref --exclude=./dev/cuda/bin . |
      (cd "$src" && tar -xf -)
    make -C "$src" -j4 PRECISION="$prec" DDP="$ddp" ATTENTION="$att" USE_MPI=0 $NCCL_HOME_ARG "${targets[@]}" &&
      { [ "$only" = train ] || mv "$src/test_gpt2cu" "$work/bin/test_$name"; } && mv "$src/train_gpt2_zero3cu" "$work/bin/train_$name"
  fi
}
# the three tested configurations, then two train-only builds with the other attention paths
BUILD_NAMES=(fp32 bf16 ddp bf16_materialized bf16_portable)
build_all() {   # runs in its own bash (under timeout): the names come through the environment
  local pids=() names cfgs=("FP32 0 flash" "BF16 0 flash" "BF16 1 flash" "BF16 0 materialized train" "BF16 0 portable train") i
  read -r -a names <<< "$BUILD_NAMES_LIST"
  for i in "${!names[@]}"; do
    build_cfg "${names[$i]}" ${cfgs[$i]} > "$work/logs/build_${names[$i]}.log" 2>&1 &
    pids+=($!)
    [ "$EMU" = 1 ] && wait "${pids[$i]}"  # 2 cores: one at a time
  done
  if [ "$EMU" != 1 ] && ! skipped kernels; then
    make -C dev/cuda -j"$NPROC" all > "$work/logs/build_dev_cuda.log" 2>&1 &
    pids+=($!)
  fi
  wait "${pids[@]}"
}
export EMU work NCCL_HOME_ARG NPROC
export BUILD_NAMES_LIST="${BUILD_NAMES[*]}"
export -f build_cfg build_all skipped  # timeout runs commands, not functions: bash -c build_all
if skipped build; then record build SKIP 0 "GPU_CHECK_SKIP"; else
  run build 300 bash -c build_all
  ok=""; bad=""
  for n in "${BUILD_NAMES[@]}"; do
    if [ -x "$work/bin/train_$n" ] && { [ -x "$work/bin/test_$n" ] || [[ $n == bf16_* ]]; }; then ok+="$n "
    else bad+="$n "; tail -15 "$work/logs/build_$n.log"; fi
  done
  spills=$(grep -h "Registers are spilled" "$work"/logs/build_*.log 2>/dev/null | sort -u | wc -l)
  [ -z "$bad" ] && [ "$RC" -eq 0 ] && [ "$spills" -eq 0 ] && st=PASS || st=FAIL
  record build "$st" "$SECS" "$(why)built: ${ok:-none}${bad:+; FAILED: $bad}; register spills: $spills"
fi
B="$work/bin"

# ------------------------------------------------------------------------------------------------
section "kernels: dev/cuda kernel checks"
if skipped kernels; then record kernels SKIP 0 "GPU_CHECK_SKIP"; else
  # the host side of the checks uses OpenMP; the emulator's processes run one thread each
  export OMP_NUM_THREADS=$([ "$EMU" = 1 ] && echo 1 || echo "$NPROC")
  if [ "$EMU" = 1 ]; then run kernels 240 dev/cuda/emu/run_dev_checks.sh attention layernorm
  else run kernels 120 make -C dev/cuda run; fi
  record kernels "$(status)" "$SECS" "$(why)$(grep -c '^KERNEL .* PASS' "$work/logs/kernels.log") PASS, $(grep -c '^KERNEL .* FAIL' "$work/logs/kernels.log") FAIL"
  # every attention path's time side by side (BF16, the largest shape): which one should be the
  # default (ATTENTION=..., and TcDefault in gpu/flash_attention_tc.cuh)
  paths=$(grep -E '^KERNEL (flash_)?attention[a-z0-9_]*(\[HS=64\])?/BF16' "$work/logs/kernels.log" |
          awk '{t=""; for(i=1;i<=NF;i++){if($i ~ /^time=/) t=substr($i,6); if($i ~ /TFLOP\/s$/) f=$i} printf "%s %s %s; ", $2, t, f}')
  record attention_paths "$([ -n "$paths" ] && echo PASS || echo SKIP)" 0 "${paths:-no attention KERNEL lines}"
fi

# ------------------------------------------------------------------------------------------------
section "test_gpt2cu on 1 rank (small dump, V=1024)"
# the emulator runs stage 3 only (2 of 8 cases), for time
stages=(); [ "$EMU" = 1 ] && stages=(env TEST_STAGES=3)
for p in fp32 bf16; do
  if skipped "test_${p}_n1"; then record "test_${p}_n1" SKIP 0 "GPU_CHECK_SKIP"; continue; fi
  [ -x "$B/test_$p" ] && [ $have_small = 1 ] || { record "test_${p}_n1" FAIL 0 "no binary or no small dump"; continue; }
  run_test "test_${p}_n1" "$([ "$EMU" = 1 ] && echo 120 || echo 60)" "${stages[@]}" "$B/test_$p" "${SMALL[@]}"
done

# ------------------------------------------------------------------------------------------------
section "train: GPT-2 124M, tokens/s and memory"
# one run per batch size with the default build, then the other attention paths at the first B
if [ "$EMU" = 1 ]; then
  TRAIN=(-e d2c64h2t64 -t 32 -x 3 -v 0 -l 1e-3 -S 1337); TRAIN_BS=(2 4); T_TRAIN=32
  BASE=(--preset tiny --device cpu --steps 2 --warmup 1)
else
  TRAIN=(-e d12 -t 1024 -x 20 -v 0 -l 6e-4 -u 5 -S 1337); TRAIN_BS=(16 32); T_TRAIN=1024
  BASE=(--preset d12 --device cuda --steps 10 --warmup 3)
fi
declare -A train_tok train_mfu
if skipped train; then record train_z3 SKIP 0 "GPU_CHECK_SKIP"; elif [ -x "$B/train_bf16" ] && [ $have_data = 1 ]; then
  for bs in "${TRAIN_BS[@]}"; do
    run "train_z3_b$bs" 90 "$B/train_bf16" "${TRAIN[@]}" -b "$bs" -z 3
    grep -E '^\|' "$work/logs/train_z3_b$bs.log" | head -12
    grep -m1 -E 'activations' "$work/logs/train_z3_b$bs.log"
    stats=$(step_stats "$work/logs/train_z3_b$bs.log")
    train_tok[$bs]=$(echo "$stats" | awk '/tok\/s/{print $1}')
    train_mfu[$bs]=$(echo "$stats" | grep -o 'MFU [0-9.]*' | awk '{print $2}')
    record "train_z3_b$bs" "$(status)" "$SECS" "$(why)BF16 stage 3 -b $bs ${TRAIN[*]}: $stats; $(grep -m1 -o 'activations .*' "$work/logs/train_z3_b$bs.log" | sed 's/ *$//')"
  done
  for att in materialized portable; do
    [ -x "$B/train_bf16_$att" ] || { record "train_$att" FAIL 0 "no train_bf16_$att binary"; continue; }
    run "train_$att" 60 "$B/train_bf16_$att" "${TRAIN[@]}" -b "${TRAIN_BS[0]}" -z 3
    record "train_$att" "$(status)" "$SECS" "$(why)ATTENTION=$att -b ${TRAIN_BS[0]}: $(step_stats "$work/logs/train_$att.log")"
  done
else record train_z3 FAIL 0 "no train_bf16 binary or no data"; fi

# ------------------------------------------------------------------------------------------------
section "baseline: the same model in PyTorch (eager, torch.compile, FSDP2)"
# modes per batch size: everything at the first, eager and compile at the second
declare -A base_tok
for bs in "${TRAIN_BS[@]}"; do
  if skipped baseline; then record baseline SKIP 0 "GPU_CHECK_SKIP"; break; fi
  modes=eager,compile; [ "$bs" = "${TRAIN_BS[0]}" ] && modes=eager,compile,fsdp2
  run "baseline_b$bs" 150 env PYTHONUNBUFFERED=1 "$PY" dev/pytorch_baseline.py "${BASE[@]}" -B "$bs" -T "$T_TRAIN" --modes "$modes"
  for mode in ${modes//,/ }; do
    line=$(grep "^baseline $mode:" "$work/logs/baseline_b$bs.log" | tail -1 | sed "s/^baseline $mode: //")
    tok=$(echo "$line" | awk '/tok\/s/{print $1}')
    base_tok[$mode.$bs]=$tok
    ratio=""
    if [ -n "$tok" ] && [ -n "${train_tok[$bs]:-}" ]; then ratio=$(awk -v a="${train_tok[$bs]}" -v b="$tok" 'BEGIN{printf "; this trainer (stage 3) / PyTorch = %.2f", a/b}'); fi
    case "$line" in
      *tok/s*) st=PASS ;; SKIP*) st=SKIP ;; "") st=$([ "$RC" -eq 124 ] && echo FAIL || echo SKIP); line="$(why)no result" ;; *) st=FAIL ;;
    esac
    record "baseline_${mode}_b$bs" "$st" "$SECS" "$line$ratio"
  done
  # issue 14's targets at this B: >= torch.compile, >= 1.3x eager, MFU >= 50% (attention FLOPs counted
  # as host/train.c says); MISS is a measured shortfall, reported, not counted as a failure
  [ -n "${train_tok[$bs]:-}" ] || continue
  verdict=$(awk -v t="${train_tok[$bs]}" -v c="${base_tok[compile.$bs]:-}" -v e="${base_tok[eager.$bs]:-}" -v m="${train_mfu[$bs]:-}" 'BEGIN{
      ok=1; s=sprintf("%.0f tok/s", t)
      if (c != "") { s=s sprintf(", %.2fx torch.compile (>= 1)", t/c); if (t < c) ok=0 } else { s=s ", no torch.compile figure"; ok=0 }
      if (e != "") { s=s sprintf(", %.2fx eager (>= 1.3)", t/e); if (t < 1.3*e) ok=0 } else { s=s ", no eager figure"; ok=0 }
      if (m != "") { s=s sprintf(", MFU %s%% (>= 50)", m); if (m+0 < 50) ok=0 } else { s=s ", no MFU"; ok=0 }
      print (ok ? "PASS" : "MISS") " " s }')
  record "target_b$bs" "${verdict%% *}" 0 "${verdict#* }"
done

# ------------------------------------------------------------------------------------------------
section "n2: 2 ranks on one GPU (NCCL over loopback sockets)"
if skipped n2; then record test_fp32_n2 SKIP 0 "GPU_CHECK_SKIP"
elif [ "$EMU" = 1 ]; then record test_fp32_n2 SKIP 0 "emulated NCCL needs MPI for N ranks: tests/test_emu_gpt2.sh runs them"
else
  run_test test_fp32_n2 90 scripts/launch.sh -n 2 --hostid-per-rank "$B/test_fp32" "${SMALL[@]}"
fi

# ------------------------------------------------------------------------------------------------
section "sanitizer: compute-sanitizer on a short run of the trainer"
SAN_RUN=(-e d2c64h2t64 -b 2 -t 32 -x 2 -v 0 -S 1337)
if skipped sanitizer; then record sanitizer SKIP 0 "GPU_CHECK_SKIP"
elif [ -z "$SANITIZER" ]; then record sanitizer SKIP 0 "compute-sanitizer not found"
else
  for tool in memcheck racecheck synccheck; do
    run "san_$tool" 60 "$SANITIZER" --tool "$tool" --error-exitcode 3 "$B/train_fp32" "${SAN_RUN[@]}"
    record "san_$tool" "$(status)" "$SECS" "$(why)$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$work/logs/san_$tool.log" | tail -1)"
  done
fi

# ------------------------------------------------------------------------------------------------
section "the rest"
if skipped rest; then record rest SKIP 0 "GPU_CHECK_SKIP"; else
  # the DDP build's test (stage 0 only, gradients all-reduced)
  [ -x "$B/test_ddp" ] && [ $have_small = 1 ] && run_test test_ddp_n1 60 "$B/test_ddp" "${SMALL[@]}"
  if [ "$EMU" = 1 ]; then
    record test_tiny SKIP 0 "GPT-2's full vocabulary takes ~15 min emulated (dev/cuda/emu/run_trainer_check.sh)"
  else
    # GPT-2's full vocabulary: the tiny dump (113 MB, too big to carry) made here on the GPU
    [ -f dev/ref/tiny.dump ] || run dump_tiny 120 "$PY" dev/gpt2_reference.py --preset tiny --device cuda
    # the token file the tiny reference trained on, beside it (the test reads NAME_tokens.bin)
    [ -f dev/ref/tiny_tokens.bin ] || cp data/tinyshakespeare/tiny_shakespeare_val.bin dev/ref/tiny_tokens.bin
    if [ -f dev/ref/tiny.dump ]; then
      for p in fp32 bf16; do [ -x "$B/test_$p" ] && run_test "test_${p}_tiny" 60 "$B/test_$p" dev/ref/tiny.dump dev/ref/tiny_model.bin; done
    else record test_tiny FAIL "$SECS" "$(why)no tiny dump (dev/gpt2_reference.py --preset tiny)"; fi
  fi
  # stage 0 (everything replicated) beside stage 3: the memory ZeRO-3 saves, the speed it costs
  if [ -x "$B/train_bf16" ] && [ $have_data = 1 ]; then
    run train_z0 120 "$B/train_bf16" "${TRAIN[@]}" -b "${TRAIN_BS[0]}" -z 0
    record train_z0 "$(status)" "$SECS" "$(why)BF16 stage 0: $(step_stats "$work/logs/train_z0.log")"
  fi
  if [ "$EMU" != 1 ] && [ -x "$B/train_bf16" ] && [ -x "$B/train_ddp" ] && [ $have_data = 1 ]; then
    args=(-e d12 -b 4 -t 1024 -x 8 -l 6e-4 -v 0 -S 1337)
    run n2_z3 120 scripts/launch.sh -n 2 --hostid-per-rank "$B/train_bf16" "${args[@]}" -z 3; rc3=$RC
    run n2_ddp 120 scripts/launch.sh -n 2 --hostid-per-rank "$B/train_ddp" "${args[@]}"; rcd=$RC
    # the same data and math: their losses agree to bf16 rounding
    cmp=$(paste <(grep '^step ' "$work/logs/n2_z3.log" | grep -o '| loss [0-9.]*' | awk '{print $3}') \
                <(grep '^step ' "$work/logs/n2_ddp.log" | grep -o '| loss [0-9.]*' | awk '{print $3}') |
          awk '{d=$1-$2; if(d<0)d=-d; r=d/$2; if(r>m)m=r; n++} END{if(n==0){print "no steps"; exit 1} printf "%d steps, max rel loss diff %.2e\n", n, m; exit (m > 2e-2)}')
    cmp_rc=$?
    [ $rc3 -eq 0 ] && [ $rcd -eq 0 ] && [ $cmp_rc -eq 0 ] && st=PASS || st=FAIL
    record zero3_vs_ddp_n2 "$st" "$SECS" "z3 exit $rc3, ddp exit $rcd; $cmp; z3 $(step_stats "$work/logs/n2_z3.log"); ddp $(step_stats "$work/logs/n2_ddp.log")"
  fi
fi

# ------------------------------------------------------------------------------------------------
section "summary ($(elapsed) s)"
echo "gpu_check: ${gpu_name:-?}, $(elapsed) s, $failures failed$([ "$EMU" = 1 ] && echo ' (EMULATED)')" | tee -a "$SUMMARY"
cat "$SUMMARY"
tar -czf "$OUTDIR/gpu_check_logs.tgz" -C "$work" logs 2>/dev/null
[ "$failures" -eq 0 ]
