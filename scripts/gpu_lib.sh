# scripts/gpu_lib.sh: what scripts/gpu_first.sh (the first, five-minute visit) and scripts/gpu_check.sh
# (the full check) share. Sourced, not run. The pieces, in the order a script uses them:
#   gpu_begin NAME SUMMARY GPU_BUDGET EMU_BUDGET   the clock, build/NAME for builds and logs, the output
#                            files in $OUT: SUMMARY (one line per result), NAME.log, NAME_logs.tgz
#   section, record, run     a heading; one summary line, written at once (with the logs so far); a
#                            command under `timeout -k`, capped by its own limit and by the time left
#   probe_env                what is here (GPU, nvcc, NCCL and where it was found, PyTorch,
#                            compute-sanitizer) and the carried files; makes what is missing and quick
#   start_build, await_build one configuration built in the background; its build_NAME line
#   run_tests_n1, run_train, record_kernels, run_baseline, sanitize_tensor_cores,
#   pairs                    one kind of measurement each, and its summary line(s)
#   gpu_end                  the closing line; the exit status (0: nothing FAILed)
#   print_carry              the ignored files the device needs, with sizes (the device tool's carry)
# Both scripts read the same environment:
#   GPU_CHECK_EMULATE=1      no GPU: builds with dev/cuda/emu/build.sh, tiny sizes on the CPU emulator,
#                            to test the scripts themselves (every figure is meaningless)
#   GPU_CHECK_BUDGET=S       seconds for the whole run: a command gets at most what is left, and one
#                            that would get under 5 s does not start (its line says SKIP, no time left)
#   GPU_CHECK_SKIP="a b"     sections skipped by name (each script lists its sections)

# The files git does not track that the device needs (at most 8 paths, 64 MiB in all, for the device
# tool's carry): the tokenized tinyshakespeare (train and validation tokens, the tokenizer, and the
# text and vocabulary they were made from) and the small PyTorch reference (V=1024) with its model
# and tokens. Made here by `make data` and `make dev/ref/small.dump`.
CARRY=(data/tinyshakespeare dev/ref/small.dump dev/ref/small_model.bin dev/ref/small_tokens.bin)
CARRY_LIMIT_MIB=64
SMALL=(dev/ref/small.dump dev/ref/small_model.bin)
TRAIN_TOKENS=data/tinyshakespeare/tiny_shakespeare_train.bin
VAL_TOKENS=data/tinyshakespeare/tiny_shakespeare_val.bin
KILL_AFTER=10  # seconds between a capped command's SIGTERM and its SIGKILL (a rank stuck in a collective)

# print_carry: the carry list as the device tool takes it, then each path's size; fails when one is
# missing (saying how to make it) or the total is over the limit
print_carry() {
  local p missing=0 total=0 kib json=""
  for p in "${CARRY[@]}"; do json+="${json:+, }\"$p\""; done
  echo "carry: [$json]"
  for p in "${CARRY[@]}"; do
    if [ -e "$p" ]; then
      kib=$(du -sk "$p" | cut -f1); total=$((total + kib))
      printf '  %-28s %8.1f MiB\n' "$p" "$(awk -v k="$kib" 'BEGIN{print k / 1024}')"
    else
      printf '  %-28s MISSING: %s\n' "$p" "$(case $p in data/*) echo "make data" ;; *) echo "make $p" ;; esac)"
      missing=1
    fi
  done
  printf '  %-28s %8.1f MiB of %d\n' total "$(awk -v k="$total" 'BEGIN{print k / 1024}')" "$CARRY_LIMIT_MIB"
  [ "$missing" = 0 ] && [ "$total" -le $((CARRY_LIMIT_MIB * 1024)) ]
}

