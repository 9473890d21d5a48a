#!/usr/bin/env bash
# The timed lessons, each run where its effect dwarfs the machine's noise (emulated links, docs/time.md)
# and repeated until it can say how sure it is:
#
#   lesson    configurations (A against B)                      links                      figure
#   prefetch  -pd 0 against -pd 4, GPT-2 d4, 2 ranks             -link 0.1                   blocks' gather waits, A / B
#   prefetch0 -pd 0 against -pd 2, d12c64h64t128, 2 ranks        -link 1GB/s,5ms             blocks' gather waits, A / B,
#             (a block's compute covers its gather)                                           and what -pd 2 leaves exposed
#   pitfall2  -wrap 2 against -wrap half, d4c64h2t64, 2 ranks    -link 1GB/s,50ms            step, B / A
#   pitfall3  -rc 1 against -rc 2, d12c64h64t128, 2 ranks         -link 1GB/s,10ms            blocks' gather waits, B / A,
#             (recompute cuts the activations by a quarter)                                   and the peak at -rc 0 and 1
#   ex6       ZeRO-2 against ZeRO-3 -pd 1, d2c64h2t64, 2 nodes   -linkx 0.01GB/s,100us        step, B / A
#   hsdp      full sharding against -hs 2, d2c64h2t64, 4 ranks   2 nodes, -linkx 0.02GB/s     step, A / B
#   zeropp    exact against -qw 8 -hp 2 -qg 8, d2c64h2t64, 4     2 nodes, -linkx 0.01GB/s     step, A / B
#   tuning    -wrap half -pd 1, then -pd 4 (prefetch first) or   -link 1GB/s,50ms            two ratios of step
#             -wrap 2 -pd 1 (granularity first), d4c64h2t64
#   offload   in memory against -oo disk -os 8, d6c384h6t64, 1    the machine's disk           (compute + I/O) / step
#
#   scripts/lessons.sh prefetch|prefetch0|pitfall2|pitfall3|ex6|hsdp|zeropp|tuning|offload|all [-r PAIRS] [--quick]
#   scripts/lessons.sh verdict NAME WHAT RATIO RATIO...    the verdict rule alone, on given ratios
#   scripts/lessons.sh trace TRACE.json                     a trace's waits a step (trace_figures, below)
#
# The configurations run interleaved, A B A B ... (PAIRS times, default 3; --quick: 2 pairs of shorter
# runs), each run's figure the mean of its measured steps (time: measured, rank 0), or for prefetch,
# prefetch0 and pitfall3 the blocks' gather waits per step (from the trace, the rank that waited
# least; their --quick runs take 4 steps: every step after the first is in the figure). The figure of a
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
# the compute; 1 is no overlap at all. prefetch0 and pitfall3 end their verdict line with the facts
# beside the ratio: what -pd 2 leaves exposed, by part, and a run without the link (the load's share);
# -rc 2's step against -rc 1's, and the peak with recompute against without ("memory: shown" when it
# is 10% lower; the kernel's count, no clock in it).
# The docs quote the shown figures (<!-- lesson: NAME ratio R -->, checked by tests/test_lessons.sh).
# Nothing is written outside a temporary folder, removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/args.sh
USAGE="usage: $0 prefetch|prefetch0|pitfall2|pitfall3|ex6|hsdp|zeropp|tuning|offload|all [-r PAIRS] [--quick], or $0 verdict NAME WHAT RATIO RATIO..., or $0 trace TRACE.json"
LESSONS="prefetch prefetch0 pitfall2 pitfall3 ex6 hsdp zeropp tuning offload"
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

PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
# trace_figures TRACE: "BLOCKS TOTAL EDGE REDUCE", ms per step, from the trace's waits: BLOCKS the
# blocks' gather waits, TOTAL all the exposed communication, EDGE the embedding's (its gathers and its
# reduction: the step's first collective and its last), REDUCE the blocks' reductions; each the median
# over the steps after the first (which records the schedule) of the rank that waited least: a wait
# also holds a rank waiting for a slower one (another job took its core), and the rank that arrived
# last waits only for the link.
trace_figures() {
  $PY - "$1" <<'PY'
import json, statistics, sys
parts, steps, ranks = {}, set(), set()
for e in json.load(open(sys.argv[1]))["traceEvents"]:
    a = e.get("args", {})
    if e.get("ph") != "X" or a.get("step", 0) < 1:
        continue
    steps.add(a["step"]); ranks.add(e["pid"])
    if e.get("cat") != "exposed":
        continue
    unit, ms = a.get("unit", ""), e["dur"] / 1000.0
    keys = ["total"]
    if a.get("kind") in ("fwd_gather", "bwd_gather") and unit.startswith("block"):
        keys.append("blocks")
    if a.get("kind") == "reduce_scatter" and unit.startswith("block"):
        keys.append("reduce")
    if unit == "embedding":
        keys.append("edge")
    for k in keys:
        parts[k, a["step"], e["pid"]] = parts.get((k, a["step"], e["pid"]), 0.0) + ms
def figure(k):
    per_step = [min(parts.get((k, s, r), 0.0) for r in ranks) for s in steps]
    return statistics.median(per_step) if per_step else 0.0
print(" ".join(f"{figure(k):.1f}" for k in ("blocks", "total", "edge", "reduce")))
PY
}

