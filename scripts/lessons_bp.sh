#!/usr/bin/env bash
# The lesson of -bp (docs/time.md, "Backward prefetch: pre or post"), measured on an emulated link:
# FSDP's BACKWARD_PRE (-bp pre) starts the next unit's gather before this unit's gradient compute,
# so the gather hides behind it; BACKWARD_POST (-bp post) starts it after, once this unit's params
# are freed, so at -pd 1 every backward gather is waited on whole, and one gathered unit fewer is live.
#   scripts/lessons_bp.sh [REPEATS] [--quick]   (2 to 20, default 3; --quick: 2 repeats of 4 steps;
#                                                each repeat runs pre, then post)
# Each run: GPT-2 d8c320h5t64 in units of one block on 2 ranks, ZeRO-3 -pd 1, one row of 64 tokens, a
# link of 10 GB/s and 10 ms a ring step: a block's gather or reduce-scatter takes ~10 ms (its 1.2M
# parameters move in well under a millisecond), its backward compute longer than the two together,
# so PRE can hide each backward gather behind it (behind compute and the reduction queued ahead of
# it on the link: on a link-bound run the two tie). The link's latency, not its bandwidth, holds
# each collective, so the embedding's unhideable collectives (32 times a block's bytes) cost about
# what a block's do, and the effect is a large part of the step's whole exposed time.
# What it measures, per run (the steps after the first, which records the schedule):
#   exposed  all the exposed communication a step, from the trace, the rank that waited least
#            (scripts/lessons.sh trace: a rank waiting for a slower one's core is not waiting for the
#            link), median over the steps: the verdict's figure;
#   wait     rank 0's median wait on a backward gather that a prefetch can hide (the trace's "wait
#            bwd_gather" spans, all but each backward's first two): the effect itself;
#   peak     the engine's peak memory per rank (log.csv's mem_engine_peak_bytes: its buffers, where the
#            prefetch rule shows; no clock in it).
# The verdict is scripts/lessons.sh's rule on post's exposed time over pre's, repeat by repeat:
#   verdict bp: shown: BACKWARD_POST leaves more exposed a step than BACKWARD_PRE R.RRx (median of K pairs, spread LO-HIx)
# when every repeat shows it by more than 10%, else "not shown" (too noisy, or the opposite).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/args.sh
USAGE="usage: $0 [REPEATS] [--quick]"
REPEATS=; QUICK=0
while [ $# -gt 0 ]; do
  case $1 in
    --quick) QUICK=1 ;;
    *) [ -z "$REPEATS" ] || die "expected at most one number of repeats ($USAGE)"
       REPEATS=$1; need_int REPEATS REPEATS 2 20 ;;   # an empty argument is refused, never taken for the default
  esac
  shift
done
[ -n "$REPEATS" ] || REPEATS=$((3 - QUICK))
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
make -s train_gpt2_zero3 >/dev/null
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
FLAGS="-e d8c320h5t64 -b 1 -t 64 -x $((6 - 2 * QUICK)) -v 0 -z 3 -pd 1 -link 10GB/s,10ms"
echo "backward prefetch: mpirun -np 2 ./train_gpt2_zero3 $FLAGS -bp pre|post, $REPEATS repeats; load $(cut -d' ' -f1 /proc/loadavg)"

run() {   # name, -bp value
  local dir="$tmp/$1"
  mpirun -np 2 ./train_gpt2_zero3 $FLAGS -bp "$2" -o "$dir" -tr "$dir.json" >"$dir.out" 2>&1 ||
    { grep -m1 '^error' "$dir.out" >&2 || tail -5 "$dir.out" >&2; exit 1; }
}
ratios=()
for r in $(seq 1 "$REPEATS"); do
  run "pre$r" pre; pre=$(scripts/lessons.sh trace "$tmp/pre$r.json" | cut -d' ' -f2)
  run "post$r" post; post=$(scripts/lessons.sh trace "$tmp/post$r.json" | cut -d' ' -f2)
  echo "$pre $post" >"$tmp/exposed$r"
  ratios+=("$(awk -v s="$post" -v f="$pre" 'BEGIN {printf "%.4f", s / (f > 0.5 ? f : 0.5)}')")
done

$PY - "$tmp" "$REPEATS" <<'PYTHON'
import csv, json, statistics, sys
tmp, repeats = sys.argv[1], int(sys.argv[2])

def hideable_waits(name):
    """Rank 0's waits on backward gathers that a prefetch can hide, ms, in the steps after the first:
    in each micro-step's backward all but the first two (the final layernorm's, gathered ahead in the
    forward, and the first block unit's, which follows it with next to no compute between)."""
    with open(f"{tmp}/{name}.json") as f:
        events = json.load(f)["traceEvents"]
    passes = {}
    for e in sorted(events, key=lambda e: e.get("ts", 0)):
        a = e.get("args", {})
        if e.get("cat") == "exposed" and e.get("pid") == 0 and a.get("kind") == "bwd_gather" and a.get("step", 0) >= 1:
            passes.setdefault((a["step"], a["micro"]), []).append(e["dur"] / 1e3)
    return [w for waits in passes.values() for w in waits[2:]]

def measure(name):
    """The median hideable wait, the hideable gathers a step, the peak."""
    waits = hideable_waits(name)
    with open(f"{tmp}/{name}/log.csv") as f:
        rows = [r for r in csv.DictReader(f) if int(r["step"]) >= 1]
    return statistics.median(waits), len(waits) / len(rows), int(rows[-1]["mem_engine_peak_bytes"])

print(f"  {'repeat':<8}{'wait per hideable gather: pre':>30}{'post':>10}{'post - pre':>12}"
      f"{'exposed a step: pre':>22}{'post':>11}")
peaks = set()
for r in range(1, repeats + 1):
    (wp, gathers, pp), (wq, _, pq) = measure(f"pre{r}"), measure(f"post{r}")
    ep, eq = (float(x) for x in open(f"{tmp}/exposed{r}").read().split())
    peaks.add((pp, pq))
    print(f"  {r:<8}{wp:27.1f} ms{wq:7.1f} ms{wq - wp:9.1f} ms{ep:19.1f} ms{eq:8.1f} ms")
print(f"  hideable backward gathers a step: {gathers:.0f}")
for pp, pq in sorted(peaks):
    print(f"  peak per rank: pre {pp / 2**20:.1f} MiB, post {pq / 2**20:.1f} MiB: pre holds {(pp - pq) / 2**20:.1f} MiB more"
          " (one more gathered unit live while the backward computes, where that holds the run's peak)")
PYTHON
scripts/lessons.sh verdict bp "BACKWARD_POST leaves more exposed a step than BACKWARD_PRE" "${ratios[@]}"
