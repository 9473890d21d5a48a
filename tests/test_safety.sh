#!/usr/bin/env bash
# Nothing lost: what a careless or unlucky user does to the CPU trainer. Each error case
# runs on 1 and 2 ranks and must exit non-zero within 30 s (nothing hangs) with exactly one line
# starting with "error" that matches (on 1 rank that line and warnings are all of stderr).
#  1. one run per -o: a second run into a busy folder (fresh or -y 1) is refused, naming the folder
#     and the holder (pid, host); a holder killed with SIGKILL leaves no lock behind;
#  2. a fresh run into a folder holding checkpoints (latest readable, garbage, a FIFO, or missing)
#     refuses and changes nothing; -f 1 starts over and keeps the old checkpoints until its first
#     checkpoint is complete (rank 0 killed while writing it: the old ones are intact, byte for byte);
#  3. -y 1 on a folder that does not exist creates nothing;
#  4. a FIFO as the model file, the tokens, `latest` or log.csv is refused at once;
#  5. NaN/Inf weights in a model file (in wpe rows the run never reads, in qkvw of layer 1) or in a
#     checkpoint (with valid checksums) are refused, naming the file and the tensor, before anything
#     is written;
#  6. an allocation too large (ulimit -v) is one line naming -e or -b/-t and the bytes (past the
#     startup check of the plan against MemAvailable, ZERO3_MEM_CHECK=0, which would refuse both first);
#  7. a model.bin that is a folder is refused before the run, and leaves no model.bin.tmp;
#  8. SIGTERM mid-run (to the one rank of 2 that mpirun started second, as a scheduler may) stops
#     every rank after the same step with a checkpoint and a line saying how to resume, exit
#     non-zero; the resumed run reproduces the uninterrupted one exactly (losses, model.bin); a
#     second signal ends the run at once;
#  9. scripts/launch.sh takes rank and world size from Slurm's and torchrun's variables; the data
#     script finds local copies through ZERO3_DATA_CACHE and rewrites nothing that is unchanged.
# ZERO3_TRAINER=path tests another build of the trainer (default: make train_gpt2_zero3).
. "$(dirname "$0")/lib.sh"
bg_pids=()
cleanup() { for p in "${bg_pids[@]}"; do kill -KILL "$p" 2>/dev/null; done; rm -rf "$work"; }
trap cleanup EXIT
[ -n "${ZERO3_TRAINER:-}" ] || make -s train_gpt2_zero3 >/dev/null || fail "build"
M=(-e d2c48h2t32 -b 2 -t 16 -v 0)
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# trainer NP ARGS...: the trainer on NP ranks (VMEM_KB: a virtual-memory limit for it)
trainer() {
  local np=$1; shift
  (
    [ -z "${VMEM_KB:-}" ] || ulimit -v "$VMEM_KB"
    if [ "$np" -eq 1 ]; then exec timeout 30 "$BIN" "$@"; else exec timeout 30 mpirun -np "$np" "$BIN" "$@"; fi
  )
}
# check_case WHAT PATTERN ARGS...: on 1 and on 2 ranks
check_case() {
  local what=$1 pattern=$2; shift 2
  local np rc t0 out err
  for np in 1 2; do
    out=$work/case_${BASHPID}_$np.out; err=$work/case_${BASHPID}_$np.err
    t0=$(now)
    trainer "$np" "$@" >"$out" 2>"$err"
    rc=$?
    check_failed "$what (np $np)" $rc "$out" "$err" "$pattern" 30
    if [ $np -eq 1 ] && [ "$(grep -vc '^warning: ' "$err")" -ne 1 ]; then cat "$err"; fail "$what: stderr has more than the error line (and warnings)"; fi
    printf 'ok   %-36s np=%d %4.1fs  %s\n' "$what" $np "$(since "$t0")" "$(grep '^error' "$err" | cut -c1-150)"
  done
}
# snapshot DIR: every file under DIR with its checksum (to prove a refused run changed nothing)
snapshot() { (cd "$1" && find . \( -type f -o -type p \) | sort | while read -r f; do
  if [ -p "$f" ]; then echo "$f fifo"; else echo "$f $(sha256sum <"$f" | cut -c1-16)"; fi; done); }
