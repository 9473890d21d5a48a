#!/usr/bin/env bash
# Faults during training:
#  1. one rank of three is killed with SIGKILL mid-run: mpirun must tear the others down, all gone
#     within 30 s (measured and printed), exit non-zero;
#  2. a NaN loss (injected with the test hook ZERO3_INJECT_NAN_STEP) stops a 2-rank run with one
#     clear message naming the last good checkpoint, which stays `latest` and resumes cleanly;
#  3. rank 0 killed in the middle of writing a checkpoint (ZERO3_INJECT_CKPT_CRASH: every shard of
#     the new checkpoint on disk, `latest` not yet moved) leaves the previous checkpoint as `latest`;
#     resuming from it reproduces the uninterrupted run exactly.
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
echo "test_faults: all passed"
