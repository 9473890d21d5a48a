#!/usr/bin/env bash
# dev/zeropp_curves.sh: the accuracy of ZeRO++ measured (docs/zeropp.md): the quick-start model
# (scripts/train.sh's CPU run: -e d4c128h4t64 -b 8 -t 64, 300 steps) trained on 4 ranks with exact
# ZeRO-3, each of -qw 8, -hp 2, -qg 8, and all three together, from the same seed; then one picture
# of the five loss curves and the table of final validation losses (dev/plot_zeropp.py).
#   dev/zeropp_curves.sh [OUT]      default OUT=out/zeropp; STEPS=300 B=8 NP=4 BIN=./train_gpt2_zero3
#   RUNS="qw8 all" picks some of the five (no picture then: plot_zeropp.py OUT draws what is there)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-out/zeropp}
steps=${STEPS:-300}
bin=${BIN:-./train_gpt2_zero3}
np=${NP:-4}
B=${B:-8}
[ "$(id -u)" -ne 0 ] || export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
flags=(-e d4c128h4t64 -b "$B" -t 64 -x "$steps" -l 2e-3 -u 20 -q 0.1 -c 0.1 -v 50 -m 4)
declare -A runs=([exact]="" [qw8]="-qw 8" [hp2]="-hp 2" [qg8]="-qg 8" [all]="-qw 8 -hp 2 -qg 8")
for name in ${RUNS:-exact qw8 hp2 qg8 all}; do
  mkdir -p "$out/$name"
  echo "== $name: mpirun -np $np $bin ${flags[*]} ${runs[$name]}"
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=1 mpirun --oversubscribe -np "$np" -x OMP_NUM_THREADS "$bin" "${flags[@]}" ${runs[$name]} \
    -o "$out/$name" -f 1 > "$out/$name/stdout.txt"
  grep -E "^step +$steps/|ledger:" "$out/$name/stdout.txt"
done
[ -n "${RUNS:-}" ] || /usr/bin/python3 dev/plot_zeropp.py "$out"
