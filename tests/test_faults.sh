#!/usr/bin/env bash
# Faults during training:
#  1. one rank of three is killed with SIGKILL mid-run: mpirun must tear the others down, all gone
#     within 30 s (measured and printed), exit non-zero;
#  2. a NaN loss (injected with the test hook ZERO3_INJECT_NAN_STEP) stops a 2-rank run with one
#     clear message naming the last good checkpoint, which stays `latest` and resumes cleanly;
#  3. rank 0 killed in the middle of writing a checkpoint (ZERO3_INJECT_CKPT_CRASH: every shard of
#     the new checkpoint on disk, `latest` not yet moved) leaves the previous checkpoint as `latest`;
#     resuming from it reproduces the uninterrupted run exactly;
#  4. one rank of two frozen (SIGSTOP) for 3 s: the other reports the stall; frozen for good: -ct 3
#     ends every rank within 10 s with one line naming the collective, the step and the peer;
#  5. SIGUSR1 during an emulated link's holds (-link 0.001): the run stops with its checkpoint in 3 s.
# ZERO3_TRAINER=path tests another build of the trainer (default: make train_gpt2_zero3).
. "$(dirname "$0")/lib.sh"
mpirun_pid=
cleanup() { [ -n "$mpirun_pid" ] && kill -KILL "$mpirun_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
[ -n "${ZERO3_TRAINER:-}" ] || make -s train_gpt2_zero3 >/dev/null || fail "build"
M=(-e d2c48h2t32 -b 2 -t 16 -v 3 -m 1)
seconds_since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

# ---------------------------------------------------------------- 1. SIGKILL one rank
mpirun -np 3 "$BIN" "${M[@]}" -x 100000 -v 0 >"$work/kill.out" 2>&1 &
mpirun_pid=$!
for _ in $(seq 120); do grep -q '^step *2/' "$work/kill.out" && break; sleep 0.5; done
grep -q '^step *2/' "$work/kill.out" || { cat "$work/kill.out"; fail "the 3-rank run did not reach step 2"; }
ranks=$(pgrep -P "$mpirun_pid")
[ "$(echo "$ranks" | wc -w)" -eq 3 ] || fail "expected 3 rank processes under mpirun, found: $ranks"
victim=$(echo "$ranks" | sed -n 2p)
t0=$(date +%s.%N)
kill -KILL "$victim"
# alive: mpirun or any rank process still exists (a zombie, not yet reaped, counts as gone)
alive() {
  local pid
  for pid in "$mpirun_pid" $ranks; do
    [ -d "/proc/$pid" ] && [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != "Z" ] && return 0
  done
  return 1
}
for _ in $(seq 300); do alive || break; sleep 0.1; done
secs=$(seconds_since "$t0")
if alive; then ps -o pid,stat,cmd -p "$mpirun_pid" $ranks; fail "30 s after SIGKILL of one rank, the job is still running"; fi
wait "$mpirun_pid"; rc=$?; mpirun_pid=
[ $rc -ne 0 ] || fail "mpirun exited 0 after a rank was killed"
echo "ok   SIGKILL of one rank of 3: every rank gone ${secs}s later, mpirun exit $rc"

# ---------------------------------------------------------------- 2. NaN loss
t0=$(date +%s.%N)
ZERO3_INJECT_NAN_STEP=3 timeout 60 mpirun -np 2 -x ZERO3_INJECT_NAN_STEP "$BIN" "${M[@]}" -x 6 -n 2 -o "$work/nan" >"$work/nan.out" 2>"$work/nan.err"
rc=$?
secs=$(seconds_since "$t0")
[ $rc -ne 124 ] || fail "NaN: the run hung"
[ $rc -ne 0 ] || fail "NaN: exit 0"
[ "$(grep -c '^error' "$work/nan.err")" -eq 1 ] || { cat "$work/nan.err"; fail "NaN: want one error line"; }
grep -q "^error: step 3: loss nan.* not finite.*last good checkpoint, .*/ckpt_00000002_g1, is intact" "$work/nan.err" \
  || { cat "$work/nan.err"; fail "NaN: the message does not name the intact checkpoint"; }
[ "$(cat "$work/nan/latest")" = "ckpt_00000002_g1" ] || fail "NaN: latest moved"
timeout 120 mpirun -np 2 "$BIN" "${M[@]}" -x 2 -o "$work/nan" -y 1 >"$work/nan_resume.out" 2>&1 \
  || { cat "$work/nan_resume.out"; fail "NaN: the last good checkpoint does not resume"; }
echo "ok   NaN at step 3 on 2 ranks: stopped after ${secs}s (exit $rc) with: $(grep '^error' "$work/nan.err" | cut -c1-90)..."

# ---------------------------------------------------------------- 3. crash while checkpointing
timeout 300 mpirun -np 2 "$BIN" "${M[@]}" -x 6 -n 2 -o "$work/straight" >"$work/straight.out" 2>&1 \
  || { cat "$work/straight.out"; fail "the uninterrupted run failed"; }
ZERO3_INJECT_CKPT_CRASH=4 timeout 300 mpirun -np 2 -x ZERO3_INJECT_CKPT_CRASH "$BIN" "${M[@]}" -x 6 -n 2 -o "$work/crash" >"$work/crash.out" 2>&1
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] || { cat "$work/crash.out"; fail "crash: expected the job to die (exit $rc)"; }
[ "$(cat "$work/crash/latest")" = "ckpt_00000002_g1" ] || fail "crash: latest should still name the step-2 checkpoint"
[ -f "$work/crash/ckpt_00000004_g2/shard_00000.bin" ] || fail "crash: the hook should have fired after the step-4 shards were written"
timeout 300 mpirun -np 2 "$BIN" "${M[@]}" -x 6 -n 2 -o "$work/crash" -y 1 >"$work/crash_resume.out" 2>&1 \
  || { cat "$work/crash_resume.out"; fail "crash: resume failed"; }
