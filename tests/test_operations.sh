#!/usr/bin/env bash
# Nothing lost, the operations guarantees (docs/operations.md), on 1 and 2 ranks of the CPU trainer:
#  1. a stop signal during validation and during sampling ends the run at the next batch or token
#     with its checkpoint; the resumed run's losses, last sample and model.bin equal an
#     uninterrupted run's; during a long step (A = 100 micro-steps) it ends between two micro-steps,
#     the checkpoint is the step before and the resumed run does the step again, with the same result;
#  2. -tr never harms a file: the model file, a FIFO and a folder are refused at once; a full disk
#     (a small tmpfs) is one error line and leaves no part or temp file; a stopped run's trace stays and
#     the resumed run's goes to a numbered file; two runs with one -tr each get a whole trace;
#  3. a folder renamed under a live run: the run stops at its next write, the new run in a new folder
#     of the old name keeps its checkpoints, latest and .lock;
#  4. one log per history: -f 1 killed before its first checkpoint leaves log.csv as it was, and the
#     resumed run's log equals an uninterrupted run's;
#  5. scripts/train.sh stopped beyond its default 781 steps resumes (judged by the checkpoint's -x);
#     after the finished run, the next goes beside it (DIR.1) and the finished one is untouched;
#  6. the planner refuses what a run refuses (same line), 64-bit (-b 65536 -t 65536, a huge -d),
#     and -hs / -wrap change the plan.
. "$(dirname "$0")/lib.sh"
bg_pids=()
mounted=
cleanup() { for p in "${bg_pids[@]}"; do kill -KILL "$p" 2>/dev/null; done; [ -z "$mounted" ] || umount "$mounted"; rm -rf "$work"; }
trap cleanup EXIT
[ -n "${ZERO3_TRAINER:-}" ] || make -s train_gpt2_zero3 >/dev/null || fail "build"
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
wait_for() {   # wait_for FILE PATTERN: until FILE has a line matching PATTERN (30 s)
  local i
  for i in $(seq 600); do grep -q -- "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
  cat "$1"; fail "no /$2/ in $1"
}
run_np() { local np=$1; shift; if [ "$np" -eq 1 ]; then "$BIN" "$@"; else mpirun -np "$np" "$BIN" "$@"; fi; }
# start_bg NP ARGS...: the same in the background, in this shell, so that $! is the trainer (or mpirun)
start_bg() { local np=$1; shift; if [ "$np" -eq 1 ]; then "$BIN" "$@" & else mpirun -np "$np" "$BIN" "$@" & fi; }
rank_pid() {   # rank_pid NP PID: the process to signal (on 2 ranks the second rank mpirun started)
  if [ "$1" -eq 1 ]; then echo "$2"; else local i; for i in $(seq 100); do
    local r; r=$(pgrep -P "$2" | sed -n 2p); [ -n "$r" ] && { echo "$r"; return; }; sleep 0.05; done; fi
}
last_sample() { awk '/^---- sample/ { s = ""; on = 1; next } /^----/ { on = 0; last = s } on { s = s $0 } END { print last }' "$1"; }

# check_case WHAT PATTERN ARGS...: one error line matching PATTERN, non-zero, on 1 and 2 ranks, in 30 s
check_case() {
  local what=$1 pattern=$2; shift 2
  local np rc out err
  for np in 1 2; do
    out=$work/case_${BASHPID}_$np.out; err=$work/case_${BASHPID}_$np.err
    if [ "$np" -eq 1 ]; then timeout 30 "$BIN" "$@" >"$out" 2>"$err"; else timeout 30 mpirun -np 2 "$BIN" "$@" >"$out" 2>"$err"; fi
    rc=$?
    check_failed "$what (np $np)" $rc "$out" "$err" "$pattern" 30
    printf 'ok   %-34s np=%d  %s\n' "$what" $np "$(grep '^error' "$err" | cut -c1-140)"
  done
}

