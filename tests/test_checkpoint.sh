#!/usr/bin/env bash
# Sharded checkpoints (checkpoint.h): an interrupted run resumed with -y 1 reproduces the
# uninterrupted run EXACTLY (log.csv train/val loss strings, the samples after the resume (with samples
# before the checkpoint too, so the sampling RNG it restores is not its seed value), and the
# exported model.bin byte for byte), on 1 rank and on 2 ranks with gradient accumulation, also when
# the checkpoint is resharded on the way: N=2 stage 3 -> N=3 stage 1 -> N=1 stage 0 (DDP) -> N=2
# stage 3. The reference is the same trainer run without interruption; the interruption is a NaN
# injected at a step (ZERO3_INJECT_NAN_STEP), which stops the run after its last checkpoint.
# Also: only the newest two checkpoints are kept, and `latest` names the newest; a resume with other
# recorded flags warns once for each (host/cli.c's table), with the values as typed (-p bf16), and one
# with the same flags not at all; a resume at -x equal to the checkpoint's step on the same N and stage
# leaves the checkpoints as they were; a corrupt shard read by several ranks is one error line.
# ZERO3_TRAINER=path tests another build of the trainer (default: make train_gpt2_zero3).
. "$(dirname "$0")/lib.sh"
[ -n "${ZERO3_TRAINER:-}" ] || make -s train_gpt2_zero3 >/dev/null || fail "build"

# run NAME NP ARGS...: the trainer on NP ranks, stdout+stderr to $work/NAME.out; returns its exit code
run() {
  local name=$1 np=$2; shift 2
  if [ "$np" -eq 1 ]; then timeout 300 "$BIN" "$@" >"$work/$name.out" 2>&1
  else timeout 300 mpirun -np "$np" ${ZERO3_INJECT_NAN_STEP:+-x ZERO3_INJECT_NAN_STEP} "$BIN" "$@" >"$work/$name.out" 2>&1; fi
}
must_run() { run "$@" || { cat "$work/$1.out"; fail "$1: exit $?"; }; }
must_stop() { ! run "$@" || { cat "$work/$1.out"; fail "$1: should have stopped at the injected NaN"; }
              grep -q "is not finite" "$work/$1.out" || { cat "$work/$1.out"; fail "$1: no 'not finite' message"; }; }
# losses: step,train_loss,val_loss of a log.csv (the strings, as written)
losses() { cut -d, -f1-3 "$1/log.csv"; }
# samples_after STEP FILE: the sample blocks printed after step STEP (1-based step lines)
samples_after() { awk -v s="$1" '/^step /{split($2, a, "/"); n = a[1] + 0} /^---- sample/{p = (n > s)} p {print} /^----$/{p = 0}' "$2"; }
same_run() {   # same_run WHAT REF_DIR DIR: identical losses and model.bin
  diff <(losses "$2") <(losses "$3") >"$work/diff" || { cat "$work/diff"; fail "$1: losses differ from the uninterrupted run"; }
  [ "$(losses "$3" | wc -l)" -eq 7 ] || { losses "$3"; fail "$1: log.csv should have a header and 6 rows"; }
  cmp -s "$2/model.bin" "$3/model.bin" || fail "$1: model.bin differs from the uninterrupted run's"
}

M=(-e d2c48h2t32 -b 2 -t 16 -v 3 -m 1 -x 6 -n 2 -l 1e-3 -c 0.1 -u 2 -q 0.1)

# ---------------------------------------------------------------- 1 rank, stage 3, with sampling
must_run straight1 1 "${M[@]}" -s 1 -g 12 -o "$work/straight1"
ZERO3_INJECT_NAN_STEP=3 must_stop broken1 1 "${M[@]}" -s 1 -g 12 -o "$work/resumed1"
[ "$(cat "$work/resumed1/latest")" = "ckpt_00000002_g1" ] || fail "after the NaN at step 3, latest should name the step-2 checkpoint"
must_run resumed1 1 "${M[@]}" -s 1 -g 12 -o "$work/resumed1" -y 1
grep -q "resume: .*ckpt_00000002_g1, step 2" "$work/resumed1.out" || fail "the resumed run does not say where it resumed"
same_run "1 rank" "$work/straight1" "$work/resumed1"
diff <(samples_after 2 "$work/straight1.out") <(samples_after 2 "$work/resumed1.out") >"$work/diff" \
  || { cat "$work/diff"; fail "1 rank: the samples after the resume differ (sampling RNG not restored?)"; }
