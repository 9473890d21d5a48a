#!/usr/bin/env bash
# CPU benchmark: ms/step and tokens/s for one fixed config at 1 and 2 ranks and every ZeRO stage.
#   scripts/bench_cpu.sh [-e MODEL] [-b B] [-t T] [-x STEPS] [-p fp32|bf16|both] [-z STAGES] [-r]
#   scripts/bench_cpu.sh --floor [-e MODEL] [-b B] [-t T] [-x STEPS] [-p fp32|bf16|both]
# --floor: the step against its physical floor, one rank, phase by phase: tools/bench/bench_floor.c
# measures the peaks and the memory's bandwidth (STREAM-style passes), then one training run with the phase clock
# (ZERO3_CPU_PHASES, cpu/gpt2_cpu.c) gives each phase's mean ms, and the table prints both. With
# BENCH_CLOCK=cpu (a loaded machine) everything runs on one thread and is timed in CPU seconds.
# -p: the trainer's precision (-p bf16: mixed precision); both runs each configuration in fp32, then
# in bf16, and adds a column saying which. -z: the stages to run, e.g. -z 3 or -z "0 3" (default
# all four). -r: then PyTorch's bf16 CPU step on the same model and batch (tools/bench/pytorch_baseline.py,
# eager mode: bf16 autocast, fp32 weights, fused AdamW; -e d12 only: its one GPT-2 of our shapes),
# with as many threads as one rank of the trainer had, in the same run.
# The same total work per step at every N (B per rank = B/N), so the figures compare directly.
# Each run's first step (buffer pool and cache warm-up) is left out of the average, so STEPS >= 2;
# B is split over 1 and 2 ranks, so it is even.
# Every row's "x floor" is its step over the step's physical floor on this machine's cores (the sum
# of the phases' floors of --floor, measured by tools/bench/bench_floor.c after the first 1-rank run
# of each precision: the same total work at any N, so one floor for every row of a precision; a
# PyTorch row uses the bf16 floor). Below the table, for each stage and precision: 2 ranks over 1,
# and what copying the 2-rank row's comm/step once (read and write, both ranks at once, at the
# memory's bandwidth) would add to the 1-rank step: the cost ZeRO on one machine cannot go under
# without sharing memory; then one rank's half alone (B/2 on half the cores, no peer: each rank's
# compute without its collectives), which splits what the 2 ranks add into the collectives and the
# shared machine (2 ranks less the half) and the half batch itself (the half less 1 rank).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/args.sh
MODEL=d2c128h2t64; B=8; T=64; STEPS=8; PREC=fp32; STAGES="0 1 2 3"; TORCH=0
USAGE="usage: $0 [--floor] [-e MODEL] [-b B] [-t T] [-x STEPS] [-p fp32|bf16|both] [-z STAGES] [-r]"
FLOOR=0; [ "${1:-}" = --floor ] && { FLOOR=1; shift; }
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
# bench_floor's shape flags from a run's model line:
#   "| model    NAME: L=12 C=768 NH=12 V=50257 (Vp 50304) maxT=1024, 124475904 parameters"
model_dims() {
  sed -n 's/.* L=\([0-9]*\) C=\([0-9]*\) NH=\([0-9]*\) V=\([0-9]*\) (Vp \([0-9]*\)).*, \([0-9]*\) parameters.*/-L \1 -C \2 -NH \3 -V \4 -Vp \5 -P \6/p' "$1" | head -1
}
if [ $FLOOR = 1 ]; then   # one rank, each precision: the floor table with the phase clock's figures beside it
  [ $TORCH = 0 ] || die "-r: not with --floor (the floor is this trainer's step)"
  case ${BENCH_CLOCK:-wall} in wall) clock=1; threads=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc);;
    cpu) clock=cpu; threads=1;; *) die "BENCH_CLOCK=$BENCH_CLOCK: expected wall or cpu";; esac
  make -s train_gpt2_zero3 build/bench_floor >/dev/null
  for p in $precs; do trainer_accepts 1 -e "$MODEL" -b "$B" -t "$T" -x "$STEPS" -p "$p"; done
  out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
  echo "model $MODEL, B=$B T=$T, 1 rank, $threads threads, ${BENCH_CLOCK:-wall} clock, $STEPS steps ($(date -u +%F), $(git rev-parse --short HEAD 2>/dev/null || echo '?')), load $(cut -d' ' -f1-3 /proc/loadavg)"
  for p in $precs; do
    OMP_NUM_THREADS=$threads ZERO3_CPU_PHASES=$clock ./train_gpt2_zero3 -e "$MODEL" -b "$B" -t "$T" -x "$STEPS" -p "$p" \
      -v 0 -s 0 -o "$out/$p" >"$out/$p.log"
    dims=$(model_dims "$out/$p.log")
    # the phase clock's line: "cpu phases (...): step S | matmul M | attention A | elementwise E | logits G | other O"
    ms=$(sed -n 's/^cpu phases.*: step \([0-9.]*\) | matmul \([0-9.]*\) | attention \([0-9.]*\) | elementwise \([0-9.]*\) | logits \([0-9.]*\) | other \(-*[0-9.]*\)$/\2,\3,\4,\5,\6,\1/p' "$out/$p.log")
    [ -n "$dims" ] && [ -n "$ms" ] || die "--floor: the $p run printed no model line or no phase line (see a run by hand with ZERO3_CPU_PHASES=1)"
    echo "-p $p:"
    # shellcheck disable=SC2086   # dims is the flags, split on purpose
    OMP_NUM_THREADS=$threads ./build/bench_floor $dims -B "$B" -T "$T" -p "$p" -ms "$ms"
  done
  exit 0