M=(-e d2c48h2t32 -b 2 -t 16 -l 1e-3)
# ---------------------------------------------------------------- 2. -tr: refused at once
"$BIN" "${M[@]}" -v 0 -x 2 -o "$work/model" >/dev/null 2>&1 || fail "the model run failed"
cp "$work/model/model.bin" "$work/input.bin"; sha=$(sha256sum <"$work/input.bin")
mkfifo "$work/fifo"; mkdir "$work/folder"
expect_error "-tr is the model file"   "flag -tr: .*/input.bin is the model file of -e: an output never replaces an input" -e "$work/input.bin" -b 2 -t 16 -v 0 -x 1 -tr "$work/input.bin"
expect_error "-tr is the train tokens" "flag -tr: .*tiny_shakespeare_train.bin is the train tokens of -i" "${M[@]}" -v 0 -x 1 -tr data/tinyshakespeare/tiny_shakespeare_train.bin
expect_error "-tr is a FIFO"           "flag -tr: .*/fifo is not a regular file \(it is a FIFO\)" "${M[@]}" -v 0 -x 1 -tr "$work/fifo"
expect_error "-tr is a folder"         "flag -tr: .*/folder is not a regular file \(it is a folder\)" "${M[@]}" -v 0 -x 1 -tr "$work/folder"
expect_error "-e is -o's model.bin"    "flag -o: .*/model/model.bin is the model file of -e" -e "$work/model/model.bin" -b 2 -t 16 -v 0 -x 3 -o "$work/model" -y 1
finish_cases
[ "$(sha256sum <"$work/input.bin")" = "$sha" ] || fail "the model file changed"
[ -p "$work/fifo" ] && [ -z "$(ls "$work/folder")" ] || fail "the FIFO or the folder changed"
echo "ok   the model file, the FIFO and the folder are as they were"
# a full disk: a small tmpfs (as root; mount is refused elsewhere: then skipped) that the trace parts fill
mkdir -p "$work/full" "$work/two"
if mount -t tmpfs -o size=48k tmpfs "$work/full" 2>/dev/null; then
  mounted=$work/full
  for np in 1 2; do
    run_np $np "${M[@]}" -v 0 -x 40 -tr "$work/full/t.json" >"$work/full$np.out" 2>"$work/full$np.err"
    [ $? -ne 0 ] || fail "np $np: a full disk under the trace went unnoticed"
    [ "$(grep -c '^error' "$work/full$np.err")" -eq 1 ] && grep -q '^error.*trace: cannot write .*t.json.* (No space left on device)' "$work/full$np.err" \
      || { cat "$work/full$np.err"; fail "np $np: not one trace error line"; }
    [ -z "$(ls "$work/full")" ] || { ls "$work/full"; fail "np $np: a full disk left $(ls "$work/full")"; }
    echo "ok   np=$np: a full disk under -tr: $(grep '^error' "$work/full$np.err" | cut -c1-110); nothing left behind"
  done
  umount "$work/full"; mounted=
else
  echo "skip a full disk under -tr: mount -t tmpfs is not allowed here"
fi
# two runs with one -tr at once: each trace whole, neither replaced
for i in 1 2; do "$BIN" "${M[@]}" -v 0 -x 12 -tr "$work/two/t.json" >"$work/two$i.out" 2>&1 & bg_pids+=($!); done
wait "${bg_pids[-1]}" && wait "${bg_pids[-2]}" || fail "two runs with one -tr: one failed"
[ "$(ls "$work/two")" = "$(printf 't.1.json\nt.json')" ] || { ls "$work/two"; fail "two runs with one -tr: want t.json and t.1.json"; }
for f in t.json t.1.json; do
  n=$($PY -c "import json,sys; e=json.load(open(sys.argv[1]))['traceEvents']; print(len({x['args']['step'] for x in e if x.get('cat')=='step'}))" "$work/two/$f") \
    || fail "two runs: $f is not JSON"
  [ "$n" -eq 12 ] || fail "two runs: $f holds $n steps, want 12"
