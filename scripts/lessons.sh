#!/usr/bin/env bash
# The timed lessons, each run where its effect dwarfs the machine's noise (emulated links, docs/time.md)
# and repeated until it can say how sure it is:
#
#   lesson    configurations (A against B)                      links                      figure
#   prefetch  -pd 0 against -pd 4, GPT-2 d4, 2 ranks             -link 0.1                   blocks' gather waits, A / B
#   pitfall2  -wrap 2 against -wrap half, d4c64h2t64, 2 ranks    -link 1GB/s,50ms            step, B / A
#   ex6       ZeRO-2 against ZeRO-3 -pd 1, d2c64h2t64, 2 nodes   -linkx 0.01GB/s,100us        step, B / A
#   hsdp      full sharding against -hs 2, d2c64h2t64, 4 ranks   2 nodes, -linkx 0.02GB/s     step, A / B
#   zeropp    exact against -qw 8 -hp 2 -qg 8, d2c64h2t64, 4     2 nodes, -linkx 0.01GB/s     step, A / B
#   tuning    -wrap half -pd 1, then -pd 4 (prefetch first) or   -link 1GB/s,50ms            two ratios of step
#             -wrap 2 -pd 1 (granularity first), d4c64h2t64
#   offload   in memory against -oo disk -os 8, d6c384h6t64, 1    the machine's disk           (compute + I/O) / step
#
#   scripts/lessons.sh prefetch|pitfall2|ex6|hsdp|zeropp|tuning|offload|all [-r PAIRS] [--quick]
#   scripts/lessons.sh verdict NAME WHAT RATIO RATIO...    the verdict rule alone, on given ratios
#
# The configurations run interleaved, A B A B ... (PAIRS times, default 3; --quick: 2 pairs of shorter
# runs), each run's figure the mean of its measured steps (time: measured, rank 0), or for prefetch the
# blocks' gather waits per step (from the trace, the rank that waited least). The figure of a
# lesson is the ratio within each pair (the same moment of the machine's load), reported as the median
# over the pairs and their spread (lowest-highest). Each lesson ends with one verdict line:
#   verdict NAME: shown: WHAT R.RRx (median of K pairs, spread LO-HIx)
# when every pair shows the effect by more than 10% (the lowest ratio above 1.10); when every pair
# shows the opposite (the highest ratio below 1)
#   verdict NAME: not shown: the opposite came out, R.RRx (median of K pairs, spread LO-HIx)
# else
#   verdict NAME: not shown: the machine is too noisy (spread LO-HIx over K pairs)
# tuning runs three configurations a round and shows its order only when the lowest speed-up of -wrap 2
# is above 1.10 and above the highest of -pd 4. offload's ratio is the step the two would take one
# after the other (compute alone: the run in memory; I/O alone: the step's bytes at the rate the
# offload run's own I/O line measured) over the offload run's step: above 1 the disk works under
# the compute; 1 is no overlap at all.
# The docs quote the shown figures (<!-- lesson: NAME ratio R -->, checked by tests/test_lessons.sh).
# Nothing is written outside a temporary folder, removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/args.sh
USAGE="usage: $0 prefetch|pitfall2|ex6|hsdp|zeropp|tuning|offload|all [-r PAIRS] [--quick], or $0 verdict NAME WHAT RATIO RATIO..."
LESSONS="prefetch pitfall2 ex6 hsdp zeropp tuning offload"
# summary RATIOS...: "median lo hi" of the ratios
summary() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
  printf "%.2f %.2f %.2f\n", m, v[1], v[NR]}'; }

# verdict NAME WHAT RATIOS...: the lesson's one verdict line
verdict() {
  local name=$1 what=$2 m lo hi; shift 2
  read -r m lo hi <<<"$(summary "$@")"
  if awk -v lo="$lo" 'BEGIN {exit !(lo > 1.10)}'; then
    echo "verdict $name: shown: $what ${m}x (median of $# pairs, spread $lo-${hi}x)"
  elif awk -v hi="$hi" 'BEGIN {exit !(hi < 1.0)}'; then
    echo "verdict $name: not shown: the opposite came out, ${m}x (median of $# pairs, spread $lo-${hi}x)"
  else
    echo "verdict $name: not shown: the machine is too noisy (spread $lo-${hi}x over $# pairs)"
  fi
}