# gpu_begin NAME SUMMARY GPU_BUDGET EMU_BUDGET: moves to the repository root, starts the clock and the
# output files; sets root EMU BUDGET work OUTDIR SUMMARY NPROC failures
gpu_begin() {
  cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
  root="$PWD"
  GPU_SCRIPT=$1
  EMU=${GPU_CHECK_EMULATE:-0}
  BUDGET=${GPU_CHECK_BUDGET:-$([ "$EMU" = 1 ] && echo "$4" || echo "$3")}
  work="$root/build/$GPU_SCRIPT"
  rm -rf "$work"
  mkdir -p "$work/bin" "$work/logs"
  OUTDIR=${OUT:-$work/out}
  mkdir -p "$OUTDIR"
  SUMMARY="$OUTDIR/$2"
  : > "$SUMMARY"
  exec > >(tee "$OUTDIR/$GPU_SCRIPT.log") 2>&1
  t0=$(date +%s)
  NPROC=$(nproc 2>/dev/null || echo 4)
  failures=0
  B="$work/bin"
  gpu_sizes
}

# gpu_sizes: what differs by mode. The training runs: GPT-2 124M on tinyshakespeare at T=1024 on the
# GPU, a 2-layer model at T=32 under the emulator; the PyTorch baseline's arguments for the same
# model; the launcher of 2 ranks: on the GPU machine (no MPI) scripts/launch.sh, both ranks on its
# one GPU (NCCL over loopback sockets), under the emulator mpirun, whose ranks the emulated NCCL joins.
gpu_sizes() {
  TRAIN=($(pick "-e d12 -t 1024 -x 20 -v 0 -l 6e-4 -u 5 -S 1337" "-e d2c64h2t64 -t 32 -x 3 -v 0 -l 1e-3 -S 1337"))
  TRAIN_B=($(pick "16 32" "2 4"))
  T_TRAIN=$(pick 1024 32)
  BASE=($(pick "--preset d12 --device cuda --steps 10 --warmup 3" "--preset tiny --device cpu --steps 2 --warmup 1"))
  LAUNCH2=($(pick "scripts/launch.sh -n 2 --hostid-per-rank" "env OMPI_ALLOW_RUN_AS_ROOT=1 \
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1 mpirun -np 2"))
  PAIR_ARGS=($(pick "-e d12 -b 4 -t 1024 -x 8 -l 6e-4 -v 0 -S 1337" "-e d2c64h2t64 -b 2 -t 32 -x 3 -l 1e-3 -v 0 -S 1337"))
}

elapsed() { echo $(( $(date +%s) - t0 )); }
left() { echo $(( BUDGET - $(elapsed) )); }
skipped() { [[ " ${GPU_CHECK_SKIP:-} " == *" $1 "* ]]; }
section() { echo; echo "==================== [$(elapsed) s] $*"; }
# cap GPU EMU: a time limit, by mode (the emulator is some thousand times slower, on tiny sizes)
cap() { [ "$EMU" = 1 ] && echo "$2" || echo "$1"; }
# pick GPU EMU: the same for anything else that differs by mode
pick() { [ "$EMU" = 1 ] && echo "$2" || echo "$1"; }

# record NAME PASS|FAIL|SKIP|MISS SECONDS DETAIL: one summary line, written at once, and the logs so far
record() {
  local line
  line=$(printf '%-24s %-4s %4ss  %s' "$1" "$2" "$3" "$4")
  echo "$line" >> "$SUMMARY"
  echo ">>> $line"
  [ "$2" = FAIL ] && failures=$((failures + 1))
  tar -czf "$OUTDIR/${GPU_SCRIPT}_logs.tgz" -C "$work" logs 2>/dev/null
}

# run NAME CAP COMMAND...: COMMAND with its output in logs/NAME.log, under `timeout -k` with
# min(CAP, time left); sets RC (124/137: timed out) and SECS. Under 5 s left: RC=125, nothing runs.
run() {
  local name=$1 limit=$2; shift 2
  local l; l=$(left)
  [ "$l" -lt "$limit" ] && limit=$l
  SECS=0
  if [ "$limit" -lt 5 ]; then RC=125; : > "$work/logs/$name.log"; return; fi
  echo "--- $name (cap ${limit}s): $*"
  local s; s=$(date +%s)
  timeout -k "$KILL_AFTER" "$limit" "$@" > "$work/logs/$name.log" 2>&1
  RC=$?
  SECS=$(( $(date +%s) - s ))
  tail -n 8 "$work/logs/$name.log"
}

