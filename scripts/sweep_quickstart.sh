#!/usr/bin/env bash
# scripts/sweep_quickstart.sh: the sweep that chose scripts/train.sh's CPU quick start (model, precision,
# learning rate, steps): the lowest val loss a fixed budget of step time buys on this machine's ranks.
#
#   scripts/sweep_quickstart.sh [--budget SEC] [-n N] [-c LIST] [--time-only]
#
# A loaded machine slows every step but changes no loss, so the two are measured apart:
#   (a) each candidate's ms/step: two short runs (8 steps, no val), the candidates' runs interleaved;
#       the fastest step after each run's first is the figure, the one closest to an idle machine;
#   (b) each candidate trains the steps that fit SEC seconds at that step time (floor(SEC*1000/ms)),
#       warmup 1/15 of them, cosine to 0.1*LR, weight decay 0.1 (train.sh's schedule), val once at the
#       end over 16 batches a rank (the same tokens for every candidate), and the table prints it.
# --budget SEC: the step time to spend (default 180: three minutes). -n N: ranks (default min(4, cores),
# train.sh's). -c LIST: the candidates to run, by number, e.g. -c 1,3 (default all). --time-only: (a) only.
# The wall column is the run's own, on this machine as loaded at the time (load printed in the header):
# it includes the start, the val and the load, never a speed figure. Nothing is written outside a
# temporary folder, removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/args.sh

# the candidates: MODEL PRECISION LR, per rank B=8 T=64 (train.sh's); 1 is the quick start before this sweep
CANDIDATES=(
  "d4c128h4t64 fp32 2e-3"
  "d4c128h4t64 bf16 2e-3"
  "d4c128h4t64 bf16 4e-3"
  "d2c128h4t64 bf16 3e-3"
  "d6c128h4t64 bf16 2e-3"
  "d4c192h6t64 bf16 2e-3"
  "d4c64h4t64 bf16 4e-3"
)
B=8; T=64; TIMING_STEPS=8; ROUNDS=2; VAL_BATCHES=16
USAGE="usage: $0 [--budget SEC] [-n N] [-c LIST] [--time-only]"
budget=180; n=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc); [ "$n" -le 4 ] || n=4
list=; time_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --budget|-n|-c) [ $# -ge 2 ] || die "$1: missing its value ($USAGE)" ;;&
    --budget) budget=$2; shift 2 ;;
    -n) n=$2; shift 2 ;;
    -c) list=$2; shift 2 ;;
    --time-only) time_only=1; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) die "$1: unknown argument ($USAGE)" ;;
  esac
done
need_int --budget budget 1 86400
need_int -n n 1 64
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
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
run() { OMP_NUM_THREADS=1 mpirun --oversubscribe -np "$n" -x OMP_NUM_THREADS=1 ./train_gpt2_zero3 "$@"; }
fail() { echo "error: candidate $1: the run failed (its output: $2)" >&2; cp "$2" "${TMPDIR:-/tmp}/sweep_quickstart_failed.log"; exit 1; }

echo "quick-start sweep: $n ranks, B=$B T=$T a rank, budget ${budget}s of step time ($(date -u +%F), $(git rev-parse --short HEAD 2>/dev/null || echo '?')), load $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A ms params
for r in $(seq 1 $ROUNDS); do for k in $picks; do   # (a): all timings first, the rounds interleaved
  read -r model prec lr <<<"${CANDIDATES[$((k - 1))]}"
  run -e "$model" -b $B -t $T -p "$prec" -x $TIMING_STEPS -v 0 -s 0 >"$tmp/t$k.log" 2>&1 || fail "$k" "$tmp/t$k.log"
  # the step line: "step 2/8 | loss ... | 531.2 ms | ..."; the model line: "..., 7311872 parameters"
  m=$( { sed -n 's/^step \([0-9]*\)\/[0-9]* .* | \([0-9.]*\) ms | .*/\1 \2/p' "$tmp/t$k.log" | awk '$1 > 1 { print $2 }'
         [ -z "${ms[$k]:-}" ] || echo "${ms[$k]}"; } | sort -g | head -1)
  params[$k]=$(sed -n 's/.*, \([0-9]*\) parameters.*/\1/p' "$tmp/t$k.log" | head -1)
  [ -n "$m" ] && [ -n "${params[$k]}" ] || fail "$k" "$tmp/t$k.log"
  ms[$k]=$m
done; done
printf '| # | model | parameters | -p | -l | ms/step (min of steps 2-%d, %d runs) | steps in %ds | val loss | wall s (loaded) |\n' $TIMING_STEPS $ROUNDS "$budget"
echo '|---|---|---:|---|---:|---:|---:|---:|---:|'
for k in $picks; do   # (b): the steps each buys, trained
  read -r model prec lr <<<"${CANDIDATES[$((k - 1))]}"
  steps=$(awk -v b="$budget" -v m="${ms[$k]}" 'BEGIN { s = int(b * 1000 / m); print (s < 1 ? 1 : s) }')
  val=-; wall=-
  if [ $time_only = 0 ]; then
    warm=$((steps / 15))
    t0=$(date +%s.%N)
    run -e "$model" -b $B -t $T -p "$prec" -l "$lr" -x "$steps" -u "$warm" -q 0.1 -c 0.1 -v "$steps" -m $VAL_BATCHES -s 0 \
      >"$tmp/r$k.log" 2>&1 || fail "$k" "$tmp/r$k.log"
    wall=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
    val=$(sed -n "s/^step $steps\/$steps .* | val \([0-9.]*\) | .*/\1/p" "$tmp/r$k.log")
    [ -n "$val" ] || fail "$k" "$tmp/r$k.log"
    val=$(printf '%.3f' "$val")
  fi
  printf '| %d | %s | %s | %s | %s | %s | %d | %s | %s |\n' "$k" "$model" "${params[$k]}" "$prec" "$lr" "${ms[$k]}" "$steps" "$val" "$wall"
done
