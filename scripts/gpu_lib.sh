# scripts/gpu_lib.sh: what scripts/gpu_first.sh (the time-boxed first run) and scripts/gpu_check.sh
# (the full check) share. Sourced, not run. The pieces, in the order a script uses them:
#   gpu_begin NAME SUMMARY GPU_BUDGET EMU_BUDGET   the clock, build/NAME for builds and logs, the output
#                            files in GPU_CHECK_OUT: SUMMARY (one line per result), NAME.log, NAME_logs.tgz
#   section, record, run     a heading; one summary line, written at once (with the logs so far); a
#                            command under `timeout -k`, capped by its own limit and by the time left
#   probe_env                what is here (GPU, nvcc, NCCL and where it was found, PyTorch,
#                            compute-sanitizer) and the copied files; makes what is missing and quick
#   start_build, await_build one configuration built in the background; its build_NAME line
#   run_tests_n1, run_train, record_kernels, run_baseline, sanitize_tensor_cores,
#   pairs                    one kind of measurement each, and its summary line(s)
#   gpu_end                  the closing line; the exit status (0: nothing FAILed)
#   print_files              the files git does not track that a run needs, with sizes (to copy to the GPU machine)
# Both scripts read the same environment:
#   GPU_CHECK_OUT=DIR        where the answers go (an empty or new folder; unset: a new build/NAME_out.N)
#   GPU_CHECK_EMULATE=1      no GPU: builds with tools/emu/build.sh, tiny sizes on the CPU emulator,
#                            to test the scripts themselves (every figure is meaningless)
#   GPU_CHECK_BUDGET=S       seconds for the whole run: a command gets at most what is left, and one
#                            that would get under 5 s does not start (its line: TIMEOUT, not started)
#   GPU_CHECK_SKIP="a b"     sections skipped by name (each script lists its sections)
#   GPU_CHECK_CAPS="n=S ..." the cap of the command behind line n set to S seconds (stage_cap): to give
#                            a rerun more time, or to test what a cut-off stage reports
#   GPU_CHECK_REUSE=1        keep the binaries an earlier run of the same script built on this machine
#                            (a rerun with a runtime switch changed, without building again)
#   ZERO3_GPU_EPILOGUES=0, ZERO3_GPU_ATTENTION=portable   passed through to every program: cuBLASLt
#                            without epilogues, the portable attention (gpu/matmul.cuh,
#                            gpu/flash_attention_tc.cuh); the env line and the train lines say which ran
# A summary line's STATUS: PASS or FAIL (a verdict); TIMEOUT (cut off by its cap or the budget, with
# how far it got: no verdict, not a failure); UNKNOWN (no verdict possible: a tool or a figure it
# needs is missing); MISS (a speed target measured and not met: a figure); SKIP (GPU_CHECK_SKIP).

# The files git does not track that a run needs, to copy to the GPU machine beside a checkout (about
# 25 MiB): the tokenized tinyshakespeare (train and validation tokens, the tokenizer, and the text and
# vocabulary they were made from), the small PyTorch reference (V=1024) with its model and tokens,
# and the head-size-64 reference (C=128, NH=2: GPT-2's head size, for the 64-wide attention kernels).
# Made by `make data dumps`; what is missing and quick to make, a run makes itself (make_missing).
GPU_FILES=(data/tinyshakespeare tests/reference/dumps/small.dump tests/reference/dumps/small_model.bin tests/reference/dumps/small_tokens.bin
       tests/reference/dumps/hs64.dump tests/reference/dumps/hs64_model.bin tests/reference/dumps/hs64_tokens.bin)
SMALL=(tests/reference/dumps/small.dump tests/reference/dumps/small_model.bin)
HS64=(tests/reference/dumps/hs64.dump tests/reference/dumps/hs64_model.bin)
# The train lines' learning check: the last of the steps below this fraction of the first step's
# loss. At initialization every batch's loss is ln(V) ~ 10.8 within about 1%, so a model that does
# not learn (no gradient reaching the weights, a zero learning rate) stays above 0.99 of it; 20 steps
# of AdamW take the emulator's d2 model to 0.78 of it (measured, lr 3e-3), GPT-2 124M at 6e-4 further.
LEARN_FRACTION=0.9
TRAIN_TOKENS=data/tinyshakespeare/tiny_shakespeare_train.bin
VAL_TOKENS=data/tinyshakespeare/tiny_shakespeare_val.bin
KILL_AFTER=10  # seconds between a capped command's SIGTERM and its SIGKILL (a rank stuck in a collective)

# print_files: the paths on one line (for rsync -R or scp), then each path's size and the total;
# fails when one is missing (saying how to make it)
print_files() {
  local p missing=0 total=0 kib
  echo "files: ${GPU_FILES[*]}"
  for p in "${GPU_FILES[@]}"; do
    if [ -e "$p" ]; then
      kib=$(du -sk "$p" | cut -f1); total=$((total + kib))
      printf '  %-40s %8.1f MiB\n' "$p" "$(awk -v k="$kib" 'BEGIN{print k / 1024}')"
    else
      printf '  %-40s MISSING: %s\n' "$p" "$(case $p in data/*) echo "make data" ;; *) echo "make $p" ;; esac)"
      missing=1
    fi
  done
  printf '  %-40s %8.1f MiB\n' total "$(awk -v k="$total" 'BEGIN{print k / 1024}')"
  [ "$missing" = 0 ]
}

# gpu_check_settings: the switches, checked before anything is built or removed; and, unless
# emulated, that there is a GPU to check at all (one error line and exit 1 where there is none).
gpu_check_settings() {
  local v
  for v in GPU_CHECK_EMULATE GPU_CHECK_REUSE; do
    case ${!v:-0} in 0|1) ;; *) echo "error: $v=${!v}: must be 0 or 1" >&2; exit 2 ;; esac
  done
  case ${GPU_CHECK_BUDGET:-1} in ''|*[!0-9]*) echo "error: GPU_CHECK_BUDGET=$GPU_CHECK_BUDGET: must be a whole number of seconds" >&2; exit 2 ;; esac
  [ "${GPU_CHECK_BUDGET:-1}" -ge 1 ] || { echo "error: GPU_CHECK_BUDGET=0: must be at least 1 second" >&2; exit 2; }
  if [ "${GPU_CHECK_EMULATE:-0}" = 0 ] && ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }; then
    echo "error: no GPU here (nvidia-smi lists none): run $GPU_SCRIPT on the GPU machine, or GPU_CHECK_EMULATE=1 $0 for the CPU emulator" >&2
    exit 1
  fi
}

