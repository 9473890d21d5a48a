#!/usr/bin/env bash
# -oo disk, -op disk (zero3_offload.h): the optimizer shard and (at stage 3) the parameter shard on
# disk are placements, so a run with them gives the same numbers as the same run without them. The
# reference is that run: log.csv's losses (the strings) and the exported model.bin byte for byte;
# -oo disk at stages 0-3, -op disk at stage 3 (with and without -oo disk, -pd 2), on 1, 2 and 3 ranks,
# with A=2 and 3, -p fp32 and bf16. Checkpoints hold the offloaded state: a run with -oo disk (or -op
# disk) stopped by a NaN resumes on another N and stage without it, and one without it resumes with
# it, all as the straight run. The planner's -op disk figures (the file, the I/O per step) are the
# run's own, to the tolerance worked out below.
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

# -op disk (stage 3): the params shard read before every gather; against the runs above without it
must_run straight32 2 "${M[@]}" -d 192 -z 3 -o "$work/straight32"   # A=3 on 2 ranks (and the checkpoints' reference)
must_run z3n3a2_ref 3 "${M[@]}" -d 192 -z 3 -o "$work/z3n3a2_ref"   # A=2 on 3 ranks
op_pair() {   # op_pair NAME NP REF ARGS...: the run with ARGS (-op disk among them) against REF's
  local name=$1 np=$2 ref=$3; shift 3
  must_run "$name" "$np" "${M[@]}" "$@" -o "$work/$name"
  grep -q "^offload: the parameter shard in $work/$name/offload/params_r00000.bin" "$work/$name.out" \
    || { cat "$work/$name.out"; fail "$name: the run does not say where its parameter shard is"; }
  grep -q "^offload I/O (rank 0" "$work/$name.out" || fail "$name: no offload I/O line in the report"
  [ -z "$(ls -A "$work/$name/offload")" ] || fail "$name: the files were left behind after the run"
  same_run "$name ($*)" "$work/$ref" "$work/$name"
  echo "ok   $name: np $np $*: the same losses and model.bin as without offload"
}
op_pair op_n1 1 z3n1_ref -z 3 -op disk
op_pair op_n2bf16a3 2 z3n2bf16a3_ref -z 3 -p bf16 -d 192 -op disk
op_pair op_n2bf16a3oo 2 z3n2bf16a3_ref -z 3 -p bf16 -d 192 -op disk -oo disk -pd 2
op_pair op_n2a3oo 2 straight32 -z 3 -d 192 -op disk -oo disk
op_pair op_n3a2pd2 3 z3n3a2_ref -z 3 -d 192 -op disk -pd 2
# the variants of -z 3 that gather differently: ZeRO++'s three (the qwZ gather quantizes the record
# read from the file; hpZ's backward gathers from the secondary shards, no read) and HSDP with the
# sampler's forward passes (the samples' text, too)
Z=(-z 3 -p bf16 -qw 8 -hp 2 -qg 8)
must_run zpp_ref 4 "${M[@]}" "${Z[@]}" -o "$work/zpp_ref"
op_pair op_zpp 4 zpp_ref "${Z[@]}" -op disk
H=(-z 3 -hs 2 -s 3 -g 8)
must_run hsdp_ref 4 "${M[@]}" "${H[@]}" -o "$work/hsdp_ref"
op_pair op_hsdp 4 hsdp_ref "${H[@]}" -op disk
samples() { grep -A1 '^---- sample' "$work/$1.out" | grep -v '^----'; }
[ -n "$(samples hsdp_ref)" ] && [ "$(samples hsdp_ref)" = "$(samples op_hsdp)" ] || fail "-op disk -hs 2: the samples differ"
echo "ok   -op disk with -hs 2: the same samples"