done
echo "ok   two runs given one -tr at once: t.json and t.1.json, each 12 steps of valid JSON"

# ---------------------------------------------------------------- 1. prompt stops, exact resume (and the trace of a resumed run)
# Validation (400 batches) and the sample (400 tokens) each take about 0.9 s on an idle core, the
# step before them about 20 ms: a signal 0.3 s after step 2's line lands in step 3's validation, and
# one 0.1 s after the sample's header (flushed before its first token) lands in the sample, however
# loaded the machine (a slower machine stretches the loops more than the sleeps).
S=("${M[@]}" -x 6 -v 3 -m 400 -s 3 -g 400 -n 3)
for np in 1 2; do
  run_np $np "${S[@]}" -o "$work/straight$np" >"$work/straight$np.out" 2>&1 || { cat "$work/straight$np.out"; fail "np $np: the uninterrupted run failed"; }
  for where in validation sample; do
    d=$work/$where$np
    start_bg $np "${S[@]}" -o "$d" -tr "$d.json" >"$d.out" 2>"$d.err"
    pid=$!; bg_pids+=("$pid")
    if [ $where = validation ]; then wait_for "$d.out" "^step 2/6"; sleep 0.3; else wait_for "$d.out" "^---- sample"; sleep 0.1; fi
    t0=$(now); kill -TERM "$(rank_pid $np $pid)"; wait "$pid"; rc=$?; took=$(since "$t0")
    [ $rc -ne 0 ] || fail "np $np, $where: exit 0 after SIGTERM"
    if [ $where = validation ]; then cut_re="^validation cut short after [0-9]+ of 400 batches"; else cut_re="^---- sample cut short after [0-9]+ of 400 tokens"; fi
    cut=$(grep -E "$cut_re" "$d.out" | head -1)
    [ -n "$cut" ] || { cat "$d.out"; fail "np $np: SIGTERM during $where did not cut it short"; }
    grep -q "^stopped by SIGTERM after step 3 of 6: checkpoint .* is complete; resume with the same command and -y 1; the trace of these steps is $d.json" "$d.err" \
      || { cat "$d.err"; fail "np $np, $where: the stop line"; }
    cp "$d.json" "$d.first.json"
    run_np $np "${S[@]}" -o "$d" -y 1 -tr "$d.json" >"$d.resume.out" 2>&1 || { cat "$d.resume.out"; fail "np $np, $where: resume failed"; }
    cmp -s "$d.json" "$d.first.json" || fail "np $np, $where: the resumed run replaced the first trace"
    grep -q "^trace: $work/$where$np.1.json" "$d.resume.out" || fail "np $np, $where: the resumed run's trace is not the numbered file"
    diff <(cut -d, -f1,2 "$work/straight$np/log.csv") <(cut -d, -f1,2 "$d/log.csv") >/dev/null || fail "np $np, $where: train losses differ"
    [ "$(tail -1 "$work/straight$np/log.csv" | cut -d, -f3)" = "$(tail -1 "$d/log.csv" | cut -d, -f3)" ] || fail "np $np, $where: the last val loss differs"
    [ "$(last_sample "$work/straight$np.out")" = "$(last_sample "$d.resume.out")" ] || fail "np $np, $where: the last sample differs (sampling RNG)"
    cmp -s "$work/straight$np/model.bin" "$d/model.bin" || fail "np $np, $where: model.bin differs"
    echo "ok   np=$np: SIGTERM during $where: '${cut:0:52}', stopped in ${took} s; resumed: losses, last sample, model.bin identical; trace kept, resumed trace numbered"
  done
done