wait_for_step() {   # wait_for_step FILE K: until FILE shows step K
  local i
  for i in $(seq 300); do grep -q "^step *$2/" "$1" && return 0; sleep 0.05; done
  cat "$1"; fail "no step $2 in $1"
}

# ---------------------------------------------------------------- inputs
# an earlier run: checkpoints at steps 2 and 4, log.csv, model.bin
"$BIN" "${M[@]}" -x 4 -n 2 -o "$work/prev" >"$work/prev.out" 2>&1 || { cat "$work/prev.out"; fail "the earlier run failed"; }
[ "$(cat "$work/prev/latest")" = ckpt_00000004_g2 ] || fail "the earlier run's latest is not ckpt_00000004_g2"
copy() { rm -rf "$work/$1"; cp -r "$work/prev" "$work/$1"; }
copy garbage_latest; echo "not a checkpoint name" >"$work/garbage_latest/latest"
copy fifo_latest; rm "$work/fifo_latest/latest"; mkfifo "$work/fifo_latest/latest"
copy no_latest; rm "$work/no_latest/latest"
copy readable
copy fifo_log; rm "$work/fifo_log/log.csv"; mkfifo "$work/fifo_log/log.csv"
copy resume_fifo_latest; rm "$work/resume_fifo_latest/latest"; mkfifo "$work/resume_fifo_latest/latest"
for d in garbage_latest fifo_latest no_latest readable; do snapshot "$work/$d" >"$work/$d.before"; done
mkfifo "$work/fifo"
mkdir -p "$work/export_fails/model.bin"   # refused before the run: the export's rename could not replace it
# model files with a non-finite weight (d2c48h2t32: V 50257, Vp 50304, maxT 32, C 48)
$PY - "$work" <<'EOF'
import struct, sys
work = sys.argv[1]
data = bytearray(open(f"{work}/prev/model.bin", "rb").read())
Vp, maxT, C, L = 50304, 32, 48, 2
def patch(name, elem, value):
    d = bytearray(data)
    d[1024 + 4 * elem:1024 + 4 * elem + 4] = struct.pack("<f", value)
    open(f"{work}/{name}", "wb").write(d)
# wpe row 31: with -t 16 no step ever reads positions 16..31, so training alone would not notice
patch("nan_wpe.bin", Vp * C + 31 * C + 5, float("nan"))
# qkvw of layer 1, element 7: after wte, wpe, ln1w (L*C), ln1b (L*C), qkvw of layer 0 (3C*C)
patch("inf_qkvw.bin", Vp * C + maxT * C + 2 * L * C + 3 * C * C + 7, float("inf"))