# gpu_choose_outdir SUMMARY_NAME: OUTDIR, where this run's answers go. GPU_CHECK_OUT when set: it
# must be a folder this user can write that holds no earlier summary; else the first free
# build/NAME_out, build/NAME_out.1, ... so that an earlier run's answers stay.
gpu_choose_outdir() {
  local out=${GPU_CHECK_OUT:-}
  if [ -n "$out" ]; then
    [ ! -e "$out" ] || [ -d "$out" ] || { echo "error: GPU_CHECK_OUT=$out: exists and is not a folder" >&2; exit 2; }
    [ ! -s "$out/$1" ] || { echo "error: GPU_CHECK_OUT=$out: holds an earlier run's $1: give an empty folder, or unset GPU_CHECK_OUT (the answers then go to a new build/${GPU_SCRIPT}_out.N)" >&2; exit 2; }
    mkdir -p "$out" 2>/dev/null && [ -w "$out" ] || { echo "error: GPU_CHECK_OUT=$out: cannot write there" >&2; exit 2; }
    OUTDIR=$out
  else
    OUTDIR="$root/build/${GPU_SCRIPT}_out"; local k=1 base=$OUTDIR
    while [ -e "$OUTDIR" ]; do OUTDIR=$base.$k; k=$((k + 1)); done
  fi
}

# gpu_begin NAME SUMMARY GPU_BUDGET EMU_BUDGET: moves to the repository root, starts the clock and the
# output files; sets root EMU BUDGET work OUTDIR SUMMARY NPROC failures
gpu_begin() {
  cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
  root="$PWD"
  GPU_SCRIPT=$1
  gpu_check_settings
  EMU=${GPU_CHECK_EMULATE:-0}
  BUDGET=${GPU_CHECK_BUDGET:-$([ "$EMU" = 1 ] && echo "$4" || echo "$3")}
  gpu_choose_outdir "$2"
  work="$root/build/$GPU_SCRIPT"   # scratch: the builds and the logs of this run (archived to OUTDIR)
  if [ "${GPU_CHECK_REUSE:-0}" = 1 ]; then rm -rf "$work/logs"; else rm -rf "$work"; fi
  mkdir -p "$work/bin" "$work/logs" "$OUTDIR"
  SUMMARY="$OUTDIR/$2"
  : > "$SUMMARY"
  exec > >(tee "$OUTDIR/$GPU_SCRIPT.log") 2>&1
  t0=$(date +%s)
  NPROC=$(nproc 2>/dev/null || echo 4)
  failures=0
  timeouts=0
  B="$work/bin"
  gpu_sizes
}

# gpu_sizes: what differs by mode. The training runs: GPT-2 124M on tinyshakespeare at T=1024 on the
# GPU, a 2-layer model at T=32 under the emulator; the pairs a 6-layer model, 4 steps (two ranks of
# 124M on one GPU would each move ~370 MB a step over loopback, after a 124M host init each); the
# PyTorch baseline's arguments for the same
# model; the launcher of 2 ranks: on the GPU machine (no MPI) scripts/launch.sh, both ranks on its
# one GPU (NCCL over loopback sockets), under the emulator mpirun, whose ranks the emulated NCCL joins.
gpu_sizes() {
  TRAIN=($(pick "-e d12 -t 1024 -x 20 -v 0 -l 6e-4 -u 5 -S 1337" "-e d2c64h2t64 -t 32 -x 20 -v 0 -l 3e-3 -u 2 -S 1337"))
  TRAIN_B=($(pick "16 32" "2 4"))
  T_TRAIN=$(pick 1024 32)
  BASE=($(pick "--preset d12 --device cuda --steps 10 --warmup 3" "--preset tiny --device cpu --steps 2 --warmup 1"))
  # NCCL between two ranks of one machine: over the loopback interface, warnings only
  LAUNCH2=($(pick "env NCCL_SOCKET_IFNAME=lo NCCL_DEBUG=WARN scripts/launch.sh -n 2 --hostid-per-rank" "env OMPI_ALLOW_RUN_AS_ROOT=1 \
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1 mpirun -np 2"))
  PAIR_ARGS=($(pick "-e d6 -b 4 -t 1024 -x 4 -l 6e-4 -v 0 -S 1337" "-e d2c64h2t64 -b 2 -t 32 -x 3 -l 1e-3 -v 0 -S 1337"))
}

elapsed() { echo $(( $(date +%s) - t0 )); }
left() { echo $(( BUDGET - $(elapsed) )); }
skipped() { [[ " ${GPU_CHECK_SKIP:-} " == *" $1 "* ]]; }
section() { echo; echo "==================== [$(elapsed) s] $*"; }
# cap GPU EMU: a time limit, by mode (the emulator is some thousand times slower, on tiny sizes)
cap() { [ "$EMU" = 1 ] && echo "$2" || echo "$1"; }
# stage_cap NAME GPU EMU: the cap of line NAME's command: GPU_CHECK_CAPS's NAME=S, else cap GPU EMU
stage_cap() {
  local kv
  for kv in ${GPU_CHECK_CAPS:-}; do [ "${kv%%=*}" = "$1" ] && { echo "${kv#*=}"; return; }; done
  cap "$2" "$3"
}
# cap_of SPEC NAME: the cap of line NAME's command, SPEC a number (stage_cap NAME SPEC SPEC) or the
# name of a function that prints it (gpu_first.sh's table lookup, c)
cap_of() { if declare -F "$1" >/dev/null; then "$1" "$2"; else stage_cap "$2" "$1" "$1"; fi; }
# pick GPU EMU: the same for anything else that differs by mode
pick() { [ "$EMU" = 1 ] && echo "$2" || echo "$1"; }

# record NAME STATUS SECONDS DETAIL: one summary line, written at once, and the logs so far:
#   NAME  STATUS  SECONDS used  of CAP  DETAIL (the figure, or how far it got)
# CAP: the limit the command behind the line ran under (LIMIT, set by run and await_build, then
# cleared here); "-" for a line with no command of its own (a verdict drawn from other lines)
record() {
  local line cap=${LIMIT:+${LIMIT}s}
  line=$(printf '%-24s %-7s %4ss of %4s  %s' "$1" "$2" "$3" "${cap:--}" "$4")
  LIMIT=
  echo "$line" >> "$SUMMARY"
  echo ">>> $line"
  [ "$2" = FAIL ] && failures=$((failures + 1))
  [ "$2" = TIMEOUT ] && timeouts=$((timeouts + 1))
  tar -czf "$OUTDIR/${GPU_SCRIPT}_logs.tgz" -C "$work" logs 2>/dev/null
}

# run NAME CAP COMMAND...: COMMAND with its output in logs/NAME.log, under `timeout -k` with
# min(CAP, time left); sets RC (124/137: timed out), SECS and LIMIT. Under 5 s of the budget left:
# RC=125, nothing runs.
run() {
  local name=$1 limit=$2; shift 2
  local l; l=$(left)
  [ "$l" -lt "$limit" ] && limit=$l
  SECS=0
  LIMIT=$limit
  if [ "$l" -lt 5 ]; then RC=125; : > "$work/logs/$name.log"; return; fi
  echo "--- $name (cap ${limit}s): $*"
  local s; s=$(date +%s)
  timeout -k "$KILL_AFTER" "$limit" "$@" > "$work/logs/$name.log" 2>&1
  RC=$?
  SECS=$(( $(date +%s) - s ))
  tail -n 8 "$work/logs/$name.log"
}