# status from RC, and a note for the summary when the command did not finish
status() { [ "$RC" -eq 0 ] && echo PASS || { [ "$RC" -eq 125 ] && echo SKIP || echo FAIL; }; }
why() { case "$RC" in 124|137) echo "timed out; " ;; 125) echo "no time left; " ;; 0) ;; *) echo "exit $RC; " ;; esac; }
log() { echo "$work/logs/$1.log"; }

# ------------------------------------------------------------------------------------------------
# probe_env: prints what is here, makes the carried files that are missing and quick to make, and
# records the `env` line. Sets PY NVCC CUDA_HOME SANITIZER NCCL_HOME_ARG gpu_name have_data have_small.
probe_env() {
  PY=""
  local p
  for p in python3 /usr/bin/python3; do
    if $p -c 'import torch' >/dev/null 2>&1; then PY=$p; break; fi
  done
  [ -n "$PY" ] || PY=python3
  NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC")")}
  SANITIZER=$(command -v compute-sanitizer || ls "$CUDA_HOME/bin/compute-sanitizer" 2>/dev/null || true)
  NCCL_HOME_ARG=""
  local nccl
  if [ "$EMU" = 1 ]; then
    echo "mode:     EMULATED (GPU_CHECK_EMULATE=1): dev/cuda/emu on the CPU, tiny sizes, figures meaningless"
    gpu_name="CPU emulator"
    nccl="the emulator's (over MPI for 2 ranks)"
    SANITIZER=""
  else
    echo "nvcc:     $NVCC: $("$NVCC" --version 2>/dev/null | grep -o 'release [0-9.]*' || echo MISSING)"
    gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
    echo "GPU:      $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo 'nvidia-smi failed')"
    # NCCL: the toolkit's, else the one inside PyTorch's wheels (nvidia/nccl under site-packages)
    if [ -f "$CUDA_HOME/include/nccl.h" ] && ls "$CUDA_HOME"/lib64/libnccl.so* >/dev/null 2>&1; then
      nccl="toolkit, $(ls "$CUDA_HOME"/lib64/libnccl.so* | head -1)"
    elif [ -f /usr/include/nccl.h ] && ls /usr/lib/*/libnccl.so* >/dev/null 2>&1; then
      nccl="system, $(ls /usr/lib/*/libnccl.so* | head -1)"
    else
      local dir
      dir=$($PY -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
      if [ -n "$dir" ] && [ -f "$dir/include/nccl.h" ]; then
        NCCL_HOME_ARG="NCCL_HOME=$dir"
        export LD_LIBRARY_PATH="$dir/lib:${LD_LIBRARY_PATH:-}"
        nccl="PyTorch wheel, $dir"
      else
        nccl="NOT FOUND (no nccl.h in the toolkit or /usr/include; python has no nvidia.nccl)"
      fi
    fi
  fi
  echo "NCCL:     $nccl"
  echo "python:   $PY: $($PY -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available())' 2>&1 | tail -1)"
  echo "sanitizer: ${SANITIZER:-not found}"
  echo "cpus:     $NPROC; budget ${BUDGET}s; OUT=${OUT:-unset}"
  make_missing
  have_data=0; [ -f "$TRAIN_TOKENS" ] && [ -f "$VAL_TOKENS" ] && have_data=1
  have_small=0; [ -f "${SMALL[0]}" ] && [ -f "${SMALL[1]}" ] && [ -f dev/ref/small_tokens.bin ] && have_small=1
  local st=PASS; [ $have_data = 1 ] && [ $have_small = 1 ] || st=FAIL
  [[ $nccl == NOT* ]] && st=FAIL
  record env "$st" "$(elapsed)" "${gpu_name:-no GPU found}; NCCL: $nccl; data $([ $have_data = 1 ] && echo ok || echo "MISSING: carry data/tinyshakespeare"); small dump $([ $have_small = 1 ] && echo ok || echo "MISSING: carry ${CARRY[*]:1}")"
}