# -os S: more staging slots, the same numbers. The stream then reads the step's first S-1 units at
# the step's start and leaves its last write-backs to run under the next forward; M's model has 4
# units, so -os 4 gives every unit its own slot (the edge: each record still read and written once a
# step), and a step of bf16 -op disk beside it, -pd 2
op_pair os4_n2bf16a3 2 z3n2bf16a3_ref -z 3 -p bf16 -d 192 -oo disk -op disk -pd 2 -os 4
must_run os4_n3z1 3 "${M[@]}" -z 1 -oo disk -os 4 -o "$work/os4_n3z1"
same_run "-z 1 -oo disk -os 4 on 3 ranks" "$work/z1n3_ref" "$work/os4_n3z1"
grep -q "^offload: the optimizer state in .* (.* GB a rank, 4 slots of " "$work/os4_n3z1.out" || { grep ^offload "$work/os4_n3z1.out"; fail "-os 4: the startup line does not name its 4 slots"; }
# the planner's slots column against the run's slots (slot i as large as the largest record of the
# units i mod S; a record rounds up to 4 KiB and its tensors' 64-element alignment: at most 8 KiB a
# slot more than the planner's count), both files, fp32 on one rank (a 4-block model, 6 units, -oo
# disk -op disk -os 4: slot 0 takes the embedding and block 4, slot 1 block 1 and the final
# layernorm, slots 2 and 3 a block each; the planner prints GiB to 3 decimals: 0.0005 GiB, and the
# run each file's slots in GB to 3: 0.0005 GB a file)
S=(-e d4c48h2t32 -b 2 -t 16 -v 0 -z 3 -oo disk -op disk -os 4)
pslots=$("$BIN" -plan 1 "${S[@]}" | grep -A5 '^offload (-oo disk -op disk), fp32' | awk '$1 == 3 {print $7}')
must_run os_slots 1 "${S[@]}" -x 1 -o "$work/os_slots"
rslots=$(grep '^offload: the ' "$work/os_slots.out" | sed 's/.*, \([0-9]*\) slots of \([0-9.]*\) GB in memory.*/\1 \2/' | awk '{t += $2} END {print t}')
echo "$pslots $rslots" | awk '{ p = $1 * 1073741824 / 1e9; r = $2
  printf "     planner: slots %.4f GB; the run: %.4f GB (-os 4 of 6 units, both files)\n", p, r
  exit !(r >= p - 0.0006 - 2 * 0.0005 && r <= p + 0.0006 + 2 * 0.0005 + 8 * 8192e-9) }' || fail "planner: -os 4's slots ($pslots GiB) are not the run's ($rslots GB)"
# a checkpoint written with -os 4 resumes with the default 3 (slots are memory, not state)
ZERO3_INJECT_NAN_STEP=3 run stop_os 2 "${M[@]}" -z 3 -p bf16 -d 192 -o "$work/resume_os" -oo disk -os 4 \
  && fail "the NaN at step 3 should stop the run"
must_run resume_os 2 "${M[@]}" -z 3 -p bf16 -d 192 -o "$work/resume_os" -y 1 -oo disk
same_run "-os 4, resumed with -os 3" "$work/z3n2bf16a3_ref" "$work/resume_os"
# the flag's bad values: one line each, nothing run
os_bad() {   # os_bad PATTERN ARGS...
  local pat=$1; shift
  timeout 60 "$BIN" "${M[@]}" -x 1 -o "$work/os_bad" "$@" >"$work/os_bad.out" 2>"$work/os_bad.err" && fail "-os: $* ran"
  [ "$(grep -c '^error' "$work/os_bad.err")" -eq 1 ] && grep -q -- "$pat" "$work/os_bad.err" || { cat "$work/os_bad.err"; fail "-os: $*: want one line matching /$pat/"; }
  ! grep -q '^step' "$work/os_bad.out" || fail "-os: $*: a step ran"
}
os_bad "flag -os: 2 is out of range" -oo disk -os 2
os_bad "flag -os: the slots stage the files on disk, and this run has none" -os 4
os_bad "flag -os: 5 slots for a model of 4 units" -oo disk -os 5
os_bad "flag -os: expected" -oo disk -os four
echo "ok   -os: 4 slots give the same numbers (bf16 -op -pd 2 on 2 ranks, -z 1 on 3), the planner's slots, a resume with 3, bad values refused"

# ---------------------------------------------------------------- checkpoints: on another N, with or without
# on another N and stage as tests/test_checkpoint.sh does it: resharded there with no step run (-x 2:
# read and written again), the steps then run on the first N (a sum over other N rounds otherwise)
D=(-d 192)   # A=3 on 2 ranks, A=2 on 3 (straight32 above: the run without a stop)
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
# -op disk (with -oo disk) on the way in, a stage that has no params shard (-z 1 on 3 ranks) between,
# -op disk on the way out
ZERO3_INJECT_NAN_STEP=3 run stop_op 2 "${M[@]}" "${D[@]}" -z 3 -o "$work/resume_d" -op disk -oo disk \
  && fail "the NaN at step 3 should stop the run"