# no_input_status: the status of a line whose program is missing: UNKNOWN when the copied files are
# all here (the program's build line has the verdict: FAIL or TIMEOUT), FAIL when they are not
no_input_status() { [ "$have_data" = 1 ] && [ "$have_small" = 1 ] && [ "$have_hs64" = 1 ] && echo UNKNOWN || echo FAIL; }
# status from RC (a command cut off by its cap, or never started for want of budget: TIMEOUT), and
# a note for the summary when the command did not finish; how_far NAME says what it got through
cut_off() { [ "$RC" -eq 124 ] || [ "$RC" -eq 137 ] || [ "$RC" -eq 125 ]; }
status() { [ "$RC" -eq 0 ] && echo PASS || { cut_off && echo TIMEOUT || echo FAIL; }; }
why() {
  case "$RC" in
    124|137) echo "cut off by its ${LIMIT:-?} s cap: $(how_far "${1:-}"); " ;;
    125) echo "not started: the budget is spent; " ;;
    0) ;;
    *) echo "exit $RC; " ;;
  esac
}
log() { echo "$work/logs/$1.log"; }
# how_far NAME: what the command behind NAME got through before it was stopped: training steps,
# test cases, kernel checks, or its log's last line
how_far() {
  local l; l=$(log "$1")
  [ -s "$l" ] || { echo "no output"; return; }
  local last_step; last_step=$(grep -oE '^step +[0-9]+/[0-9]+' "$l" | tail -1 | awk '{print $2}')
  if [ -n "$last_step" ]; then echo "reached step ${last_step%/*} of ${last_step#*/}"
  elif grep -q '^init: loading' "$l" && grep -qE '^  stage [0-9]' "$l"; then echo "$(grep -cE '^  stage .*: ok' "$l") test cases passed, $(grep -cE '^  stage ' "$l") done"
  elif grep -qE '^ *KERNEL ' "$l"; then echo "$(kernel_lines "$l" | wc -l) kernel checks done ($(kernel_lines "$l" | grep -c ' PASS ') PASS)"
  else echo "last line: $(grep . "$l" | tail -1 | cut -c1-100)"; fi
}

# ------------------------------------------------------------------------------------------------
# probe_env: prints what is here (GPU, nvcc, gcc, make, the libraries and where they were found,
# PyTorch, compute-sanitizer, the runtime switches), makes the copied files that are missing and
# quick to make, and records the `env` line. Sets PY NVCC CUDA_HOME SANITIZER gpu_name have_data
# have_small have_hs64. CAP (default 60): every command of the probe shares it (probe_tmo: a cold
# PyTorch import on a fresh disk takes 10-20 s, a hung driver longer); past it the line is TIMEOUT.
probe_env() {
  local probe_cap=${1:-60}
  probe_end=$(( $(date +%s) + probe_cap ))
  PY=""
  local p
  for p in python3 /usr/bin/python3; do
    if probe_tmo $p -c 'import torch' >/dev/null 2>&1; then PY=$p; break; fi
  done
  [ -n "$PY" ] || PY=python3
  NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC")")}
  SANITIZER=$(command -v compute-sanitizer || ls "$CUDA_HOME/bin/compute-sanitizer" 2>/dev/null || true)
  local libs libs_ok=1
  libs=$(CUDA_HOME=$CUDA_HOME PYTHON=$PY probe_tmo bash scripts/gpu_find_libs.sh --report) || libs_ok=0
  if [ "$EMU" = 1 ]; then
    echo "mode:     EMULATED (GPU_CHECK_EMULATE=1): tools/emu on the CPU, tiny sizes, figures meaningless"
    gpu_name="CPU emulator"
    SANITIZER=""
    libs_ok=1  # the emulator brings its own cuBLASLt and NCCL; the lines below say what a GPU build here would link
  else
    gpu_name=$(probe_tmo nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
    echo "GPU:      $(probe_tmo nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo 'nvidia-smi failed')"
  fi
  echo "nvcc:     $NVCC: $(probe_tmo "$NVCC" --version 2>/dev/null | grep -o 'release [0-9.]*' || echo MISSING)"
  local gcc_v make_v
  gcc_v=$(command -v gcc >/dev/null && echo "gcc $(gcc -dumpfullversion 2>/dev/null)" || echo "gcc MISSING")
  make_v=$(command -v make >/dev/null && make --version 2>/dev/null | sed -n 1p || echo "make MISSING")  # (sed reads all: no SIGPIPE under pipefail)
  echo "gcc:      $(command -v gcc): $gcc_v"
  echo "make:     $(command -v make): $make_v"
  echo "$libs" | sed 's/^/lib       /'
  echo "python:   $PY: $(probe_tmo $PY -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available())' 2>&1 | tail -1)"
  echo "sanitizer: ${SANITIZER:-not found}"
  echo "switches: $(switches)"
  echo "cpus:     $NPROC; budget ${BUDGET}s; answers in $OUTDIR"
  make_missing
  have_data=0; [ -f "$TRAIN_TOKENS" ] && [ -f "$VAL_TOKENS" ] && have_data=1
  have_small=0; [ -f "${SMALL[0]}" ] && [ -f "${SMALL[1]}" ] && [ -f tests/reference/dumps/small_tokens.bin ] && have_small=1
  have_hs64=0; [ -f "${HS64[0]}" ] && [ -f "${HS64[1]}" ] && [ -f tests/reference/dumps/hs64_tokens.bin ] && have_hs64=1
  local st=PASS; [ $have_data = 1 ] && [ $have_small = 1 ] && [ $have_hs64 = 1 ] && [ $libs_ok = 1 ] || st=FAIL
  command -v gcc >/dev/null && command -v make >/dev/null || st=FAIL
  local cut=""; [ "$(date +%s)" -ge "$probe_end" ] && { st=TIMEOUT; cut="cut off by its $probe_cap s cap: what it found: "; }
  LIMIT=$probe_cap
  record env "$st" "$(elapsed)" "$cut${gpu_name:-no GPU found}; $(echo "$libs" | sed 's/: /=/; s/, /:/' | tr '\n' ' '); $gcc_v, $make_v; data $([ $have_data = 1 ] && echo ok || echo "MISSING: copy data/tinyshakespeare"); dumps $([ $have_small = 1 ] && [ $have_hs64 = 1 ] && echo ok || echo "MISSING: copy ${GPU_FILES[*]:1}"); $(switches)"
}