# make_missing: the carried files a run can make in seconds when they did not come: the tokens from
# the carried text and vocabulary, the small reference from the tokens (PyTorch, ~20 s)
make_missing() {
  local d=data/tinyshakespeare
  if [ ! -f "$TRAIN_TOKENS" ] && [ -f "$d/tiny_shakespeare.txt" ] && [ -f "$d/encoder.json" ] && [ -f "$d/vocab.bpe" ]; then
    run make_data 60 "$PY" data/tinyshakespeare.py --input "$d/tiny_shakespeare.txt" --vocab "$d"
  fi
  if [ -f "$VAL_TOKENS" ] && { [ ! -f "${SMALL[0]}" ] || [ ! -f "${SMALL[1]}" ] || [ ! -f dev/ref/small_tokens.bin ]; }; then
    run make_small_dump 90 make dev/ref/small.dump PYTHON="$PY"
  fi
}

# ------------------------------------------------------------------------------------------------
# Builds. A configuration: NAME PRECISION DDP ATTENTION PARTS [EXTRA], PARTS one of both|train|test
# (train_NAME and test_NAME in $B); EXTRA only under the emulator: `mpi` (its NCCL runs 2 ranks over
# MPI; on the GPU the ranks come from scripts/launch.sh and every build is USE_MPI=0) or `asan`.
build_cfg() {
  local name=$1 prec=$2 ddp=$3 att=$4 parts=$5 extra=${6:-}
  local want_train=1 want_test=1
  [ "$parts" = test ] && want_train=0
  [ "$parts" = train ] && want_test=0
  if [ "$EMU" = 1 ]; then
    local defs=(-DENABLE_"$prec"); [ "$ddp" = 1 ] && defs+=(-DZERO3_DDP_ONLY)
    case "$att" in materialized) defs+=(-DATTENTION_MATERIALIZED) ;; portable) defs+=(-DATTENTION_PORTABLE) ;; esac
    local asan=()
    [ "$extra" = mpi ] && defs+=(-DUSE_MPI)
    [ "$extra" = asan ] && asan=(--asan)
    { [ $want_test = 0 ] || dev/cuda/emu/build.sh "${asan[@]}" "$B/test_$name" test_gpt2.cu "${defs[@]}" --library; } &&
      { [ $want_train = 0 ] || dev/cuda/emu/build.sh "${asan[@]}" "$B/train_$name" train_gpt2_zero3.cu "${defs[@]}" --library; }
  else
    # a copy of the sources per configuration: they build side by side (the outputs share names)
    local src="$work/src_$name" targets=()
    [ $want_train = 1 ] && targets+=(train_gpt2_zero3cu)
    [ $want_test = 1 ] && targets+=(test_gpt2cu)
    mkdir -p "$src"
    tar -cf - --exclude=./.git --exclude=./build --exclude=./data --exclude=./dev/ref --exclude=./dev/cuda/bin . |
      (cd "$src" && tar -xf -)
    # shellcheck disable=SC2086  # NCCL_HOME_ARG is one word or none
    make -C "$src" -j4 PRECISION="$prec" DDP="$ddp" ATTENTION="$att" USE_MPI=0 $NCCL_HOME_ARG "${targets[@]}" &&
      { [ $want_test = 0 ] || mv "$src/test_gpt2cu" "$B/test_$name"; } &&
      { [ $want_train = 0 ] || mv "$src/train_gpt2_zero3cu" "$B/train_$name"; }
  fi
}
# the dev/cuda checks: every program on its own (-k: one that fails to compile stops no other)
build_dev_cuda() {
  if [ "$EMU" = 1 ]; then echo "emulated: dev/cuda/emu/run_dev_checks.sh builds its programs when it runs them"
  else make -C dev/cuda -k -j"$NPROC" all; fi
}
export -f build_cfg build_dev_cuda

