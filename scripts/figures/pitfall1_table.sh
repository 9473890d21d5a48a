#!/usr/bin/env bash
# scripts/figures/pitfall1_table.sh: pitfall 1 measured (docs/primer.md's table). GPT-2 d2c48h2t32 trains on 4
# ranks for 120 steps (-b 4 -t 32 -l 1e-3) with -clip global and with -clip local, at the default
# clip threshold (-gc 1.0) and at a tiny one (-gc 1e-4), from the same init and data; then one
# Markdown table of the four losses at step 120, local against global.
#   scripts/figures/pitfall1_table.sh [DIR]    DIR (new or empty) keeps the four runs, DIR/{1.0,1e-4}_{global,local},
#                                  for a picture (scripts/figures.sh pitfall1 draws it from them); without
#                                  DIR they go into a temporary folder, removed at the end
# The table goes to stdout, one error line to stderr when a run fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/args.sh
[ $# -le 1 ] || die "$2: unexpected argument (usage: scripts/figures/pitfall1_table.sh [DIR])"
if [ $# -eq 1 ]; then
  need_new_folder DIR "$1"; out=$1
else
  out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
MODEL=(-e d2c48h2t32 -b 4 -t 32 -x 120 -l 1e-3 -v 0)
CLIPS=(1.0 1e-4)
make -s train_gpt2_zero3 >/dev/null
for gc in "${CLIPS[@]}"; do for c in global local; do trainer_accepts 4 "${MODEL[@]}" -gc "$gc" -clip $c; done; done
mkdir -p "$out"
loss_at_end() { tail -1 "$1/log.csv" | cut -d, -f2; }   # log.csv: step,loss,...
printf '| setting | -clip global, loss at step 120 | -clip local | local against global |\n|---|---:|---:|---:|\n'
for gc in "${CLIPS[@]}"; do
  for c in global local; do
    run=$out/${gc}_$c
    mpirun -np 4 ./train_gpt2_zero3 "${MODEL[@]}" -gc "$gc" -clip $c -o "$run" >"$run.out" 2>&1 ||
      { grep -m1 '^error' "$run.out" >&2 || tail -5 "$run.out" >&2; exit 1; }
  done
  g=$(loss_at_end "$out/${gc}_global"); l=$(loss_at_end "$out/${gc}_local")
  printf '| `-l 1e-3 -gc %s` | %.4f | %.4f | %+.2f%% |\n' "$gc" "$g" "$l" "$(awk -v g="$g" -v l="$l" 'BEGIN { print 100 * (l - g) / g }')"
done