[ $# -ge 1 ] || die "expected a lesson ($USAGE)"
if [ "$1" = verdict ]; then
  [ $# -ge 5 ] || die "verdict: expected a name, what it shows and at least two ratios ($USAGE)"
  for r in "${@:4}"; do [[ "$r" =~ ^[0-9]+([.][0-9]+)?$ ]] || die "verdict: $r is not a ratio"; done
  verdict "${@:2}"; exit 0
fi
WHICH=$1; shift
case " $LESSONS all " in *" $WHICH "*) ;; *) die "$WHICH: not a lesson ($USAGE)" ;; esac
PAIRS=; QUICK=0
while [ $# -gt 0 ]; do
  case $1 in
    -r) [ $# -ge 2 ] || die "-r: expected a number of pairs ($USAGE)"; PAIRS=$2; need_int -r PAIRS 2 20; shift 2 ;;
    --quick) QUICK=1; shift ;;
    *) die "$1: not an option ($USAGE)" ;;
  esac
done
[ -n "$PAIRS" ] || PAIRS=$((3 - QUICK))
STEPS=6; [ $QUICK = 1 ] && STEPS=5   # step 1 records the schedule, 2-3 calibrate; the rest are measured
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
make -s train_gpt2_zero3 >/dev/null
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# figure_of KIND RANKS FLAGS...: one run; KIND step = its measured mean step (ms), blocks = how long
# per step the compute waited for the blocks' gathers (ms, from the trace, below)
figure_of() {
  local kind=$1 n=$2 out=$tmp/run.out; shift 2
  rm -f "$tmp/trace.json"   # -tr never replaces a file: it would write trace.1.json
  mpirun -np "$n" ./train_gpt2_zero3 -v 0 -x "$STEPS" -tr "$tmp/trace.json" "$@" >"$out" 2>&1 ||
    { grep -m1 '^error' "$out" >&2 || tail -5 "$out" >&2; exit 1; }
  case $kind in
    step) grep '^time: measured  compute' "$out" | sed -E 's/.*\| step +([0-9.]+) ms.*/\1/' ;;
    blocks) $PY - "$tmp/trace.json" <<'PY' ;;
# The blocks' gather waits per step (every step after the first, which records the schedule), for the
# rank that waited least: a wait also holds a rank waiting for a slower one (another job took its
# core), and the rank that arrived last waits only for the link. The median over the steps.
import json, statistics, sys
waits, steps, ranks = {}, set(), set()
for e in json.load(open(sys.argv[1]))["traceEvents"]:
    a = e.get("args", {})
    if e.get("ph") != "X" or a.get("step", 0) < 1:
        continue
    steps.add(a["step"]); ranks.add(e["pid"])
    if e.get("cat") == "exposed" and a.get("kind") in ("fwd_gather", "bwd_gather") and a.get("unit", "").startswith("block"):
        waits[a["step"], e["pid"]] = waits.get((a["step"], e["pid"]), 0.0) + e["dur"] / 1000.0
per_step = [min(waits.get((s, r), 0.0) for r in ranks) for s in steps]
print(f"{statistics.median(per_step) if per_step else 0.0:.1f}")
PY
  esac
}