fi
make -s train_gpt2_zero3 build/bench_floor >/dev/null
# every row of the table checked before its header: a bad one refuses the whole table, never half of it
for n in 1 2; do for z in $STAGES; do for p in $precs; do
  trainer_accepts "$n" -e "$MODEL" -b $((B / n)) -t "$T" -x "$STEPS" -z "$z" -p "$p"
done; done; done
for p in $precs; do trainer_accepts 1 -e "$MODEL" -b $((B / 2)) -t "$T" -x "$STEPS" -p "$p"; done
CORES=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)   # the cores, not an OMP_NUM_THREADS the user exported
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
echo "model $MODEL, $((B*T)) tokens/step, $STEPS steps, $CORES cores ($(date -u +%F), $(git rev-parse --short HEAD 2>/dev/null || echo '?')), load $(cut -d' ' -f1-3 /proc/loadavg)"
[ $pcol = 1 ] && printf "%-6s " prec
printf "%-6s %-6s %10s %12s %14s %14s %14s %8s\n" ranks stage ms/step tokens/s comm/step engine/rank process/rank "x floor"
declare -A FLOOR_MS BANDWIDTH MACHINE STEP_MS COMM
first_out=
# a run's mean ms a step from its log.csv (column 6), the first step (the warm-up) left out
mean_step_ms() { awk -F, 'NR>2 { ms += $6; c++ } END { printf "%.3f", ms/c }' "$1"; }
HALF_THREADS=$(( CORES / 2 > 1 ? CORES / 2 : 1 ))   # one of 2 ranks' share of the cores
# the floor of precision p's step, from the model line of a run's output ($2): "-p P: F ms" (floor_line),
# and the machine's memory bandwidth in GB/s
measure_floor() {
  local p=$1 dims report
  dims=$(model_dims "$2")
  [ -n "$dims" ] || die "the $p run printed no model line to count its floor from"
  # shellcheck disable=SC2086   # dims is the flags, split on purpose
  report=$(OMP_NUM_THREADS=$CORES ./build/bench_floor $dims -B "$B" -T "$T" -p "$p") || die "bench_floor -p $p failed"
  FLOOR_MS[$p]=$(awk '$1 == "step" { print $2 }' <<<"$report")
  BANDWIDTH[$p]=$(sed -n 's/.* memory \([0-9.]*\) GB\/s.*/\1/p' <<<"$report")
  [ -n "${FLOOR_MS[$p]}" ] && [ -n "${BANDWIDTH[$p]}" ] || die "bench_floor -p $p printed no step floor or memory bandwidth: $report"
  MACHINE[$p]=$(grep '^machine' <<<"$report")
}
for n in 1 2; do
  for z in $STAGES; do
    for p in $precs; do
      threads=$(( n == 1 ? CORES : HALF_THREADS ))
      dir="$out/r$n$z$p"
      cmd=(./train_gpt2_zero3 -e "$MODEL" -b $((B / n)) -t "$T" -x "$STEPS" -z "$z" -p "$p" -v 0 -o "$dir")
      if [ "$n" -gt 1 ]; then cmd=(mpirun --oversubscribe --bind-to none -np "$n" "${cmd[@]}"); fi
      OMP_NUM_THREADS=$threads "${cmd[@]}" >"$dir.out"
      [ -n "$first_out" ] || first_out=$dir.out   # its model line: the shapes every floor counts
      [ -n "${FLOOR_MS[$p]:-}" ] || measure_floor "$p" "$dir.out"
      ms=$(mean_step_ms "$dir/log.csv"); comm=$(awk -F, 'NR>2 { comm = $8 } END { printf "%.0f", comm }' "$dir/log.csv")
      STEP_MS[$n,$z,$p]=$ms; COMM[$n,$z,$p]=$comm
      [ $pcol = 1 ] && printf "%-6s " "$p"
      # log.csv's engine peak (mem_engine_peak_bytes) and rank 0's process peak (mem_peak_bytes, the kernel's count)
      awk -F, -v n="$n" -v z="$z" -v tok=$((B*T)) -v floor="${FLOOR_MS[$p]}" 'NR>2 { ms += $6; c++; comm = $8; proc = $10; eng = $13 }
        END { printf "%-6d %-6d %10.1f %12.0f %12.2f MiB %10.2f MiB %10.2f MiB %8.2f\n", n, z, ms/c, tok/(ms/c/1000), comm/1048576, eng/1048576, proc/1048576, ms/c/floor }' "$dir/log.csv"
    done
  done