# a checkpoint whose lnfb master weight is NaN, with every checksum made valid again
import os, shutil
src, dst = f"{work}/prev", f"{work}/nan_ckpt"
shutil.copytree(src, dst)
ck = f"{dst}/ckpt_00000004_g2"
meta = open(f"{ck}/meta.bin", "rb").read()
w = struct.unpack("<%dq" % (len(meta) // 8), meta)
world, nunits = w[4], w[27]
k, units = 32, []
for u in range(nunits):
    padded, nt = w[k], w[k + 1]
    units.append((padded // world, [w[k + 2 + 2 * i] for i in range(nt)]))
    k += 2 + 2 * nt
def fnv(h, b):
    for (x,) in struct.iter_unpack("<I", b):
        h = ((h ^ x) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h
INIT = 0xcbf29ce484222325
shard = bytearray(open(f"{ck}/shard_00000.bin", "rb").read())
hwords = 16 + 3 * nunits + 1
head = nunits - 1
at = 8 * hwords + 12 * sum(S for S, _ in units[:head])
S, offsets = units[head]
shard[at + 4 * offsets[1]:at + 4 * offsets[1] + 4] = struct.pack("<f", float("nan"))   # lnfb[0]
shard[8 * (16 + 3 * head):8 * (16 + 3 * head) + 8] = struct.pack("<Q", fnv(INIT, bytes(shard[at:at + 4 * S])))
shard[8 * (hwords - 1):8 * hwords] = struct.pack("<Q", fnv(INIT, bytes(shard[:8 * (hwords - 1)])))
open(f"{ck}/shard_00000.bin", "wb").write(shard)
EOF
[ $? -eq 0 ] || fail "making the broken inputs"

# ---------------------------------------------------------------- 2-7. refused at once
R=(-x 6 -n 2)
expect_error "fresh -o with checkpoints"         "flag -o: .*/readable holds checkpoints \(latest: ckpt_00000004_g2\); -y 1 resumes that run, -f 1 starts over" "${M[@]}" "${R[@]}" -o "$work/readable"
expect_error "fresh -o, latest is garbage"       "flag -o: .*/garbage_latest holds checkpoints, with a .latest. that cannot be read .*does not name a checkpoint" "${M[@]}" "${R[@]}" -o "$work/garbage_latest"
expect_error "fresh -o, latest is a FIFO"        "flag -o: .*/fifo_latest holds checkpoints, with a .latest. that cannot be read .*a FIFO" "${M[@]}" "${R[@]}" -o "$work/fifo_latest"
expect_error "fresh -o, latest missing"          "flag -o: .*/no_latest holds checkpoints \(ckpt_0000000[24]_g[12]\) but no .latest." "${M[@]}" "${R[@]}" -o "$work/no_latest"
expect_error "-y 1 on a missing folder"          "flag -y: .*/missing/out does not exist" "${M[@]}" "${R[@]}" -o "$work/missing/out" -y 1
expect_error "model file is a FIFO"              "flag -e: cannot open model file .*/fifo \(a FIFO, not a regular file\)" -e "$work/fifo" -b 2 -t 16 -x 1
expect_error "tokens are a FIFO"                 "flag -i: .*/fifo: cannot open token file \(a FIFO, not a regular file\)" "${M[@]}" -x 1 -i "$work/fifo"
expect_error "resume: latest is a FIFO"          "resume_fifo_latest/latest: cannot open \(a FIFO, not a regular file\)" "${M[@]}" -x 6 -o "$work/resume_fifo_latest" -y 1
expect_error "resume: log.csv is a FIFO"         "flag -o: .*/fifo_log/log.csv is not a regular file \(it is a FIFO\)" "${M[@]}" -x 4 -o "$work/fifo_log" -y 1
expect_error "model: NaN in wpe rows never read" "model file .*/nan_wpe.bin: tensor wpe holds nan at element 1493: the weights must be finite" -e "$work/nan_wpe.bin" -b 2 -t 16 -v 0 -x 2 -o "$work/nan_out"
expect_error "model: Inf in qkvw of layer 1"     "model file .*/inf_qkvw.bin: tensor qkvw of layer 1 holds inf at element 7" -e "$work/inf_qkvw.bin" -b 2 -t 16 -v 0 -x 2
expect_error "checkpoint: NaN (checksums valid)" "checkpoint file .*/nan_ckpt/ckpt_00000004_g2/shard_00000.bin: master weights of tensor lnfb in unit head holds nan" "${M[@]}" -x 6 -o "$work/nan_ckpt" -y 1
VMEM_KB=2000000 ZERO3_MEM_CHECK=0 expect_error "out of memory: model state"  "out of memory: the model state of -e d48 \(.*\) asked for [0-9.]+ GiB \([0-9]+ bytes\) of host memory" -e d48 -x 1 -v 0
VMEM_KB=2000000 ZERO3_MEM_CHECK=0 expect_error "out of memory: activations"  "out of memory: the activations of -b 4000 -t 32 for -e d2c48h2t32 asked for [0-9.]+ GiB \([0-9]+ bytes\)" -e d2c48h2t32 -b 4000 -t 32 -v 0 -x 1 -j data/tinyshakespeare/tiny_shakespeare_train.bin
expect_error "model.bin is a folder"             "flag -o: .*/export_fails/model.bin is not a regular file \(it is a folder\)" "${M[@]}" -x 1 -o "$work/export_fails" -f 1
finish_cases
for d in garbage_latest fifo_latest no_latest readable; do
  snapshot "$work/$d" | diff "$work/$d.before" - >/dev/null || { snapshot "$work/$d" | diff "$work/$d.before" -; fail "a refused run changed $d"; }
done
echo "ok   the refused runs left every folder as it was (files and checksums)"
[ ! -e "$work/missing" ] || fail "-y 1 on a missing folder created $(find "$work/missing")"
[ ! -e "$work/nan_out/latest" ] && [ ! -e "$work/nan_out/model.bin" ] || fail "a model with NaN weights was checkpointed or exported"
[ -z "$(find "$work/export_fails" -name '*.tmp')" ] || fail "a failed export left $(find "$work/export_fails" -name '*.tmp')"
[ ! -e "$work/export_fails/.lock" ] || fail "a failed run left its .lock"
echo "ok   nothing created by -y 1 on a missing folder, nothing written from NaN weights, no temp file after a failed export"

# ---------------------------------------------------------------- 2. -f 1 keeps the old checkpoints until its first is complete
copy start_over; echo "garbage" >"$work/start_over/latest"
(cd "$work/start_over" && sha256sum ckpt_*/*) >"$work/old_ckpts"
ZERO3_INJECT_CKPT_CRASH=2 timeout 60 mpirun -np 2 -x ZERO3_INJECT_CKPT_CRASH "$BIN" "${M[@]}" -x 4 -n 2 -o "$work/start_over" -f 1 \
  >"$work/start_over.out" 2>&1 && fail "-f 1: the injected crash did not happen"
(cd "$work/start_over" && sha256sum -c --quiet "$work/old_ckpts") || fail "-f 1: the old checkpoints changed before the new run's first was complete"
[ "$(cat "$work/start_over/latest")" = garbage ] || fail "-f 1: latest moved before the new checkpoint was complete"
[ -d "$work/start_over/ckpt_00000002_g3" ] || { ls "$work/start_over"; fail "-f 1: the new checkpoint should be generation 3 (above the old ones)"; }
timeout 60 mpirun -np 2 "$BIN" "${M[@]}" -x 4 -n 2 -o "$work/start_over" -f 1 >"$work/start_over2.out" 2>&1 \
  || { cat "$work/start_over2.out"; fail "-f 1: the start-over run failed"; }
[ "$(cat "$work/start_over/latest")" = ckpt_00000004_g5 ] || fail "-f 1: latest should name the new run's ckpt_00000004_g5"
[ "$(cd "$work/start_over" && ls -d ckpt_* | tr '\n' ' ')" = "ckpt_00000002_g4 ckpt_00000004_g5 " ] || { ls "$work/start_over"; fail "-f 1: expected only the new run's two checkpoints at the end"; }
echo "ok   -f 1 over a garbage latest: rank 0 killed writing the first checkpoint left the old ones intact; a complete start-over replaced them"

# ---------------------------------------------------------------- 1. one run per folder
"$BIN" "${M[@]}" -x 100000 -o "$work/busy" >"$work/busy.out" 2>&1 &
holder=$!; bg_pids+=("$holder")
wait_for_step "$work/busy.out" 2
check_case "second run into a busy -o"          "flag -o: .*/busy is in use by another run \(pid $holder on host .*, started .*\): two runs in one folder" "${M[@]}" -x 2 -o "$work/busy"
check_case "second run (-y 1) into a busy -o"   "flag -o: .*/busy is in use by another run \(pid $holder " "${M[@]}" -x 2 -o "$work/busy" -y 1
kill -0 "$holder" 2>/dev/null || fail "the first run died from the second's attempts"
kill -KILL "$holder"; wait "$holder" 2>/dev/null
[ -f "$work/busy/.lock" ] || fail "expected the killed run's .lock file to stay (its lock is gone with the process)"
timeout 30 "$BIN" "${M[@]}" -x 2 -o "$work/busy" -f 1 >"$work/busy2.out" 2>&1 || { cat "$work/busy2.out"; fail "a run after the holder was killed was refused"; }
[ ! -e "$work/busy/.lock" ] || fail "a finished run left its .lock"
echo "ok   a run killed with SIGKILL holds no lock: the next run (-f 1) goes ahead; a finished run removes .lock"

# ---------------------------------------------------------------- 8. SIGTERM: finish the step, checkpoint, resume exactly
# 60 steps of about 16 ms: the signal, sent once step 3 shows, lands with nearly a second to spare
S=(-e d2c48h2t32 -b 2 -t 16 -v 4 -m 1 -x 60 -n 8 -l 1e-3)
for np in 1 2; do
  if [ $np -eq 1 ]; then run=("$BIN"); else run=(mpirun -np 2 "$BIN"); fi
  timeout 120 "${run[@]}" "${S[@]}" -o "$work/straight$np" >"$work/straight$np.out" 2>&1 || { cat "$work/straight$np.out"; fail "np $np: the uninterrupted run failed"; }
  "${run[@]}" "${S[@]}" -o "$work/term$np" >"$work/term$np.out" 2>"$work/term$np.err" &
  pid=$!; bg_pids+=("$pid")
  wait_for_step "$work/term$np.out" 3
  if [ $np -eq 1 ]; then victim=$pid; else victim=$(pgrep -P "$pid" | sed -n 2p); fi
  [ -n "$victim" ] || fail "np $np: no rank process to signal"
  kill -TERM "$victim"
  wait "$pid"; rc=$?
  [ $rc -ne 0 ] || fail "np $np: exit 0 after SIGTERM, want non-zero"
  [ $np -ne 1 ] || [ $rc -eq 143 ] || fail "np 1: exit $rc after SIGTERM, want 143 (128 + SIGTERM)"
  line=$(grep '^stopped by SIGTERM' "$work/term$np.err")
  [ "$(echo "$line" | grep -c .)" -eq 1 ] || { cat "$work/term$np.err"; fail "np $np: want one 'stopped by SIGTERM' line"; }
  k=$(echo "$line" | sed -n 's/^stopped by SIGTERM after step \([0-9]*\) of 60: checkpoint .* is complete; resume with the same command and -y 1$/\1/p')
  [ -n "$k" ] && [ "$k" -ge 3 ] && [ "$k" -lt 60 ] || { echo "$line"; fail "np $np: the stop line does not say the step and how to resume"; }
  grep -q '^error' "$work/term$np.err" && { cat "$work/term$np.err"; fail "np $np: an error line after SIGTERM"; }
  # (the generation counts the checkpoints before it: one each 8 steps, then the stop's own)
  grep -qx "$(printf 'ckpt_%08d_g' "$k")[0-9]*" "$work/term$np/latest" || fail "np $np: latest should name the step-$k checkpoint"
  [ ! -e "$work/term$np/model.bin" ] || fail "np $np: a stopped run should not export"
  [ ! -e "$work/term$np/.lock" ] || fail "np $np: a stopped run left its .lock"
  timeout 120 "${run[@]}" "${S[@]}" -o "$work/term$np" -y 1 >"$work/resume$np.out" 2>&1 || { cat "$work/resume$np.out"; fail "np $np: resume failed"; }
  # the same steps and losses; a validation the signal cut short leaves its val_loss empty (docs/operations.md)
  paste -d, <(cut -d, -f1-3 "$work/straight$np/log.csv") <(cut -d, -f1-3 "$work/term$np/log.csv") \
    | awk -F, '$1 != $4 || $2 != $5 || ($6 != "" && $3 != $6) { bad = 1; print } END { exit bad }' >"$work/diff" \
    || { cat "$work/diff"; fail "np $np: losses after SIGTERM + resume differ from the uninterrupted run"; }
  cmp -s "$work/straight$np/model.bin" "$work/term$np/model.bin" || fail "np $np: model.bin differs from the uninterrupted run's"
  echo "ok   np=$np: SIGTERM$([ $np -eq 2 ] && echo " to rank 1 only") stopped every rank after step $k with a checkpoint (exit $rc); resumed: losses and model.bin identical"
done
# a second signal ends the run at once (a slower model, so the step is still running when it comes)
"$BIN" -e d4c128h4t64 -b 8 -t 64 -v 0 -x 1000 -o "$work/twice" >"$work/twice.out" 2>"$work/twice.err" &
pid=$!; bg_pids+=("$pid")
wait_for_step "$work/twice.out" 1
kill -INT "$pid"
for _ in $(seq 200); do grep -q '^stop requested' "$work/twice.err" && break; sleep 0.01; done
grep -q '^stop requested' "$work/twice.err" || fail "the first SIGINT was not acknowledged"
t0=$(now); kill -INT "$pid"; wait "$pid"; rc=$?
[ $rc -eq 130 ] || { cat "$work/twice.err"; fail "second signal: exit $rc, want 130 (killed by SIGINT)"; }
grep -q '^stopped by' "$work/twice.err" && fail "second signal: the run finished its step instead of stopping at once"
echo "ok   a second SIGINT ended the run at once ($(since "$t0") s, exit $rc), the first was acknowledged on stderr"

# ---------------------------------------------------------------- 9. launch.sh under Slurm / torchrun; data from a local cache
vars() { grep -E '^(RANK|WORLD_SIZE|LOCAL_RANK)=' | sort | tr '\n' ' '; }
got=$(env -u RANK -u WORLD_SIZE SLURM_PROCID=5 SLURM_NTASKS=16 SLURM_LOCALID=1 SLURM_JOB_ID=42 SLURM_STEP_ID=0 scripts/launch.sh env | vars)
[ "$got" = "LOCAL_RANK=1 RANK=5 WORLD_SIZE=16 " ] || fail "launch.sh under Slurm: got '$got'"
env -u SLURM_PROCID SLURM_PROCID=5 SLURM_NTASKS=16 SLURM_JOB_ID=42 SLURM_STEP_ID=3 scripts/launch.sh env | grep -q "^ZERO3_RENDEZVOUS=.*slurm42.3$" \
  || fail "launch.sh under Slurm: the rendezvous file is not named after the job step"
got=$(env -u SLURM_PROCID RANK=2 WORLD_SIZE=4 LOCAL_RANK=0 scripts/launch.sh env | vars)
[ "$got" = "LOCAL_RANK=0 RANK=2 WORLD_SIZE=4 " ] || fail "launch.sh under torchrun: got '$got'"
env -u SLURM_PROCID RANK=4 WORLD_SIZE=4 scripts/launch.sh true 2>/dev/null && fail "launch.sh accepted RANK=4 of WORLD_SIZE=4"
echo "ok   launch.sh takes RANK/WORLD_SIZE/LOCAL_RANK from SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID and from torchrun's variables"
if [ -n "${ZERO3_DATA_CACHE:-}" ]; then text=$ZERO3_DATA_CACHE/tinyshakespeare/input.txt; vocab=$ZERO3_DATA_CACHE/gpt2
else text=data/tinyshakespeare/tiny_shakespeare.txt; vocab=data/tinyshakespeare; fi
if [ -f "$text" ] && [ -f "$vocab/encoder.json" ]; then
  mkdir -p "$work/cache/tinyshakespeare" "$work/cache/gpt2"
  cp "$text" "$work/cache/tinyshakespeare/input.txt"; cp "$vocab/encoder.json" "$vocab/vocab.bpe" "$work/cache/gpt2/"
  ZERO3_DATA_CACHE=$work/cache $PY data/tinyshakespeare.py --out "$work/data" >"$work/data.out" 2>&1 || { cat "$work/data.out"; fail "data from the cache failed"; }
  [ "$(grep -c '^using the local copy' "$work/data.out")" -eq 3 ] && ! grep -q '^downloading' "$work/data.out" \
    || { cat "$work/data.out"; fail "data: want the 3 inputs from the cache, no download"; }
  stamps() { stat -c '%n %Y.%y' "$work"/data/*.bin; }
  stamps >"$work/stamps"; sleep 1
  ZERO3_DATA_CACHE=$work/nowhere $PY data/tinyshakespeare.py --out "$work/data" >"$work/data2.out" 2>&1 || { cat "$work/data2.out"; fail "data: a second run failed"; }
  stamps | diff "$work/stamps" - >/dev/null || fail "data: a second run rewrote unchanged files"
  echo "ok   data from ZERO3_DATA_CACHE (3 local copies, no download); a second run rewrites nothing"
else
  echo "skip data cache: no local copy of the text and vocabulary (make data first)"
fi
echo "test_safety: all passed"
