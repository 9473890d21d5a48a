#!/usr/bin/env bash
# The lesson of -bp (docs/time.md, "Backward prefetch: pre or post"), measured on an emulated link:
# FSDP's BACKWARD_PRE (-bp pre) starts the next unit's gather before this unit's gradient compute,
# so the gather hides behind it; BACKWARD_POST (-bp post) starts it after, once this unit's params
# are freed, so at -pd 1 every backward gather is waited on whole, and one gathered unit fewer is live.
#   scripts/lessons_bp.sh [REPEATS]      (2 to 20, default 3; each repeat runs pre, then post)
# Each run: GPT-2 d8c640h10t64 in units of 2 blocks (-wrap 2) on 2 ranks, ZeRO-3 -pd 1, B = 8 rows
# of 64 tokens, a link of 0.25 GB/s: a block unit's gather or reduce-scatter takes ~79 ms, the two
# together well under the unit's backward compute on this CPU (pre can hide a gather only where the
# compute covers it and the reduction ahead of it on the link; on a link-bound run the two tie).
# What it measures, per run (rank 0, the steps after the first, which records the schedule):
#   wait     the median wait on a backward gather that a prefetch can hide (the trace's "wait
#            bwd_gather" spans, all but each backward's first two): the effect itself, robust to the
#            odd slow step of a busy machine;
#   exposed  all the exposed communication a step (log.csv's exposed_comm_ms, median), for scale;
#   peak     the engine's peak memory per rank (log.csv's mem_engine_peak_bytes: its buffers, where the
#            prefetch rule shows; no clock in it).
# The verdict compares post with pre repeat by repeat: "BACKWARD_PRE hides X ms more than POST
# (spread Y)" when every repeat shows it and the mean beats the spread, else "not shown: too noisy".
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/args.sh
[ $# -le 1 ] || die "expected at most one argument, the number of repeats (usage: $0 [REPEATS])"
REPEATS=3; [ $# -eq 0 ] || REPEATS=$1   # an empty argument is refused, never taken for the default
need_int REPEATS REPEATS 2 20
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
make -s train_gpt2_zero3 >/dev/null
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
FLAGS="-e d8c640h10t64 -wrap 2 -b 8 -t 64 -x 5 -v 0 -z 3 -pd 1 -link 0.25GB/s"
echo "backward prefetch: mpirun -np 2 ./train_gpt2_zero3 $FLAGS -bp pre|post, $REPEATS repeats; load $(cut -d' ' -f1 /proc/loadavg)"

run() {   # name, -bp value
  local dir="$tmp/$1"
  mpirun -np 2 ./train_gpt2_zero3 $FLAGS -bp "$2" -o "$dir" -tr "$dir.json" >"$dir.out" 2>&1 ||
    { grep -m1 '^error' "$dir.out" >&2 || tail -5 "$dir.out" >&2; exit 1; }
}
for r in $(seq 1 "$REPEATS"); do
  run "pre$r" pre
  run "post$r" post
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
    """The median hideable wait, the hideable gathers a step, the median exposed time a step, the peak."""
    waits = hideable_waits(name)
    with open(f"{tmp}/{name}/log.csv") as f:
        rows = [r for r in csv.DictReader(f) if int(r["step"]) >= 1]
    exposed = statistics.median(float(r["exposed_comm_ms"]) for r in rows)
    return statistics.median(waits), len(waits) / len(rows), exposed, int(rows[-1]["mem_engine_peak_bytes"])

print(f"  {'repeat':<8}{'wait per hideable gather: pre':>30}{'post':>10}{'post - pre':>12}"
      f"{'exposed a step: pre':>22}{'post':>11}")
diffs, peaks = [], set()
for r in range(1, repeats + 1):
    (wp, gathers, ep, pp), (wq, _, eq, pq) = measure(f"pre{r}"), measure(f"post{r}")
    diffs.append(wq - wp)
    peaks.add((pp, pq))
    print(f"  {r:<8}{wp:27.1f} ms{wq:7.1f} ms{wq - wp:9.1f} ms{ep:19.1f} ms{eq:8.1f} ms")
mean, spread = statistics.mean(diffs), max(diffs) - min(diffs)
for pp, pq in sorted(peaks):
    print(f"  peak per rank: pre {pp / 2**20:.1f} MiB, post {pq / 2**20:.1f} MiB: pre holds {(pp - pq) / 2**20:.1f} MiB more"
          " (one more gathered unit live while the backward computes, where that holds the run's peak)")
if min(diffs) > 0 and mean > spread:
    print(f"verdict: BACKWARD_PRE hides {mean * gathers:.0f} ms more than POST a step ({gathers:.0f} gathers x {mean:.0f} ms; "
          f"spread {spread * gathers:.0f} ms over {repeats} repeats)")
else:
    print(f"verdict: not shown: the machine is too noisy (post - pre {mean * gathers:.0f} ms a step, "
          f"spread {spread * gathers:.0f} ms over {repeats} repeats)")
PYTHON
