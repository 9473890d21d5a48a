#!/usr/bin/env bash
# scripts/bench_variants.sh: the variants side by side on one model and N ranks: bytes sent per step,
# collectives per step, resident model state, the engine's peak and the process's, activations,
# exposed communication; then each stage's "x of DDP's", saying which figure it compares.
#   engine/rank   the engine's buffers at their most in the last step: model state + gathered units +
#                 gradient buffers (log.csv's mem_engine_peak_bytes)
#   process/rank  rank 0's peak resident memory, the kernel's count (log.csv's mem_peak_bytes: the
#                 engine's buffers + activations + the pool's reserve + MPI's copies); with --bytes the
#                 plan's figure for rank 0 (the kernel's count moves by pages from run to run), each
#                 run's measured peak held to it within 10% (the bound of tests/peak.py)
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
row() { if [ "$BYTES" = 1 ]; then printf '%-22s %12s %11s %12s %12s %12s %12s\n' "${@:1:7}"; else printf '%-22s %12s %11s %12s %12s %12s %12s %10s\n' "$@"; fi; }
row variant "sent/step" collectives "state/rank" "engine/rank" "process/rank" activations "exposed"
mib() { awk -v v="$1" -v u="$2" 'BEGIN{m = u == "GiB" ? 1024 : u == "KiB" ? 1 / 1024 : u == "B" ? 1 / 1048576 : 1; printf "%.4f", v * m}'; }
ratios=(); ddp=""; far=0
for v in "${applies[@]}"; do
  out=$(mpirun -np "$N" ./train_gpt2_zero3 "${RUN[@]}" $v "$@" 2>&1) || { echo "$out" | grep '^error' >&2 || echo "$out" >&2; exit 1; }
  last=$(echo "$out" | grep '^step' | tail -1)
  sent=$(echo "$last" | sed -E 's/.*sent ([^|]*) \|.*/\1/')
  exposed=$(echo "$last" | sed -E 's/.*exposed comm ([0-9.]+ ms \([0-9]+%\)).*/\1/')
  count=$(echo "$out" | sed -n '/collective ledger, last step/,/^ledger:/p' | awk '$3 ~ /^collectives?,$/ {c += $2} END {print c + 0}')
  state=$(echo "$out" | sed -nE 's/.*this run holds ([0-9.]+ [KMG]?i?B).*/\1/p')
  acts=$(echo "$out" | sed -nE 's/.*activations per rank: ([0-9.]+ [KMG]?i?B) without recompute, ([0-9.]+ [KMG]?i?B) with.*/\1|\2/p')
  case "$v" in *-rc*) acts=${acts#*|} ;; *) acts=${acts%|*} ;; esac
  [ -n "$last" ] && [ -n "$state" ] && [ -n "$acts" ] || die "$v: the run's output lacks its step line or its memory report"
  engine=$(echo "$last" | sed -nE 's/.*peak [^|]* process, ([0-9.]+ [KMG]?i?B) engine.*/\1/p')
  process=$(echo "$last" | sed -nE 's/.*peak ([0-9.]+ [KMG]?i?B) process,.*/\1/p')
  measured=$(echo "$out" | sed -nE "s/.*\(([0-9]+) bytes\) the run's peak; the plan's ([0-9.]+ [KMG]?i?B).*/\1/p")
  planned=$(echo "$out" | sed -nE "s/.*\(([0-9]+) bytes\) the run's peak; the plan's ([0-9.]+ [KMG]?i?B).*/\2/p")
  [ -n "$engine" ] && [ -n "$process" ] && [ -n "$planned" ] || die "$v: the run's output lacks its peaks (step line, process memory)"
  # shellcheck disable=SC2086
  if [ "$BYTES" = 1 ]; then
    awk -v m="$measured" -v p="$(mib $planned)" 'BEGIN{exit !(p * 1048576 / m - 1 > 0.10 || p * 1048576 / m - 1 < -0.10)}' &&
      { echo "bench_variants.sh: $v: rank 0's measured peak, $measured bytes, is more than 10% from the plan's $planned" >&2; far=1; }
    process=$planned
  fi
  # shellcheck disable=SC2086
  cells="$(mib $state) $(mib $engine) $(mib $process)"
  [ "$v" = "-z 0" ] && ddp=$cells
  ratios+=("$v|$cells")
  row "$v" "$sent" "$count" "$state" "$engine" "$process" "$acts" "${exposed:-?}"
done
if [ -n "$ddp" ]; then   # each figure against DDP's own: model state, the engine's peak, the process's (rank 0)
  [ "$BYTES" = 1 ] && what="the plan's for rank 0, each run's measured within 10%" || what="rank 0's, the kernel's count"
  echo "x of DDP's (process peak: $what):"
  for r in "${ratios[@]}"; do
    [ "${r%%|*}" = "-z 0" ] && continue
    # shellcheck disable=SC2086
    echo "${r%%|*} ${r#*|} $ddp" | awk '{v = $1; n = NF - 5; for (i = 2; i < n; i++) v = v " " $i
      printf "  %s: model state %.2f, engine peak %.2f, process peak %.2f of DDP'"'"'s\n", v, $n / $(n + 3), $(n + 1) / $(n + 4), $(n + 2) / $(n + 5)}'
  done
fi
[ "$far" = 0 ] || exit 1