must_run reshard_d 3 "${M[@]}" "${D[@]}" -z 1 -x 2 -o "$work/resume_d" -y 1
must_run resume_d 2 "${M[@]}" "${D[@]}" -z 3 -o "$work/resume_d" -y 1 -op disk
same_run "-op disk N=2 z3 -> N=3 z1 -> N=2 z3 with -op disk" "$work/straight32" "$work/resume_d"
echo "ok   checkpoints: with -oo disk resumed without it on another N and stage, the other way round, and bf16 with it; the same with -op disk"

# ---------------------------------------------------------------- the planner's -op disk figures
# -plan 1's stage-3 row (disk GB, read GB/step, write GB/step) against the run's own: the file's size
# it prints at startup, and one step's I/O, the difference of the offload I/O lines of a 5-step and a
# 1-step run over 4 (the same start and end: the init's writes, the last checkpoint's and the
# export's reads). fp32, one rank: a step reads every record at its forward and backward gather and
# in AdamW (it is the master), and writes it once. A larger model than M's: the lines print GB to 3
# decimals. The tolerance, in GB: the plan rounds to 0.0005; the run's file size to 0.0005; its step
# is two totals rounded to 0.0005 each over 4 steps, 0.00025; and a record is its unit's shard
# rounded up to a 4096-byte block, its tensors aligned to 64 elements (256 bytes, at most 16 tensors
# a unit: 4096 bytes more), so each of the 4 units' records holds at most 8192 bytes more than its
# parameters x 4, the planner's count: per step 3 reads of 4 records, 0.0001 GB, a write 0.00004.
P=(-e d2c192h2t32 -b 2 -t 16 -v 0 -z 3 -op disk)
row=$("$BIN" -plan 1 "${P[@]}" | grep -A5 '^offload (-oo none -op disk), fp32' | awk '$1 == 3 {print $8, $9, $10}')
[ -n "$row" ] || fail "planner: no stage-3 row in -plan 1's offload table"
must_run plan_x1 1 "${P[@]}" -x 1 -o "$work/plan_x1"
must_run plan_x5 1 "${P[@]}" -x 5 -o "$work/plan_x5"
io() { grep '^offload I/O' "$work/$1.out" | sed 's/.*: \([0-9.]*\) GB read + \([0-9.]*\) GB written.*/\1 \2/'; }
file=$(grep -o 'parameter shard in .* (\([0-9.]*\) GB a rank' "$work/plan_x1.out" | sed 's/.*(\([0-9.]*\) GB.*/\1/')
echo "$row $file $(io plan_x1) $(io plan_x5)" | awk '{
  disk = $1; read = $2; write = $3; file = $4; r = ($7 - $5) / 4; w = ($8 - $6) / 4
  printf "     planner: disk %.3f GB, read %.3f, write %.3f GB/step; the run: file %.3f GB, read %.5f, write %.5f GB/step\n", disk, read, write, file, r, w
  bad = 0
  if (file < disk - 0.001 || file > disk + 0.001 + 0.00004) bad = 1
  if (r < read - 0.00075 || r > read + 0.00075 + 0.0001) bad = 1
  if (w < write - 0.00075 || w > write + 0.00075 + 0.00004) bad = 1
  if (r < 2.9 * w) bad = 1   # three reads a record, whatever the rounding
  exit bad }' || fail "planner: -plan 1's -op disk figures differ from the run's beyond the rounding"
