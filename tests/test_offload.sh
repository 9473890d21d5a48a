#!/usr/bin/env bash
# -oo disk (zero3_offload.h): the optimizer shard on disk is a placement, so a run with it gives the
# same numbers as the same run without it. The reference is that run: log.csv's losses (the strings)
# and the exported model.bin byte for byte, at stages 0-3, on 1, 2 and 3 ranks, with A=2, -p fp32
# and bf16. Checkpoints hold the offloaded state: a run with -oo disk stopped by a NaN resumes on
# another N and stage without it, and one without it resumes with it, both as the straight run.
# The faults (as root, on small tmpfs mounts): a disk too small for the state file is refused at
# startup in one line with nothing left in the folder; a disk that the run's own checkpoints fill
# mid-run stops it at the checkpoint with the state file's room untouched and the last complete
# checkpoint resumable; a read-only folder is refused; the state file truncated or changed while the
# run is paused (SIGSTOP) ends it with one line naming the file; SIGTERM during the run stops it with
# a complete checkpoint that resumes as the straight run.
. "$(dirname "$0")/lib.sh"
[ -n "${ZERO3_TRAINER:-}" ] || make -s train_gpt2_zero3 >/dev/null || fail "build"

# run NAME NP ARGS...: the trainer on NP ranks, stdout to $work/NAME.out, stderr to $work/NAME.err
run() {
  local name=$1 np=$2; shift 2
  if [ "$np" -eq 1 ]; then timeout 120 "$BIN" "$@" >"$work/$name.out" 2>"$work/$name.err"
  else timeout 120 mpirun -np "$np" ${ZERO3_INJECT_NAN_STEP:+-x ZERO3_INJECT_NAN_STEP} "$BIN" "$@" >"$work/$name.out" 2>"$work/$name.err"; fi
}
must_run() { local rc; run "$@"; rc=$?; [ $rc -eq 0 ] || { cat "$work/$1.out" "$work/$1.err"; fail "$1: exit $rc"; }; }
losses() { cut -d, -f1-3 "$1/log.csv"; }
same_run() {   # same_run WHAT REF_DIR DIR: identical losses and model.bin
  diff <(losses "$2") <(losses "$3") >"$work/diff" || { cat "$work/diff"; fail "$1: losses differ from the run without offload"; }
  [ "$(losses "$3" | wc -l)" -eq 7 ] || { losses "$3"; fail "$1: log.csv should have a header and 6 rows"; }
  cmp -s "$2/model.bin" "$3/model.bin" || fail "$1: model.bin differs from the run without offload"
}

# 6 steps, a checkpoint every 2 (the cache's reads), -b 2 -t 16: -d 64 is A=2 on one rank
M=(-e d2c48h2t32 -b 2 -t 16 -v 3 -m 1 -x 6 -n 2 -l 1e-3 -c 0.1 -u 2 -q 0.1 -s 0)

# ---------------------------------------------------------------- bitwise against the run without it
pair() {   # pair NAME NP ARGS...: the same run with and without -oo disk
  local name=$1 np=$2; shift 2
  must_run "${name}_ref" "$np" "${M[@]}" "$@" -o "$work/${name}_ref"
  must_run "${name}_off" "$np" "${M[@]}" "$@" -o "$work/${name}_off" -oo disk
  grep -q "^offload: the optimizer state in $work/${name}_off/offload/optimizer_r00000.bin" "$work/${name}_off.out" \
    || { cat "$work/${name}_off.out"; fail "$name: the run does not say where its state is"; }
  grep -q "^offload I/O (rank 0" "$work/${name}_off.out" || fail "$name: no offload I/O line in the report"
  [ -z "$(ls -A "$work/${name}_off/offload")" ] || fail "$name: the state files were left behind after the run"
  same_run "$name ($*)" "$work/${name}_ref" "$work/${name}_off"
  echo "ok   $name: np $np $*: the same losses and model.bin with -oo disk"
}
pair z3n1 1 -z 3
pair z3n2bf16a3 2 -z 3 -p bf16 -d 192
pair z0n2 2 -z 0 -p bf16
pair z1n3 3 -z 1
pair z2n2a2 2 -z 2 -d 128

# ---------------------------------------------------------------- checkpoints: on another N, with or without
# on another N and stage as tests/test_checkpoint.sh does it: resharded there with no step run (-x 2:
# read and written again), the steps then run on the first N (a sum over other N rounds otherwise)
D=(-d 192)   # A=3 on 2 ranks, A=2 on 3
must_run straight32 2 "${M[@]}" "${D[@]}" -z 3 -o "$work/straight32"
ZERO3_INJECT_NAN_STEP=3 run stop_off 2 "${M[@]}" "${D[@]}" -z 3 -o "$work/resume_a" -oo disk \
  && fail "the NaN at step 3 should stop the run"