# A long step (100 micro-steps, about a second) is given up between two micro-steps: the checkpoint
# is the step before, and the resumed run does the step again, from its first micro-step.
L=("${M[@]}" -d 3200 -x 3 -v 0 -n 2)
for np in 1 2; do
  run_np $np "${L[@]}" -o "$work/lstraight$np" >"$work/lstraight$np.out" 2>&1 || { cat "$work/lstraight$np.out"; fail "np $np: the uninterrupted long-step run failed"; }
  d=$work/long$np
  start_bg $np "${L[@]}" -o "$d" >"$d.out" 2>"$d.err"
  pid=$!; bg_pids+=("$pid")
  wait_for "$d.out" "^step 1/3"; sleep 0.3
  t0=$(now); kill -TERM "$(rank_pid $np $pid)"; wait "$pid"; rc=$?; took=$(since "$t0")
  [ $rc -ne 0 ] || fail "np $np, long step: exit 0 after SIGTERM"
  line=$(grep "^stopped by SIGTERM during step 2 of 3, after [0-9]* of its $((100 / np)) micro-steps (the resumed run does the step again): checkpoint .*/ckpt_00000001_g1 is complete; resume with the same command and -y 1" "$d.err") \
    || { cat "$d.out" "$d.err"; fail "np $np: SIGTERM during a long step did not give it up between micro-steps"; }
  [ "$(cut -d, -f1 "$d/log.csv" | tail -1)" = 0 ] || fail "np $np, long step: log.csv has a row for the step given up"
  run_np $np "${L[@]}" -o "$d" -y 1 >"$d.resume.out" 2>&1 || { cat "$d.resume.out"; fail "np $np, long step: resume failed"; }
  diff <(cut -d, -f1,2 "$work/lstraight$np/log.csv") <(cut -d, -f1,2 "$d/log.csv") >/dev/null || fail "np $np, long step: train losses differ"
  cmp -s "$work/lstraight$np/model.bin" "$d/model.bin" || fail "np $np, long step: model.bin differs"
  echo "ok   np=$np: SIGTERM during a step of $((100 / np)) micro-steps: '$(echo "$line" | cut -c1-70)', stopped in ${took} s; resumed: losses and model.bin identical"
done

# ---------------------------------------------------------------- 3. the folder renamed under a live run
for np in 1 2; do
  # a slower model: seconds between its checkpoints, for the new run to start in between
  start_bg $np -e d4c128h4t64 -b 8 -t 64 -v 0 -x 100000 -n 3 -o "$work/live$np" >"$work/live$np.out" 2>"$work/live$np.err"
  a=$!; bg_pids+=("$a")
  wait_for "$work/live$np.out" "^checkpoint: .*ckpt_00000003_g1 written"
  mv "$work/live$np" "$work/moved$np"
  "$BIN" "${M[@]}" -v 0 -x 100000 -n 2 -o "$work/live$np" >"$work/new$np.out" 2>&1 &
  b=$!; bg_pids+=("$b")
  wait "$a"; rc=$?
  [ $rc -ne 0 ] || fail "np $np: the moved run did not stop"
  grep -q "^error: flag -o: $work/live$np is no longer the folder this run started in" "$work/live$np.err" || { cat "$work/live$np.err"; fail "np $np: no error line for the moved folder"; }
  kill -0 "$b" 2>/dev/null || { cat "$work/new$np.out"; fail "np $np: the new run died"; }
  grep -q "^pid $b " "$work/live$np/.lock" || fail "np $np: the new run's .lock was removed or replaced"
  ls -d "$work/moved$np"/ckpt_* >/dev/null 2>&1 || fail "np $np: the moved run's checkpoints are not in the moved folder"
  kill -TERM "$b"; wait "$b"   # stopped, it has printed every checkpoint it wrote (one may be mid-write now)
  for c in "$work/live$np"/ckpt_*; do grep -q "$(basename "$c")" "$work/new$np.out" || fail "np $np: $(basename "$c") in the new folder is not the new run's"; done
  grep -q "$(cat "$work/live$np/latest")" "$work/new$np.out" || fail "np $np: latest does not name the new run's checkpoint"
  echo "ok   np=$np: a folder moved under a live run: it stopped at its next checkpoint; the new run's checkpoints, latest and .lock untouched"
