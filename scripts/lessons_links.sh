#!/usr/bin/env bash
# The trace pictures of two lessons of docs/time.md, one run of each configuration on emulated links
# (one run shows where the time goes; scripts/lessons.sh measures the lessons, repeated, with a spread):
#   ex6      exercise 6 (docs/primer.md): with slow links across nodes (2 ranks, one per node) ZeRO-3 is
#            slower than ZeRO-2 by about the planner's factor, and deeper prefetch cannot hide it;
#   pitfall2 pitfall 2 (docs/primer.md): with a high latency per ring step, too-fine units (-wrap half)
#            cost visibly more than coarse ones (-wrap 2).
#   scripts/lessons_links.sh ex6|pitfall2 [PNG_DIR]      (default docs/)
# A picture that exists in PNG_DIR is kept: the new one goes to a numbered sibling (time_ex6_z2.1.png),
# and the last line names the pictures drawn.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/args.sh
USAGE="usage: $0 ex6|pitfall2 [PNG_DIR]"
[ $# -ge 1 ] && [ $# -le 2 ] || die "expected a lesson and an optional folder ($USAGE)"
LESSON=$1; DIR=docs; [ $# -lt 2 ] || DIR=$2   # an empty folder name is refused, never taken for docs
case $LESSON in ex6|pitfall2) ;; *) die "$LESSON: not a lesson ($USAGE)" ;; esac
need_writable_folder PNG_DIR "$DIR"
drawn=()
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
make -s train_gpt2_zero3 >/dev/null
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
run() {   # name, title, flags
  local name=$1 title=$2; shift 2
  mpirun -np 2 ./train_gpt2_zero3 -v 0 -x 6 -tr "$tmp/$name.json" "$@" >"$tmp/$name.out" 2>&1 ||
    { grep -m1 '^error' "$tmp/$name.out" >&2 || cat "$tmp/$name.out" >&2; exit 1; }
  printf '%-34s' "$title"; grep '^time: measured  compute' "$tmp/$name.out" | sed 's/^time: measured //'
  printf '%-34s' "  (planner)"; grep '^time: planner' "$tmp/$name.out" | tail -1 | sed 's/^time: planner //'
  local png; png=$($PY scripts/plot_trace.py "$tmp/$name.json" "$DIR/time_${name}.png" --title "$title: $*") || exit 1
  drawn+=("${png%%: step*}")
}
case $LESSON in
ex6)
  LINKS="-link 10GB/s -linkx 0.05GB/s,100us -rpn 1"
  echo "exercise 6: GPT-2 d2c64h2t64, 2 ranks on 2 nodes: $LINKS"
  run ex6_z2 "ZeRO-2" -e d2c64h2t64 -b 4 -t 64 -z 2 $LINKS
  run ex6_z3 "ZeRO-3 -pd 1" -e d2c64h2t64 -b 4 -t 64 -z 3 -pd 1 $LINKS
  run ex6_z3pd4 "ZeRO-3 -pd 4" -e d2c64h2t64 -b 4 -t 64 -z 3 -pd 4 $LINKS
  ;;
pitfall2)
  LINKS="-link 1GB/s,5ms"
  echo "pitfall 2: GPT-2 d4c64h2t64, 2 ranks: $LINKS (5 ms per ring step)"
  run p2_wrap2 "ZeRO-3 -wrap 2 (coarse units)" -e d4c64h2t64 -b 4 -t 64 -z 3 -wrap 2 $LINKS
  run p2_half "ZeRO-3 -wrap half (fine units)" -e d4c64h2t64 -b 4 -t 64 -z 3 -wrap half $LINKS
  ;;
esac
echo "pictures: ${drawn[*]}"
