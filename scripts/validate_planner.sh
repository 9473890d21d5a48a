#!/usr/bin/env bash
# The time model against measurement: trains each configuration (stages 0-3, -pd 0 and 1, -wrap
# coarse and fine, HSDP) under three links (unlimited: the machine's own memory copies; slow; slow
# with a high latency, emulated by the CPU backend), and tabulates what each run printed: its
# measured step time and exposed communication beside the planner's prediction (plan_predict_step)
# and the replay of its own calibration steps over the links (host/predict.h).
#   scripts/validate_planner.sh [--ci | --docs] [--tcp GBIT] [-o TABLE.md]
# --ci (default): a tiny model, 4 steps a row (a few seconds each); --docs: a larger model, 10 steps.
# --tcp GBIT (root; no cluster up): two more rows a configuration, its ranks split over 2 nodes:
# real TCP between namespace nodes shaped to GBIT Gbit/s (scripts/cluster.sh, brought up here and
# taken down at the end), and the same split emulated on one machine (-linkx GBIT/8 GB/s -rpn R);
# the planner and the replay of both are given that link (-bwx, -rpn). The two run as A B A B (2
# pairs a configuration; the rows give the median of each column), and the table ends with two
# verdict lines by scripts/lessons.sh's rule, over every configuration's pairs: tcp_table (real TCP's
# step over the emulated split's, within each pair) and tcp_planner (real TCP's step over the
# planner's prediction in the same run).
# -o TABLE.md is checked before the first run; one that exists is kept, the table goes to a numbered
# sibling (TABLE.1.md), and the last line names it.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/args.sh
MODE=ci; OUT=""; TCP=""
USAGE="usage: $0 [--ci | --docs] [--tcp GBIT] [-o TABLE.md]"
while [ $# -gt 0 ]; do case $1 in --ci) MODE=ci;; --docs) MODE=docs;;
  --tcp) [ $# -ge 2 ] || die "--tcp: missing its link speed in Gbit/s ($USAGE)"; TCP=$2; shift;;
  -o) [ $# -ge 2 ] && [ -n "$2" ] || die "-o: missing its file name ($USAGE)"; OUT=$2; shift;;
  *) die "$1: unknown argument ($USAGE)";; esac; shift; done
if [ -n "$OUT" ]; then
  [ ! -d "$OUT" ] || die "-o: $OUT is a folder"
  case "$OUT" in *.md) ;; *) die "-o: $OUT: the table is Markdown: its name ends in .md" ;; esac
  need_writable_folder -o "$(dirname "$OUT")"
fi
if [ -n "$TCP" ]; then
  need_gbit --tcp "$TCP"
  need_no_cluster --tcp
  GBS=$(awk -v g="$TCP" 'BEGIN { printf "%g", g / 8 }')   # Gbit/s to GB/s
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
make -s train_gpt2_zero3 >/dev/null
if [ $MODE = ci ]; then MODEL="-e d2c48h2t32 -b 2 -t 32 -x 4"; SLOW=0.2; LAT=2ms
else MODEL="-e d2c64h2t64 -b 4 -t 64 -x 10"; SLOW=0.1; LAT=5ms; fi
# the table's name, reserved now (created empty, O_EXCL): a second run started beside this one takes
# the next; a run that ends without its table releases the reservation
[ -z "$OUT" ] || OUT=$(free_name "$OUT") || exit 2
release_unused_name() { [ -z "$OUT" ] || [ -s "$OUT" ] || rm -f "$OUT"; }
tmp=$(mktemp -d)
if [ -n "$TCP" ]; then own_cluster "$TCP" "$tmp" release_unused_name; else trap 'release_unused_name; rm -rf "$tmp"' EXIT; trap 'exit 130' INT TERM; fi
CONFIGS=("stage 0 (DDP)|2|-z 0" "stage 1|2|-z 1" "stage 2|2|-z 2" "stage 3 -pd 1|2|-z 3 -pd 1" "stage 3 -pd 0|2|-z 3 -pd 0"
         "stage 3 -wrap 2 (coarse)|2|-z 3 -wrap 2" "stage 3 -wrap half (fine)|2|-z 3 -wrap half" "HSDP -hs 2, 4 ranks|4|-z 3 -hs 2")