done
if [ $TORCH = 1 ]; then   # PyTorch's bf16 step: its ms/step over the timed steps, one rank's threads
  PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
  line=$(OMP_NUM_THREADS=$CORES "$PY" tools/bench/pytorch_baseline.py --preset d12 -B "$B" -T "$T" --device cpu \
         --modes eager --steps $((STEPS - 1)) --warmup 1 | grep '^baseline eager')
  ms=$(echo "$line" | sed -n 's/.* \([0-9.]*\) ms\/step.*/\1/p')
  [ -n "$ms" ] || die "-r: PyTorch gave no step time: $line"
  [ -n "${FLOOR_MS[bf16]:-}" ] || measure_floor bf16 "$first_out"
  [ $pcol = 1 ] && printf "%-6s " torch
  awk -v ms="$ms" -v tok=$((B*T)) -v floor="${FLOOR_MS[bf16]}" 'BEGIN { printf "%-6s %-6s %10.1f %12.0f %14s %14s %8.2f   (PyTorch bf16 autocast, 1 process, %s)\n", 1, "-", ms, tok/(ms/1000), "", "", ms/floor, "eager" }'
fi
# One rank's half alone: what each of the 2 ranks computes (B/2, its share of the cores), run with
# no peer, so no collective and no second process beside it. The 2-rank step less this is what the
# collectives and the two ranks' sharing of the machine cost; this less the 1-rank step, what the
# half batch on fewer threads costs (smaller matmuls; the weights packed by each rank).
declare -A HALF_MS
for p in $precs; do
  dir="$out/half$p"
  OMP_NUM_THREADS=$HALF_THREADS ./train_gpt2_zero3 -e "$MODEL" -b $((B / 2)) -t "$T" -x "$STEPS" -p "$p" -v 0 -o "$dir" >"$dir.out"
  HALF_MS[$p]=$(mean_step_ms "$dir/log.csv")
done
for p in $precs; do echo "floor -p $p: ${FLOOR_MS[$p]} ms a step; ${MACHINE[$p]}"; done
for z in $STAGES; do for p in $precs; do
  awk -v z="$z" -v p="$p" -v one="${STEP_MS[1,$z,$p]}" -v two="${STEP_MS[2,$z,$p]}" -v comm="${COMM[2,$z,$p]}" -v gbs="${BANDWIDTH[$p]}" \
      -v half="${HALF_MS[$p]}" -v threads=$HALF_THREADS -v b=$((B / 2)) \
    'BEGIN { copy = 2 * 2 * comm / (gbs * 1e9) * 1000   # 2 ranks, each reading and writing its bytes once
             printf "stage %d, -p %s: 2 ranks / 1 rank = %.2fx; one copy of the collectives'"'"' bytes would add %.1f ms (%.2fx)\n",
                    z, p, two / one, copy, (one + copy) / one
             printf "stage %d, -p %s: one rank'"'"'s half alone (B=%d, %d thread%s, no peer) %.1f ms: the collectives and the shared machine add %+.1f ms, the half batch %+.1f ms\n",
                    z, p, b, threads, (threads > 1 ? "s" : ""), half, two - half, half - one }'
done; done
if [ $TORCH = 1 ] && [[ " $precs " == *" bf16 "* ]]; then
  read -r z _ <<<"$STAGES"
  awk -v a="${STEP_MS[1,$z,bf16]}" -v t="$ms" 'BEGIN { printf "bf16, 1 rank, against PyTorch'"'"'s bf16 step: %.2fx as fast\n", t / a }'
fi