diff <(cut -d, -f1-3 "$work/straight/log.csv") <(cut -d, -f1-3 "$work/crash/log.csv") >"$work/diff" \
  || { cat "$work/diff"; fail "crash: the resumed run's losses differ from the uninterrupted run"; }
cmp -s "$work/straight/model.bin" "$work/crash/model.bin" || fail "crash: model.bin differs from the uninterrupted run's"
echo "ok   rank 0 killed while writing checkpoint 4: latest still named checkpoint 2; resumed run identical"

# ---------------------------------------------------------------- 4. a rank frozen: stall, then timeout
# rank 1 stopped (SIGSTOP) for 3 s: rank 0 waits in a collective and says so when it completes
# (stalls over min(5, -ct/10) = 2 s are reported); stopped for good: -ct 3 ends every rank, with
# one line naming the collective, the step and the peer
run_frozen() {   # run_frozen CT OUT: a 2-rank run; sets victim to rank 1's pid
  mpirun -np 2 "$BIN" "${M[@]}" -x 100000 -v 0 -ct "$1" >"$2" 2>&1 &
  mpirun_pid=$!
  for _ in $(seq 120); do grep -q '^step *2/' "$2" && break; sleep 0.5; done
  grep -q '^step *2/' "$2" || { cat "$2"; fail "the 2-rank run did not reach step 2"; }
  victim=$(pgrep -P "$mpirun_pid" | sed -n 2p)
}
run_frozen 20 "$work/stall.out"
kill -STOP "$victim"; sleep 3; kill -CONT "$victim"
for _ in $(seq 40); do grep -q 'stall:' "$work/stall.out" && break; sleep 0.25; done
kill -USR1 "$mpirun_pid"; wait "$mpirun_pid"; mpirun_pid=
grep -q '^warning (rank 0 on [^)]*): stall: the [a-z -]* \(of unit [a-z0-9.]* \)\?in step [0-9]* waited [3-9]\.[0-9] s for its peers before it completed (stalls over [0-9.]* s are reported; -ct 20 ends the run)' "$work/stall.out" ||
  { grep -E 'warn|err' "$work/stall.out"; fail "rank 0 did not report the 3 s stall"; }
