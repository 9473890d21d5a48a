#!/usr/bin/env bash
# scripts/wire_bytes.sh: the bytes each stage really puts on the wire, counted by the kernel, beside
# the ring model's count. Brings up 2 nodes (scripts/cluster.sh up 2, links unshaped: bytes, not
# time, are measured) and trains these runs across them over TCP:
#
#   run        ranks          flags
#   ddp2       2, 1 a node    -z 0
#   zero3_2    2, 1 a node    -z 3
#   ddp4       4, 2 a node    -z 0
#   zero3_4    4, 2 a node    -z 3
#   hsdp       4, 2 a node    -z 3 -hs 2
#   hpz        4, 2 a node    -z 3 -hp 2
#   zeropp     4, 2 a node    -z 3 -qw 8 -hp 2 -qg 8
#
# Each run's closing report has its wire line (host/report.c): the bytes node1 sent a step, the sum of
# its interfaces' transmit counters over the timed steps (steps 2..), and the ring model's bytes out
# of the node (the ledger's bytes each rank sends, times its rings' hops to the other node). This
# prints them in a table, each run's wire / model, and the ratios people quote: ZeRO-3 against DDP
# (the ring model's 1.5x), HSDP's and ZeRO++'s against exact ZeRO-3.
#
#   scripts/wire_bytes.sh [-e MODEL] [-x STEPS]      defaults: d4c256h4t64 (-b 2 -t 32), 4 steps
#
# Needs root and no cluster up; takes its own down at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/args.sh
USAGE="usage: $0 [-e MODEL] [-x STEPS]"
MODEL=d4c256h4t64; STEPS=4
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || die "$1: needs a value ($USAGE)"
  case $1 in
    -e) MODEL=$2 ;;
    -x) STEPS=$2 ;;
    *) die "$1: unknown argument ($USAGE)" ;;
  esac
  shift 2
done
need_int -x STEPS 3 1000
FLAGS="-e $MODEL -b 2 -t 32 -x $STEPS -v 0 -s 0"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
make -s train_gpt2_zero3 >/dev/null || exit 1
# shellcheck disable=SC2086
trainer_accepts 4 $FLAGS
need_no_cluster wire_bytes.sh
tmp=$(mktemp -d)
own_cluster "" "$tmp"
RUNS=("ddp2|1|-z 0" "zero3_2|1|-z 3" "ddp4|2|-z 0" "zero3_4|2|-z 3" "hsdp|2|-z 3 -hs 2" "hpz|2|-z 3 -hp 2" "zeropp|2|-z 3 -qw 8 -hp 2 -qg 8")
echo "# wire_bytes: $FLAGS; 2 nodes, links unshaped; bytes node1 sent a step (the kernel's count) against the ring model's ($(date -u +%F), $(git rev-parse --short HEAD 2>/dev/null || echo '?'))"
echo "| run | ranks | flags | wire, bytes a step | ring model, bytes a step | wire / model |"
echo "|---|---:|---|---:|---:|---:|"
declare -A wire
for run in "${RUNS[@]}"; do
  IFS='|' read -r name r flags <<<"$run"
  out=$tmp/$name.out
  # shellcheck disable=SC2086
  on_cluster "$r" -np $((2 * r)) ./train_gpt2_zero3 $FLAGS $flags >"$out" 2>&1 ||
    { tail -5 "$out" >&2; die "wire_bytes.sh: the run $name failed"; }
  line=$(grep '^wire (node' "$out") || { tail -5 "$out" >&2; die "wire_bytes.sh: the run $name printed no wire line"; }
  w=$(sed -n 's/.* sent a step (\([0-9]*\) bytes).*/\1/p' <<<"$line")
  m=$(sed -n 's/.*out of the node a step (\([0-9]*\) bytes).*/\1/p' <<<"$line")
  wire[$name]=$w
  if [ -n "$m" ]; then ratio=$(awk -v w="$w" -v m="$m" 'BEGIN { printf "%.3fx", w / m }'); else m="(all-to-all: no ring)"; ratio=-; fi
  echo "| $name | $((2 * r)) | $flags | $w | $m | $ratio |"
done
ratio() { awk -v a="${wire[$1]}" -v b="${wire[$2]}" 'BEGIN { printf "%.2fx", a / b }'; }
echo "ZeRO-3 against DDP on the wire: $(ratio zero3_2 ddp2) on 2 ranks, $(ratio zero3_4 ddp4) on 4 (the ring model: 1.50x)"
echo "exact ZeRO-3 against HSDP -hs 2: $(ratio zero3_4 hsdp); against hpZ -hp 2: $(ratio zero3_4 hpz); against ZeRO++ -qw 8 -hp 2 -qg 8: $(ratio zero3_4 zeropp)"