# probe_tmo COMMAND...: COMMAND under what is left of probe_env's cap (at least 1 s)
probe_tmo() {
  local l=$(( probe_end - $(date +%s) )); [ "$l" -lt 1 ] && l=1
  timeout -k 2 "$l" "$@"
}

# switches: the runtime switches this run passes to every program (gpu/matmul.cuh, gpu/flash_attention_tc.cuh)
switches() {
  echo "cuBLASLt epilogues $([ "${ZERO3_GPU_EPILOGUES:-1}" = 0 ] && echo "OFF (ZERO3_GPU_EPILOGUES=0)" || echo on), attention $([ "${ZERO3_GPU_ATTENTION:-}" = portable ] && echo "forced portable (ZERO3_GPU_ATTENTION=portable)" || echo "as built")"
}

# measure_gemm_peak CAP: the bf16 matrix rate PyTorch reaches here (8192^3, random data, median of 10
# after 3 warm-ups, timed with CUDA events), the second peak MFU is given against (GEMM_TFLOPS);
# the emulator times a small fp32 product on the CPU instead (a figure with no meaning)
measure_gemm_peak() {
  local n; n=$(pick 8192 256)
  run gemm_peak "$1" env PYTHONUNBUFFERED=1 "$PY" - "$n" "$(pick cuda cpu)" <<'PYEOF'
import sys, time, torch
n, dev = int(sys.argv[1]), sys.argv[2]
dtype = torch.bfloat16 if dev == "cuda" else torch.float32
a, b = (torch.randn(n, n, device=dev, dtype=dtype) for _ in range(2))
times = []
for i in range(13):
    if dev == "cuda":
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record(); a @ b; e.record(); torch.cuda.synchronize(); t = s.elapsed_time(e) / 1e3
    else:
        t0 = time.perf_counter(); a @ b; t = time.perf_counter() - t0
    if i >= 3: times.append(t)
t = sorted(times)[len(times) // 2]
print(f"gemm_peak {2 * n**3 / t / 1e12:.3g} TFLOP/s: {dtype} {n}^3 on {dev}, median of {len(times)}")
PYEOF
  GEMM_TFLOPS=$(grep -o '^gemm_peak [0-9.]*' "$(log gemm_peak)" | awk '{print $2}')
  record gemm_peak "$(status)" "$SECS" "$(why gemm_peak)$(grep '^gemm_peak' "$(log gemm_peak)" | sed 's/^gemm_peak //')"
}

# make_missing: the copied files a run can make in seconds when they were not copied: the tokens from
# the copied text and vocabulary, the small and head-size-64 references from the tokens (PyTorch, a
# few seconds each), within what is left of the probe's cap (probe_left)
probe_left() { local l=$(( probe_end - $(date +%s) )); [ "$l" -lt 1 ] && l=1; echo "$l"; }
make_missing() {
  local d=data/tinyshakespeare
  if [ ! -f "$TRAIN_TOKENS" ] && [ -f "$d/tiny_shakespeare.txt" ] && [ -f "$d/encoder.json" ] && [ -f "$d/vocab.bpe" ]; then
    run make_data "$(probe_left)" "$PY" data/tinyshakespeare.py --input "$d/tiny_shakespeare.txt" --vocab "$d"
  fi
  if [ -f "$VAL_TOKENS" ] && { [ ! -f "${SMALL[0]}" ] || [ ! -f "${SMALL[1]}" ] || [ ! -f tests/reference/dumps/small_tokens.bin ]; }; then
    run make_small_dump "$(probe_left)" make tests/reference/dumps/small.dump PYTHON="$PY"
  fi
  if [ -f "$VAL_TOKENS" ] && { [ ! -f "${HS64[0]}" ] || [ ! -f "${HS64[1]}" ] || [ ! -f tests/reference/dumps/hs64_tokens.bin ]; }; then
    run make_hs64_dump "$(probe_left)" make tests/reference/dumps/hs64.dump PYTHON="$PY"
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
    { [ $want_test = 0 ] || tools/emu/build.sh "${asan[@]}" "$B/test_$name" test_gpt2.cu "${defs[@]}" --library; } &&
      { [ $want_train = 0 ] || tools/emu/build.sh "${asan[@]}" "$B/train_$name" train_gpt2_zero3.cu "${defs[@]}" --library; }
  else
    # a copy of the sources per configuration: they build side by side (the outputs share names)
    local src="$work/src_$name" targets=()
    [ $want_train = 1 ] && targets+=(train_gpt2_zero3cu)
    [ $want_test = 1 ] && targets+=(test_gpt2cu)
    mkdir -p "$src"
    tar -cf - --exclude=./.git --exclude=./build --exclude=./data --exclude=./tests/reference/dumps --exclude=./tests/cuda/bin . |
      (cd "$src" && tar -xf -)
    # (the libraries: wherever scripts/gpu_find_libs.sh finds them, the wheels of PY's PyTorch too)
    make -C "$src" -j4 PRECISION="$prec" DDP="$ddp" ATTENTION="$att" USE_MPI=0 PYTHON="$PY" "${targets[@]}" &&
      { [ $want_test = 0 ] || mv "$src/test_gpt2cu" "$B/test_$name"; } &&
      { [ $want_train = 0 ] || mv "$src/train_gpt2_zero3cu" "$B/train_$name"; }
  fi
}
# the tests/cuda checks: every program on its own (-k: one that fails to compile stops no other)
build_cuda_checks() {
  if [ "$EMU" = 1 ]; then echo "emulated: tools/emu/run_kernel_checks.sh builds its programs when it runs them"
  else make -C tests/cuda -k -j"$NPROC" all; fi
}
export -f build_cfg build_cuda_checks

# start_build NAME CAP COMMAND...: COMMAND (build_cfg ... or build_cuda_checks) in the background under
# `timeout -k`, log logs/build_NAME.log; when it ends, its exit status and end time go to build_NAME.rc
declare -A build_pid build_start build_limit
start_build() {
  local name=$1 limit=$2; shift 2
  skipped build && return
  local l; l=$(left)
  [ "$l" -lt "$limit" ] && limit=$l
  build_start[$name]=$(date +%s)
  build_pid[$name]=""
  if [ "$l" -lt 5 ]; then echo "125 $(date +%s)" > "$work/logs/build_$name.rc"; : > "$(log "build_$name")"; return; fi
  build_limit[$name]=$limit
  if [ "${GPU_CHECK_REUSE:-0}" = 1 ] && [ -f "$B/.built_$name" ]; then
    echo "reused: built by an earlier run (GPU_CHECK_REUSE=1)" > "$(log "build_$name")"
    echo "0 $(date +%s)" > "$work/logs/build_$name.rc"
    return
  fi
  rm -f "$B/.built_$name"
  export EMU work B PY NPROC
  echo "--- build_$name (cap ${limit}s): $*"
  { timeout -k "$KILL_AFTER" "$limit" bash -c '"$@"' build "$@"; rc=$?
    echo "$rc $(date +%s)" > "$work/logs/build_$name.rc"; [ $rc = 0 ] && touch "$B/.built_$name"; } \
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
  cut_off && st=TIMEOUT
  LIMIT=${build_limit[$name]:-}
  local reused; reused=$(grep -m1 '^reused' "$(log "build_$name")")
  record "build_$name" "$st" "$SECS" "$(why "build_$name")${missing:+missing:$missing; }${reused:+$reused; }register spill warnings: $spills"
  [ "$st" = PASS ]
}

# ------------------------------------------------------------------------------------------------
# Measurements

# kernel_lines LOG: the KERNEL lines of a tests/cuda run (run_all.sh or the emulator's run_kernel_checks.sh),
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
  record "$name" "$(status)" "$SECS" "$(why "$name")$(grep 'cases passed' "$(log "$name")" | tail -1)"
}