[ "$(samples_after 2 "$work/resumed1.out" | grep -c '^---- sample')" -eq 4 ] || fail "1 rank: expected 4 samples after step 2"
[ "$(grep -c '^---- sample' "$work/broken1.out")" -ge 2 ] || fail "1 rank: the interrupted run should have sampled before its checkpoint"
# a resume with the same flags says nothing about them; one with other recorded flags (cli.c's table)
# warns once for each, naming the flag, the checkpoint's value and this run's
! grep -q "^warning: the checkpoint" "$work/resumed1.out" || { cat "$work/resumed1.out"; fail "a resume with the same flags warned"; }
cp -r "$work/resumed1" "$work/changed1"
must_run changed1 1 "${M[@]}" -x 8 -l 2e-3 -S 7 -o "$work/changed1" -y 1
grep "^warning: the checkpoint" "$work/changed1.out" | cut -d: -f1-2 | cut -d, -f1 >"$work/warned"
printf '%s\n' "warning: the checkpoint was written with -x 6" "warning: the checkpoint was written with -l 0.001" \
  "warning: the checkpoint was written with -S 1337" | diff - "$work/warned" >"$work/diff" \
  || { cat "$work/diff" "$work/changed1.out"; fail "a resume with -x, -l and -S changed should warn for those three, in the table's order"; }
grep -q "^warning: the checkpoint was written with -l 0.001, this run has -l 0.002: the LR schedule" "$work/changed1.out" \
  || { cat "$work/changed1.out"; fail "the -l warning should give both values and what the change means"; }
echo "ok   1 rank: interrupted at step 3, resumed from step 2: losses, samples and model.bin identical"
# keep the newest two
ls -d "$work"/straight1/ckpt_* | xargs -n1 basename >"$work/kept"
[ "$(cat "$work/kept" | tr '\n' ' ')" = "ckpt_00000004_g2 ckpt_00000006_g3 " ] || { cat "$work/kept"; fail "expected only the checkpoints of steps 4 and 6"; }
[ "$(cat "$work/straight1/latest")" = "ckpt_00000006_g3" ] || fail "latest should name the step-6 checkpoint"
echo "ok   only the newest two checkpoints are kept; latest names the newest"

# ---------------------------------------------------------------- resharding chain, with accumulation
# -d 192 tokens/step: A=3 on 2 ranks, A=2 on 3, A=6 on 1 (the data order is the same on all)
D=(-d 192)
must_run straight2 2 "${M[@]}" "${D[@]}" -z 3 -o "$work/straight2"
ZERO3_INJECT_NAN_STEP=3 must_stop broken2 2 "${M[@]}" "${D[@]}" -z 3 -o "$work/chain"
must_run reshard3 3 "${M[@]}" "${D[@]}" -z 1 -x 2 -o "$work/chain" -y 1   # no steps: reshard and save
grep -q "written on N=2 at ZeRO stage 3, resharded" "$work/reshard3.out" || fail "N=3: no resharding message"
[ "$(ls "$work/chain/$(cat "$work/chain/latest")" | grep -c shard_)" -eq 3 ] || fail "N=3 should write 3 shard files"
must_run reshard1 1 "${M[@]}" "${D[@]}" -z 0 -x 2 -o "$work/chain" -y 1
grep -q "written on N=3 at ZeRO stage 1, resharded" "$work/reshard1.out" || fail "N=1: no resharding message"
must_run resumed2 2 "${M[@]}" "${D[@]}" -z 3 -o "$work/chain" -y 1
grep -q "written on N=1 at ZeRO stage 0, resharded" "$work/resumed2.out" || fail "N=2: no resharding message"
same_run "resharded 2->3->1->2" "$work/straight2" "$work/chain"
echo "ok   2 ranks, A=3: checkpoint resharded N=2 z3 -> N=3 z1 -> N=1 z0 -> N=2 z3, resumed: losses and model.bin identical"
# the chain's exports at step 2 (written on 3 and on 1 rank) were the same model: the last resume
# started from it, and its run matches, so the state survived both reshards bit for bit

# ---------------------------------------------------------------- a resume changes nothing it need not
# -x equal to the checkpoint's step on its own N and stage: no step, model.bin exported, and the
# checkpoints on disk (names, latest, bytes) exactly as they were
cp -r "$work/straight1" "$work/same1"
ckpts() { (cd "$1" && cat latest && find . -path './ckpt_*' -type f -exec sha256sum {} + | sort); }
ckpts "$work/same1" >"$work/ckpts_before"
must_run same1 1 "${M[@]}" -o "$work/same1" -y 1
ckpts "$work/same1" | diff "$work/ckpts_before" - >"$work/diff" || { cat "$work/diff" "$work/same1.out"; fail "a resume at -x = its step, same N and stage, changed the checkpoints"; }
cmp -s "$work/straight1/model.bin" "$work/same1/model.bin" || fail "the resume at -x = its step exported another model"
echo "ok   a resume at -x = the checkpoint's step, same N and stage: the checkpoints untouched, model.bin the same"

