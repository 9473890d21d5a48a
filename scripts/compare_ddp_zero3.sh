#!/usr/bin/env bash
# DDP vs ZeRO-3 on the CPU trainer: builds the DDP binary (make ddp -> build/ddp/train_gpt2_zero3,
# fixed at stage 0) and the ZeRO binary, trains both with mpirun -np N on tinyshakespeare from the
# same init and data, and plots the two loss curves, the per-rank memory and the bytes sent per step
# (scripts/plot_compare.py). Prints the largest loss difference and the memory / communication numbers.
#
#   scripts/compare_ddp_zero3.sh [-n N] [-x STEPS] [-e MODEL] [-o DIR] [-p PNG] [-T] [-- TRAINER FLAGS...]
#     -n N       ranks                                  default 4
#     -x STEPS   training steps                         default 100
#     -e MODEL   model: a descriptor or an llm.c file   default d2c64h2t64
#     -o DIR     output: DIR/{ddp,zero3}/log.csv, the PNG   default build/compare_ddp_zero3, or the
#                first free build/compare_ddp_zero3.1, .2, ...; a DIR given must be new or empty
#     -p PNG     where the plot goes                    default DIR/compare_ddp_zero3.png; a PNG
#                that exists is kept (the plot goes to a numbered sibling)
#     -T         the table alone (docs/primer.md's): the runs in a temporary folder, removed at the
#                end, their progress on stderr, the Markdown table on stdout, no picture (no -o, -p)
#   Flags after -- go to both trainers (e.g. -- -b 8 -t 32).
#
# The README's plot is docs/compare_ddp_zero3.png, redrawn by `scripts/figures.sh compare` (this
#   script with -n 4 -x 120, the picture then moved into place)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/args.sh
usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; }
N=4; STEPS=100; MODEL=d2c64h2t64; OUT=; PNG=; TABLE=0
while getopts ":n:x:e:o:p:Th" opt; do
  case $opt in
    n) N=$OPTARG ;; x) STEPS=$OPTARG ;; e) MODEL=$OPTARG ;; o) OUT=$OPTARG; [ -n "$OUT" ] || die "-o: needs a folder" ;; p) PNG=$OPTARG; [ -n "$PNG" ] || die "-p: needs a picture's name" ;; T) TABLE=1 ;;
    h) usage; exit 0 ;;
    :) die "-$OPTARG: missing its value (-h for help)" ;;
    *) die "-$OPTARG: unknown option (-h for help)" ;;
  esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
need_int -n N 1 64; need_int -x STEPS 1 100000000
if [ $TABLE = 1 ]; then
  [ -z "$OUT" ] && [ -z "$PNG" ] || die "-T: the table's runs go into a temporary folder and draw no picture (leave -o and -p out)"
  OUT=$(mktemp -d); trap 'rm -rf "$OUT"' EXIT
  exec 3>&1 1>&2                       # stdout is the table's; the runs' progress goes to stderr
elif [ -n "$OUT" ]; then need_new_folder -o "$OUT"; else mkdir -p build && OUT=$(free_name build/compare_ddp_zero3 folder) || exit 2; fi
PNG=${PNG:-$OUT/compare_ddp_zero3.png}
case "$PNG" in *.png) ;; *) die "-p: $PNG: a picture's name ends in .png" ;; esac
[ "$(dirname "$PNG")" = "$OUT" ] || need_writable_folder -p "$(dirname "$PNG")"
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# one OpenMP thread per rank when the ranks already cover the cores
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( cores / N > 0 ? cores / N : 1 ))}
# the same model, data, init (-S) and schedule for both; only the stage differs
FLAGS=(-e "$MODEL" -b 4 -t 64 -x "$STEPS" -l 1e-3 -u 10 -q 0.1 -c 0.1 -v 25 -m 4 -S 1337 "$@")

echo "== building the DDP and ZeRO binaries"
make -s train_gpt2_zero3
for z in 0 3; do trainer_accepts "$N" "${FLAGS[@]}" -z $z; done
make -s ddp
mkdir -p "$OUT"
run() {   # run NAME BINARY STAGE
  echo "== $1: mpirun -np $N $2 -z $3 ${FLAGS[*]} -o $OUT/$1"
  mpirun -np "$N" "$2" "${FLAGS[@]}" -z "$3" -o "$OUT/$1" >"$OUT/$1.out" 2>&1 ||
    { grep -m1 '^error' "$OUT/$1.out" >&2 || tail -20 "$OUT/$1.out" >&2; exit 1; }
  grep -E '^step' "$OUT/$1.out" | sed -n '1p;$p'
}
t0=$(date +%s)
run ddp build/ddp/train_gpt2_zero3 0
run zero3 ./train_gpt2_zero3 3
if [ $TABLE = 1 ]; then
  $PY scripts/plot_compare.py --ddp "$OUT/ddp/log.csv" --zero3 "$OUT/zero3/log.csv" --table "$N" >&3
  exit 0
fi
echo "== both runs took $(( $(date +%s) - t0 )) s; plotting"
$PY scripts/plot_compare.py --ddp "$OUT/ddp/log.csv" --zero3 "$OUT/zero3/log.csv" --out "$PNG" \
  --title "$MODEL, $N ranks, $STEPS steps"