# start_build NAME CAP COMMAND...: COMMAND (build_cfg ... or build_dev_cuda) in the background under
# `timeout -k`, log logs/build_NAME.log; when it ends, its exit status and end time go to build_NAME.rc
declare -A build_pid build_start
start_build() {
  local name=$1 limit=$2; shift 2
  skipped build && return
  local l; l=$(left)
  [ "$l" -lt "$limit" ] && limit=$l
  build_start[$name]=$(date +%s)
  build_pid[$name]=""
  if [ "$limit" -lt 5 ]; then echo "125 $(date +%s)" > "$work/logs/build_$name.rc"; : > "$(log "build_$name")"; return; fi
  export EMU work B NCCL_HOME_ARG NPROC
  echo "--- build_$name (cap ${limit}s): $*"
  { timeout -k "$KILL_AFTER" "$limit" bash -c '"$@"' build "$@"; echo "$? $(date +%s)" > "$work/logs/build_$name.rc"; } \
    > "$(log "build_$name")" 2>&1 &
  build_pid[$name]=$!
}

# await_build NAME FILES...: waits for that build, records build_NAME (the files it must have made,
# and any register spill nvcc reported); returns non-zero when it failed
await_build() {
  local name=$1; shift
  if skipped build; then record "build_$name" SKIP 0 "GPU_CHECK_SKIP"; return 1; fi
  [ -n "${build_pid[$name]}" ] && wait "${build_pid[$name]}"
  local end
  read -r RC end < "$work/logs/build_$name.rc"
  SECS=$(( end - build_start[$name] ))
  local f missing=""
  for f in "$@"; do [ -x "$f" ] || missing+=" $(basename "$f")"; done
  local spills; spills=$(grep -c "Registers are spilled" "$(log "build_$name")")
  [ -n "$missing" ] && tail -15 "$(log "build_$name")"
  local st=PASS; { [ "$RC" -ne 0 ] || [ -n "$missing" ] || [ "$spills" -ne 0 ]; } && st=FAIL
  [ "$RC" -eq 125 ] && st=SKIP
  record "build_$name" "$st" "$SECS" "$(why)${missing:+missing:$missing; }register spill warnings: $spills"
  [ "$st" = PASS ]
}

# ------------------------------------------------------------------------------------------------
# Measurements

# kernel_lines LOG: the KERNEL lines of a dev/cuda run (run_all.sh or the emulator's run_dev_checks.sh),
# each once: run_all.sh prints them indented as they come and again in its summary, which a run
# stopped by its cap never reaches
kernel_lines() { grep -E '^ *KERNEL ' "$1" | sed 's/^ *//' | awk '!seen[$0]++'; }
# kernel_counts LOG: those lines counted, and the programs that failed (did not build, crashed, or
# printed no KERNEL line)
kernel_counts() {
  echo "$(kernel_lines "$1" | grep -c ' PASS ') PASS, $(kernel_lines "$1" | grep -c ' FAIL ') FAIL$(grep -o 'programs failed: .*' "$1" | tail -1 | sed 's/^/; /')"
}
# attention_paths LOG: every attention path's time and TFLOP/s side by side (BF16; tags: [HS=64]
# GPT-2's head size, [B=16] the training batch): which one should be the default (ATTENTION=...,
# and TcDefault in gpu/flash_attention_tc.cuh)
attention_paths() {
  kernel_lines "$1" | grep -E '^KERNEL (flash_)?attention[a-z0-9_]*(\[[A-Z]+=[0-9]+\])?/BF16' |
    awk '{t=""; for(i=1;i<=NF;i++){if($i ~ /^time=/) t=substr($i,6); if($i ~ /TFLOP\/s$/) f=$i} printf "%s %s %s; ", $2, t, f}'
}

# run_test NAME CAP COMMAND...: a test_gpt2cu run; its line has the "N of M cases passed" line
run_test() {
  local name=$1 limit=$2; shift 2
  run "$name" "$limit" "$@"
  grep -m5 MISMATCH "$(log "$name")"
  record "$name" "$(status)" "$SECS" "$(why)$(grep 'cases passed' "$(log "$name")" | tail -1)"
}

# record_kernels NAME [paths]: the line of the dev/cuda run just made (run NAME ...), and with `paths`
# the attention_paths line from its log
record_kernels() {
  record "$1" "$(status)" "$SECS" "$(why)$(kernel_counts "$(log "$1")")"
  [ "${2:-}" = paths ] || return 0
  local p; p=$(attention_paths "$(log "$1")")
  record attention_paths "$([ -n "$p" ] && echo PASS || { [ "$RC" -eq 125 ] && echo SKIP || echo FAIL; })" 0 "${p:-no BF16 attention KERNEL lines}"
}

