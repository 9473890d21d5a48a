#!/usr/bin/env bash
# The time model against measurement: trains each configuration (stages 0-3, -pd 0 and 1, -wrap
# coarse and fine, HSDP) under three links (unlimited: the machine's own memory copies; slow; slow
# with a high latency, emulated by the CPU backend), and tabulates what each run printed: its
# measured step time and exposed communication beside the planner's prediction (plan_predict_step)
# and the replay of its own calibration steps over the links (host/predict.h).
#   scripts/validate_planner.sh [--ci | --docs] [-o TABLE.md]
# --ci (default): a tiny model, 4 steps a row (a few seconds each); --docs: a larger model, 10 steps.
# -o TABLE.md is checked before the first run; one that exists is kept, the table goes to a numbered
# sibling (TABLE.1.md), and the last line names it.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/args.sh
MODE=ci; OUT=""
USAGE="usage: $0 [--ci | --docs] [-o TABLE.md]"
while [ $# -gt 0 ]; do case $1 in --ci) MODE=ci;; --docs) MODE=docs;;
  -o) [ $# -ge 2 ] && [ -n "$2" ] || die "-o: missing its file name ($USAGE)"; OUT=$2; shift;;
  *) die "$1: unknown argument ($USAGE)";; esac; shift; done
if [ -n "$OUT" ]; then
  [ ! -d "$OUT" ] || die "-o: $OUT is a folder"
  case "$OUT" in *.md) ;; *) die "-o: $OUT: the table is Markdown: its name ends in .md" ;; esac
  need_writable_folder -o "$(dirname "$OUT")"
  OUT=$(free_name "$OUT")
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
make -s train_gpt2_zero3 >/dev/null
if [ $MODE = ci ]; then MODEL="-e d2c48h2t32 -b 2 -t 32 -x 4"; SLOW=0.2; LAT=2ms
else MODEL="-e d2c64h2t64 -b 4 -t 64 -x 10"; SLOW=0.1; LAT=5ms; fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
CONFIGS=("stage 0 (DDP)|2|-z 0" "stage 1|2|-z 1" "stage 2|2|-z 2" "stage 3 -pd 1|2|-z 3 -pd 1" "stage 3 -pd 0|2|-z 3 -pd 0"
         "stage 3 -wrap 2 (coarse)|2|-z 3 -wrap 2" "stage 3 -wrap half (fine)|2|-z 3 -wrap half" "HSDP -hs 2, 4 ranks|4|-z 3 -hs 2")
LINKS=("unlimited|" "slow|-link $SLOW" "slow + latency|-link $SLOW,$LAT")
echo "# validate_planner ($MODE): $MODEL; links: unlimited, -link $SLOW, -link $SLOW,$LAT; $(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
i=0
for c in "${CONFIGS[@]}"; do
  IFS='|' read -r label np flags <<<"$c"
  for l in "${LINKS[@]}"; do
    IFS='|' read -r lname lflags <<<"$l"
    i=$((i + 1))
    # shellcheck disable=SC2086
    mpirun -np "$np" ./train_gpt2_zero3 $MODEL -v 0 -l 1e-3 $flags $lflags >"$tmp/$i.out" 2>&1 \
      || { sed '/^error/d' "$tmp/$i.out" >&2; echo "error: $label, $lname: the run failed: $(grep -m1 '^error' "$tmp/$i.out" || echo "exit status $?")" >&2; exit 1; }
    printf '%s\t%s\t%s\n' "$label" "$lname" "$tmp/$i.out" >>"$tmp/index"
  done
done
$PY - "$tmp/index" "${OUT:-/dev/null}" <<'EOF'
import os, re, sys
sys.path.insert(0, "scripts")
import plotlib
rows = []
for line in open(sys.argv[1]):
    label, links, path = line.rstrip("\n").split("\t")
    text = open(path).read()
    t = {}
    for who in ("planner", "replay", "measured"):
        m = re.findall(rf"^time: {who} +compute +([\d.]+) ms \| comm +([\d.]+) ms \| exposed +([\d.]+) ms \| step +([\d.]+) ms", text, re.M)
        if not m:
            plotlib.fail(f"{label}, {links}: the run printed no 'time: {who}' line")
        t[who] = [float(x) for x in m[-1]]
    rows.append((label, links, t))
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
within = lambda who: sum(abs(t[who][3] / t["measured"][3] - 1) <= 0.15 for _, l, t in rows if l != "unlimited")
n = sum(1 for _, l, _ in rows if l != "unlimited")
summary = f"step time within 15% on emulated links: planner {within('planner')} of {n} rows, replay {within('replay')} of {n}"
print(summary)
if sys.argv[2] != "/dev/null":
    tmp = f"{sys.argv[2]}.{os.getpid()}.tmp"   # beside, then renamed: never a partial table
    with open(tmp, "w") as f:
        f.write(table + "\n\n" + summary + "\n")
    os.replace(tmp, sys.argv[2])
    print(f"table: {sys.argv[2]}")
EOF