LINKS=("unlimited|" "slow|-link $SLOW" "slow + latency|-link $SLOW,$LAT")
echo "# validate_planner ($MODE): $MODEL; links: unlimited, -link $SLOW, -link $SLOW,$LAT${TCP:+, TCP $TCP Gbit/s and -linkx $GBS across 2 nodes}; $(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
# tcp_rows LABEL NP FLAGS: the configuration over real TCP (its ranks split over 2 nodes, NP/2 a node)
# and the same split emulated on one machine, A B A B
TCP_PAIRS=2
tcp_rows() {
  local label=$1 np=$2 flags=$3 r=$(($2 / 2)) k
  for k in $(seq $TCP_PAIRS); do
    i=$((i + 1))
    # shellcheck disable=SC2086
    on_cluster "$r" -np "$np" ./train_gpt2_zero3 $MODEL -v 0 -l 1e-3 $flags -bwx "$GBS" -rpn "$r" >"$tmp/$i.out" 2>&1 ||
      die "$label, TCP: the run across the cluster failed: $(grep -m1 '^error' "$tmp/$i.out" || tail -1 "$tmp/$i.out")"
    printf '%s\t%s\t%s\t%s\n' "$label" "TCP $TCP Gbit/s, 2 nodes (median of $TCP_PAIRS)" "$tmp/$i.out" "$k" >>"$tmp/index"
    i=$((i + 1))
    # shellcheck disable=SC2086
    mpirun -np "$np" ./train_gpt2_zero3 $MODEL -v 0 -l 1e-3 $flags -linkx "$GBS" -rpn "$r" >"$tmp/$i.out" 2>&1 ||
      die "$label, -linkx $GBS: the run failed: $(grep -m1 '^error' "$tmp/$i.out" || tail -1 "$tmp/$i.out")"
    printf '%s\t%s\t%s\t%s\n' "$label" "-linkx $GBS -rpn $r (emulated, median of $TCP_PAIRS)" "$tmp/$i.out" "$k" >>"$tmp/index"
  done
}
i=0
for c in "${CONFIGS[@]}"; do
  IFS='|' read -r label np flags <<<"$c"
  for l in "${LINKS[@]}"; do
    IFS='|' read -r lname lflags <<<"$l"
    i=$((i + 1))
    # shellcheck disable=SC2086
    mpirun -np "$np" ./train_gpt2_zero3 $MODEL -v 0 -l 1e-3 $flags $lflags >"$tmp/$i.out" 2>&1 \
      || { sed '/^error/d' "$tmp/$i.out" >&2; echo "error: $label, $lname: the run failed: $(grep -m1 '^error' "$tmp/$i.out" || echo "exit status $?")" >&2; exit 1; }
    printf '%s\t%s\t%s\t1\n' "$label" "$lname" "$tmp/$i.out" >>"$tmp/index"
  done
  if [ -n "$TCP" ]; then tcp_rows "$label" "$np" "$flags"; fi