# record_kernels NAME [paths]: the line of the tests/cuda run just made (run NAME ...), and with `paths`
# the attention_paths line from its log
record_kernels() {
  record "$1" "$(status)" "$SECS" "$(why "$1")$(kernel_counts "$(log "$1")")"
  [ "${2:-}" = paths ] || return 0
  local p; p=$(attention_paths "$(log "$1")")
  record attention_paths "$([ -n "$p" ] && echo PASS || { cut_off && echo TIMEOUT || echo FAIL; })" 0 "${p:-no BF16 attention KERNEL lines}"
}

# run_tests_n1 CAP PRECISION...: test_gpt2cu of each precision on one rank against the small dump
# (lines test_PRECISION_n1), then against the head-size-64 dump (test_PRECISION_hs64: the 64-wide
# attention kernels GPT-2 124M runs); GPU_CHECK_SKIP: tests, or one line's name. The emulator runs
# stage 3 only (2 of the 8 cases), for time. CAP: each line's (cap_of: a number, or a function of
# the line's name).
run_tests_n1() {
  local limit=$1 p set name; shift
  local stages=(); [ "$EMU" = 1 ] && stages=(env TEST_STAGES=3)
  for set in n1 hs64; do
    for p in "$@"; do
      name="test_${p}_$set"
      if skipped tests || skipped "$name"; then record "$name" SKIP 0 "GPU_CHECK_SKIP"; continue; fi
      local dump=("${SMALL[@]}") have=$have_small; [ $set = hs64 ] && { dump=("${HS64[@]}"); have=$have_hs64; }
      [ -x "$B/test_$p" ] && [ "$have" = 1 ] || { record "$name" "$(no_input_status)" 0 "no test_$p (its build line says why) or no ${dump[0]}"; continue; }
      run_test "$name" "$(cap_of "$limit" "$name")" "${stages[@]}" "$B/test_$p" "${dump[@]}"
    done
  done
}

# step_stats LOG: mean ms/step and tok/s over the steps after the first, last MFU, loss and peak (the
# step line's engine peak, "X MiB engine": the device's buffers; its process peak is the host's)
step_stats() {
  awk -F'|' '/^step /{n++; for(i=1;i<=NF;i++){f=$i; gsub(/^ +| +$/,"",f);
      if(f ~ /^loss /){split(f,a," "); loss=a[2]} if(f ~ / ms$/){split(f,a," "); ms=a[1]}
      if(f ~ /tok\/s$/){split(f,a," "); tok=a[1]} if(f ~ /^MFU /){split(f,a," "); mfu=a[2]}
      if(f ~ /^peak /){sub(/^peak .*, /,"",f); peak=f}}
      if(n>1){sms+=ms; stok+=tok; k++}}
    END{if(k==0){print "no steps"; exit} printf "%.0f tok/s, %.1f ms/step, MFU %s, loss %s, peak %s\n", stok/k, sms/k, mfu, loss, peak}' "$1" 2>/dev/null
}

# learned LOG: the first and last step losses and their ratio, in words; exit 0 when every step ran
# and the last is below LEARN_FRACTION of the first
learned() {
  sed -n 's/^step *\([0-9]*\)\/\([0-9]*\) | loss \([0-9.]*\) .*/\1 \2 \3/p' "$1" |
    awk -v f="$LEARN_FRACTION" 'NR == 1 {first = $3} {last = $3; n = $1; of = $2}
      END {if (NR == 0) {print "no steps"; exit 1} r = last / first
           printf "loss %s -> %s in %d of %d steps (%.2f of the first; learns if < %s)", first, last, n, of, r, f
           exit !(n == of && r < f)}'
}

# mfu_both LOG: the step line's MFU (against the datasheet peak the trainer names, `MFU vs N
# TFLOP/s`) and the same against the GEMM rate measured here (measure_gemm_peak)
mfu_both() {
  local mfu sheet; mfu=$(step_stats "$1" | grep -o 'MFU [0-9.]*' | awk '{print $2}')
  sheet=$(grep -m1 -o 'MFU vs [0-9.]* TFLOP/s' "$1" | awk '{print $3}')
  [ -n "$mfu" ] && [ -n "$sheet" ] || { echo "MFU: no figure"; return; }
  awk -v m="$mfu" -v s="$sheet" -v g="${GEMM_TFLOPS:-}" 'BEGIN{printf "MFU %.1f%% of the %s TFLOP/s datasheet peak", m, s
    if (g + 0 > 0) printf ", %.1f%% of the %s TFLOP/s measured GEMM peak", m * s / g, g; else printf ", no measured GEMM peak"}'
}

declare -A train_tok train_mfu base_tok

# run_train NAME CAP BIN B ARGS...: the trainer at batch B (plus ARGS) for train_NAME's line: whether
# it learns (learned: a PASS needs that too), tok/s, ms/step, MFU against both peaks, loss, peak
# memory, the attention that ran, and the cuBLASLt epilogue line (fallback counters, or the switch
# that took the epilogues off)
run_train() {
  local name=$1 limit=$2 bin=$3 bs=$4; shift 4
  [ -x "$bin" ] && [ $have_data = 1 ] || { record "$name" "$(no_input_status)" 0 "no $(basename "$bin") (its build line says why) or no data"; return; }
  run "$name" "$limit" "$bin" "${TRAIN[@]}" -b "$bs" "$@"
  local l; l=$(log "$name")
  grep -E '^\|' "$l" | head -12
  local stats; stats=$(step_stats "$l")
  train_tok[$name]=$(echo "$stats" | awk '/tok\/s/{print $1}')
  train_mfu[$name]=$(echo "$stats" | grep -o 'MFU [0-9.]*' | awk '{print $2}')
  local learn learn_rc; learn=$(learned "$l"); learn_rc=$?
  local att; att=$(grep -m1 -oE '(flash|materialized) attention[^0-9]*' "$l" | sed 's/ [0-9.]* GiB.*//; s/ *$//')
  local act; act=$(grep -m1 -o 'activations [0-9.]* GiB' "$l")
  local fb; fb=$(grep -i -m1 'fallback' "$l" | sed 's/^[ |]*//; s/ *$//')
  local st; st=$(status); [ "$st" = PASS ] && [ $learn_rc -ne 0 ] && st=FAIL
  record "$name" "$st" "$SECS" "$(why "$name")-b $bs $*: $learn; $(echo "$stats" | sed "s/, MFU [0-9.]*%//"); $(mfu_both "$l"); ${act:-no activations line}, ${att:-attention not named}; ${fb:-fallback counters: not printed}"
}