must_run reshard_a 3 "${M[@]}" "${D[@]}" -z 1 -x 2 -o "$work/resume_a" -y 1 -oo disk
grep -q "written on N=2 at ZeRO stage 3, resharded" "$work/reshard_a.out" || fail "N=3: no resharding message"
must_run resume_a 2 "${M[@]}" "${D[@]}" -z 3 -o "$work/resume_a" -y 1
grep -q "written on N=3 at ZeRO stage 1, resharded" "$work/resume_a.out" || fail "N=2: no resharding message"
same_run "-oo disk N=2 z3 -> N=3 z1 (-oo disk) -> N=2 z3 without" "$work/straight32" "$work/resume_a"
ZERO3_INJECT_NAN_STEP=3 run stop_mem 2 "${M[@]}" "${D[@]}" -z 3 -o "$work/resume_b" \
  && fail "the NaN at step 3 should stop the run"
must_run reshard_b 1 "${M[@]}" "${D[@]}" -z 0 -x 2 -o "$work/resume_b" -y 1
must_run resume_b 2 "${M[@]}" "${D[@]}" -z 3 -o "$work/resume_b" -y 1 -oo disk
same_run "N=2 z3 -> N=1 z0 -> N=2 z3 with -oo disk" "$work/straight32" "$work/resume_b"
# bf16 on the same N, with -oo disk on the way in and out
ZERO3_INJECT_NAN_STEP=3 run stop_bf16 2 "${M[@]}" -z 3 -p bf16 -d 192 -o "$work/resume_c" -oo disk \
  && fail "the NaN at step 3 should stop the run"
must_run resume_c 2 "${M[@]}" -z 3 -p bf16 -d 192 -o "$work/resume_c" -y 1 -oo disk
same_run "-p bf16 -oo disk, resumed with it" "$work/z3n2bf16a3_ref" "$work/resume_c"
echo "ok   checkpoints: with -oo disk resumed without it on another N and stage, the other way round, and bf16 with it"

# ---------------------------------------------------------------- faults
# one_error WHAT NAME PATTERN: the run NAME failed with one 'error' line matching PATTERN
one_error() {
  local rc=$(cat "$work/$2.rc")
  [ "$rc" -ne 124 ] || fail "$1: still running after its timeout"
  [ "$rc" -ne 0 ] || { cat "$work/$2.out"; fail "$1: exit 0, want an error"; }
  [ "$(grep -c '^error' "$work/$2.err")" -eq 1 ] || { cat "$work/$2.err"; fail "$1: want exactly one error line"; }
  grep '^error' "$work/$2.err" | grep -qE -- "$3" || { cat "$work/$2.err"; fail "$1: the line does not match /$3/"; }
}
checked() { run "$@"; echo $? >"$work/$1.rc"; }

# the state file truncated / changed while the run is paused: SIGSTOP, the change, SIGCONT, until the
# run finds it (a change to a record the run then writes anew is not a fault: it tries again)
tamper() {   # tamper NAME HOW: HOW is truncate or flip
  local name=$1 how=$2 dir=$work/$1 f pid i
  "$BIN" "${M[@]}" -x 400 -n 0 -v 0 -o "$dir" -oo disk >"$work/$name.out" 2>"$work/$name.err" &
  pid=$!
  f=$dir/offload/optimizer_r00000.bin
  for i in $(seq 1 600); do [ -s "$dir/log.csv" ] && [ "$(wc -l <"$dir/log.csv")" -ge 3 ] && break; sleep 0.05; done
  for i in $(seq 1 40); do
    kill -STOP $pid 2>/dev/null || break
    if [ "$how" = truncate ]; then truncate -c -s 8192 "$f" 2>/dev/null
    else printf '\x55\x66\x77\x88' | dd of="$f" bs=1 seek=1000 conv=notrunc,nocreat status=none 2>/dev/null; fi
    kill -CONT $pid 2>/dev/null
    sleep 0.2
  done
  wait $pid; echo $? >"$work/$name.rc"
  one_error "$how" "$name" "offload: $f: "
  [ ! -e "$f" ] || fail "$how: the state file was left behind"
}
tamper trunc truncate
grep -q "truncated\|changed behind the run's back" "$work/trunc.err" || { cat "$work/trunc.err"; fail "truncate: the line does not say what happened"; }
tamper flip flip
grep -q "checksum mismatch\|changed behind" "$work/flip.err" || { cat "$work/flip.err"; fail "flip: the line does not say what happened"; }
echo "ok   a state file truncated, or changed, behind the run's back: one line naming it, exit 1"