# run_tests_n1 CAP PRECISION...: test_gpt2cu of each precision on one rank against the small dump
# (lines test_PRECISION_n1; GPU_CHECK_SKIP: tests, or one line's name). The emulator runs stage 3
# only (2 of the 8 cases), for time.
run_tests_n1() {
  local limit=$1 p; shift
  local stages=(); [ "$EMU" = 1 ] && stages=(env TEST_STAGES=3)
  for p in "$@"; do
    if skipped tests || skipped "test_${p}_n1"; then record "test_${p}_n1" SKIP 0 "GPU_CHECK_SKIP"; continue; fi
    [ -x "$B/test_$p" ] && [ $have_small = 1 ] || { record "test_${p}_n1" FAIL 0 "no binary or no small dump"; continue; }
    run_test "test_${p}_n1" "$limit" "${stages[@]}" "$B/test_$p" "${SMALL[@]}"
  done
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

declare -A train_tok train_mfu base_tok

# run_train NAME CAP BIN B ARGS...: the trainer at batch B (plus ARGS) for train_NAME's line: tok/s,
# ms/step, MFU, loss, peak memory, the activations line, and the cuBLASLt epilogue fallback counters
# (how often the GELU or bias-gradient epilogue was asked for and no algorithm had it)
run_train() {
  local name=$1 limit=$2 bin=$3 bs=$4; shift 4
  [ -x "$bin" ] && [ $have_data = 1 ] || { record "$name" FAIL 0 "no $(basename "$bin") or no data"; return; }
  run "$name" "$limit" "$bin" "${TRAIN[@]}" -b "$bs" "$@"
  local l; l=$(log "$name")
  grep -E '^\|' "$l" | head -12
  local stats; stats=$(step_stats "$l")
  train_tok[$name]=$(echo "$stats" | awk '/tok\/s/{print $1}')
  train_mfu[$name]=$(echo "$stats" | grep -o 'MFU [0-9.]*' | awk '{print $2}')
  local act; act=$(grep -m1 -o 'activations .*' "$l" | sed 's/ *$//')
  local fb; fb=$(grep -i -m1 'fallback' "$l" | sed 's/^[ |]*//; s/ *$//')
  record "$name" "$(status)" "$SECS" "$(why)-b $bs $*: $stats; ${act:-no activations line}; ${fb:-fallback counters: not printed}"
}

# run_baseline B MODES TRAIN_NAME: dev/pytorch_baseline.py at batch B in the given modes (eager,
# compile, fsdp2); one baseline_MODE_bB line each, with this trainer's ratio (train_NAME's tok/s),
# then target_bB: the speed targets (>= torch.compile, >= 1.3x eager, MFU >= 50%) met or MISSed
# (a MISS is a measured shortfall, not a failure)
run_baseline() {
  local bs=$1 modes=$2 tname=$3 mode line tok ratio st
  local mine=${train_tok[$tname]:-}
  run "baseline_b$bs" "$(cap 150 240)" env PYTHONUNBUFFERED=1 "$PY" dev/pytorch_baseline.py "${BASE[@]}" -B "$bs" -T "$T_TRAIN" --modes "$modes"
  for mode in ${modes//,/ }; do
    line=$(grep "^baseline $mode:" "$(log "baseline_b$bs")" | tail -1 | sed "s/^baseline $mode: //")
    tok=$(echo "$line" | awk '/tok\/s/{print $1}')
    base_tok[$mode.$bs]=$tok
    ratio=""
    [ -n "$tok" ] && [ -n "$mine" ] && ratio=$(awk -v a="$mine" -v b="$tok" 'BEGIN{printf "; this trainer (stage 3) / PyTorch = %.2f", a/b}')
    case "$line" in
      *tok/s*) st=PASS ;; SKIP*) st=SKIP ;; "") st=$([ "$RC" -eq 124 ] && echo FAIL || echo SKIP); line="$(why)no result" ;; *) st=FAIL ;;
    esac
    record "baseline_${mode}_b$bs" "$st" "$SECS" "$line$ratio"
  done
  [ -n "$mine" ] || return 0
  local verdict
  verdict=$(awk -v t="$mine" -v c="${base_tok[compile.$bs]:-}" -v e="${base_tok[eager.$bs]:-}" -v m="${train_mfu[$tname]:-}" 'BEGIN{
      ok=1; s=sprintf("%.0f tok/s", t)
      if (c != "") { s=s sprintf(", %.2fx torch.compile (>= 1)", t/c); if (t < c) ok=0 } else { s=s ", no torch.compile figure"; ok=0 }
      if (e != "") { s=s sprintf(", %.2fx eager (>= 1.3)", t/e); if (t < 1.3*e) ok=0 } else { s=s ", no eager figure"; ok=0 }
      if (m != "") { s=s sprintf(", MFU %s%% (>= 50)", m); if (m+0 < 50) ok=0 } else { s=s ", no MFU"; ok=0 }
      print (ok ? "PASS" : "MISS") " " s }')
  record "target_b$bs" "${verdict%% *}" 0 "${verdict#* }"
}