# run_train_host NAME CAP BIN B BASE ARGS...: the BASE run's training (train_BASE) again with -oo host
# (the optimizer shard in pinned host memory, AdamW on the host) for HOST_STEPS steps: PASS only if
# every loss whose learning rates so far agree with BASE's (the schedule's decay depends on the
# step count) is BASE's, digit for digit (the host AdamW gives the device kernel's bits); its tok/s
# beside BASE's, the ratio, and both peaks (the device's model state: 12 bytes a parameter less)
HOST_STEPS=5
# same_losses BASE LOG: LOG's step losses against BASE's, step by step while the learning rates of
# the steps before agree (a later step's loss follows another schedule); exit 0 when every compared
# loss is the same string, with the count, else the first difference
same_losses() {
  awk -F' [|] ' 'FNR == 1 {file++}
      /^step / {split($1, s, "[ /]+"); k = s[2]; loss[file, k] = $2; lr[file, k] = $3}
      END {n = 0; for (k = 1; (2, k) in loss; k++) {
             if (!((1, k) in loss)) {print "no step " k " without -oo host"; exit 1}
             if (loss[1, k] != loss[2, k]) {print "step " k ": " loss[2, k] " with -oo host, " loss[1, k] " without"; exit 1}
             n++; if (lr[1, k] != lr[2, k]) break }
           if (n == 0) {print "no steps"; exit 1}
           printf "losses of steps 1-%d digit for digit those without -oo host", n}' "$1" "$2"
}
run_train_host() {
  local name=$1 limit=$2 bin=$3 bs=$4 base=$5; shift 5
  [ -x "$bin" ] && [ $have_data = 1 ] || { record "$name" "$(no_input_status)" 0 "no $(basename "$bin") (its build line says why) or no data"; return; }
  run "$name" "$limit" "$bin" "${TRAIN[@]}" -b "$bs" -x "$HOST_STEPS" -oo host "$@"
  local l b; l=$(log "$name"); b=$(log "$base")
  local stats; stats=$(step_stats "$l")
  local tok; tok=$(echo "$stats" | awk '/tok\/s/{print $1}')
  local mine=${train_tok[$base]:-}
  local ratio="no tok/s without it"
  [ -n "$tok" ] && [ -n "$mine" ] && ratio=$(awk -v a="$tok" -v b="$mine" 'BEGIN{printf "%.0f tok/s without (%s): %.2f of it", b, "'"$base"'", a/b}')
  local same same_rc
  same=$(same_losses "$b" "$l"); same_rc=$?
  local peak_b peak_h
  peak_b=$(step_stats "$b" | grep -o 'peak [^,]*$'); peak_h=$(echo "$stats" | grep -o 'peak [^,]*$')
  local st; st=$(status); [ "$st" = PASS ] && [ $same_rc -ne 0 ] && st=FAIL
  record "$name" "$st" "$SECS" "$(why "$name")-b $bs -oo host $*: $same; $(echo "$stats" | sed "s/, MFU [0-9.]*%//; s/, loss [^,]*//; s/, peak .*//"), $ratio; ${peak_h:-no peak} (${peak_b:-no peak} without)"
}

# run_baseline B MODES TRAIN_NAME CAP: tools/bench/pytorch_baseline.py at batch B in the given modes (eager,
# compile, fsdp2); one baseline_MODE_bB line each, with this trainer's ratio (train_NAME's tok/s),
# then target_bB: the speed targets (>= torch.compile, >= 1.3x eager, MFU >= 50% of the datasheet
# peak) met (PASS) or not (MISS: a measured shortfall, not a failure), or UNKNOWN when any figure it
# needs is missing (a baseline cut off or not available, no tok/s of this trainer)
run_baseline() {
  local bs=$1 modes=$2 tname=$3 limit=$4 mode line tok ratio st
  local mine=${train_tok[$tname]:-}
  run "baseline_b$bs" "$limit" env PYTHONUNBUFFERED=1 "${COMPILE_ENV[@]}" "$PY" tools/bench/pytorch_baseline.py "${BASE[@]}" -B "$bs" -T "$T_TRAIN" --modes "$modes"
  local run_limit=$LIMIT
  for mode in ${modes//,/ }; do
    LIMIT=$run_limit
    line=$(grep "^baseline $mode:" "$(log "baseline_b$bs")" | tail -1 | sed "s/^baseline $mode: //")
    tok=$(echo "$line" | awk '/tok\/s/{print $1}')
    base_tok[$mode.$bs]=$tok
    ratio=""
    [ -n "$tok" ] && [ -n "$mine" ] && ratio=$(awk -v a="$mine" -v b="$tok" 'BEGIN{printf "; this trainer (stage 3) / PyTorch = %.2f", a/b}')
    case "$line" in
      *tok/s*) st=PASS ;;
      SKIP*) st=UNKNOWN ;;
      "") st=$(cut_off && echo TIMEOUT || echo FAIL); line="$(why "baseline_b$bs")no result" ;;
      *) st=FAIL ;;
    esac
    record "baseline_${mode}_b$bs" "$st" "$SECS" "$line$ratio"
  done
  local verdict
  verdict=$(awk -v t="$mine" -v c="${base_tok[compile.$bs]:-}" -v e="${base_tok[eager.$bs]:-}" -v m="${train_mfu[$tname]:-}" -v g="${GEMM_TFLOPS:-}" 'BEGIN{
      ok = 1; known = 1
      if (t == "") { print "UNKNOWN no tok/s of this trainer"; exit }
      s = sprintf("%.0f tok/s", t)
      if (c != "") { s = s sprintf(", %.2fx torch.compile (>= 1)", t/c); if (t < c) ok = 0 } else { s = s ", no torch.compile figure"; known = 0 }
      if (e != "") { s = s sprintf(", %.2fx eager (>= 1.3)", t/e); if (t < 1.3*e) ok = 0 } else { s = s ", no eager figure"; known = 0 }
      if (m != "") { s = s sprintf(", MFU %s%% of the datasheet peak (>= 50)", m); if (m + 0 < 50) ok = 0 } else { s = s ", no MFU"; known = 0 }
      if (!known) print "UNKNOWN " s; else print (ok ? "PASS" : "MISS") " " s }')
  record "target_b$bs" "${verdict%% *}" 0 "${verdict#* }"
}