# ---------------------------------------------------------------- messages in the user's words
# a bf16 checkpoint resumed in fp32: the warning quotes -p as typed
must_run bf16 1 "${M[@]}" -x 2 -p bf16 -o "$work/bf16"
must_run fp32 1 "${M[@]}" -x 3 -p fp32 -o "$work/bf16" -y 1
grep -q "^warning: the checkpoint was written with -p bf16, this run has -p fp32: " "$work/fp32.out" ||
  { grep '^warning' "$work/fp32.out"; fail "the -p warning should say -p bf16 and -p fp32, as typed"; }
# one flipped bit in a shard that two of 3 ranks read after resharding from 2: one error line
cp -r "$work/straight2" "$work/flip"
shard=$work/flip/$(cat "$work/flip/latest")/shard_00001.bin
$PY -c "import sys; b = bytearray(open(sys.argv[1], 'rb').read()); b[len(b) // 2] ^= 0x10; open(sys.argv[1], 'wb').write(b)" "$shard"
! run flip 3 "${M[@]}" "${D[@]}" -z 3 -x 8 -o "$work/flip" -y 1 || fail "a resume from a corrupt shard ran"
[ "$(grep -c '^error' "$work/flip.out")" -eq 1 ] && grep -q "^error.*shard_00001.bin: .*checksum mismatch" "$work/flip.out" ||
  { grep '^error' "$work/flip.out"; fail "a corrupt shard read by 2 ranks: want one error line naming it"; }
echo "ok   resume warnings quote -p bf16 / -p fp32; a corrupt shard read by 2 of 3 ranks is one error line"
# a log.csv written before mem_engine_peak_bytes (12 columns, mem_peak_bytes holding the engine's peak):
# resumed, it is rewritten in today's columns, each old row's engine peak moved to the last column and
# its process peak left empty, the rows after it complete; a log of other columns is refused in one line
# and left as it was
cp -r "$work/straight1" "$work/oldlog"
$PY - "$work/oldlog/log.csv" <<'PY'
import sys
rows = open(sys.argv[1]).read().splitlines()
out = ["step,train_loss,val_loss,lr,grad_norm,ms,tokens_per_s,comm_bytes,mem_states_bytes,mem_peak_bytes,compute_ms,exposed_comm_ms"]
for r in rows[1:]:
    f = r.split(",")
    out.append(",".join(f[:9] + [f[12]] + f[10:12]))   # the old layout: the engine's peak in column 10
open(sys.argv[1], "w").write("\n".join(out) + "\n")
PY
head -3 "$work/oldlog/log.csv" | cut -d, -f9-12 > "$work/oldlog.head"
must_run oldlog 1 "${M[@]}" -s 1 -g 12 -x 8 -o "$work/oldlog" -y 1
$PY - "$work/straight1/log.csv" "$work/oldlog/log.csv" <<'PY' || fail "the resumed old-column log: see above"
import sys
new, got = [open(p).read().splitlines() for p in sys.argv[1:]]
assert got[0] == new[0], f"header {got[0]!r}, want {new[0]!r}"
assert len(got) == 9, f"{len(got)} lines, want a header and 8 rows"
ref_rows = {int(r.split(",")[0]): r.split(",") for r in new[1:]}
for row in got[1:]:
    g = row.split(",")
    assert len(g) == 13, f"row {row!r}: {len(g)} fields"
    step = int(g[0])
    if step in ref_rows:   # the old rows: their engine peak moved to the end, no process peak
        r = ref_rows[step]
        assert g[9] == "" and g[12] == r[12] and g[:9] == r[:9] and g[10:12] == r[10:12], f"old row {row!r} against {r}"
    else:
        assert g[9] != "" and g[12] != "", f"new row {row!r} incomplete"
assert sorted(int(r.split(",")[0]) for r in got[1:]) == list(range(8)), "want the steps 0-7"
print("ok   a resumed 12-column log.csv is rewritten in 13, each figure where it belongs")
PY
cp -r "$work/straight1" "$work/otherlog"
sed -i '1s/.*/step,loss,something_else/' "$work/otherlog/log.csv"
cp "$work/otherlog/log.csv" "$work/otherlog.csv"
! run otherlog 1 "${M[@]}" -s 1 -g 12 -x 8 -o "$work/otherlog" -y 1 || fail "a resume onto a log of other columns ran"
[ "$(grep -c '^error' "$work/otherlog.out")" -eq 1 ] && grep -q "^error.*log.csv has other columns than this trainer writes" "$work/otherlog.out" ||
  { cat "$work/otherlog.out"; fail "a log of other columns: want one error line naming it"; }
cmp -s "$work/otherlog/log.csv" "$work/otherlog.csv" || fail "the refused resume changed the log"
echo "ok   a log of other columns is refused in one line and left as it was"
echo "test_checkpoint: all passed"