[ $# -ge 1 ] || die "expected a lesson ($USAGE)"
if [ "$1" = verdict ]; then
  [ $# -ge 5 ] || die "verdict: expected a name, what it shows and at least two ratios ($USAGE)"
  for r in "${@:4}"; do [[ "$r" =~ ^[0-9]+([.][0-9]+)?$ ]] || die "verdict: $r is not a ratio"; done
  verdict "${@:2}"; exit 0
fi
if [ "$1" = trace ]; then
  [ $# -eq 2 ] || die "trace: expected one trace file ($USAGE)"
  need_file trace "$2"; trace_figures "$2"; exit 0
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
    blocks) trace_figures "$tmp/trace.json" | cut -d' ' -f1 ;;
  esac
}

# step_of: the last run's measured mean step (ms)
step_of() { grep '^time: measured  compute' "$tmp/run.out" | sed -E 's/.*\| step +([0-9.]+) ms.*/\1/'; }


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

# prefetch0: where a block's compute covers its gather, prefetch leaves only what nothing can hide
lesson_prefetch0() {
  local common="-e d12c64h64t128 -b 1 -t 128 -z 3" link="-link 1GB/s,5ms" k a b tot edge red alone ratios=() tots=() edges=() bls=() reds=()
  [ "$QUICK" = 0 ] || local STEPS=4   # its figures come from the trace: every step after the first
  echo "prefetch0: GPT-2 d12c64h64t128 -b 1 -t 128 at -z 3, 2 ranks, -link 1GB/s,5ms: a block's gather takes about 5 ms,"
  echo "  its forward longer (64 heads over 128 tokens), its backward more: -pd 2 can hide every block's gather"
  for k in $(seq "$PAIRS"); do
    # shellcheck disable=SC2086
    a=$(figure_of blocks 2 $common $link -pd 0)
    # shellcheck disable=SC2086
    b=$(figure_of blocks 2 $common $link -pd 2)
    read -r _ tot edge red <<<"$(trace_figures "$tmp/trace.json")"
    printf '  pair %d: -pd 0 %7.1f ms the blocks waited | -pd 2 %6.1f ms the blocks waited; exposed in all %6.1f ms: the embedding %6.1f, the blocks'"'"' reductions %6.1f\n' \
      "$k" "$a" "$b" "$tot" "$edge" "$red"
    ratios+=("$(awk -v s="$a" -v f="$b" 'BEGIN {printf "%.4f", s / (f > 0.5 ? f : 0.5)}')")
    tots+=("$tot"); edges+=("$edge"); bls+=("$b"); reds+=("$red")
  done
  # shellcheck disable=SC2086
  figure_of blocks 2 $common -pd 2 >/dev/null
  alone=$(trace_figures "$tmp/trace.json" | cut -d' ' -f2)
  echo "  the same -pd 2 run without the emulated link: $alone ms exposed a step (no link time in it: the ranks waiting for each other's core)"
  # the median of each part over the pairs
  med() { summary "$@" | awk '{printf "%.1f", $1}'; }
  tot=$(med "${tots[@]}"); edge=$(med "${edges[@]}"); b=$(med "${bls[@]}"); red=$(med "${reds[@]}")
  echo "$(verdict prefetch0 "-pd 2 hides the blocks' gathers" "${ratios[@]}"); -pd 2 leaves $tot ms exposed a step" \
    "(median of $PAIRS): the embedding's gathers and reduction (the step's first and last) $edge ms, the blocks' gathers $b ms," \
    "their reductions $red ms, the rest $(awk -v t="$tot" -v e="$edge" -v b="$b" -v r="$red" 'BEGIN {printf "%.1f", t - e - b - r}') ms;" \
    "without the link $alone ms"
}

# pitfall3: -rc 2 (recompute with its own gather) against -rc 1 (recompute inside the backward's
# gather), on a model whose activations the recompute visibly cuts (64 heads over 128 tokens a
# layer); memory from one -rc 0 run beside them (the kernel's count: no clock in it)
lesson_pitfall3() {
  local common="-e d12c64h64t128 -b 1 -t 128 -z 3 -link 1GB/s,10ms" k a b sa sb g1 g2 m0 m1 p0 p1 ratios=() steps=() v
  [ "$QUICK" = 0 ] || local STEPS=4   # its figures come from the trace and the last step's ledger
  echo "pitfall 3: GPT-2 d12c64h64t128 -b 1 -t 128 at -z 3, 2 ranks, -link 1GB/s,10ms: -rc 1 against -rc 2's extra gathers"
  peak_of() { sed -nE 's/^process memory .* = ([0-9.]+) MiB \([0-9]+ bytes\) the run.s peak; the plan.s ([0-9.]+) MiB$/\1 \2/p' "$tmp/run.out"; }
  gathers_of() { awk '$1 ~ /^(fwd|bwd)_gather$/ && $3 ~ /^collectives?,$/ {n += $2} END {print n + 0}' "$tmp/run.out"; }
  # shellcheck disable=SC2086
  figure_of step 2 $common -rc 0 >/dev/null
  read -r m0 p0 <<<"$(peak_of)"
  for k in $(seq "$PAIRS"); do
    # shellcheck disable=SC2086
    a=$(figure_of blocks 2 $common -rc 1); sa=$(step_of); g1=$(gathers_of); read -r m1 p1 <<<"$(peak_of)"
    # shellcheck disable=SC2086
    b=$(figure_of blocks 2 $common -rc 2); sb=$(step_of); g2=$(gathers_of)
    printf '  pair %d: -rc 1 %7.1f ms the blocks waited, step %7.1f ms | -rc 2 %7.1f ms the blocks waited, step %7.1f ms\n' "$k" "$a" "$sa" "$b" "$sb"
    ratios+=("$(awk -v s="$b" -v f="$a" 'BEGIN {printf "%.4f", s / (f > 0.5 ? f : 0.5)}')")
    steps+=("$(awk -v s="$sb" -v f="$sa" 'BEGIN {printf "%.4f", s / f}')")
  done
  echo "  gathers a step (the ledger): -rc 1 $g1, -rc 2 $g2: $((g2 - g1)) more"
  echo "  peak per rank (rank 0, the kernel's count): -rc 0 $m0 MiB (plan $p0), -rc 1 $m1 MiB (plan $p1)"
  v=$(verdict pitfall3 "-rc 2's $((g2 - g1)) extra gathers lengthen the blocks' gather waits" "${ratios[@]}")
  v+="; the step $(summary "${steps[@]}" | awk '{print $1 "x (spread " $2 "-" $3 "x)"}')"
  if awk -v a="$m0" -v b="$m1" 'BEGIN {exit !(b < a / 1.10)}'; then
    v+="; memory: shown: recompute cuts the peak $m0 -> $m1 MiB"
  else
    v+="; memory: not shown: recompute's peak $m1 MiB against $m0 MiB without"
  fi
  echo "$v"
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
