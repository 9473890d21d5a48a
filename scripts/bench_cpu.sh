#!/usr/bin/env bash
# CPU benchmark: ms/step and tokens/s for one fixed config at 1 and 2 ranks and every ZeRO stage.
#   scripts/bench_cpu.sh [-e MODEL] [-b B] [-t T] [-x STEPS] [-p fp32|bf16|both] [-z STAGES] [-r]
# -p: the trainer's precision (-p bf16: mixed precision); both runs each configuration in fp32, then
# in bf16, and adds a column saying which. -z: the stages to run, e.g. -z 3 or -z "0 3" (default
# all four). -r: then PyTorch's bf16 CPU step on the same model and batch (tools/bench/pytorch_baseline.py,
# eager mode: bf16 autocast, fp32 weights, fused AdamW; -e d12 only: its one GPT-2 of our shapes),
# with as many threads as one rank of the trainer had, in the same run.
# The same total work per step at every N (B per rank = B/N), so the figures compare directly.
# Each run's first step (buffer pool and cache warm-up) is left out of the average, so STEPS >= 2;
# B is split over 1 and 2 ranks, so it is even.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/args.sh
MODEL=d2c128h2t64; B=8; T=64; STEPS=8; PREC=fp32; STAGES="0 1 2 3"; TORCH=0
USAGE="usage: $0 [-e MODEL] [-b B] [-t T] [-x STEPS] [-p fp32|bf16|both] [-z STAGES] [-r]"
while getopts ":e:b:t:x:p:z:r" o; do case $o in e) MODEL=$OPTARG;; b) B=$OPTARG;; t) T=$OPTARG;; x) STEPS=$OPTARG;;
  p) PREC=$OPTARG;; z) STAGES=$OPTARG;; r) TORCH=1;;
  :) die "-$OPTARG: missing its value ($USAGE)" ;;
  *) die "-$OPTARG: unknown option ($USAGE)" ;; esac; done
shift $((OPTIND - 1)); [ $# -eq 0 ] || die "$1: unexpected argument"
need_int -b B 2 1048576; [ $((B % 2)) -eq 0 ] || die "-b: $B is split over 1 and 2 ranks: give an even B"
need_int -t T 1 1048576; need_int -x STEPS 2 100000
case $PREC in fp32|bf16) precs=$PREC; pcol=0;; both) precs="fp32 bf16"; pcol=1;;
  *) die "-p: expected fp32, bf16 or both, got '$PREC'";; esac
for z in $STAGES; do [[ "$z" =~ ^[0-3]$ ]] || die "-z: expected stages among 0 1 2 3, got '$STAGES'"; done
[ -n "$STAGES" ] || die "-z: expected stages among 0 1 2 3, got nothing"
[ $TORCH = 0 ] || [ "$MODEL" = d12 ] || die "-r: PyTorch's step is GPT-2 124M: give -e d12, got -e $MODEL"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
make -s train_gpt2_zero3 >/dev/null
# every row of the table checked before its header: a bad one refuses the whole table, never half of it
for n in 1 2; do for z in $STAGES; do for p in $precs; do
  trainer_accepts "$n" -e "$MODEL" -b $((B / n)) -t "$T" -x "$STEPS" -z "$z" -p "$p"
done; done; done
CORES=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)   # the cores, not an OMP_NUM_THREADS the user exported
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
echo "model $MODEL, $((B*T)) tokens/step, $STEPS steps, $CORES cores ($(date -u +%F), $(git rev-parse --short HEAD 2>/dev/null || echo '?'))"
[ $pcol = 1 ] && printf "%-6s " prec
printf "%-6s %-6s %10s %12s %14s %14s\n" ranks stage ms/step tokens/s comm/step peak/rank
for n in 1 2; do
  for z in $STAGES; do
    for p in $precs; do
      threads=$(( CORES / n )); [ $threads -ge 1 ] || threads=1
      dir="$out/r$n$z$p"
      cmd=(./train_gpt2_zero3 -e "$MODEL" -b $((B / n)) -t "$T" -x "$STEPS" -z "$z" -p "$p" -v 0 -o "$dir")
      if [ "$n" -gt 1 ]; then cmd=(mpirun --oversubscribe --bind-to none -np "$n" "${cmd[@]}"); fi
      OMP_NUM_THREADS=$threads "${cmd[@]}" >/dev/null
      [ $pcol = 1 ] && printf "%-6s " "$p"
      awk -F, -v n="$n" -v z="$z" -v tok=$((B*T)) 'NR>2 { ms += $6; c++; comm = $8; peak = $10 }
        END { printf "%-6d %-6d %10.1f %12.0f %12.2f MiB %10.2f MiB\n", n, z, ms/c, tok/(ms/c/1000), comm/1048576, peak/1048576 }' "$dir/log.csv"
    done
  done
done
if [ $TORCH = 1 ]; then   # PyTorch's bf16 step: its ms/step over the timed steps, one rank's threads
  PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
  line=$(OMP_NUM_THREADS=$CORES "$PY" tools/bench/pytorch_baseline.py --preset d12 -B "$B" -T "$T" --device cpu \
         --modes eager --steps $((STEPS - 1)) --warmup 1 | grep '^baseline eager')
  ms=$(echo "$line" | sed -n 's/.* \([0-9.]*\) ms\/step.*/\1/p')
  [ -n "$ms" ] || die "-r: PyTorch gave no step time: $line"
  [ $pcol = 1 ] && printf "%-6s " torch
  awk -v ms="$ms" -v tok=$((B*T)) 'BEGIN { printf "%-6s %-6s %10.1f %12.0f   (PyTorch bf16 autocast, 1 process, %s)\n", 1, "-", ms, tok/(ms/1000), "eager" }'
fi