# run_sanitizer TOOL CAP BIN ARGS...: compute-sanitizer TOOL on one program, line san_TOOL_BIN.
# A run cut off by its cap gave no verdict: SKIP, not FAIL.
run_sanitizer() {
  local tool=$1 limit=$2 bin=$3; shift 3
  local name="san_${tool}_$(basename "$bin")"
  [ -n "$SANITIZER" ] || { record "$name" SKIP 0 "compute-sanitizer not found"; return; }
  run "$name" "$limit" "$SANITIZER" --tool "$tool" --error-exitcode 3 "$bin" "$@"
  local st; st=$(status)
  { [ "$RC" -eq 124 ] || [ "$RC" -eq 137 ]; } && st=SKIP
  record "$name" "$st" "$SECS" "$(why)$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$(log "$name")" | tail -1)"
}

# sanitize_tensor_cores CAP TOOL...: the sanitizer on the tensor-core attention kernels: the BF16 test
# at stage 3 (lines san_TOOL_test_bf16). The emulator has no compute-sanitizer; its counterparts run
# on a short run of the BF16 trainer instead (the test takes minutes there; lines san_TOOL_train_bf16):
# memcheck -> the trainer built with AddressSanitizer (emulated device memory is host memory),
# racecheck -> another warp schedule (EMU_SCHED_SEED), under which a missing barrier shows.
sanitize_tensor_cores() {
  local limit=$1 tool; shift
  if [ "$EMU" != 1 ]; then
    for tool in "$@"; do TEST_STAGES=3 run_sanitizer "$tool" "$limit" "$B/test_bf16" "${SMALL[@]}"; done
    return
  fi
  start_build bf16_asan 300 build_cfg bf16_asan BF16 0 flash train asan
  await_build bf16_asan "$B/train_bf16_asan"
  local short=("${TRAIN[@]}" -b "${TRAIN_B[0]}" -x 2 -z 3) name bin run_env
  for tool in "$@"; do
    name="san_${tool}_train_bf16"
    case "$tool" in
      memcheck) bin=$B/train_bf16_asan; run_env=(env ASAN_OPTIONS=detect_leaks=0) ;;
      racecheck) bin=$B/train_bf16; run_env=(env EMU_SCHED_SEED=7) ;;
      *) record "$name" SKIP 0 "emulated: no counterpart of $tool"; continue ;;
    esac
    [ -x "$bin" ] || { record "$name" FAIL 0 "no $(basename "$bin")"; continue; }
    run "$name" "$limit" "${run_env[@]}" "$bin" "${short[@]}"
    record "$name" "$(status)" "$SECS" "$(why)emulated $tool counterpart: $(step_stats "$(log "$name")")"
  done
}

# compare_losses LOG_A LOG_B: the step losses of two runs of the same data and math agree to bf16
# rounding (max relative difference 2e-2); prints the count and the largest difference
compare_losses() {
  paste <(grep '^step ' "$1" | grep -o '| loss [0-9.]*' | awk '{print $3}') \
        <(grep '^step ' "$2" | grep -o '| loss [0-9.]*' | awk '{print $3}') |
    awk '{d=$1-$2; if(d<0)d=-d; r=d/$2; if(r>m)m=r; n++} END{if(n==0){print "no steps"; exit 1} printf "%d steps, max rel loss diff %.2e", n, m; exit (m > 2e-2)}'
}

