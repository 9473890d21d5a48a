#!/usr/bin/env bash
# scripts/sweep_quickstart.sh: the sweep that chose scripts/train.sh's CPU quick start (model, precision,
# learning rate, steps): the lowest val loss a fixed budget of step time buys on this machine's ranks.
#
#   scripts/sweep_quickstart.sh [--budget SEC] [-n N] [-c LIST] [-j J] [--time-only] [--dir DIR]
#
# A loaded machine slows every step but changes no loss, so the two are measured apart:
#   (a) each candidate's ms/step: a short run (6 steps, no val) with the phase clock on rank 0's CPU time
#       (ZERO3_CPU_PHASES=cpu, cpu/gpt2_cpu.c), which other programs do not inflate: the step's compute,
#       AdamW and the engine; the waits for communication are not in it (on an idle machine they add
#       the exposed communication, tens of ms: docs/performance.md);
#   (b) each candidate trains the steps that fit SEC seconds at that step time (floor(SEC*1000/ms)),
#       warmup 1/15 of them, cosine to 0.1*LR, weight decay 0.1 (train.sh's schedule), val once at the
#       end over 16 batches a rank (the same tokens for every candidate), and the table prints it.
# --budget SEC: the step time to spend (default 180: three minutes). -n N: ranks (default min(4, cores),
# train.sh's). -c LIST: the candidates to run, by number, e.g. -c 1,3 (default all). --time-only: (a)
# only. -j J: J candidates train at once in (b) (default 1; their losses do not depend on it).
# --dir DIR: the runs' logs go to DIR (made if absent) and stay; a sweep given a DIR that holds a
# candidate's timing or finished training (its log at its last step) reads it instead of running it
# again, so an interrupted sweep goes on where it stopped. Without it everything is in a temporary
# folder, removed at the end.
# The wall column is the run's own, on this machine as loaded at the time (load printed in the header):
# it includes the start, the val and the load, never a speed figure.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/args.sh

# the candidates: MODEL PRECISION LR, per rank B=8 T=64 (train.sh's); 1 is the quick start before this sweep
CANDIDATES=(
  "d4c128h4t64 fp32 2e-3"
  "d4c128h4t64 bf16 2e-3"
  "d4c128h4t64 bf16 4e-3"
  "d6c128h4t64 bf16 2e-3"
  "d4c192h6t64 bf16 2e-3"
  "d4c64h4t64 bf16 4e-3"
)
B=8; T=64; TIMING_STEPS=6; VAL_BATCHES=16
USAGE="usage: $0 [--budget SEC] [-n N] [-c LIST] [-j J] [--time-only] [--dir DIR]"
budget=180; n=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc); [ "$n" -le 4 ] || n=4
list=; time_only=0; jobs=1; dir=
while [ $# -gt 0 ]; do
  case "$1" in
    --budget|-n|-c|-j|--dir) [ $# -ge 2 ] || die "$1: missing its value ($USAGE)" ;;&
    --budget) budget=$2; shift 2 ;;
    -n) n=$2; shift 2 ;;
    -c) list=$2; shift 2 ;;
    -j) jobs=$2; shift 2 ;;
    --dir) [ -n "$2" ] || die "--dir: needs a folder"; dir=$2; shift 2 ;;
    --time-only) time_only=1; shift ;;
    -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
    *) die "$1: unknown argument ($USAGE)" ;;
  esac
done
need_int --budget budget 1 86400
need_int -n n 1 64
need_int -j jobs 1 16
if [ -n "$dir" ]; then
  [ ! -e "$dir" ] || [ -d "$dir" ] || die "--dir: $dir exists and is not a folder"
  [ -d "$(dirname "$dir")" ] || die "--dir: the folder $(dirname "$dir") (where $dir would go) does not exist"
  [ -d "$dir" ] || need_writable_folder --dir "$(dirname "$dir")"
