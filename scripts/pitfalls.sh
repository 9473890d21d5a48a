#!/usr/bin/env bash
# The three pitfalls of ZeRO-3, each on purpose, on a small GPT-2 (d4c64h2t64) over N ranks; every
# figure printed is a count of bytes, collectives or coefficients, so a rerun prints the same.
#   scripts/pitfalls.sh [1|2|3 ...] [-n N]      (default: all three, N=4)
#   1  clipping by a shard's own norm (-clip local): each rank's coefficient, the one global clipping
#      would use, how far the update is from the correct one; the losses against -clip global
#   2  units too fine (-wrap half) or coarse (-wrap 2): the same bytes in more or fewer collectives
#   3  recompute with a gather of its own (-rc 2): activations saved, bytes paid, against -rc 1
# docs/primer.md shows and explains the output; docs/time.md shows what pitfall 2 costs in time.
# Every figure comes from a run that must succeed: a run that fails ends the script with its error line.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/args.sh
N=4; WHICH=()
while [ $# -gt 0 ]; do case "$1" in
  -n) [ $# -ge 2 ] || die "-n: missing its value"; N=$2; shift 2 ;; 1|2|3) WHICH+=("$1"); shift ;;
  *) die "$1: not a pitfall (1, 2, 3) nor -n N (usage: $0 [1|2|3 ...] [-n N])" ;; esac; done
need_int -n N 1 64
[ ${#WHICH[@]} -gt 0 ] || WHICH=(1 2 3)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
make -s train_gpt2_zero3 >/dev/null
MODEL="-e d4c64h2t64 -b 2 -t 32 -v 0"
# shellcheck disable=SC2086
trainer_accepts "$N" $MODEL -z 3 -wrap half
train() {   # the run's output; a failed run: its error line on stderr and a non-zero status
  local out
  out=$(mpirun -np "$N" ./train_gpt2_zero3 $MODEL "$@" 2>&1) || { echo "$out" | grep -m1 '^error' >&2 || echo "$out" >&2; return 1; }
  echo "$out"
}
loss_of() { sed -nE 's/^step +([0-9]+)\/[0-9]+ \| loss ([0-9.]+).*/\2/p' | tail -1; }
ledger() {   # flags: "collectives, bytes" of the last step's measured ledger, in all
  local out; out=$(train -x 1 "$@") || return 1
  echo "$out" | sed -n '/collective ledger, last step/,/^ledger:/p' |
    awk '$3 ~ /^collectives?,$/ { c += $2; gsub(",", "", $4); b += $4 } END { if (!c) exit 1; printf "%3d collectives %12d bytes", c, b }' ||
    die "$* on $N ranks: the run printed no collective ledger"
}
for p in "${WHICH[@]}"; do case $p in
1)
  echo "pitfall 1: -clip local on $N ranks, -gc 1 (each rank's coefficient against global clipping's)"
  out=$(train -x 3 -clip local) || exit 1
  echo "$out" | grep '^  clip local' | sed 's/^  clip local | /  /'
  global=$(train -x 3 -clip global) || exit 1
  echo "  loss after 3 steps: -clip global $(echo "$global" | loss_of), -clip local $(echo "$out" | loss_of)"
  ;;
2)
  echo "pitfall 2: unit granularity at -z 3 on $N ranks (per step)"
  for w in 2 1 half; do l=$(ledger -z 3 -wrap $w) || exit 1; printf '  -wrap %-5s %s\n' "$w" "$l"; done
  ;;
3)
  echo "pitfall 3: activation recompute at -z 3 on $N ranks (per step)"
  out=$(train -x 1 -z 3) || exit 1
  acts=$(echo "$out" | sed -nE 's/.*activations per rank: ([0-9.]+ [KMG]?i?B) without recompute, ([0-9.]+ [KMG]?i?B) with.*/\1|\2/p')
  [ -n "$acts" ] || die "-z 3 on $N ranks: the run printed no activation memory"
  for rc in 0 1 2; do
    l=$(ledger -z 3 -rc $rc) || exit 1
    printf '  -rc %s  %s   activations %s\n' "$rc" "$l" "$([ $rc = 0 ] && echo "${acts%|*}" || echo "${acts#*|}")"
  done
  ;;
esac; done