# pairs NAME WHAT KIND RANKS "COMMON FLAGS" "A FLAGS" "A LABEL" "B FLAGS" "B LABEL" SLOW: A and B
# interleaved; SLOW (A or B) is the one the lesson expects larger, so each ratio is slow / fast
pairs() {
  local name=$1 what=$2 kind=$3 n=$4 common=$5 fa=$6 la=$7 fb=$8 lb=$9 slow=${10} k a b ratios=()
  local unit=ms; [ "$kind" = blocks ] && unit="ms the blocks waited"
  for k in $(seq "$PAIRS"); do
    # shellcheck disable=SC2086
    a=$(figure_of "$kind" "$n" $common $fa); b=$(figure_of "$kind" "$n" $common $fb)
    printf '  pair %d: %-28s %8.1f %s | %-28s %8.1f %s\n' "$k" "$la" "$a" "$unit" "$lb" "$b" "$unit"
    if [ "$slow" = A ]; then ratios+=("$(awk -v s="$a" -v f="$b" 'BEGIN {printf "%.4f", s / (f > 0.5 ? f : 0.5)}')")
    else ratios+=("$(awk -v s="$b" -v f="$a" 'BEGIN {printf "%.4f", s / (f > 0.5 ? f : 0.5)}')"); fi
  done
  verdict "$name" "$what" "${ratios[@]}"
}

lesson_prefetch() {
  echo "prefetch: GPT-2 d4 -b 2 -t 64 at -z 3, 2 ranks, -link 0.1: a block's gather takes 16 ms, its forward 1.5 ms,"
  echo "  the LM head's backward about 150 ms: -pd 4 issues the blocks' backward gathers during it"
  pairs prefetch "-pd 4 cuts the blocks' gather waits" blocks 2 "-e d4 -b 2 -t 64 -z 3 -link 0.1" \
    "-pd 0" "-pd 0 (no prefetch)" "-pd 4" "-pd 4" A
}
lesson_pitfall2() {
  echo "pitfall 2: GPT-2 d4c64h2t64 -b 4 -t 64 at -z 3, 2 ranks, -link 1GB/s,50ms (50 ms per ring step)"
  pairs pitfall2 "-wrap half (31 collectives) is slower than -wrap 2 (13)" step 2 \
    "-e d4c64h2t64 -b 4 -t 64 -z 3 -link 1GB/s,50ms" "-wrap 2" "-wrap 2 (coarse)" "-wrap half" "-wrap half (fine)" B
}
lesson_ex6() {
  echo "exercise 6: GPT-2 d2c64h2t64 -b 1 -t 64, 2 ranks on 2 nodes, -link 10GB/s -linkx 0.01GB/s,100us -rpn 1"
  pairs ex6 "ZeRO-3 is slower than ZeRO-2" step 2 "-e d2c64h2t64 -b 1 -t 64 -link 10GB/s -linkx 0.01GB/s,100us -rpn 1" \
    "-z 2" "ZeRO-2" "-z 3 -pd 1" "ZeRO-3 -pd 1" B
}
lesson_hsdp() {
  echo "HSDP: GPT-2 d2c64h2t64 -b 2 -t 64 at -z 3, 4 ranks on 2 nodes, -link 10GB/s -linkx 0.02GB/s,100us -rpn 2"
  pairs hsdp "full sharding is slower than HSDP -hs 2" step 4 \
    "-e d2c64h2t64 -b 2 -t 64 -z 3 -link 10GB/s -linkx 0.02GB/s,100us -rpn 2" \
    "" "full sharding (4 ranks)" "-hs 2" "HSDP -hs 2" A
}
lesson_zeropp() {
  echo "ZeRO++: GPT-2 d2c64h2t64 -b 2 -t 64 at -z 3, 4 ranks on 2 nodes, -link 10GB/s -linkx 0.01GB/s,100us -rpn 2"
  pairs zeropp "exact ZeRO-3 is slower than -qw 8 -hp 2 -qg 8" step 4 \
    "-e d2c64h2t64 -b 2 -t 64 -z 3 -link 10GB/s -linkx 0.01GB/s,100us -rpn 2" \
    "" "exact ZeRO-3" "-qw 8 -hp 2 -qg 8" "-qw 8 -hp 2 -qg 8" A
}