fi
if [ -z "$list" ]; then
  picks=$(seq 1 ${#CANDIDATES[@]})
else
  [[ "$list" =~ ^[0-9]+(,[0-9]+)*$ ]] || die "-c: expected candidate numbers separated by commas (1,3), got '$list'"
  picks=${list//,/ }
  for k in $picks; do need_int -c k 1 ${#CANDIDATES[@]}; done
fi
make -s train_gpt2_zero3 >/dev/null
# every candidate checked before the first run: a bad one refuses the whole sweep, never half of it
for k in $picks; do
  read -r model prec lr <<<"${CANDIDATES[$((k - 1))]}"
  trainer_accepts "$n" -e "$model" -b $B -t $T -p "$prec" -l "$lr"
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ -n "$dir" ]; then mkdir -p "$dir"; need_writable_folder --dir "$dir"; tmp=$dir
else tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT; fi
# ZERO3_CPU_PHASES: the phase clock of (a) (cpu), off (0) in (b)
run() { OMP_NUM_THREADS=1 mpirun --oversubscribe -np "$n" -x OMP_NUM_THREADS=1 -x ZERO3_CPU_PHASES ./train_gpt2_zero3 "$@"; }
fail() { echo "error: candidate $1: the run failed (its output: $2)" >&2; cp "$2" "${TMPDIR:-/tmp}/sweep_quickstart_failed.log"; exit 1; }

echo "quick-start sweep: $n ranks, B=$B T=$T a rank, budget ${budget}s of step time ($(date -u +%F), $(git rev-parse --short HEAD 2>/dev/null || echo '?')), load $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A ms params
for k in $picks; do   # (a): the step's CPU time (rank 0's phase clock line)
  read -r model prec lr <<<"${CANDIDATES[$((k - 1))]}"
  grep -q '^cpu phases' "$tmp/t$k.log" 2>/dev/null ||   # --dir: a timing done before is read
    ZERO3_CPU_PHASES=cpu run -e "$model" -b $B -t $T -p "$prec" -x $TIMING_STEPS -v 0 -s 0 >"$tmp/t$k.log" 2>&1 || fail "$k" "$tmp/t$k.log"
  # "cpu phases (rank 0, mean CPU ms per step over 5 steps, the first left out): step 257.16 | ..."; "..., 7311872 parameters"
  ms[$k]=$(sed -n 's/^cpu phases (.*): step \([0-9.]*\) | .*/\1/p' "$tmp/t$k.log")
  params[$k]=$(sed -n 's/.*, \([0-9]*\) parameters.*/\1/p' "$tmp/t$k.log" | head -1)
  [ -n "${ms[$k]}" ] && [ -n "${params[$k]}" ] || fail "$k" "$tmp/t$k.log"
done
train() {   # (b) for candidate k: "VAL WALL" into $tmp/res$k
  local k=$1 model prec lr steps t0 val
  read -r model prec lr <<<"${CANDIDATES[$((k - 1))]}"
  steps=${buys[$k]}
  # --dir: a finished run (its result and its log at its last step) is read
  [ -s "$tmp/res$k" ] && grep -q "^step $steps/$steps .* | val " "$tmp/r$k.log" 2>/dev/null && return 0
  rm -f "$tmp/res$k"
  t0=$(date +%s.%N)
  ZERO3_CPU_PHASES=0 run -e "$model" -b $B -t $T -p "$prec" -l "$lr" -x "$steps" -u $((steps / 15)) -q 0.1 -c 0.1 \
    -v "$steps" -m $VAL_BATCHES -s 0 >"$tmp/r$k.log" 2>&1 || return 1
  val=$(sed -n "s/^step $steps\/$steps .* | val \([0-9.]*\) | .*/\1/p" "$tmp/r$k.log")
  [ -n "$val" ] || return 1
  printf '%.3f %.0f\n' "$val" "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')" >"$tmp/res$k"
}
declare -A buys
for k in $picks; do buys[$k]=$(awk -v b="$budget" -v m="${ms[$k]}" 'BEGIN { s = int(b * 1000 / m); print (s < 1 ? 1 : s) }'); done
if [ $time_only = 0 ]; then   # (b): at most J at once; any failure ends the sweep with its output
  declare -A pid_of
  for k in $picks; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
    train "$k" & pid_of[$k]=$!
  done
  for k in $picks; do wait "${pid_of[$k]}" || fail "$k" "$tmp/r$k.log"; done
fi
printf '| # | model | parameters | -p | -l | ms/step (rank 0 CPU, steps 2-%d) | steps in %ds | val loss | wall s (loaded) |\n' $TIMING_STEPS "$budget"
echo '|---|---|---:|---|---:|---:|---:|---:|---:|'
for k in $picks; do
  read -r model prec lr <<<"${CANDIDATES[$((k - 1))]}"
  res="- -"; [ $time_only = 1 ] || res=$(cat "$tmp/res$k")
  printf '| %d | %s | %s | %s | %s | %s | %d | %s | %s |\n' "$k" "$model" "${params[$k]}" "$prec" "$lr" "${ms[$k]}" "${buys[$k]}" ${res}
done