echo "ok   planner: -op disk's file and I/O per step on paper are the run's own"

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
tamper() {   # tamper NAME HOW [FILE FLAG]: HOW is truncate or flip; the optimizer's file (-oo), or FILE (its FLAG)
  local name=$1 how=$2 dir=$work/$1 f pid i
  "$BIN" "${M[@]}" -x 400 -n 0 -v 0 -o "$dir" ${4:--oo} disk >"$work/$name.out" 2>"$work/$name.err" &
  pid=$!
  f=$dir/offload/${3:-optimizer}_r00000.bin
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
# (a later record written past the cut makes the file whole again, with zeros: the read's checksum says so)
tamper trunc truncate
grep -q "truncated\|changed behind the run's back" "$work/trunc.err" || { cat "$work/trunc.err"; fail "truncate: the line does not say what happened"; }
tamper flip flip
grep -q "checksum mismatch\|changed behind" "$work/flip.err" || { cat "$work/flip.err"; fail "flip: the line does not say what happened"; }
tamper ptrunc truncate params -op
grep -q "truncated\|changed behind the run's back" "$work/ptrunc.err" || { cat "$work/ptrunc.err"; fail "-op truncate: the line does not say what happened"; }
tamper pflip flip params -op
grep -q "checksum mismatch" "$work/pflip.err" || { cat "$work/pflip.err"; fail "-op flip: the line does not say what happened"; }
echo "ok   a state file (-oo disk's, -op disk's) truncated, or changed, behind the run's back: one line naming it, exit 1"

# on 2 ranks, rank 1's params file changed under the running job (no pause: a flip the step's write
# covers again is tried again): one line naming it, every rank down, no hang, no file left
timeout 120 mpirun -np 2 "$BIN" "${M[@]}" -z 3 -x 400 -n 0 -v 0 -o "$work/pflip2" -op disk >"$work/pflip2.out" 2>"$work/pflip2.err" &
pid=$!
f=$work/pflip2/offload/params_r00001.bin
for i in $(seq 1 600); do [ -s "$work/pflip2/log.csv" ] && [ "$(wc -l <"$work/pflip2/log.csv")" -ge 3 ] && break; sleep 0.05; done
for i in $(seq 1 100); do
  kill -0 $pid 2>/dev/null || break
  printf '\x55\x66\x77\x88' | dd of="$f" bs=1 seek=1000 conv=notrunc,nocreat status=none 2>/dev/null
  sleep 0.1
done
wait $pid; echo $? >"$work/pflip2.rc"   # one_error: 124, the job still running after its timeout (a hang)
one_error "-op flip on 2 ranks" pflip2 "offload: $f: .*checksum mismatch"
[ -z "$(ls -A "$work/pflip2/offload")" ] || { ls -la "$work/pflip2/offload"; fail "-op flip on 2 ranks: files left"; }
echo "ok   rank 1's params file changed under a 2-rank job: one line naming it, every rank down, no file left"

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
mnt=$work/mnt; mkdir -p "$mnt"/small "$mnt"/psmall "$mnt"/fill "$mnt"/ro
trap 'umount "$mnt"/small "$mnt"/psmall "$mnt"/fill "$mnt"/ro 2>/dev/null; rm -rf "$work"' EXIT
# the sizes of this model's state file and checkpoint (from the runs above), to size the disks
state=$(grep -o '(0\.[0-9]* GB a rank' "$work/z3n1_off.out" | tr -dc '0-9.' | awk '{printf "%d", $1 * 1e9}')
shard=$(stat -c %s "$work/z3n1_ref/$(cat "$work/z3n1_ref/latest")/shard_00000.bin")
mount -t tmpfs -o size=$((state / 2)) tmpfs "$mnt/small" || skip "mount -t tmpfs failed"
checked small 2 "${M[@]}" -o "$work/small_out" -oo "disk:$mnt/small"
one_error "a disk too small" small "optimizer_r0000[01].bin: cannot reserve .* GB for this rank's optimizer state \(No space left on device\)"
[ -z "$(ls -A "$mnt/small")" ] || { ls -la "$mnt/small"; fail "a disk too small: a file was left on it"; }
echo "ok   a disk too small for the state: refused at startup in one line, nothing left on it"
# -op disk's file (here beside -oo disk's, which fits): refused before the first step, both files gone
pstate=$(grep -o 'parameter shard in .* (0\.[0-9]* GB a rank' "$work/op_n1.out" | sed 's/.*(//' | tr -dc '0-9.' | awk '{printf "%d", $1 * 1e9}')
mount -t tmpfs -o size=$((pstate / 2)) tmpfs "$mnt/psmall" || skip "mount -t tmpfs failed"
checked psmall 2 "${M[@]}" -z 3 -o "$work/psmall_out" -oo disk -op "disk:$mnt/psmall"
one_error "a disk too small for -op" psmall "params_r0000[01].bin: cannot reserve .* GB for this rank's parameter shard \(No space left on device\)"
[ -z "$(ls -A "$mnt/psmall")" ] || { ls -la "$mnt/psmall"; fail "a disk too small for -op: a file was left on it"; }
[ -z "$(ls -A "$work/psmall_out/offload" 2>/dev/null)" ] || { ls -la "$work/psmall_out/offload"; fail "a disk too small for -op: -oo's file was left"; }
! grep -q "^step" "$work/psmall.out" || fail "a disk too small for -op: a step ran"
echo "ok   a disk too small for the parameter shard: refused at startup in one line, nothing left"

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