# run_pairs Z3_BIN DDP_BIN: two ranks on one GPU, the same model and data three ways: ZeRO-3, DDP
# (the DDP build) and HSDP (-hs 1: shard groups of one rank, replicated across the two). The three
# must print the same losses to bf16 rounding. Lines zero3_vs_ddp_n2 and hsdp_n2.
run_pairs() {
  local z3=$1 ddp=$2
  if ! [ -x "$z3" ] || ! [ -x "$ddp" ] || [ $have_data = 0 ]; then
    record zero3_vs_ddp_n2 FAIL 0 "no $(basename "$z3") / $(basename "$ddp") or no data"
    record hsdp_n2 FAIL 0 "no $(basename "$z3") or no data"
    return
  fi
  local limit; limit=$(cap 90 240)
  run n2_z3 "$limit" "${LAUNCH2[@]}" "$z3" "${PAIR_ARGS[@]}" -z 3; local rc3=$RC s3=$SECS
  run n2_ddp "$limit" "${LAUNCH2[@]}" "$ddp" "${PAIR_ARGS[@]}"; local rcd=$RC
  local cmp; cmp=$(compare_losses "$(log n2_z3)" "$(log n2_ddp)"); local cmp_rc=$?
  local st=FAIL; [ $rc3 -eq 0 ] && [ $rcd -eq 0 ] && [ $cmp_rc -eq 0 ] && st=PASS
  [ $rc3 -eq 125 ] && st=SKIP
  record zero3_vs_ddp_n2 "$st" "$((s3 + SECS))" "z3 exit $rc3, ddp exit $rcd; $cmp; z3 $(step_stats "$(log n2_z3)"); ddp $(step_stats "$(log n2_ddp)")"
  run n2_hsdp "$limit" "${LAUNCH2[@]}" "$z3" "${PAIR_ARGS[@]}" -z 3 -hs 1
  cmp=$(compare_losses "$(log n2_hsdp)" "$(log n2_z3)"); cmp_rc=$?
  st=$(status); [ "$st" = PASS ] && [ $cmp_rc -ne 0 ] && st=FAIL
  local err; err=$(grep -m1 'error' "$(log n2_hsdp)")
  record hsdp_n2 "$st" "$SECS" "$(why)-hs 1 against ZeRO-3: $cmp; ${err:+$err; }$(step_stats "$(log n2_hsdp)")"
}

# pairs: run_pairs with this machine's trainers: the GPU builds (train_bf16, train_ddp), or under the
# emulator MPI builds of both made here (its NCCL runs 2 ranks over MPI)
pairs() {
  if [ "$EMU" != 1 ]; then run_pairs "$B/train_bf16" "$B/train_ddp"; return; fi
  command -v mpicxx >/dev/null || { record zero3_vs_ddp_n2 SKIP 0 "emulated: 2 ranks need MPI (mpicxx)"; return; }
  start_build bf16_mpi 300 build_cfg bf16_mpi BF16 0 flash train mpi
  start_build ddp_mpi 300 build_cfg ddp_mpi BF16 1 flash train mpi
  await_build bf16_mpi "$B/train_bf16_mpi"
  await_build ddp_mpi "$B/train_ddp_mpi"
  run_pairs "$B/train_bf16_mpi" "$B/train_ddp_mpi"
}

# gpu_end: the closing line (counted failures) and the summary again; exit status 0 when none failed
gpu_end() {
  section "summary ($(elapsed) s)"
  echo "$GPU_SCRIPT: ${gpu_name:-?}, $(elapsed) s, $failures failed$([ "$EMU" = 1 ] && echo ' (EMULATED)')" | tee -a "$SUMMARY"
  cat "$SUMMARY"
  tar -czf "$OUTDIR/${GPU_SCRIPT}_logs.tgz" -C "$work" logs 2>/dev/null
  [ "$failures" -eq 0 ]
}
