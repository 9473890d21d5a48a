#!/usr/bin/env bash
# scripts/cluster_lessons.sh: the time lessons on a real network. Brings up 2 nodes with tbf-shaped
# links (scripts/cluster.sh up 2 --gbit G), and trains these runs across them over TCP (one, marked,
# on one machine with the same link emulated by -linkx G/8 GB/s), round after round:
#
#   run     ranks          flags (all at -z 3 -pd 1 but the first)
#   z2      2, 1 a node    -z 2
#   z3      2, 1 a node    -z 3 -pd 1
#   half    2, 1 a node    -z 3 -pd 1 -wrap half
#   emu     2, one machine -z 3 -pd 1 -linkx G/8 -rpn 1
#   full    4, 2 a node    -z 3 -pd 1
#   hs2     4, 2 a node    -z 3 -pd 1 -hs 2
#   zpp     4, 2 a node    -z 3 -pd 1 -qw 8 -hp 2 -qg 8
#
#   lesson         figure, within each round       it shows
#   tcp_ex6        z3 / z2                         exercise 6: ZeRO-3 is slower than ZeRO-2
#   tcp_pitfall2   half / z3                       pitfall 2: half-block units are slower than blocks
#   tcp_emulation  z3 / emu                        real TCP is slower than its emulation (-linkx)
#   tcp_hsdp       full / hs2                      full sharding is slower than HSDP -hs 2
#   tcp_zeropp     full / zpp                      exact ZeRO-3 is slower than -qw 8 -hp 2 -qg 8
#
#   scripts/cluster_lessons.sh [LESSON...] [--quick] [-r ROUNDS] [--gbit G] [-e MODEL] [-x STEPS]
#   defaults: every lesson, 3 rounds, 1 Gbit/s, d2c48h2t32 (-b 2 -t 32), 6 steps; --quick: 2 rounds of
#   4 steps. Given lessons, a round trains only the runs they compare.
#
# A run's figure is its measured step (time: measured, the mean after the calibration steps; the
# planner's prediction for the link, -bwx G/8 -rpn R, beside it). A round's runs follow each other,
# so a lesson's two runs of a round meet the same load: its ratio within the round is one pair of
# scripts/lessons.sh's rule, and each lesson ends with that script's verdict line (the median of the
# rounds and their spread, or "not shown"). The docs quote them (<!-- lesson: tcp_NAME ratio R -->,
# checked by tests/test_cluster.sh). Needs root and no cluster up; takes its own down at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/args.sh
USAGE="usage: $0 [LESSON...] [--quick] [-r ROUNDS] [--gbit G] [-e MODEL] [-x STEPS]"
G=1; MODEL=d2c48h2t32; STEPS=; ROUNDS=; QUICK=0; WANTED=()
while [ $# -gt 0 ]; do
  case $1 in
    --quick) QUICK=1; shift; continue ;;
    tcp_*) WANTED+=("$1"); shift; continue ;;
  esac
  [ $# -ge 2 ] || die "$1: needs a value ($USAGE)"
  case $1 in
    --gbit) G=$2 ;;
    -e) MODEL=$2 ;;
    -x) STEPS=$2 ;;
    -r) ROUNDS=$2 ;;
    *) die "$1: unknown argument ($USAGE)" ;;
  esac
  shift 2
done
[ -n "$STEPS" ] || STEPS=$((6 - 2 * QUICK))
[ -n "$ROUNDS" ] || ROUNDS=$((3 - QUICK))
need_int -x STEPS 3 1000
need_int -r ROUNDS 2 20
need_gbit --gbit "$G"
GBS=$(awk -v g="$G" 'BEGIN { printf "%g", g / 8 }')   # Gbit/s to GB/s
FLAGS="-e $MODEL -b 2 -t 32 -x $STEPS -v 0 -l 1e-3"
RUNS=("z2|1|tcp|-z 2" "z3|1|tcp|-z 3 -pd 1" "half|1|tcp|-z 3 -pd 1 -wrap half" "emu|1|one|-z 3 -pd 1"
      "full|2|tcp|-z 3 -pd 1" "hs2|2|tcp|-z 3 -pd 1 -hs 2" "zpp|2|tcp|-z 3 -pd 1 -qw 8 -hp 2 -qg 8")
