#!/usr/bin/env bash
# Six exercises on ZeRO, each answered by the program: one section each, every
# figure from a run (or a plan) this script makes, on the CPU.
#
#   scripts/exercises.sh [-q] [-m MIB] [-o DIR] [SECTION ...]      SECTION: 1..6, loop, capacity, paper,
#                                                                         deepspeed, all
#     1         bytes per parameter (bf16 + AdamW) and DDP's model state per rank: the planner's 7B
#               figures and a -p bf16 run's split
#     2         which of P, G, O each stage shards, the model state per rank against N: the planner's
#               closed form for 7.5B, and the four stages measured on the section's model
#     3         why ZeRO-2 leans on reduce-scatter and ZeRO-3 on all-gather: the two ledgers side by side
#     4         model states, activations, temporary buffers, fragmentation: one ZeRO-3 run's report
#     5         the experiment DDP / ZeRO-1 / 2 / 3: the metrics it records, the rule that judges the
#               stage choice (correct losses, then the peak against the budget -m, then the traffic),
#               and its verdict
#     6         ZeRO-3 slower than ZeRO-2 on a slow link: the ratio, and its three reasons from the
#               ledger (bytes, collectives) and the trace (what the compute waited for)
#     loop      the closed loop: -z 0..3 from the same init and data, the loss of every step side by side
#     capacity  DDP adds throughput, not capacity: the model state and the process peak per rank
#               against N, DDP flat and ZeRO-3 falling ~1/N (runs on 1, 2, 4 ranks; the planner beyond)
#     paper     a template of questions for reading the ZeRO paper (the problem, the three stages, the cost, the
#               conclusion): each question answered by a figure of the -z 0..3 runs or the planner
#     deepspeed docs/examples/deepspeed's ds_zero1/2/3.json through scripts/translate_config.py, each printed command run,
#               their memory logs side by side; ds_report, the launcher and Hugging Face's Trainer here
#     all       every section (the default)
#   -q       quick: the smallest models, the fewest steps (the test suite's mode, under 2 minutes)
#   -m MIB   a memory budget per rank, in MiB (1-1048576): sections 5 and capacity say what fits
#   -o DIR   keep every run's output there (a new or empty folder); without it the runs go to a
#            temporary folder, removed at the end
#
# Memory: "model state" is the run's `this run holds` line; "process peak" is the closing report's
# `process memory` line (rank 0, the kernel's peak resident count less what the process held before
# the model state); the engine's buffers are the `buffer pool` line. No log.csv column is read.
# Times are taken on whatever machine runs this (loaded, on a shared one): the timed figures say so,
# and section 6's ratio is a verdict with its spread only from scripts/lessons.sh ex6 (not under -q).
# Interrupted (INT, TERM), the runs stop and nothing of this script's is left on disk.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/args.sh
USAGE="usage: $0 [-q] [-m MIB] [-o DIR] [1|2|3|4|5|6|loop|capacity|paper|deepspeed|all ...]"
SECTIONS="1 2 3 4 5 6 loop capacity paper deepspeed"
QUICK=0; BUDGET=; OUT=; WHICH=()
while [ $# -gt 0 ]; do case "$1" in
  -q) QUICK=1; shift ;;
  -m) [ $# -ge 2 ] || die "-m: missing its value, a budget in MiB ($USAGE)"; BUDGET=$2; need_int -m BUDGET 1 1048576; shift 2 ;;
  -o) [ $# -ge 2 ] || die "-o: missing its value, a folder ($USAGE)"; OUT=$2; [ -n "$OUT" ] || die "-o: needs a folder"; shift 2 ;;
  -h|--help) sed -n '2,36p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  all) WHICH+=($SECTIONS); shift ;;
  *) case " $SECTIONS " in *" $1 "*) WHICH+=("$1"); shift ;;
     *) die "$1: not a section (1..6, loop, capacity, paper, deepspeed, all) nor an option ($USAGE)" ;; esac ;;