echo "ok   rank 1 frozen 3 s: $(grep -o 'stall: .* for its peers' "$work/stall.out" | head -1)"
run_frozen 3 "$work/frozen.out"
kill -STOP "$victim"; t0=$(date +%s.%N)
for _ in $(seq 200); do kill -0 "$mpirun_pid" 2>/dev/null || break; sleep 0.1; done
secs=$(seconds_since "$t0")
wait "$mpirun_pid"; rc=$?; mpirun_pid=
for _ in $(seq 30); do kill -0 "$victim" 2>/dev/null || break; sleep 0.1; done   # mpirun's SIGKILL lands
kill -0 "$victim" 2>/dev/null && { ps -o pid,stat,comm -p "$victim"; kill -KILL "$victim"; fail "the frozen rank outlived the run"; }
awk -v s="$secs" 'BEGIN { exit !(s >= 2.5 && s <= 10) }' || fail "the run with a frozen rank ended ${secs}s later, want 3-10 s (-ct 3)"
[ $rc -ne 0 ] || fail "the run with a frozen rank exited 0"
grep -q '^error (rank 0 on [^)]*): collective timeout: the [a-z -]* \(of unit [a-z0-9.]* \)\?in step [0-9]* has not completed 3 s after it started (-ct 3); its peers: [^ ]* rank 1; a peer or its link is down: ending every rank$' "$work/frozen.out" ||
  { grep -E 'warn|err' "$work/frozen.out"; fail "rank 0 did not name the collective that timed out"; }
echo "ok   rank 1 frozen for good, -ct 3: every rank gone ${secs}s later (exit $rc): $(grep -o 'collective timeout: [^;]*' "$work/frozen.out" | head -1)"
# frozen past -ct, then woken (SIGCONT): the woken rank's own deadline has passed too, and its line,
# if it gets one out before the abort, blames itself, never the healthy rank 0
run_frozen 3 "$work/thawed.out"
kill -STOP "$victim"; sleep 6; kill -CONT "$victim"
wait "$mpirun_pid"; mpirun_pid=
grep -q '^error (rank 0 on [^)]*): collective timeout: .*its peers: [^ ]* rank 1; a peer or its link is down' "$work/thawed.out" &&
  ! grep -q '^error (rank 1 on [^)]*): collective timeout: .*a peer or its link is down' "$work/thawed.out" ||
  { grep -E 'warn|err' "$work/thawed.out"; fail "rank 1 frozen then woken: rank 0 should name rank 1, and rank 1 never blame its peers"; }
echo "ok   rank 1 frozen 6 s then woken, -ct 3: rank 0 names rank 1; rank 1 blames no peer$(grep -q '^error (rank 1' "$work/thawed.out" && echo ' (its line: this rank itself was not running)')"

# ---------------------------------------------------------------- 5. a stop during an emulated hold
# -link 0.001 (1 MB/s) holds each all-gather of this model for seconds; SIGUSR1 ends the holds, so
# the run stops with its checkpoint within 3 s, where the holds of the step would take a minute
mpirun -np 2 "$BIN" "${M[@]}" -x 20 -v 0 -link 0.001 -o "$work/hold" >"$work/hold.out" 2>&1 &
mpirun_pid=$!
for _ in $(seq 120); do grep -q '^| links' "$work/hold.out" && break; sleep 0.5; done
grep -q '^| links' "$work/hold.out" || { cat "$work/hold.out"; fail "the run on an emulated link did not start"; }
sleep 2   # inside the first step's holds
kill -USR1 "$mpirun_pid"; t0=$(date +%s.%N)
wait "$mpirun_pid"; rc=$?; mpirun_pid=
secs=$(seconds_since "$t0")
[ $rc -eq 138 ] || { tail "$work/hold.out"; fail "the run stopped during a hold exited $rc, want 138"; }
awk -v s="$secs" 'BEGIN { exit !(s <= 3) }' || fail "the stop during an emulated hold took ${secs}s, want at most 3"
grep -q '^stopped by SIGUSR1 after step [0-9]* of 20: checkpoint' "$work/hold.out" || { tail "$work/hold.out"; fail "no stop checkpoint after a hold"; }
echo "ok   SIGUSR1 during -link 0.001's holds: stopped with a checkpoint ${secs}s later"
echo "test_faults: all passed"