# SIGTERM while the run streams: a complete checkpoint, resumed as the straight run
"$BIN" "${M[@]}" -z 3 -x 6 -o "$work/term" -oo disk >"$work/term.out" 2>"$work/term.err" &
pid=$!
for i in $(seq 1 200); do [ -s "$work/term/log.csv" ] && [ "$(wc -l <"$work/term/log.csv")" -ge 3 ] && break; sleep 0.02; done
kill -TERM $pid; wait $pid; rc=$?
[ $rc -eq 143 ] || [ $rc -eq 0 ] || { cat "$work/term.err"; fail "SIGTERM: exit $rc, want 143 (or 0: the run ended first)"; }
if [ $rc -eq 143 ]; then
  grep -q "stopped by SIGTERM" "$work/term.err" || { cat "$work/term.err"; fail "SIGTERM: no stop line"; }
  must_run term_resume 1 "${M[@]}" -z 3 -o "$work/term" -y 1 -oo disk
fi
same_run "SIGTERM, resumed" "$work/z3n1_ref" "$work/term"
echo "ok   SIGTERM during a run with -oo disk: exit 143, a complete checkpoint, resumed as the straight run"

if [ "$(id -u)" -ne 0 ] || ! command -v mount >/dev/null; then
  echo "skipped: the disk faults mount tmpfs, which needs root"; exit 0
fi
mnt=$work/mnt; mkdir -p "$mnt"/small "$mnt"/fill "$mnt"/ro
trap 'umount "$mnt"/small "$mnt"/fill "$mnt"/ro 2>/dev/null; rm -rf "$work"' EXIT
# the sizes of this model's state file and checkpoint (from the runs above), to size the disks
state=$(grep -o '(0\.[0-9]* GB a rank' "$work/z3n1_off.out" | tr -dc '0-9.' | awk '{printf "%d", $1 * 1e9}')
shard=$(stat -c %s "$work/z3n1_ref/$(cat "$work/z3n1_ref/latest")/shard_00000.bin")
mount -t tmpfs -o size=$((state / 2)) tmpfs "$mnt/small" || skip "mount -t tmpfs failed"
checked small 2 "${M[@]}" -o "$work/small_out" -oo "disk:$mnt/small"
one_error "a disk too small" small "optimizer_r0000[01].bin: cannot reserve .* GB for this rank's optimizer state \(No space left on device\)"
[ -z "$(ls -A "$mnt/small")" ] || { ls -la "$mnt/small"; fail "a disk too small: a file was left on it"; }
echo "ok   a disk too small for the state: refused at startup in one line, nothing left on it"

# the state file and the run's checkpoints on one disk with room for the file and one checkpoint and a
# half: the second checkpoint fills it; the file's room was reserved, so only the checkpoint fails
mount -t tmpfs -o size=$((state + shard * 3 / 2 + 65536)) tmpfs "$mnt/fill"
checked fill 1 "${M[@]}" -o "$mnt/fill/out" -oo "disk:$mnt/fill"
rc=$(cat "$work/fill.rc"); [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || { cat "$work/fill.err"; fail "a disk that fills: exit $rc"; }
grep -q "^error.*No space left on device" "$work/fill.err" || { cat "$work/fill.err"; fail "a disk that fills: no line saying so"; }
grep -q "^error.*ckpt_\|^error.*shard" "$work/fill.err" || { cat "$work/fill.err"; fail "a disk that fills: the line should name the checkpoint file"; }
cp -r "$mnt/fill/out" "$work/fill_copy"
must_run fill_resume 1 "${M[@]}" -o "$work/fill_copy" -y 1 -oo disk
same_run "a disk that fills, resumed" "$work/z3n1_ref" "$work/fill_copy"
echo "ok   a disk the checkpoints fill mid-run: the checkpoint fails in one line, the last complete one resumes as the straight run"

mount -t tmpfs -o ro,size=1m tmpfs "$mnt/ro"
checked ro 1 "${M[@]}" -o "$work/ro_out" -oo "disk:$mnt/ro"
one_error "a read-only folder" ro "$mnt/ro"
echo "ok   a folder the run cannot write: refused in one line naming it"