# torch.compile's caches (inductor's FX graph and Triton kernels) in one folder of this run, and
# the threads it compiles with: a second compile of the same model in the same shapes reads them
# instead of compiling again (tens of seconds for GPT-2 124M on a cold machine, a few warm)
COMPILE_ENV=()
compile_env() {
  COMPILE_ENV=(TORCHINDUCTOR_CACHE_DIR="$work/inductor_cache" TRITON_CACHE_DIR="$work/triton_cache"
               TORCHINDUCTOR_COMPILE_THREADS="$NPROC" TORCHINDUCTOR_FX_GRAPH_CACHE=1)
}
# start_compile_warmup B CAP: the torch.compile baseline at batch B, once (1 step after 1 warm-up),
# in the background from the start, so that its compilation fills those caches while the builds run
# (CPU work beside CPU work, the GPU idle); await_compile_warmup records line compile_warmup: PASS
# (compiled and stepped), UNKNOWN (this PyTorch has no torch.compile), FAIL or TIMEOUT. The timed
# baseline (run_baseline) then compiles from the caches. (--steps and --warmup given again: the
# last of an argument wins.)
start_compile_warmup() {
  local bs=$1 limit=$2
  compile_env
  local l; l=$(left); [ "$l" -lt "$limit" ] && limit=$l
  warm_limit=$limit warm_start=$(date +%s) warm_pid=""
  [ "$limit" -lt 5 ] && { echo "125 $warm_start" > "$work/logs/compile_warmup.rc"; : > "$(log compile_warmup)"; return; }
  echo "--- compile_warmup (cap ${limit}s, in the background): torch.compile at B=$bs, caches in $work/inductor_cache"
  { timeout -k "$KILL_AFTER" "$limit" env PYTHONUNBUFFERED=1 "${COMPILE_ENV[@]}" "$PY" tools/bench/pytorch_baseline.py \
      "${BASE[@]}" --steps 1 --warmup 1 -B "$bs" -T "$T_TRAIN" --modes compile; echo "$? $(date +%s)" > "$work/logs/compile_warmup.rc"; } \
    > "$(log compile_warmup)" 2>&1 &
  warm_pid=$!
}
await_compile_warmup() {
  [ -n "${warm_pid:-}" ] && wait "$warm_pid"
  local end; read -r RC end < "$work/logs/compile_warmup.rc" 2>/dev/null || { RC=125; end=$warm_start; }
  SECS=$(( end - warm_start )); LIMIT=$warm_limit  # (its own seconds: it ended before the builds)
  local line; line=$(grep '^baseline compile:' "$(log compile_warmup)" | tail -1 | sed 's/^baseline compile: //')
  local st; st=$(status)
  case "$line" in SKIP*) st=UNKNOWN ;; FAIL*) st=FAIL ;; "") [ "$st" = PASS ] && st=FAIL ;; esac
  record compile_warmup "$st" "$SECS" "$(why compile_warmup)${line:-no result}"
}

# run_sanitizer TOOL CAP BIN ARGS...: compute-sanitizer TOOL on one program, line san_TOOL_BIN.
# A run cut off by its cap gave no verdict: TIMEOUT, not FAIL; no sanitizer here: UNKNOWN.
# SAN_KERNELS=SUBSTRING: only the kernels whose names contain it are instrumented (racecheck on every
# kernel, cuBLASLt's included, takes minutes); the line names the filter.
run_sanitizer() {
  local tool=$1 limit=$2 bin=$3; shift 3
  local name="san_${tool}_$(basename "$bin")"
  [ -n "$SANITIZER" ] || { record "$name" UNKNOWN 0 "compute-sanitizer not found"; return; }
  local filter=() note=""
  if [ -n "${SAN_KERNELS:-}" ]; then
    # (--kernel-name since compute-sanitizer 2022; --filter before it)
    if "$SANITIZER" --help 2>/dev/null | grep -q -- '--kernel-name'; then filter=(--kernel-name "kns=$SAN_KERNELS")
    else filter=(--filter "kernel_substring=$SAN_KERNELS"); fi
    note="kernels named *$SAN_KERNELS*: "
  fi
  run "$name" "$(cap_of "$limit" "$name")" "$SANITIZER" --tool "$tool" "${filter[@]}" --error-exitcode 3 "$bin" "$@"
  record "$name" "$(status)" "$SECS" "$(why "$name")$note$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$(log "$name")" | tail -1)"
}

# sanitize_tensor_cores CAP TOOL...: the sanitizer on the tensor-core attention kernels: the BF16 test
# at stage 3 (lines san_TOOL_test_bf16). The emulator has no compute-sanitizer; its counterparts run
# on a short run of the BF16 trainer instead (the test takes minutes there; lines san_TOOL_train_bf16):
# memcheck -> the trainer built with AddressSanitizer (emulated device memory is host memory),
# racecheck -> another warp schedule (EMU_SCHED_SEED), under which a missing barrier shows.
sanitize_tensor_cores() {
  local limit=$1 tool; shift
  if [ "$EMU" != 1 ]; then
    for tool in "$@"; do TEST_STAGES=3 run_sanitizer "$tool" "$limit" "$B/test_bf16" "${SMALL[@]}"; done  # (CAP: cap_of)
    return
  fi
  local bcap; bcap=$(cap_of "$limit" build_asan); declare -F "$limit" >/dev/null || bcap=300
  start_build bf16_asan "$bcap" build_cfg bf16_asan BF16 0 flash train asan
  await_build bf16_asan "$B/train_bf16_asan"
  local short=("${TRAIN[@]}" -b "${TRAIN_B[0]}" -x 2 -z 3) name bin run_env
  for tool in "$@"; do
    name="san_${tool}_train_bf16"
    case "$tool" in
      memcheck) bin=$B/train_bf16_asan; run_env=(env ASAN_OPTIONS=detect_leaks=0) ;;
      racecheck) bin=$B/train_bf16; run_env=(env EMU_SCHED_SEED=7) ;;
      *) record "$name" UNKNOWN 0 "emulated: no counterpart of $tool"; continue ;;
    esac
    [ -x "$bin" ] || { record "$name" "$(no_input_status)" 0 "no $(basename "$bin") (its build line says why)"; continue; }
    run "$name" "$(cap_of "$limit" "$name")" "${run_env[@]}" "$bin" "${short[@]}"
    record "$name" "$(status)" "$SECS" "$(why "$name")emulated $tool counterpart: $(step_stats "$(log "$name")")"
  done
}