esac; done
[ ${#WHICH[@]} -gt 0 ] || WHICH=($SECTIONS)
[ -z "$OUT" ] || need_new_folder -o "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
command -v mpirun >/dev/null || die "mpirun: not found (scripts/install_deps.sh installs Open MPI)"
if ! err=$(make -s train_gpt2_zero3 2>&1 >/dev/null) || [ ! -x ./train_gpt2_zero3 ]; then
  die "./train_gpt2_zero3 could not be built (make train_gpt2_zero3: $(echo "$err" | grep -m1 . || echo 'no output'))"
fi

# The models. Sections 2-5 and loop share four runs (-z 0..3 on N ranks); capacity wants the state to
# dominate the peak (few tokens); section 6 is lessons.sh ex6's configuration, a slow cross-node link.
N=4
if [ $QUICK = 1 ]; then
  MODEL=d2c64h2t64; STEPS=3; CAP_MODEL=d2c64h2t64
else
  MODEL=d4; STEPS=10; CAP_MODEL=d4
fi
RUN=(-e "$MODEL" -b 2 -t 64 -x "$STEPS" -v 0 -S 1337)
CAP=(-e "$CAP_MODEL" -b 1 -t 16 -x 1 -v 0)
EX6=(-e d2c64h2t64 -b 1 -t 64 -link 10GB/s -linkx 0.01GB/s,100us -rpn 1 -x 3 -v 0)
CAP_N="1 2 4"
trainer_accepts "$N" "${RUN[@]}" -z 3
trainer_accepts 2 "${EX6[@]}" -z 3
trainer_accepts 4 "${CAP[@]}" -z 3

# the runs' folder: -o DIR, else a temporary one; on any exit the temporary one goes, and on a signal
# the run in progress is stopped and what this script wrote is removed (an -o folder was new or empty)
CREATED=0
if [ -n "$OUT" ]; then [ -d "$OUT" ] || { mkdir "$OUT"; CREATED=1; }; DIR=$OUT
else DIR=$(mktemp -d); fi
CHILD=
cleanup() {
  local sig=$1
  [ -z "$CHILD" ] || { kill -TERM -- -"$CHILD" 2>/dev/null || kill -TERM "$CHILD" 2>/dev/null; wait "$CHILD" 2>/dev/null || true; }
  if [ -z "$OUT" ]; then rm -rf "$DIR"
  elif [ "$sig" != 0 ]; then find "$DIR" -mindepth 1 -delete 2>/dev/null || true; [ $CREATED = 0 ] || rmdir "$DIR" 2>/dev/null || true; fi
}
exec 3>&2   # the script's stderr: a trap runs inside the redirections of the run it interrupts
trap 'cleanup 0' EXIT
trap 'trap - EXIT; cleanup INT; echo "exercises.sh: interrupted; the runs stopped, their files removed" >&3; exit 130' INT
trap 'trap - EXIT; cleanup TERM; echo "exercises.sh: terminated; the runs stopped, their files removed" >&3; exit 143' TERM

# in the background, so that a signal reaches the trap at once, not after the run; in a process group
# of its own (setsid), so that the trap stops all of it (a script's own runs too)
child() { setsid "$@" & CHILD=$!; local rc=0; wait "$CHILD" || rc=$?; CHILD=; return $rc; }
# trainer NAME NP FLAGS...: one run, once (sections share it), its output in $DIR/NAME.out
trainer() {
  local name=$1 np=$2; shift 2
  [ -s "$DIR/$name.out" ] && return 0
  echo "mpirun -np $np ./train_gpt2_zero3 $*" >"$DIR/$name.cmd"
  if ! child mpirun -np "$np" ./train_gpt2_zero3 "$@" >"$DIR/$name.part" 2>&1; then
    { grep -m1 '^error' "$DIR/$name.part" || tail -5 "$DIR/$name.part"; } >&2
    die "the run $name failed: $(cat "$DIR/$name.cmd")"
  fi
  mv "$DIR/$name.part" "$DIR/$name.out"
}
# script NAME SCRIPT ARGS...: another of the project's scripts, its output indented, kept as NAME.out
script() {
  local name=$1; shift
  if ! child bash "$@" >"$DIR/$name.out" 2>"$DIR/$name.err"; then
    { grep -m1 '^error' "$DIR/$name.err" || tail -5 "$DIR/$name.err"; } >&2
    die "$*: failed"
  fi
  sed 's/^/    /' "$DIR/$name.out"
}
stage_runs() { local z; for z in 0 1 2 3; do trainer "z$z" "$N" "${RUN[@]}" -z $z; done; }

# readers of a run's output (file $1); each fails the script when its line is missing
need() { [ -n "$2" ] || die "$1: the run's output lacks $3 (see $(cat "${1%.out}.cmd"))"; echo "$2"; }
state_of() { need "$1" "$(sed -nE 's/.*this run holds ([0-9.]+ [KMG]?i?B) of model state.*/\1/p' "$1")" "its model state line"; }
acts_of() { need "$1" "$(sed -nE 's/.*activations per rank: ([0-9.]+ [KMG]?i?B) without recompute, ([0-9.]+ [KMG]?i?B) with.*/\1|\2/p' "$1")" "its activations line"; }
# the process peak in bytes: the closing report's `process memory` line, its "(B bytes) the run's peak"
proc_of() { need "$1" "$(sed -nE 's/^process memory \(rank 0.*\(([0-9]+) bytes\) the run.s peak.*/\1/p' "$1" | head -1)" "its process memory line"; }
pool_of() { need "$1" "$(grep -m1 '^buffer pool' "$1")" "its buffer pool line"; }
# the pool's busiest moment, "12.39 MiB", from a buffer pool line ($1)
held_of() { sed -nE 's/.*held at most ([0-9.]+ [KMG]?i?B) in them.*/\1/p' <<<"$1"; }
# the last step's measured ledger: "KIND COUNT BYTES" lines
ledger_of() {
  local l; l=$(sed -n '/^collective ledger, last step/,/^ledger:/p' "$1" |
    awk '$3 ~ /^collectives?,$/ { b = $4; gsub(",", "", b); print $1, $2, b }')
  need "$1" "$l" "its collective ledger"
}
losses_of() { sed -nE 's/^step +([0-9]+)\/[0-9]+ \| loss ([0-9.]+).*/\1 \2/p' "$1"; }
# the median of the step times (ms) after the first (which records the prefetch schedule)
step_ms_of() { sed -nE 's/^step +([0-9]+)\/[0-9]+ \|.* \| ([0-9.]+) ms \|.*/\1 \2/p' "$1" | awk '$1 > 1 {print $2}' | sort -g |
  awk '{v[NR] = $1} END {if (!NR) {print "?"; exit} printf "%.1f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
mib() { awk -v b="$1" 'BEGIN {printf "%.2f", b / 1048576}'; }
tomib() { awk -v s="$1" 'BEGIN {split(s, a, " "); f = (a[2] == "GiB") ? 1024 : (a[2] == "KiB") ? 1 / 1024 : (a[2] == "B") ? 1 / 1048576 : 1; printf "%.2f", a[1] * f}'; }
sum_bytes() { awk '{b += $3} END {print b + 0}'; }
sum_count() { awk '{c += $2} END {print c + 0}'; }
kind_of() { awk -v k="$2" '$1 == k {print $2, $3; f = 1} END {if (!f) print 0, 0}' <<<"$1"; }

section_1() {
  echo "== exercise 1: bytes per parameter with bf16 + AdamW, and DDP's model state per rank"
  local plan split p g o
  plan=$(./train_gpt2_zero3 -plan 1 -e 7B)
  echo "  the planner, 7B parameters on 1 rank (./train_gpt2_zero3 -plan 1 -e 7B), GiB:"
  echo "$plan" | sed -n '/in GiB/,/total/p' | sed -n '2,$p' | sed 's/^ */    /'
  echo "  per parameter: bf16 param 2 + bf16 grad 2 + fp32 master 4 + fp32 Adam m 4 + v 4 = 16 bytes;"
  echo "  DDP holds all 16 on every rank: $(echo "$plan" | awk '/^model-state memory per rank, mixed/ {on = 1} on && $1 == 0 && $2 == "DDP" {print $NF " GiB (" $(NF-1) " GB)"; exit}') per rank, whatever the number of ranks"
  trainer bf16 1 -e "$MODEL" -b 1 -t 16 -x 1 -v 0 -z 0 -p bf16
  split=$(need "$DIR/bf16.out" "$(sed -nE 's/.*split +params ([0-9.]+) MiB \(2 bytes a parameter\) \+ grads ([0-9.]+) MiB \(2\) \+ optimizer ([0-9.]+) MiB \(12: fp32 master, m, v\).*/\1 \2 \3/p' "$DIR/bf16.out")" "its split line")
  read -r p g o <<<"$split"
  echo "  measured, a run of $MODEL -p bf16 at -z 0 (mpirun -np 1 ... -z 0 -p bf16): params $p MiB + grads $g MiB + optimizer $o MiB"
  awk -v p="$p" -v g="$g" -v o="$o" 'BEGIN {printf "    = %.2f MiB held, %.2f bytes a parameter (the total over the params'"'"' %.2f MiB at 2 bytes each)\n", p + g + o, (p + g + o) / (p / 2), p}'
}

section_2() {
  echo "== exercise 2: which of P, G, O each stage shards, and the model state per rank against N"
  echo "  the planner, 7.5B parameters, mixed precision (./train_gpt2_zero3 -plan 64 -e 7.5B): /N marks a sharded part"
  ./train_gpt2_zero3 -plan 64 -e 7.5B | sed -n '/^model-state memory per rank, mixed/,/model state only/p' | sed -n '/^  stage  *params/,/^  3 /p' | sed 's/^/  /'
  echo "  per rank, GB, against N (psi = 7.5e9 parameters: Z0 16 psi, Z1 4 psi + 12 psi/N, Z2 2 psi + 14 psi/N, Z3 16 psi/N):"
  local n
  for n in 1 2 4 8 64 512; do
    printf '    N=%-4s' "$n"
    ./train_gpt2_zero3 -plan "$n" -e 7.5B | sed -n '/^model-state memory per rank, mixed/,/^  3 /p' |
      awk '/^  [0-3] /{printf "  %s %9.3f", ($1 == 0 ? "DDP" : "Z" $1), $(NF-1)}'
    echo
  done
  stage_runs
  printf '  measured, %s on %s ranks, fp32 (each run'"'"'s "this run holds"):' "$MODEL" "$N"
  for z in 0 1 2 3; do printf '  Z%s %s' "$z" "$(state_of "$DIR/z$z.out")"; done; echo
  echo "  stages 1 and 2 stop falling at their unsharded part (the params, and at stage 1 the grads too); only stage 3 falls as 1/N"
}

section_3() {
  echo "== exercise 3: why ZeRO-2 leans on reduce-scatter and ZeRO-3 on all-gather"
  stage_runs
  local l2 l3 k a b t2 t3 g2 g3
  l2=$(ledger_of "$DIR/z2.out"); l3=$(ledger_of "$DIR/z3.out")
  local same="measured, equal to the theory"
  grep -q '^ledger: measured = theory' "$DIR/z2.out" && grep -q '^ledger: measured = theory' "$DIR/z3.out" ||
    same="measured; the run says it differs from the theory: see its ledger"
  echo "  the two ledgers of one step, $MODEL on $N ranks (the bytes rank 0 sends; $same):"
  printf '    %-15s %28s %28s\n' "" "ZeRO-2 (-z 2)" "ZeRO-3 (-z 3)"
  for k in fwd_gather bwd_gather reduce_scatter step_gather norm; do
    read -r a b <<<"$(kind_of "$l2" $k)"; local c d; read -r c d <<<"$(kind_of "$l3" $k)"
    printf '    %-15s %4s collectives %11s B %4s collectives %11s B\n' "$k" "$a" "$b" "$c" "$d"
  done
  t2=$(sum_bytes <<<"$l2"); t3=$(sum_bytes <<<"$l3")
  g2=$(awk '$1 ~ /gather/ {b += $3} END {print b + 0}' <<<"$l2"); g3=$(awk '$1 ~ /gather/ {b += $3} END {print b + 0}' <<<"$l3")
  printf '    %-15s %4s collectives %11s B %4s collectives %11s B\n' "in all" "$(sum_count <<<"$l2")" "$t2" "$(sum_count <<<"$l3")" "$t3"
  awk -v g2="$g2" -v t2="$t2" -v g3="$g3" -v t3="$t3" -v r2="$(kind_of "$l2" reduce_scatter | cut -d' ' -f2)" 'BEGIN {
    printf "  gathers: %.0f%% of ZeRO-2'"'"'s bytes, %.0f%% of ZeRO-3'"'"'s; ZeRO-3 sends %.2fx ZeRO-2'"'"'s\n", 100 * g2 / t2, 100 * g3 / t3, t3 / t2
    printf "  ZeRO-2: the gradients are sharded, so the backward ends in reduce-scatters (%d bytes): each rank keeps\n", r2
    print  "    the sum of its 1/N only; the one all-gather (step_gather) sends the updated params after AdamW, once a step,"
    print  "    off the compute'"'"'s path: DDP'"'"'s all-reduce cut in its two halves, the reduce-scatter the one the stage rests on."
    print  "  ZeRO-3: the params are sharded too, so every unit is all-gathered before it computes, in the forward and again"
    print  "    in the backward (the forward released it): the gathers are most of the traffic, and each stands before compute."
  }'
}

section_4() {
  echo "== exercise 4: model states, activations, temporary buffers, fragmentation (one ZeRO-3 run, $MODEL, $N ranks)"
  stage_runs
  local f=$DIR/z3.out acts pool res held frag
  acts=$(acts_of "$f"); pool=$(pool_of "$f")
  res=$(sed -nE 's/.*reserve ([0-9.]+ [KMG]?i?B);.*/\1/p' <<<"$pool"); held=$(held_of "$pool")
  frag=$(sed -nE 's/.*fragmentation ([0-9.]+ [KMG]?i?B \([0-9.]+%\)).*/\1/p' <<<"$pool")
  echo "  model states       $(state_of "$f") per rank: the shards of params, grads and optimizer state (this run holds)"
  echo "  activations        ${acts%|*} per rank kept for the backward; ${acts#*|} with recompute (-rc 1): they scale with -b and -t, not with N"
  echo "  temporary buffers  $held at most at once in the buffer pool: gathered units and full-size gradient buffers, held for a unit's use"
  echo "  fragmentation      $frag: what the pool's $res reserve holds beyond the busiest moment's $held"
  echo "  the process        $(mib "$(proc_of "$f")") MiB peak resident on rank 0 (process memory, less what it held before the model):"
  echo "                     the four above plus MPI's scratch copies, the data and the code"
  echo "  at -z 0 the pool holds nothing ($(pool_of "$DIR/z0.out" | sed -E 's/^buffer pool: ([^;]*);.*/\1/')): DDP's buffers are its resident state"
}

# loop and 5 read the same four runs
loss_table() {
  local z
  for z in 0 1 2 3; do losses_of "$DIR/z$z.out" >"$DIR/loss$z"; done
  paste "$DIR/loss0" "$DIR/loss1" "$DIR/loss2" "$DIR/loss3" |
    awk '{d = 0; for (i = 4; i <= 8; i += 2) { x = $i - $2; if (x < 0) x = -x; if (x > d) d = x }
      printf "    %4d   %10s %10s %10s %10s   %g\n", $1, $2, $4, $6, $8, d; if (d > m) m = d; n++ }
      END { if (n == 0) exit 1; printf "  largest difference from DDP over the %d steps: %g\n", n, m }'
}
max_loss_diff() { paste "$DIR/loss0" "$DIR/loss$1" | awk '{x = $4 - $2; if (x < 0) x = -x; if (x > m) m = x} END {print m + 0}'; }

section_loop() {
  echo "== the closed loop: AdamW updates each rank's shard, the next step gathers exactly it"
  stage_runs
  echo "  $MODEL on $N ranks, $STEPS steps from the same init and data (mpirun -np $N ./train_gpt2_zero3 ${RUN[*]} -z Z):"
  echo "    step   loss -z 0    -z 1       -z 2       -z 3       largest |difference| from -z 0"
  loss_table
  echo "  the same losses at every step: the shards the stages update and gather are the model DDP holds whole"
}

section_5() {
  echo "== exercise 5: the experiment DDP, ZeRO-1, ZeRO-2, ZeRO-3"
  stage_runs
  echo "  design: the same model ($MODEL), data, seed and schedule on $N ranks, only -z differs, $STEPS steps each; recorded per stage:"
  echo "  the losses (correctness), the model state and the process peak per rank (memory), the bytes and collectives a step"
  echo "  (traffic), the median step time after the first (time, measured on this machine as loaded as it is)"
  for z in 0 1 2 3; do losses_of "$DIR/z$z.out" >"$DIR/loss$z"; done
  printf '    %-5s %10s %12s %12s %14s %12s %11s %10s\n' stage "final loss" "|d| vs DDP" "state/rank" "process peak" "sent/step" collectives "step ms"
  local z f l last sent fit=
  for z in 0 1 2 3; do
    f=$DIR/z$z.out; l=$(ledger_of "$f"); last=$(tail -1 "$DIR/loss$z" | cut -d' ' -f2)
    sent=$(mib "$(sum_bytes <<<"$l")")
    printf '    -z %-2s %10s %12s %12s %10s MiB %8s MiB %11s %10s\n' "$z" "$last" "$(max_loss_diff $z)" "$(state_of "$f")" \
      "$(mib "$(proc_of "$f")")" "$sent" "$(sum_count <<<"$l")" "$(step_ms_of "$f")"
  done
  echo "  judged: (1) a stage whose losses leave DDP's is wrong, whatever it saves; (2) of the rest, those whose process"
  echo "  peak fits the budget; (3) of those, the lowest stage: it sends least and exposes least (1 and 2 send DDP's bytes,"
  echo "  3 half as much again). The step times rank the stages only where the machine is quiet."
  local ok=() z0peak
  for z in 0 1 2 3; do
    awk -v d="$(max_loss_diff $z)" 'BEGIN {exit !(d == 0)}' || { echo "  -z $z: its losses differ from DDP's: ruled out"; continue; }
    ok+=("$z")
  done
  [ ${#ok[@]} -gt 0 ] || { echo "verdict ex5: no stage reproduces DDP's losses"; return; }
  if [ -z "$BUDGET" ]; then
    echo "verdict ex5: no budget given (-m MIB): every stage fits; -z ${ok[0]}, the lowest, sends least"
    return
  fi
  for z in "${ok[@]}"; do
    if awk -v p="$(proc_of "$DIR/z$z.out")" -v m="$BUDGET" 'BEGIN {exit !(p <= m * 1048576)}'; then fit=$z; break; fi
  done
  z0peak=$(mib "$(proc_of "$DIR/z0.out")")
  if [ -n "$fit" ]; then
    echo "verdict ex5: budget $BUDGET MiB per rank: -z $fit, the lowest stage whose process peak fits ($(mib "$(proc_of "$DIR/z$fit.out")") MiB; DDP's $z0peak MiB)"
  else
    echo "verdict ex5: budget $BUDGET MiB per rank: no stage fits on $N ranks (ZeRO-3's process peak $(mib "$(proc_of "$DIR/z3.out")") MiB): more ranks, -rc 1, a smaller batch or offload"
  fi
  if [ $QUICK = 0 ]; then
    echo "  the DDP build (make ddp, fixed at stage 0) against ZeRO-3, d2c64h2t64 (scripts/compare_ddp_zero3.sh -n 4 -x 60 -T):"
    script compare scripts/compare_ddp_zero3.sh -n 4 -x 60 -T
  fi
}

# the compute's waits per step by kind of collective, ms, rank 0, the steps after the first
trace_waits() {
  $PY - "$1" <<'PY'
import json, sys
w, steps = {}, set()
for e in json.load(open(sys.argv[1]))["traceEvents"]:
    a = e.get("args", {})
    if e.get("ph") != "X" or e.get("pid") != 0 or a.get("step", 0) < 1:
        continue
    steps.add(a["step"])
    if e.get("cat") == "exposed":
        w[a.get("kind", "?")] = w.get(a.get("kind", "?"), 0.0) + e["dur"] / 1000.0
n = max(len(steps), 1)
gathers = sum(v for k, v in w.items() if k.endswith("gather")) / n
print(f"{sum(w.values()) / n:.1f} ms in all, {gathers:.1f} on gathers:", " ".join(f"{k} {v / n:.1f}" for k, v in sorted(w.items(), key=lambda kv: -kv[1])))
PY
}

section_6() {
  echo "== exercise 6: three reasons ZeRO-3 can be slower than ZeRO-2, each seen in the ledger or the trace"
  echo "  d2c64h2t64 -b 1 -t 64 on 2 ranks, one a node, an emulated 0.01 GB/s link between them (lessons.sh ex6's configuration)"
  local z l2 l3 s2 s3 c2 c3 b2 b3
  for z in 2 3; do rm -f "$DIR/ex6_z$z.json"; trainer "ex6_z$z" 2 "${EX6[@]}" -z $z -tr "$DIR/ex6_z$z.json"; done
  l2=$(ledger_of "$DIR/ex6_z2.out"); l3=$(ledger_of "$DIR/ex6_z3.out")
  s2=$(step_ms_of "$DIR/ex6_z2.out"); s3=$(step_ms_of "$DIR/ex6_z3.out")
  b2=$(sum_bytes <<<"$l2"); b3=$(sum_bytes <<<"$l3"); c2=$(sum_count <<<"$l2"); c3=$(sum_count <<<"$l3")
  awk -v a="$s2" -v b="$s3" 'BEGIN {printf "  the ratio: ZeRO-3 %.1f ms a step against ZeRO-2 %.1f ms: %.2fx (one run each, steps 2-3; a verdict with its spread: scripts/lessons.sh ex6)\n", b, a, b / a}'
  awk -v b2="$b2" -v b3="$b3" 'BEGIN {printf "  1. more bytes (the ledger): %d against %d bytes a step, %.2fx: the params are gathered twice, forward and backward,\n     where ZeRO-2 gathers them once after AdamW\n", b3, b2, b3 / b2}'
  awk -v c2="$c2" -v c3="$c3" 'BEGIN {printf "  2. more collectives (the ledger): %d against %d a step, one per unit and pass: each pays the link'"'"'s latency\n     (100 us here; at 50 ms a ring step, scripts/lessons.sh pitfall2 times what that costs)\n", c3, c2}'
  echo "  3. gathers the compute must wait for (the trace's waits, ms a step by kind, rank 0):"
  echo "     ZeRO-2: $(trace_waits "$DIR/ex6_z2.json")"
  echo "     ZeRO-3: $(trace_waits "$DIR/ex6_z3.json")"
  echo "     ZeRO-3's forward cannot start a unit before its gather lands, and a 2-block model has too little compute to hide it"
  echo "  to see them: the ledger ends every run; -tr FILE writes the trace (scripts/plot_trace.py draws it); DeepSpeed's"
  echo "  equivalents are its comms logger (bytes, counts) and the profiler's timeline (the waits)"
  if [ $QUICK = 0 ]; then script lesson_ex6 scripts/lessons.sh ex6; fi
}

section_capacity() {
  echo "== capacity: DDP adds throughput, not capacity; ZeRO-3 adds both"
  echo "  $CAP_MODEL -b 1 -t 16 (few tokens: the state is most of the peak), one step per run, per rank, MiB:"
  printf '    %-4s %12s %14s %16s %18s\n' N "DDP state" "ZeRO-3 state" "DDP proc. peak" "ZeRO-3 proc. peak"
  local n z s0 s3 gib
  for n in $CAP_N; do
    for z in 0 3; do trainer "cap_n${n}_z$z" "$n" "${CAP[@]}" -z $z; done
    s0=$(state_of "$DIR/cap_n${n}_z0.out"); s3=$(state_of "$DIR/cap_n${n}_z3.out")
    printf '    %-4s %12s %14s %16s %18s\n' "$n" "$(tomib "$s0")" "$(tomib "$s3")" "$(mib "$(proc_of "$DIR/cap_n${n}_z0.out")")" "$(mib "$(proc_of "$DIR/cap_n${n}_z3.out")")"
  done
  echo "  DDP's state is the same on every rank whatever N (N ranks train N batches at once: throughput); ZeRO-3's is 1/N."
  awk -v d="$(proc_of "$DIR/cap_n${n}_z0.out")" -v z="$(proc_of "$DIR/cap_n${n}_z3.out")" -v n="$n" 'BEGIN {
    printf "  The process peak is another matter: on %d ranks ZeRO-3'"'"'s is %.0f%% of DDP'"'"'s, not %.0f%%: stage 3 gathers a unit whole,\n", n, 100 * z / d, 100 / n
    print  "  and this toy model'"'"'s largest unit, the embedding (the 50304-token wte), is most of it; activations and MPI'"'"'s"
    print  "  scratch do not shard at all. A deep model, whose largest unit is one block among dozens, is where capacity grows:" }'
  gib=$(awk -v m="${BUDGET:-2048}" 'BEGIN {printf "%g", m / 1024}')
  echo "  capacity: the deepest GPT-2 of d12's width (C=768) whose planned process peak"
  echo "  fits ${BUDGET:-2048} MiB per rank (-m), fp32, -b 1 -t 64 (./train_gpt2_zero3 -plan N -mem $gib -e d12 -b 1 -t 64):"
  local rows
  rows=$(for n in 1 2 4 8 16 64; do
    ./train_gpt2_zero3 -plan "$n" -mem "$gib" -e d12 -b 1 -t 64 | awk -v n="$n" '
      function m(l) { if (l == "none") return "none"; sub(/^L=/, "", l); sub(/\+$/, "", l)
                      return sprintf("L=%-4d (%6.1fM parameters)", l, (fixed + l * block) / 1e6) }
      /^the deepest/ {on = 1; t = $0; sub(/.*: /, "", t); split(t, w, " "); fixed = w[1]; block = w[8]; sub(/\).*/, "", block)} on && $1 == 0 && $2 == "DDP" {d = $3} on && $1 == 3 {z = $2}
      END { if (d == "" || z == "") exit 1; printf "    N=%-3s DDP %-30s ZeRO-3 %s\n", n, m(d), m(z) }' ||
      die "-plan $n -mem $gib: the planner printed no deepest model"
  done) || exit
  echo "$rows"
  if [ "$(echo "$rows" | tail -1 | awk '{print $NF}')" = none ]; then
    echo "  not even one block of this width fits ${BUDGET:-2048} MiB on 64 ranks: give a larger budget (-m) to see the depths"
  else
    echo "  DDP's deepest model stays where one rank puts it; ZeRO-3's grows with N: more ranks, a larger model"
  fi
}

# the flags of a printed `command: mpirun -np N ./train_gpt2_zero3 FLAGS` line
command_flags() { sed -nE 's/^command: mpirun -np [0-9]+ \.\/train_gpt2_zero3 (.*)$/\1/p' <<<"$1"; }

ds_config() { echo "docs/examples/deepspeed/ds_zero$1.json"; }   # the DeepSpeed example of stage $1
section_deepspeed() {
  local z cfg out cmd flags f
  declare -A translated
  for z in 1 2 3; do   # every config translated before the section's first line: a bad one stops it before it starts
    cfg=$(ds_config "$z")
    out=$($PY scripts/translate_config.py --ranks "$N" --model "$MODEL" "$cfg" 2>&1) ||
      die "scripts/translate_config.py: $(echo "$out" | grep -m1 . | sed 's/^error: //')"
    [ -n "$(command_flags "$out")" ] || die "scripts/translate_config.py $cfg printed no command line"
    translated[$z]=$out
  done
  echo "== the DeepSpeed way to run them: ds_report, the deepspeed launcher and ds_zero1/2/3.json, their memory logs side by side"
  for z in 1 2 3; do
    cfg=$(ds_config "$z") out=${translated[$z]}
    cmd=$(sed -n 's/^command: //p' <<<"$out"); flags=$(command_flags "$out")
    echo "  deepspeed --num_gpus=$N train.py --deepspeed $cfg"
    echo "    is  $cmd   (scripts/translate_config.py --ranks $N --model $MODEL $cfg)"
    # shellcheck disable=SC2086  # the translator's flags, one word each
    trainer "ds$z" "$N" $flags -t 64 -x "$STEPS" -v 0 -S 1337
  done
  echo "  run here with -t 64 -x $STEPS -v 0 -S 1337 added (the configs name no sequence length or step count); what each one's"
  echo "  closing report says, rank 0, the memory log DeepSpeed prints with its see_memory_usage:"
  printf '    %-9s %14s %14s %18s %14s %12s\n' config "model state" "process peak" "pool held (most)" "sent/step" "final loss"
  for z in 1 2 3; do
    f=$DIR/ds$z.out
    printf '    %-9s %14s %10s MiB %18s %10s MiB %12s\n' "ds_zero$z" "$(state_of "$f")" "$(mib "$(proc_of "$f")")" \
      "$(held_of "$(pool_of "$f")")" \
      "$(mib "$(ledger_of "$f" | sum_bytes)")" "$(losses_of "$f" | tail -1 | cut -d' ' -f2)"
  done
  echo "  ds_report checks the machine before a run; here every run's startup report does (ds_zero3's, its first lines):"
  sed -n '/^| GPT-2 ZeRO trainer/,/^| links/p' "$DIR/ds3.out" | sed 's/^/    /'
  echo "  the launcher: \`deepspeed --num_gpus=N\` starts N processes and their rendezvous; mpirun -np N does both here"
  echo "  (scripts/launch.sh for several machines, scripts/slurm/ for a Slurm cluster)."
  echo "  Hugging Face's TrainingArguments(deepspeed=\"ds_zero2.json\") hands a config to a trainer; this program is the"
  echo "  trainer, and the config becomes its flags (the lines above): there is nothing to hand it to."
}

# a template of questions for reading the ZeRO paper, each question answered by a figure of the runs
section_paper() {
  echo "== the paper's note: the template's questions, answered by the four -z runs ($MODEL, $N ranks) and the planner"
  stage_runs
  local z b st
  declare -A ledger bytes count state
  for z in 0 1 2 3; do
    ledger[$z]=$(ledger_of "$DIR/z$z.out"); bytes[$z]=$(sum_bytes <<<"${ledger[$z]}"); count[$z]=$(sum_count <<<"${ledger[$z]}")
    state[$z]=$(tomib "$(state_of "$DIR/z$z.out")")
  done
  echo "  1. the problem"
  awk -v s0="${state[0]}" -v s3="${state[3]}" -v n="$N" 'BEGIN {
    printf "     which states does DDP repeat on every rank? all three, params, grads and optimizer: -z 0 holds %.2f MiB a rank,\n", s0
    printf "       the whole model'"'"'s; -z 3 holds %.2f MiB, %.3f of it (1/N = %.3f, the padding aside)\n", s3, s3 / s0, 1 / n }'
  echo "     where do model states end and activations, temporary buffers and fragmentation begin? section 4 (exercises.sh 4)"
  echo "       draws the line in one run: the state is the shards; the rest is the pool, the activations and the process's own"
  echo "  2. the three stages"
  awk -v s0="${state[0]}" -v s1="${state[1]}" -v s2="${state[2]}" -v s3="${state[3]}" \
      -v b0="${bytes[0]}" -v b1="${bytes[1]}" -v b2="${bytes[2]}" -v b3="${bytes[3]}" \
      -v rs2="$(kind_of "${ledger[2]}" reduce_scatter | cut -d' ' -f2)" \
      -v g3="$(awk '$1 ~ /^(fwd|bwd)_gather$/ {b += $3} END {print b + 0}' <<<"${ledger[3]}")" 'BEGIN {
    printf "     ZeRO-1 shards the optimizer state: %.2f MiB a rank against DDP'"'"'s %.2f, and sends %.3fx DDP'"'"'s bytes (nothing more)\n", s1, s0, b1 / b0
    printf "     ZeRO-2 shards the gradients too: %.2f MiB; each rank keeps the sum of its 1/N only, so the backward reduce-scatters\n", s2
    printf "       (%d bytes a step, %.0f%% of what it sends; DDP all-reduces the same bytes twice over: reduce-scatter + all-gather)\n", rs2, 100 * rs2 / b2
    printf "     ZeRO-3 shards the params as well: %.2f MiB; no rank holds a unit it must compute with, so each is all-gathered\n", s3
    printf "       before its forward and again before its backward (%d bytes a step, %.0f%% of what it sends: %.2fx DDP'"'"'s in all)\n", g3, 100 * g3 / b3, b3 / b0 }'
  echo "  3. the cost"
  awk -v b0="${bytes[0]}" -v b3="${bytes[3]}" -v c0="${count[0]}" -v c3="${count[3]}" 'BEGIN {
    printf "     when is ZeRO-3 slow? when its extra %.2fx bytes and %d collectives a step (DDP: %d) meet a slow link, a compute too\n", b3 / b0, c3, c0
    print  "       small to hide them, or many small units: section 6 measures the three reasons; lessons.sh ex6 gives the verdict" }'
  echo "     what are prefetch, buckets and overlap for? to start a gather before its unit is needed, while another unit"
  echo "       computes: -pd sets how far ahead, -wrap the unit (the bucket), and lessons.sh prefetch and prefetch0 time"
  echo "       the exposed waits with and without it (docs/time.md)"
  echo "  4. the conclusion"
  awk -v s0="${state[0]}" -v s1="${state[1]}" -v b0="${bytes[0]}" -v b1="${bytes[1]}" 'BEGIN {
    printf "     if the model fits under DDP, would ZeRO help? stage 1 costs nothing: DDP'"'"'s bytes (%.3fx) for %.0f%% of its state;\n", b1 / b0, 100 * s1 / s0
    print  "       beyond it, the lowest stage that fits: each higher one sends more or waits more (section 5'"'"'s rule)" }'
  echo "     when ZeRO-2, when ZeRO-3? the planner's answer for 7.5B on 64 ranks (./train_gpt2_zero3 -plan 64 -e 7.5B), the lowest"
  echo "       stage whose model state fits a rank's budget (the activations aside):"
  st=$(./train_gpt2_zero3 -plan 64 -e 7.5B | sed -n '/^model-state memory per rank, mixed/,/^  3 /p' | awk '/^  [0-3] / {print $1, $(NF-1)}')
  [ "$(wc -l <<<"$st")" = 4 ] || die "-plan 64 -e 7.5B: no per-stage model-state table"
  for b in 80 40 24 8; do
    awk -v b="$b" '{ if (pick == "" && $2 <= b) { pick = $1; gb = $2 } }
      END { printf "       %3d GB a rank: %s\n", b, pick == "" ? "none fits: more ranks, or offload (-oo)" : sprintf("-z %s (%.3f GB)", pick, gb) }' <<<"$st"
  done
}

for s in "${WHICH[@]}"; do "section_$s"; done
