#!/usr/bin/env bash
# scripts/cluster_lessons.sh: the time lessons on a real network. Brings up a 2-node cluster with
# tbf-shaped links (scripts/cluster.sh up 2 --gbit G), trains each configuration across it over TCP,
# then the same ranks on one machine with the link emulated (-linkx G/8 GB/s), and tabulates the step
# time each measured beside the planner's prediction for that link (-bwx, -rpn):
#   exercise 6   ZeRO-2 against ZeRO-3 -pd 1, 1 rank a node
#   pitfall 2    -wrap 2 against -wrap half (13 collectives against 31 a step), 1 rank a node
#   HSDP         full sharding (-z 3) against -hs 2 (shard inside a node, replicate across), 2 ranks a node
#   ZeRO++       full sharding against -qw 8, -hp 2, -qg 8 and all three, 2 ranks a node
#   scripts/cluster_lessons.sh [--gbit G] [-e MODEL] [-x STEPS]     defaults: 1, d12c256h4t64, 5
# Needs root (the cluster); takes it down at the end, also when interrupted.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/args.sh
G=1; MODEL=d12c256h4t64; STEPS=5
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || die "$1: needs a value (usage: $0 [--gbit G] [-e MODEL] [-x STEPS])"
  case $1 in
    --gbit) G=$2 ;;
    -e) MODEL=$2 ;;
    -x) STEPS=$2 ;;
    *) die "$1: unknown argument (usage: $0 [--gbit G] [-e MODEL] [-x STEPS])" ;;
  esac
  shift 2
done
need_int -x "$STEPS" 3 1000
awk -v g="$G" 'BEGIN { exit !(g ~ /^[0-9]+(\.[0-9]+)?$/ && g >= 0.01 && g <= 100) }' ||
  die "--gbit: $G is not a link speed in [0.01, 100] Gbit/s"
# a cluster the user has up is theirs: this script brings up and takes down its own, never theirs
! bash scripts/cluster.sh status >/dev/null 2>&1 ||
  die "a cluster is up (scripts/cluster.sh status): take it down first (scripts/cluster.sh down); this script makes its own"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
make -s train_gpt2_zero3 >/dev/null || exit 1
trainer_accepts 4 -e "$MODEL" -b 2 -t 64 -x "$STEPS"
GBS=$(awk -v g="$G" 'BEGIN { printf "%g", g / 8 }')   # Gbit/s to GB/s
FLAGS="-e $MODEL -b 2 -t 64 -x $STEPS -v 0 -l 1e-3"
tmp=$(mktemp -d); trap 'bash scripts/cluster.sh down >/dev/null 2>&1; rm -rf "$tmp"' EXIT; trap 'exit 130' INT TERM
CONFIGS=("exercise 6: ZeRO-2|1|-z 2" "exercise 6: ZeRO-3 -pd 1|1|-z 3 -pd 1"
         "pitfall 2: -wrap 2, 2 ranks|1|-z 3 -wrap 2" "pitfall 2: -wrap half, 2 ranks|1|-z 3 -wrap half"
         "full sharding -z 3, 4 ranks|2|-z 3" "HSDP -hs 2, 4 ranks|2|-z 3 -hs 2"
         "ZeRO++ -qw 8, 4 ranks|2|-z 3 -qw 8" "ZeRO++ -hp 2, 4 ranks|2|-z 3 -hp 2" "ZeRO++ -qg 8, 4 ranks|2|-z 3 -qg 8"
         "ZeRO++ all three, 4 ranks|2|-z 3 -qw 8 -hp 2 -qg 8")
step_ms() { sed -n "s/^time: $1 .* step *\([0-9.]*\) ms.*/\1/p" "$2" | tail -1; }
exposed_ms() { sed -n "s/^time: $1 .*exposed *\([0-9.]*\) ms.*/\1/p" "$2" | tail -1; }
echo "# cluster_lessons: $FLAGS; links $G Gbit/s ($GBS GB/s) across 2 nodes; $(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| configuration | ranks | TCP, shaped: step ms (exposed) | one machine, -linkx $GBS: step ms (exposed) | planner: step ms |"
echo "|---|---:|---:|---:|---:|"
up_r=0; i=0
for c in "${CONFIGS[@]}"; do
  IFS='|' read -r label r flags <<<"$c"
  np=$((2 * r)); i=$((i + 1))
  if [ "$up_r" != "$r" ]; then
    bash scripts/cluster.sh down >/dev/null 2>&1
    bash scripts/cluster.sh up 2 --ranks-per-node "$r" --gbit "$G" >/dev/null || exit 1
    up_r=$r
  fi
  # shellcheck disable=SC2086
  bash scripts/cluster.sh mpirun -np $np ./train_gpt2_zero3 $FLAGS $flags -bwx "$GBS" -rpn "$r" >"$tmp/tcp$i" 2>&1 ||
    { tail "$tmp/tcp$i" >&2; echo "error: cluster_lessons: $label across the cluster failed" >&2; exit 1; }
  # shellcheck disable=SC2086
  mpirun -np $np ./train_gpt2_zero3 $FLAGS $flags -linkx "$GBS" -rpn "$r" >"$tmp/emu$i" 2>&1 ||
    { tail "$tmp/emu$i" >&2; echo "error: cluster_lessons: $label on one machine failed" >&2; exit 1; }
  printf '| %s | %d | %s (%s) | %s (%s) | %s |\n' "$label" $np "$(step_ms measured "$tmp/tcp$i")" "$(exposed_ms measured "$tmp/tcp$i")" \
    "$(step_ms measured "$tmp/emu$i")" "$(exposed_ms measured "$tmp/emu$i")" "$(step_ms planner "$tmp/tcp$i")"
done
