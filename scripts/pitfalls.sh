#!/usr/bin/env bash
# The three pitfalls of ZeRO-3, each on purpose, on a small GPT-2 (d4c64h2t64) over N ranks; every
# figure printed is a count of bytes, collectives or coefficients, so a rerun prints the same.
#   scripts/pitfalls.sh [1|2|3 ...] [-n N]      (default: all three, N=4)
#   1  clipping by a shard's own norm (-clip local): each rank's coefficient, the one global clipping
#      would use, how far the update is from the correct one; the losses against -clip global
#   2  units too fine (-wrap half) or coarse (-wrap 2): the same bytes in more or fewer collectives
#   3  recompute with a gather of its own (-rc 2): activations saved, bytes paid, against -rc 1
# docs/primer.md shows and explains the output; docs/time.md shows what pitfall 2 costs in time.
set -euo pipefail
cd "$(dirname "$0")/.."
N=4; WHICH=()
while [ $# -gt 0 ]; do case "$1" in
  -n) N=$2; shift 2 ;; 1|2|3) WHICH+=("$1"); shift ;;
  *) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;; esac; done
[ ${#WHICH[@]} -gt 0 ] || WHICH=(1 2 3)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
make -s train_gpt2_zero3 >/dev/null
MODEL="-e d4c64h2t64 -b 2 -t 32 -v 0"
train() { mpirun -np "$N" ./train_gpt2_zero3 $MODEL "$@" 2>&1; }
loss_of() { sed -nE 's/^step +([0-9]+)\/[0-9]+ \| loss ([0-9.]+).*/\2/p' | tail -1; }
ledger() {   # flags: "collectives, bytes" of the last step's measured ledger, in all
  train -x 1 "$@" | sed -n '/collective ledger, last step/,/^ledger:/p' |
    awk '$3 ~ /^collectives?,$/ { c += $2; gsub(",", "", $4); b += $4 } END { printf "%3d collectives %12d bytes", c, b }'
}
for p in "${WHICH[@]}"; do case $p in
1)
  echo "pitfall 1: -clip local on $N ranks, -gc 1 (each rank's coefficient against global clipping's)"
  out=$(train -x 3 -clip local)
  echo "$out" | grep '^  clip local' | sed 's/^  clip local | /  /'
  global=$(train -x 3 -clip global | loss_of)
  echo "  loss after 3 steps: -clip global $global, -clip local $(echo "$out" | loss_of)"
  ;;
2)
  echo "pitfall 2: unit granularity at -z 3 on $N ranks (per step)"
  for w in 2 1 half; do printf '  -wrap %-5s %s\n' "$w" "$(ledger -z 3 -wrap $w)"; done
  ;;
3)
  echo "pitfall 3: activation recompute at -z 3 on $N ranks (per step)"
  acts=$(train -x 1 -z 3 | sed -nE 's/.*activations per rank: ([0-9.]+ [KMG]?i?B) without recompute, ([0-9.]+ [KMG]?i?B) with.*/\1|\2/p')
  printf '  -rc 0  %s   activations %s\n' "$(ledger -z 3 -rc 0)" "${acts%|*}"
  printf '  -rc 1  %s   activations %s\n' "$(ledger -z 3 -rc 1)" "${acts#*|}"
  printf '  -rc 2  %s   activations %s\n' "$(ledger -z 3 -rc 2)" "${acts#*|}"
  ;;
esac; done
