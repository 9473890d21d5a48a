#!/usr/bin/env bash
# CPU benchmark: ms/step and tokens/s for one fixed config at 1 and 2 ranks and every ZeRO stage.
#   scripts/bench_cpu.sh [-e MODEL] [-b B] [-t T] [-x STEPS]
# The same total work per step at every N (B per rank = B/N), so the figures compare directly.
# Each run's first step (buffer pool and cache warm-up) is left out of the average, so STEPS >= 2;
# B is split over 1 and 2 ranks, so it is even.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/args.sh
MODEL=d2c128h2t64; B=8; T=64; STEPS=8
while getopts ":e:b:t:x:" o; do case $o in e) MODEL=$OPTARG;; b) B=$OPTARG;; t) T=$OPTARG;; x) STEPS=$OPTARG;;
  :) die "-$OPTARG: missing its value (usage: $0 [-e MODEL] [-b B] [-t T] [-x STEPS])" ;;
  *) die "-$OPTARG: unknown option (usage: $0 [-e MODEL] [-b B] [-t T] [-x STEPS])" ;; esac; done
shift $((OPTIND - 1)); [ $# -eq 0 ] || die "$1: unexpected argument"
need_int -b "$B" 2 1048576; [ $((B % 2)) -eq 0 ] || die "-b: $B is split over 1 and 2 ranks: give an even B"
need_int -t "$T" 1 1048576; need_int -x "$STEPS" 2 100000
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
make -s train_gpt2_zero3 >/dev/null
for n in 1 2; do trainer_accepts "$n" -e "$MODEL" -b $((B / n)) -t "$T" -x "$STEPS"; done
CORES=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)   # the cores, not an OMP_NUM_THREADS the user exported
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
echo "model $MODEL, $((B*T)) tokens/step, $STEPS steps, $CORES cores ($(date -u +%F), $(git rev-parse --short HEAD 2>/dev/null || echo '?'))"
printf "%-6s %-6s %10s %12s %14s %14s\n" ranks stage ms/step tokens/s comm/step peak/rank
for n in 1 2; do
  for z in 0 1 2 3; do
    threads=$(( CORES / n )); [ $threads -ge 1 ] || threads=1
    cmd=(./train_gpt2_zero3 -e "$MODEL" -b $((B / n)) -t "$T" -x "$STEPS" -z "$z" -v 0 -o "$out/r$n$z")
    if [ "$n" -gt 1 ]; then cmd=(mpirun --oversubscribe --bind-to none -np "$n" "${cmd[@]}"); fi
    OMP_NUM_THREADS=$threads "${cmd[@]}" >/dev/null
    awk -F, -v n="$n" -v z="$z" -v tok=$((B*T)) 'NR>2 { ms += $6; c++; comm = $8; peak = $10 }
      END { printf "%-6d %-6d %10.1f %12.0f %12.2f MiB %10.2f MiB\n", n, z, ms/c, tok/(ms/c/1000), comm/1048576, peak/1048576 }' "$out/r$n$z/log.csv"
  done
done