done

# ---------------------------------------------------------------- 4. -f 1 killed before its first checkpoint, then resumed
L=("${M[@]}" -v 2 -m 2 -n 2)
for np in 1 2; do
  run_np $np "${L[@]}" -x 6 -o "$work/whole$np" >/dev/null 2>&1 || fail "np $np: the uninterrupted run failed"
  run_np $np "${L[@]}" -x 4 -o "$work/hist$np" >/dev/null 2>&1 || fail "np $np: the first run failed"
  cp "$work/hist$np/log.csv" "$work/hist$np.log"
  start_bg $np "${L[@]}" -x 100000 -n 1000 -o "$work/hist$np" -f 1 >"$work/over$np.out" 2>&1
  pid=$!; bg_pids+=("$pid")
  wait_for "$work/over$np.out" "^step *3/"
  if [ $np -eq 1 ]; then kill -KILL "$pid"; else pkill -KILL -P "$pid"; kill -KILL "$pid"; fi; wait "$pid" 2>/dev/null
  cmp -s "$work/hist$np.log" "$work/hist$np/log.csv" || fail "np $np: -f 1 killed before its first checkpoint changed log.csv"
  run_np $np "${L[@]}" -x 6 -o "$work/hist$np" -y 1 >"$work/hist$np.out" 2>&1 || { cat "$work/hist$np.out"; fail "np $np: the resume failed"; }
  diff <(cut -d, -f1-3 "$work/whole$np/log.csv") <(cut -d, -f1-3 "$work/hist$np/log.csv") || fail "np $np: the resumed log is not the uninterrupted run's"
  [ -z "$(ls "$work/hist$np" | grep '\.tmp$')" ] || fail "np $np: a temp file was left: $(ls "$work/hist$np")"
  echo "ok   np=$np: -f 1 killed at step 3 left log.csv byte for byte; resumed (-y 1): log.csv = the uninterrupted run's (steps, losses)"
done

# ---------------------------------------------------------------- 5. scripts/train.sh resumes beyond its default 781 steps
# 1000 steps of about 4 ms: the signal, sent at step 805, lands long before the run ends
T=(-e d1c16h1t16 -b 1 -t 8 -v 0 -s 0 -n 50)
scripts/train.sh --cpu --out "$work/ts" -- "${T[@]}" -x 1000 >"$work/ts1.out" 2>&1 &
pid=$!; bg_pids+=("$pid")
wait_for "$work/ts1.out" "^step  *805/"
kill -TERM "$(pgrep -f "^\./train_gpt2_zero3 .*$work/ts" | head -1)"; wait "$pid"   # a rank (mpirun acts on SIGTERM itself)
grep -q "^stopped by SIGTERM after step [8-9][0-9][0-9] of 1000" "$work/ts1.out" || { tail "$work/ts1.out"; fail "train.sh: the run did not stop past step 781"; }
scripts/train.sh --cpu --out "$work/ts" -- "${T[@]}" -x 1000 >"$work/ts2.out" 2>&1 || { tail "$work/ts2.out"; fail "train.sh: the second call failed"; }
grep -q "^train.sh: resuming the unfinished run in $work/ts: its checkpoint is at step [8-9][0-9][0-9] of the 1000" "$work/ts2.out" || { head -20 "$work/ts2.out"; fail "train.sh: no resume"; }
[ "$(cut -d, -f1 "$work/ts/log.csv" | sed 1d | sort -n | uniq | wc -l)" -eq 1000 ] || fail "train.sh: the log does not hold steps 0..999 once each"
scripts/train.sh --cpu --out "$work/ts" -- "${T[@]}" -x 20 >"$work/ts3.out" 2>&1 || { tail "$work/ts3.out"; fail "train.sh: the third call failed"; }
grep -q "^train.sh: the run in $work/ts finished (1000 of 1000 steps): this run goes beside it, into $work/ts.1" "$work/ts3.out" || fail "train.sh: a finished run's new run did not go beside it"
[ "$(cut -d, -f1 "$work/ts/log.csv" | sed 1d | sort -n | uniq | wc -l)" -eq 1000 ] && [ "$(sed 1d "$work/ts.1/log.csv" | wc -l)" -eq 20 ] || fail "train.sh: the finished run's log was touched, or the new run's is not beside it"
echo "ok   train.sh -- -x 1000 stopped $(grep -o 'after step [0-9]*' "$work/ts1.out"): the next call resumed it to 1000; after that, a new run beside it"

