#!/usr/bin/env bash
# scripts/bench_variants.sh: the variants side by side on one model and N ranks: bytes sent per step,
# collectives per step, resident model state, peak, activations, exposed communication.
#   scripts/bench_variants.sh [-n N] [-e MODEL] [-x STEPS] [--stages] [--bytes] [extra trainer flags...]
#     -n N ranks (4), -e MODEL (d4), -x STEPS per run (4; the figures are the last step's)
#     --stages   stages 0-3 only, instead of the stages and every variant
#     --bytes    leave out the exposed-time column: what is left does not depend on the clock
# The figures in docs/variants.md come from: scripts/bench_variants.sh -n 4 -e d4
# Every variant and the extra flags are checked with the trainer's planner before the first run; a
# variant that cannot apply here (HSDP on one rank, -wrap 2 on an odd number of blocks) is left out,
# with one line on stderr saying why.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. scripts/args.sh
N=4; MODEL=d4; STEPS=4; STAGES=0; BYTES=0
while [ $# -gt 0 ]; do case "$1" in
  -n|-e|-x) [ $# -ge 2 ] || die "$1: missing its value"
    case "$1" in -n) N=$2 ;; -e) MODEL=$2 ;; -x) STEPS=$2 ;; esac; shift 2 ;;
  --stages) STAGES=1; shift ;; --bytes) BYTES=1; shift ;; --*) die "$1: unknown option" ;; *) break ;; esac; done
need_int -n N 1 64; need_int -x STEPS 1 100000
[ $(($# % 2)) -eq 0 ] || die "${*: -1}: a trainer flag without its value"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
make -s train_gpt2_zero3 >/dev/null || exit 1
RUN=(-e "$MODEL" -b 2 -t 64 -x "$STEPS" -v 0)
trainer_accepts "$N" "${RUN[@]}" "$@"
G=$(( N / 2 > 0 ? N / 2 : 1 ))
VARIANTS=("-z 0" "-z 1" "-z 2" "-z 3" "-z 3 -ra 0" "-z 3 -rc 1" "-z 3 -rc 2" "-z 3 -pt 1000000" "-z 3 -hs $G" "-z 3 -wrap half" "-z 3 -wrap 2")
[ "$STAGES" = 1 ] && VARIANTS=("-z 0" "-z 1" "-z 2" "-z 3")
applies=()
for v in "${VARIANTS[@]}"; do
  # shellcheck disable=SC2086
  if why=$(trainer_accepts "$N" "${RUN[@]}" $v "$@" 2>&1); then applies+=("$v")
  else echo "bench_variants.sh: $v left out on $N ranks: ${why#error: }" >&2; fi
done
row() { if [ "$BYTES" = 1 ]; then printf '%-22s %12s %11s %12s %12s %12s\n' "${@:1:6}"; else printf '%-22s %12s %11s %12s %12s %12s %10s\n' "$@"; fi; }
row variant "sent/step" collectives "state/rank" "peak/rank" activations "exposed"
for v in "${applies[@]}"; do
  out=$(mpirun -np "$N" ./train_gpt2_zero3 "${RUN[@]}" $v "$@" 2>&1) || { echo "$out" | grep '^error' >&2 || echo "$out" >&2; exit 1; }
  last=$(echo "$out" | grep '^step' | tail -1)
  sent=$(echo "$last" | sed -E 's/.*sent ([^|]*) \|.*/\1/')
  peak=$(echo "$last" | sed -E 's/.*peak ([^|]*) \|.*/\1/')
  exposed=$(echo "$last" | sed -E 's/.*exposed comm ([0-9.]+ ms \([0-9]+%\)).*/\1/')
  count=$(echo "$out" | sed -n '/collective ledger, last step/,/^ledger:/p' | awk '$3 ~ /^collectives?,$/ {c += $2} END {print c + 0}')
  state=$(echo "$out" | sed -nE 's/.*this run holds ([0-9.]+ [KMG]?i?B).*/\1/p')
  acts=$(echo "$out" | sed -nE 's/.*activations per rank: ([0-9.]+ [KMG]?i?B) without recompute, ([0-9.]+ [KMG]?i?B) with.*/\1|\2/p')
  case "$v" in *-rc*) acts=${acts#*|} ;; *) acts=${acts%|*} ;; esac
  [ -n "$last" ] && [ -n "$state" ] && [ -n "$acts" ] || die "$v: the run's output lacks its step line or its memory report"
  row "$v" "$sent" "$count" "$state" "$peak" "$acts" "${exposed:-?}"
done