# tuning: from too-fine units, does deeper prefetch (-pd 4) or coarser units (-wrap 2) help more?
# Three configurations interleaved; two ratios per round, against the starting point.
lesson_tuning() {
  local common="-e d4c64h2t64 -b 4 -t 64 -z 3 -link 1GB/s,50ms" k s p g rg=() rp=() mg lo_g hi_g mp lo_p hi_p
  echo "tuning order: GPT-2 d4c64h2t64 -b 4 -t 64 at -z 3, 2 ranks, -link 1GB/s,50ms; from -wrap half -pd 1"
  for k in $(seq "$PAIRS"); do
    # shellcheck disable=SC2086
    s=$(figure_of step 2 $common -wrap half -pd 1); p=$(figure_of step 2 $common -wrap half -pd 4)
    # shellcheck disable=SC2086
    g=$(figure_of step 2 $common -wrap 2 -pd 1)
    printf '  round %d: -wrap half -pd 1 %8.1f ms | -wrap half -pd 4 %8.1f ms | -wrap 2 -pd 1 %8.1f ms\n' "$k" "$s" "$p" "$g"
    rg+=("$(awk -v s="$s" -v f="$g" 'BEGIN {printf "%.4f", s / f}')")
    rp+=("$(awk -v s="$s" -v f="$p" 'BEGIN {printf "%.4f", s / f}')")
  done
  read -r mg lo_g hi_g <<<"$(summary "${rg[@]}")"
  read -r mp lo_p hi_p <<<"$(summary "${rp[@]}")"
  if awk -v g="$lo_g" -v p="$hi_p" 'BEGIN {exit !(g > 1.10 && g > p)}'; then
    echo "verdict tuning: shown: granularity first: -wrap 2 speeds the step ${mg}x (median of $PAIRS rounds, spread $lo_g-${hi_g}x), prefetch -pd 4 only ${mp}x (spread $lo_p-${hi_p}x)"
  else
    echo "verdict tuning: not shown: the machine is too noisy (spread $lo_g-${hi_g}x for -wrap 2, $lo_p-${hi_p}x for -pd 4 over $PAIRS rounds)"
  fi
}

# offload: does the disk work while the cores compute? The step's state (m and v, fp32) on disk, one
# rank, where the disk's time for a step's bytes is of the order of the compute's: the run in memory
# is the compute alone; the step's bytes (the planner's read + write per step) at the rate the
# offload run measured is the I/O alone; the offload run's step against their sum. Each round also
# runs the default 3 slots beside -os 8 (a slot a unit: the whole step's I/O free to run under the
# compute), to show what the slots add.
lesson_offload() {
  local common="-e d6c384h6t64 -b 1 -t 32 -z 3" k c o3 o rate io gb ratios=()
  gb=$(./train_gpt2_zero3 -plan 1 $common -oo disk | awk '/^offload \(/ {on = 1} on && $1 == 3 {print $8 + $9; exit}')
  echo "offload: GPT-2 d6c384h6t64 -b 1 -t 32, 1 rank, fp32: m and v on disk (-oo disk -os 8), $gb GB read and written a step"
  for k in $(seq "$PAIRS"); do
    # shellcheck disable=SC2086
    c=$(figure_of step 1 $common)
    # shellcheck disable=SC2086
    o3=$(figure_of step 1 $common -oo disk -o "$tmp/off")
    rm -rf "$tmp/off"
    # shellcheck disable=SC2086
    o=$(figure_of step 1 $common -oo disk -os 8 -o "$tmp/off")
    rate=$(grep '^offload I/O' "$tmp/run.out" | sed -E 's/.*= ([0-9.]+) GB\/s$/\1/')
    io=$(awk -v g="$gb" -v r="$rate" 'BEGIN {printf "%.1f", 1000 * g / r}')
    rm -rf "$tmp/off"
    printf '  pair %d: compute alone %7.1f ms | I/O alone %7.1f ms (%s GB/s) | step -os 8 %7.1f ms (-os 3: %.1f)\n' \
      "$k" "$c" "$io" "$rate" "$o" "$o3"
    ratios+=("$(awk -v c="$c" -v i="$io" -v s="$o" 'BEGIN {printf "%.4f", (c + i) / s}')")
  done
  verdict offload "compute + I/O one after the other would take longer than the -oo disk -os 8 step" "${ratios[@]}"
}

[ "$WHICH" = all ] && set -- $LESSONS || set -- "$WHICH"
for l in "$@"; do "lesson_$l"; done