LESSONS=("tcp_ex6|z3|z2|ZeRO-3 -pd 1 is slower than ZeRO-2 over TCP"
         "tcp_pitfall2|half|z3|-wrap half is slower than one block a unit over TCP"
         "tcp_emulation|z3|emu|real TCP is slower than its emulation (-linkx $GBS)"
         "tcp_hsdp|full|hs2|full sharding is slower than HSDP -hs 2 over TCP"
         "tcp_zeropp|full|zpp|exact ZeRO-3 is slower than -qw 8 -hp 2 -qg 8 over TCP")
# the lessons asked for (all by default), and the runs they compare, in RUNS' order
if [ ${#WANTED[@]} -gt 0 ]; then
  chosen=()
  for w in "${WANTED[@]}"; do
    l=$(printf '%s\n' "${LESSONS[@]}" | grep "^$w|") || die "$w: not a lesson (${LESSONS[*]%%|*})"
    chosen+=("$l")
  done
  LESSONS=("${chosen[@]}")
  needed=" $(printf '%s\n' "${LESSONS[@]}" | cut -d'|' -f2,3 | tr '|\n' '  ')"
  kept=(); for run in "${RUNS[@]}"; do [[ $needed == *" ${run%%|*} "* ]] && kept+=("$run"); done
  RUNS=("${kept[@]}")
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
make -s train_gpt2_zero3 >/dev/null || exit 1
trainer_accepts 4 -e "$MODEL" -b 2 -t 32 -x "$STEPS"
need_no_cluster cluster_lessons.sh
tmp=$(mktemp -d)
own_cluster "$G" "$tmp"

# run_step NAME RANKS_A_NODE WHERE FLAGS: one run, across the nodes (WHERE tcp) or on this machine
# with the link emulated (one); prints "measured planner" (ms a step)
run_step() {
  local name=$1 r=$2 where=$3 flags=$4 out=$tmp/run.out launch=(mpirun)
  if [ "$where" = tcp ]; then launch=(on_cluster "$r"); else flags+=" -linkx $GBS"; fi
  # shellcheck disable=SC2086
  "${launch[@]}" -np $((2 * r)) ./train_gpt2_zero3 $FLAGS $flags -bwx "$GBS" -rpn "$r" >"$out" 2>&1 ||
    { tail -5 "$out" >&2; die "cluster_lessons.sh: the run $name ($where) failed"; }
  grep -q '^time: measured ' "$out" || { tail -5 "$out" >&2; die "cluster_lessons.sh: the run $name ($where) printed no 'time: measured' line"; }
  printf '%s %s\n' "$(step_ms measured "$out")" "$(step_ms planner "$out")"
}

echo "# cluster_lessons: $FLAGS; links $G Gbit/s ($GBS GB/s) across 2 nodes; $ROUNDS rounds; $(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg); step ms measured (planner)"
head="| round |"; rule="|---:|"
for run in "${RUNS[@]}"; do head+=" ${run%%|*} |"; rule+="---:|"; done
echo "$head"; echo "$rule"
declare -A step
for k in $(seq "$ROUNDS"); do
  row="| $k |"
  for run in "${RUNS[@]}"; do
    IFS='|' read -r name r where flags <<<"$run"
    read -r m p <<<"$(run_step "$name" "$r" "$where" "$flags")"
    [ -n "$m" ] && [ -n "$p" ] || exit 1   # (its error line said why)
    step[$name,$k]=$m; row+=" $m ($p) |"
  done
  echo "$row"
done
for l in "${LESSONS[@]}"; do
  IFS='|' read -r name slow fast what <<<"$l"
  ratios=()
  for k in $(seq "$ROUNDS"); do ratios+=("$(awk -v s="${step[$slow,$k]}" -v f="${step[$fast,$k]}" 'BEGIN {printf "%.4f", s / f}')"); done
  bash scripts/lessons.sh verdict "$name" "$what" "${ratios[@]}"
done
