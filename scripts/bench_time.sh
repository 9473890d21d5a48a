#!/usr/bin/env bash
# The time story, measured: ms/step, compute and exposed communication per step for ZeRO stage 0
# and stage 3 (-pd 0 and -pd 1), with and without the communication thread, on N ranks.
#   scripts/bench_time.sh [-e MODEL] [-n N] [-b B] [-t T] [-x STEPS] [-p TRACE_PNG]
# B is per rank. Each run's first step (it records the prefetch schedule and fills the buffer pool)
# is left out of the means. -p renders one step of the stage-3 -pd 1 run's trace (scripts/plot_trace.py).
# A PNG that exists is kept: the picture goes to a numbered sibling, and the line printed names it.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/args.sh
MODEL=d12; N=2; B=4; T=64; STEPS=6; PNG=""
USAGE="usage: $0 [-e MODEL] [-n N] [-b B] [-t T] [-x STEPS] [-p PNG]"
while getopts ":e:n:b:t:x:p:" o; do case $o in e) MODEL=$OPTARG;; n) N=$OPTARG;; b) B=$OPTARG;; t) T=$OPTARG;;
  x) STEPS=$OPTARG;; p) PNG=$OPTARG; [ -n "$PNG" ] || die "-p: needs a picture's name";; :) die "-$OPTARG: missing its value ($USAGE)" ;; *) die "-$OPTARG: unknown option ($USAGE)" ;; esac; done
shift $((OPTIND - 1)); [ $# -eq 0 ] || die "$1: unexpected argument ($USAGE)"
need_int -n N 1 64; need_int -b B 1 1048576; need_int -t T 1 1048576; need_int -x STEPS 2 100000
if [ -n "$PNG" ]; then
  case "$PNG" in *.png) ;; *) die "-p: $PNG: a picture's name ends in .png" ;; esac
  [ ! -d "$PNG" ] || die "-p: $PNG is a folder"
  need_writable_folder -p "$(dirname "$PNG")"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
make -s train_gpt2_zero3 >/dev/null
# every run of the table checked before its header: a bad one refuses the whole table, never half of it
for v in "-z 0" "-z 3 -pd 0" "-z 3 -pd 1"; do
  # shellcheck disable=SC2086
  trainer_accepts "$N" -e "$MODEL" -b "$B" -t "$T" -x "$STEPS" $v
done
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
echo "model $MODEL, N=$N ranks x B=$B x T=$T, $STEPS steps (first left out), $(nproc --all) cores, load $(cut -d' ' -f1-3 /proc/loadavg) ($(date -u +%F), $(git rev-parse --short HEAD 2>/dev/null || echo '?'))"
printf "%-34s %10s %12s %12s %9s\n" run ms/step compute_ms exposed_ms exposed
run() {   # label, comm thread 1/0, then trainer flags
  local label=$1 thread=$2; shift 2
  local d="$out/$(echo "$label" | tr -c 'a-z0-9' _)"
  ZERO3_COMM_THREAD=$thread mpirun --oversubscribe --bind-to none -np "$N" -x ZERO3_COMM_THREAD ./train_gpt2_zero3 -e "$MODEL" \
    -b "$B" -t "$T" -x "$STEPS" -v 0 -o "$d" "$@" >/dev/null
  awk -F, -v l="$label" 'NR>2 { ms += $6; c += $11; e += $12; n++ }
    END { printf "%-34s %10.1f %12.1f %12.1f %8.1f%%\n", l, ms/n, c/n, e/n, 100*e/ms }' "$d/log.csv"
}
run "stage 0 (DDP)" 1 -z 0
run "stage 3 -pd 0" 1 -z 3 -pd 0
run "stage 3 -pd 1" 1 -z 3 -pd 1 -tr "$out/z3.json"
run "stage 0 (DDP), no comm thread" 0 -z 0
run "stage 3 -pd 0, no comm thread" 0 -z 3 -pd 0
run "stage 3 -pd 1, no comm thread" 0 -z 3 -pd 1
if [ -n "$PNG" ]; then
  PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
  drawn=$($PY scripts/plot_trace.py "$out/z3.json" "$PNG" --title "GPT-2 $MODEL, ZeRO-3 -pd 1, $N ranks: one step") || exit 1
  echo "trace picture: ${drawn%%: step*}"
fi