done
# the real-TCP rows' verdicts: each pair's TCP step over its emulated step, each TCP run's step over
# its planner's (scripts/lessons.sh verdict: one rule for every timed lesson)
: >"$tmp/verdicts"
if [ -n "$TCP" ]; then
  over_emulated=(); over_planner=()
  while IFS=$'\t' read -r tcp_out emu_out; do
    t=$(step_ms measured "$tcp_out"); e=$(step_ms measured "$emu_out"); p=$(step_ms planner "$tcp_out")
    [ -n "$t" ] && [ -n "$e" ] && [ -n "$p" ] || die "--tcp: a run printed no 'time: measured' or 'time: planner' line ($tcp_out, $emu_out)"
    over_emulated+=("$(awk -v a="$t" -v b="$e" 'BEGIN {printf "%.4f", a / b}')")
    over_planner+=("$(awk -v a="$t" -v b="$p" 'BEGIN {printf "%.4f", a / b}')")
  done < <(awk -F'\t' '$2 ~ /^TCP/ {t = $3} $2 ~ /emulated/ {print t "\t" $3}' "$tmp/index")
  bash scripts/lessons.sh verdict tcp_table "real TCP's step is longer than the emulated split's" "${over_emulated[@]}" >>"$tmp/verdicts"
  bash scripts/lessons.sh verdict tcp_planner "real TCP's step is longer than the planner's" "${over_planner[@]}" >>"$tmp/verdicts"
fi
$PY - "$tmp/index" "${OUT:-/dev/null}" "$tmp/verdicts" <<'EOF'
import os, re, statistics, sys
sys.path.insert(0, "scripts")
import plotlib
rows = {}   # (label, links) -> the runs' figures, in the order they ran
for line in open(sys.argv[1]):
    label, links, path, _pair = line.rstrip("\n").split("\t")
    text = open(path).read()
    t = {}
    for who in ("planner", "replay", "measured"):
        m = re.findall(rf"^time: {who} +compute +([\d.]+) ms \| comm +([\d.]+) ms \| exposed +([\d.]+) ms \| step +([\d.]+) ms", text, re.M)
        if not m:
            plotlib.fail(f"{label}, {links}: the run printed no 'time: {who}' line")
        t[who] = [float(x) for x in m[-1]]
    rows.setdefault((label, links), []).append(t)
# a row repeated (the real-TCP pairs): the median of each figure over its runs
rows = [(label, links, {who: [statistics.median(col) for col in zip(*(t[who] for t in runs))] for who in runs[0]})
        for (label, links), runs in rows.items()]
def err(p, m): return f"{100 * (p / m - 1):+.0f}%" if m > 0 else "-"
head = ("| configuration | links | step ms measured | planner (error) | replay (error) | exposed ms measured | planner | replay |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|")
lines = [head]
for label, links, t in rows:
    ms, pl, rp = t["measured"], t["planner"], t["replay"]
    lines.append(f"| {label} | {links} | {ms[3]:.1f} | {pl[3]:.1f} ({err(pl[3], ms[3])}) | {rp[3]:.1f} ({err(rp[3], ms[3])}) "
                 f"| {ms[2]:.1f} | {pl[2]:.1f} | {rp[2]:.1f} |")
table = "\n".join(lines)
print(table)
emulated = lambda l: l != "unlimited" and not l.startswith("TCP")
within = lambda who, kind: sum(abs(t[who][3] / t["measured"][3] - 1) <= 0.15 for _, l, t in rows if kind(l))
n = sum(1 for _, l, _ in rows if emulated(l))
summary = f"step time within 15% on emulated links: planner {within('planner', emulated)} of {n} rows, replay {within('replay', emulated)} of {n}"
tcp = lambda l: l.startswith("TCP")
n_tcp = sum(1 for _, l, _ in rows if tcp(l))
if n_tcp:
    summary += f"; on real TCP: planner {within('planner', tcp)} of {n_tcp} rows, replay {within('replay', tcp)} of {n_tcp}"
print(summary)
verdicts = open(sys.argv[3]).read()
if verdicts:
    print(verdicts, end="")
    summary += "\n" + verdicts.rstrip("\n")
if sys.argv[2] != "/dev/null":
    tmp = f"{sys.argv[2]}.{os.getpid()}.tmp"   # beside, then renamed: never a partial table
    with open(tmp, "w") as f:
        f.write(table + "\n\n" + summary + "\n")
    os.replace(tmp, sys.argv[2])
    print(f"table: {sys.argv[2]}")
EOF