# compare_losses LOG_A LOG_B [BOUND]: the step losses of two runs of the same data and math agree to
# bf16 rounding: max relative difference BOUND (default 2e-2); prints the count and the largest.
# Why 2e-2: bf16 keeps 8 significant bits, a unit roundoff u = 2^-8 = 3.9e-3 per rounding. Two runs
# that differ only in where they round (the order of a gradient sum over 2 ranks, a bias added before
# or after a product is rounded) differ per element by a few u, and a mean loss over B*T tokens
# averages such differences rather than adding them; after a few steps, with the weights moved by
# lr-sized updates of those gradients, the losses stay within ~5u = 2e-2. A real mistake (a missing
# gradient, a wrong shard) moves them by far more from the first step.
compare_losses() {
  paste <(grep '^step ' "$1" | grep -o '| loss [0-9.]*' | awk '{print $3}') \
        <(grep '^step ' "$2" | grep -o '| loss [0-9.]*' | awk '{print $3}') |
    awk -v bound="${3:-2e-2}" '{d=$1-$2; if(d<0)d=-d; r=d/$2; if(r>m)m=r; n++} END{if(n==0){print "no steps"; exit 1} printf "%d steps, max rel loss diff %.2e (bound %s)", n, m, bound; exit (m > bound)}'
}

# rank_exited LOG: the line saying a rank ended with an error (launch.sh's, mpirun's, or a rank's own
# error line): a pair cut off by its cap after that FAILed, it did not run out of time
rank_exited() {
  grep -m1 -E 'launch\.sh: rank [0-9]+ exited with status [1-9]|exited on signal|non-zero (exit )?status|^error: |^\[rank [0-9]+\] error' "$1"
}
# pair_status NAME: status, but FAIL where a rank exited (rank_exited) before the cap cut the rest off
pair_status() {
  local st; st=$(status)
  [ "$st" = TIMEOUT ] && [ "$RC" -ne 125 ] && rank_exited "$(log "$1")" >/dev/null && st=FAIL
  echo "$st"
}

# run_pairs Z3_BIN DDP_BIN CAP: two ranks on one GPU, the same model and data three ways: ZeRO-3, DDP
# (the DDP build) and HSDP (-hs 1: shard groups of one rank, replicated across the two). The three
# must print the same losses to bf16 rounding. Lines zero3_vs_ddp_n2 and hsdp_n2. CAP: each run's
# (cap_of, names n2_z3, n2_ddp, n2_hsdp).
run_pairs() {
  local z3=$1 ddp=$2 pair_cap=$3
  if ! [ -x "$z3" ] || ! [ -x "$ddp" ] || [ $have_data = 0 ]; then
    record zero3_vs_ddp_n2 "$(no_input_status)" 0 "no $(basename "$z3") / $(basename "$ddp") (their build lines say why) or no data"
    record hsdp_n2 "$(no_input_status)" 0 "no $(basename "$z3") (its build line says why) or no data"
    return
  fi
  run n2_z3 "$(cap_of "$pair_cap" n2_z3)" "${LAUNCH2[@]}" "$z3" "${PAIR_ARGS[@]}" -z 3; local rc3=$RC s3=$SECS l3=$LIMIT
  local why3; why3=$(why n2_z3)$(rank_exited "$(log n2_z3)" | sed 's/$/; /'); local st3; st3=$(pair_status n2_z3)
  run n2_ddp "$(cap_of "$pair_cap" n2_ddp)" "${LAUNCH2[@]}" "$ddp" "${PAIR_ARGS[@]}"; local rcd=$RC
  local whyd; whyd=$(why n2_ddp)$(rank_exited "$(log n2_ddp)" | sed 's/$/; /'); local std; std=$(pair_status n2_ddp)
  local cmp; cmp=$(compare_losses "$(log n2_z3)" "$(log n2_ddp)"); local cmp_rc=$?
  local st=FAIL; [ $rc3 -eq 0 ] && [ $rcd -eq 0 ] && [ $cmp_rc -eq 0 ] && st=PASS
  { [ "$st3" = TIMEOUT ] || [ "$std" = TIMEOUT ]; } && [ "$st3" != FAIL ] && [ "$std" != FAIL ] && st=TIMEOUT
  LIMIT=$((l3 + LIMIT))
  record zero3_vs_ddp_n2 "$st" "$((s3 + SECS))" "z3: ${why3:-exit 0; }ddp: ${whyd:-exit 0; }$cmp; z3 $(step_stats "$(log n2_z3)"); ddp $(step_stats "$(log n2_ddp)")"
  run n2_hsdp "$(cap_of "$pair_cap" n2_hsdp)" "${LAUNCH2[@]}" "$z3" "${PAIR_ARGS[@]}" -z 3 -hs 1
  cmp=$(compare_losses "$(log n2_hsdp)" "$(log n2_z3)"); cmp_rc=$?
  st=$(pair_status n2_hsdp); [ "$st" = PASS ] && [ $cmp_rc -ne 0 ] && st=FAIL
  local err; err=$(grep -m1 'error' "$(log n2_hsdp)")
  record hsdp_n2 "$st" "$SECS" "$(why n2_hsdp)-hs 1 against ZeRO-3: $cmp; ${err:+$err; }$(step_stats "$(log n2_hsdp)")"
}

# pairs [CAP]: run_pairs (CAP per run, cap_of; default 90 s) with this machine's trainers: the GPU
# builds (train_bf16, train_ddp), or under the emulator MPI builds of both made here (its NCCL runs 2
# ranks over MPI; their cap: cap_of CAP build_mpi)
pairs() {
  local pair_cap=${1:-90}
  if [ "$EMU" != 1 ]; then run_pairs "$B/train_bf16" "$B/train_ddp" "$pair_cap"; return; fi
  command -v mpicxx >/dev/null || { record zero3_vs_ddp_n2 UNKNOWN 0 "emulated: 2 ranks need MPI (mpicxx)"; return; }
  local bcap; bcap=$(cap_of "$pair_cap" build_mpi); declare -F "$pair_cap" >/dev/null || bcap=300
  start_build bf16_mpi "$bcap" build_cfg bf16_mpi BF16 0 flash train mpi
  start_build ddp_mpi "$bcap" build_cfg ddp_mpi BF16 1 flash train mpi
  await_build bf16_mpi "$B/train_bf16_mpi"
  await_build ddp_mpi "$B/train_ddp_mpi"
  run_pairs "$B/train_bf16_mpi" "$B/train_ddp_mpi" "$pair_cap"
}

# gpu_end: the closing line (FAILs and TIMEOUTs counted) and the summary again; exit status 0 when
# nothing failed or timed out
gpu_end() {
  section "summary ($(elapsed) s)"
  echo "$GPU_SCRIPT: ${gpu_name:-?}, $(elapsed) s of ${BUDGET}, $failures failed, $timeouts timed out$([ "$EMU" = 1 ] && echo ' (EMULATED)')" | tee -a "$SUMMARY"
  cat "$SUMMARY"
  tar -czf "$OUTDIR/${GPU_SCRIPT}_logs.tgz" -C "$work" logs 2>/dev/null
  [ "$failures" -eq 0 ] && [ "$timeouts" -eq 0 ]
}