# ---------------------------------------------------------------- 6. the planner refuses what a run refuses
same_line() {   # same_line WHAT ARGS...: -plan 2 and a 2-rank run print the same error line
  local what=$1 p_err=$work/p_$BASHPID.err r_err=$work/r_$BASHPID.err; shift
  "$BIN" -plan 2 "$@" >/dev/null 2>"$p_err" && fail "$what: -plan accepted it"
  timeout 60 mpirun -np 2 "$BIN" "$@" -x 1 >/dev/null 2>"$r_err" && fail "$what: the run accepted it"
  [ "$(grep -c '^error' "$p_err")" -eq 1 ] && [ "$(grep '^error' "$p_err")" = "$(grep '^error' "$r_err")" ] \
    || { cat "$p_err" "$r_err"; fail "$what: -plan and the run differ"; }
  echo "ok   $what: $(cut -c1-120 "$p_err")"
}
side_by_side same_line "-b 65536 -t 65536" -e d2c48h2t32 -b 65536 -t 65536
side_by_side same_line "a huge -d"         -e d2c48h2t32 -b 2 -t 16 -d 64000000000
side_by_side same_line "-hs 3 on 2 ranks"  -e d2c48h2t32 -b 2 -t 16 -hs 3
side_by_side same_line "-hs 2 on 2 ranks"  -e d2c48h2t32 -b 2 -t 16 -hs 2
side_by_side same_line "-t beyond maxT"    -e d2c48h2t32 -b 2 -t 64
side_by_side same_line "-wrap 3 of 2"      -e d2c48h2t32 -b 2 -t 16 -wrap 3
finish_cases
bytes() { "$BIN" -plan 8 -e d12 "$@" | awk '/^model-state memory per rank, mixed/ { on = 1 } on && /^  3 / { gsub(",", "", $2); print $2; exit }'; }
b0=$(bytes); b4=$(bytes -hs 4)
[ -n "$b0" ] && [ "$b4" -gt "$b0" ] || fail "-plan -hs 4: stage-3 state $b4 is not above $b0 (sharded over 4, not 8)"
u0=$("$BIN" -plan 8 -e d12 | grep -o 'in [0-9]* units'); u2=$("$BIN" -plan 8 -e d12 -wrap 2 | grep -o 'in [0-9]* units')
[ "$u0" = "in 14 units" ] && [ "$u2" = "in 8 units" ] || fail "-plan -wrap 2: $u0 -> $u2, want 14 -> 8 units"
split=$("$BIN" -plan 64 -e 7.5B | awk '/^  split.*fp32 master/ { on = 1 } on && /^  0 DDP/ { print $3, $4, $5, $6; exit }')
[ "$split" = "15.000 15.000 90.000 120.000" ] || fail "-plan 64 -e 7.5B: the stage-0 split is '$split', want 15 + 15 + 90 = 120 GB"
echo "ok   -plan: -hs 4 holds $b4 bytes at stage 3 (vs $b0 without), -wrap 2 gives 8 units (vs 14), 7.5B at stage 0 = 15 + 15 + 90 GB"
echo "test_operations: all passed"
