#!/usr/bin/env bash
# scripts/figures/zeropp_curves.sh: the accuracy of ZeRO++ measured (docs/zeropp.md): the quick-start model
# (scripts/train.sh's CPU model: -e d4c128h4t64 -b 8 -t 64, in fp32 for 300 steps) trained on 4 ranks with exact
# ZeRO-3, each of -qw 8, -hp 2, -qg 8, and all three together, from the same seed; then one picture
# of the five loss curves and the table of final validation losses (scripts/figures/plot_zeropp.py).
#   scripts/figures/zeropp_curves.sh [OUT]      default OUT=out/zeropp; STEPS=300 B=8 NP=4 BIN=./train_gpt2_zero3
#   scripts/figures/zeropp_curves.sh --table    the five runs in a fresh temporary folder, removed at the end: the
#                                   table alone on stdout, the runs' progress on stderr, no picture
#                                   (docs/zeropp.md's figure, rerun by scripts/doc_figures.py --slow)
#   RUNS="qw8 all" picks some of the five (no picture then: plot_zeropp.py OUT draws what is there)
# A run's folder OUT/NAME that holds an earlier run is refused before the first run (results are never
# replaced: give another OUT, or RUNS without it); everything is checked before the first run.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/args.sh
table=0; [ "${1:-}" != --table ] || { table=1; shift; }
[ $# -le 1 ] || die "$2: unexpected argument (usage: scripts/figures/zeropp_curves.sh [OUT] | --table)"
[ $table -eq 0 ] || [ $# -eq 0 ] || die "$1: --table writes into a temporary folder of its own (give no OUT)"
[ $table -eq 0 ] || [ -z "${RUNS:-}" ] || die "RUNS: --table prints the table of all five runs (leave RUNS out)"
if [ $table -eq 1 ]; then
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  out=$tmp/zeropp
else
  out=${1:-out/zeropp}
fi
steps=${STEPS:-300}
bin=${BIN:-./train_gpt2_zero3}
np=${NP:-4}
B=${B:-8}
need_int STEPS steps 1 100000000; need_int NP np 1 64; need_int B B 1 1048576
[ -x "$bin" ] || [ "$bin" = ./train_gpt2_zero3 ] || die "BIN: $bin is not an executable file"
declare -A runs=([exact]="" [qw8]="-qw 8" [hp2]="-hp 2" [qg8]="-qg 8" [all]="-qw 8 -hp 2 -qg 8")
names=(${RUNS:-exact qw8 hp2 qg8 all})
[ ${#names[@]} -gt 0 ] || die "RUNS: names no run (exact qw8 hp2 qg8 all)"
[ ! -e "$out" ] || [ -d "$out" ] || die "OUT: $out exists and is not a folder"
[ -d "$(dirname "$out")" ] || [ "$(dirname "$out")" = out ] || die "OUT: the folder $(dirname "$out") (where $out would go) does not exist"
for name in "${names[@]}"; do
  [ -n "${runs[$name]+set}" ] || die "RUNS: $name is not a run (exact qw8 hp2 qg8 all)"
  [ ! -e "$out/$name" ] || need_new_folder "OUT/$name" "$out/$name"
done
[ "$(id -u)" -ne 0 ] || export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
flags=(-e d4c128h4t64 -b "$B" -t 64 -x "$steps" -l 2e-3 -u 20 -q 0.1 -c 0.1 -v 50 -m 4)
[ "$bin" != ./train_gpt2_zero3 ] || make -s train_gpt2_zero3 >/dev/null
# shellcheck disable=SC2086
for name in "${names[@]}"; do trainer_accepts "$np" "${flags[@]}" -z 3 ${runs[$name]}; done
exec 3>&1                             # the table's stream
[ $table -eq 0 ] || exec 1>&2         # under --table the runs' progress goes to stderr
for name in "${names[@]}"; do
  mkdir -p "$out/$name"
  echo "== $name: mpirun -np $np $bin ${flags[*]} ${runs[$name]}"
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=1 mpirun --oversubscribe -np "$np" -x OMP_NUM_THREADS "$bin" "${flags[@]}" ${runs[$name]} \
    -o "$out/$name" > "$out/$name/stdout.txt" 2>&1 || { grep -m1 '^error' "$out/$name/stdout.txt" >&2 || tail -5 "$out/$name/stdout.txt" >&2; exit 1; }
  grep -E "^step +$steps/|ledger:" "$out/$name/stdout.txt"
done
if [ $table -eq 1 ]; then
  /usr/bin/python3 scripts/figures/plot_zeropp.py "$out" | grep '^|' >&3
elif [ -z "${RUNS:-}" ]; then
  /usr/bin/python3 scripts/figures/plot_zeropp.py "$out"
fi
