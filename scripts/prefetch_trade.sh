#!/usr/bin/env bash
# scripts/prefetch_trade.sh: what the prefetch depth -pd trades (DeepSpeed's stage3_prefetch_bucket_size,
# FSDP's limit_all_gathers): memory against exposed communication, one row a depth.
#
#   scripts/prefetch_trade.sh [--plan-only] [-e MODEL] [-n N] [-b B] [-t T] [-pd "0 1 2 4 8"] [-bw G] [-tf F]
#
# Each row: the plan's stage-3 figures in mixed precision (-p bf16) at that depth on N ranks (-plan N):
# the peak per rank, the gathered units' MiB at that peak's moment (the plan's busiest moment of the
# pool, which moves with the depth), and the exposed communication per step of the ring model at
# -bw G GB/s and -tf F TFLOP/s (the time the compute waits); then (without --plan-only) a 2-step run's
# closing "live params:" line: the most gathered units and parameters it held at once, counted by the engine.
# Nothing here is timed on this machine, so the table is the same on a loaded one. The defaults:
# GPT-2 124M (-e d12) on 2 ranks, B=1 T=64, a 2 GB/s link and 0.05 TFLOP/s (a CPU core's order).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/args.sh
MODEL=d12; N=2; B=1; T=64; PDS="0 1 2 4 8"; BW=2; TF=0.05; PLAN_ONLY=0
USAGE="usage: $0 [--plan-only] [-e MODEL] [-n N] [-b B] [-t T] [-pd \"0 1 2 4 8\"] [-bw G] [-tf F]"
while [ $# -gt 0 ]; do
  case "$1" in
    --plan-only) PLAN_ONLY=1; shift; continue ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    -e|-n|-b|-t|-pd|-bw|-tf) [ $# -ge 2 ] || die "$1: missing its value ($USAGE)" ;;
    *) die "$1: unknown argument ($USAGE)" ;;
  esac
  case "$1" in -e) MODEL=$2;; -n) N=$2;; -b) B=$2;; -t) T=$2;; -pd) PDS=$2;; -bw) BW=$2;; -tf) TF=$2;; esac
  shift 2
done
need_int -n N 2 64
[ -n "$PDS" ] || die "-pd: expected depths, e.g. \"0 1 2 4 8\", got nothing"
for p in $PDS; do need_int -pd p 0 64; done
make -s train_gpt2_zero3 >/dev/null
# every row checked before the first: the trainer's planner takes the flags as a run on N ranks would
for p in $PDS; do trainer_accepts "$N" -e "$MODEL" -b "$B" -t "$T" -pd "$p" -bw "$BW" -tf "$TF" -p bf16; done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
echo "-e $MODEL on $N ranks, B=$B T=$T, stage 3, -p bf16; exposed: the plan's ring model at $BW GB/s, $TF TFLOP/s a rank"; echo
printf '| -pd | peak MiB (plan) | gathered MiB at the peak (plan) | exposed ms (plan) | step ms (plan) |'
[ $PLAN_ONLY = 1 ] && echo || echo ' live units (run) | live parameters (run) |'
printf '|---:|---:|---:|---:|---:|'; [ $PLAN_ONLY = 1 ] && echo || echo '---:|---:|'
for p in $PDS; do
  ./train_gpt2_zero3 -plan "$N" -e "$MODEL" -b "$B" -t "$T" -pd "$p" -bw "$BW" -tf "$TF" >"$tmp/plan" 2>&1 ||
    { cat "$tmp/plan" >&2; die "-pd $p: the plan failed"; }
  # the time table's (mixed precision) and the bf16 peak table's stage-3 rows ("  3  comm compute ... exposed step ...",
  # "  3  state gathered gradients fragmentation activations MPI peak ...")
  row=$(awk '/^time per step/ { t = 1 } t && /^  3 / { ex = $6; st = $7; t = 0 }
             /^  bf16 \(-p bf16\), MiB per rank/ { m = 1 } m && /^  3 / { g = $3; pk = $8; m = 0 }
             END { if (ex != "" && g != "") printf "| %s | %s | %s | %s |", pk, g, ex, st }' "$tmp/plan")
  [ -n "$row" ] || die "-pd $p: the plan printed no stage-3 time or peak row"
  printf '| %d %s' "$p" "$row"
  if [ $PLAN_ONLY = 1 ]; then echo; continue; fi
  OMP_NUM_THREADS=1 mpirun --oversubscribe -np "$N" -x OMP_NUM_THREADS=1 ./train_gpt2_zero3 -e "$MODEL" -b "$B" -t "$T" -p bf16 \
    -pd "$p" -x 2 -v 0 -s 0 >"$tmp/run" 2>&1 || { tail -5 "$tmp/run" >&2; die "-pd $p: the run failed"; }
  live=$(sed -n 's/^live params: the last step held at most \([0-9]*\) gathered units at once, \([0-9]*\) parameters .*/ \1 | \2 |/p' "$tmp/run")
  [ -n "$live" ] || die "-pd $p: the run printed no live params line"
  echo "$live"
done
