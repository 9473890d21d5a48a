#!/usr/bin/env bash
# The GPU trainer itself (train_gpt2_zero3.cu, BF16) on the CPU emulator of CUDA (tools/emu), for
# what its end-of-run summary and data loading say (~1 minute, most of it the build):
#   - the cuBLASLt epilogue fallback line, `epilogue fallbacks: gelu N, bgradb M`, against a count by
#     hand: with the emulated library playing one without the GELU and bias-gradient epilogues
#     (EMU_LT_NO_GELU=1 EMU_LT_NO_BGRAD=1) every GEMM that asks for one falls back: per layer and
#     step the fc forward (GELU) and the fcproj backward (DGELU), and the four bias gradients (BGRADB);
#     per layer and validation batch the fc forward again. With the epilogues present: 0 and 0.
#   - the runtime switches a rerun on a GPU uses to tell rounding from a bug: ZERO3_GPU_EPILOGUES=0
#     (plain GEMMs, then the bias, GELU and bias-gradient kernels) and ZERO3_GPU_ATTENTION=portable
#     (the portable attention in the tensor-core build) give the default path's losses within 2e-3
#     relative, and the end-of-run line and the description say which path ran;
#   - -v 0 never opens the validation file; a validation split shorter than one batch validates.
#   - -p on a build of one precision (BF16): -h gives bf16 as its default, -p fp32 is refused with one
#     line naming the flag and the build, -p bf16 runs, and meta.bin's precision word (docs/
#     CHECKPOINT_FORMAT.md, read here from the file) is 1 for bf16.
#   - ZeRO++ on the GPU backend (-qw 8 -hp 2 -qg 8: int8 gathers, node-group all-gathers, grouped
#     send/receive all-to-all) on 2 emulated ranks gives the CPU trainer's losses.
#   - -ct on the GPU backend (its NCCL watchdog), 2 emulated ranks: -ct 10 without a fault keeps the
#     losses bitwise; rank 1 stopped mid-gather (EMU_NCCL_FREEZE) ends every rank within -ct and 6 s
#     with one error line naming the all-gather, the step and the peer.
#   - -oo host (the optimizer shard in pinned host memory, AdamW on the host): model.bin, every
#     checkpoint shard (master, m, v) and log.csv's losses byte for byte those of the run without it,
#     stages 0-3, BF16 and FP32 builds, 1 and 2 ranks; the device's model state (log.csv) smaller by
#     the report's host bytes, 12 (bf16) or 8 (fp32) a parameter of the shard, and the plan's figure
#     for them the model's 267912 parameters (by hand) times that, over the ranks that shard it;
#     a checkpoint written without it resumed with it as the straight run; -clip local's probe line
#     the same with it; the step's pipeline in pieces of 1000 elements (BF16 1 rank, FP32 2 ranks)
#     and in whole segments (ZERO3_GPU_HOST_PIECE) bitwise too, a malformed piece refused (~2 minutes).
#   - -ua 1 (each unit's AdamW inside the backward, -gc 0; the device's AdamW one launch a unit):
#     model.bin, every checkpoint shard and log.csv's losses and grad norms byte for byte -ua 0's,
#     BF16 1 rank (-z 3) and FP32 2 ranks (-z 1, -z 3).
#   - scripts/launch.sh ends its ranks when one fails, SIGKILLing those alive 10 s after SIGTERM.
. "$(dirname "$0")/lib.sh"
command -v g++ >/dev/null || { echo "SKIP: no g++ for the emulator"; exit 0; }
make -s dumps >/dev/null || fail "make dumps"
MODEL=tests/reference/dumps/small_model.bin    # L=3 C=72 NH=3 V=1024 maxT=64 (tests/reference/gpt2_reference.py)
TOKENS=tests/reference/dumps/small_tokens.bin  # tinyshakespeare's validation split, ids modulo 1024
L=3
t0=$(date +%s)
tools/emu/build.sh "$work/train" train_gpt2_zero3.cu -DENABLE_BF16 --library \
  >"$work/build.log" 2>&1 || { tail -20 "$work/build.log"; fail "emulator build of train_gpt2_zero3.cu"; }
echo "build: $(( $(date +%s) - t0 )) s"
# a 50-token validation split: fewer than B*T+1 = 65 at -b 2 -t 32
$PY - "$TOKENS" "$work/short_val.bin" <<'EOF' || fail "writing the short split"
import sys
data = open(sys.argv[1], "rb").read()
header = bytearray(data[:1024]); header[8:12] = (50).to_bytes(4, "little")
open(sys.argv[2], "wb").write(bytes(header) + data[1024:1024 + 100])
EOF

# -p on the BF16 build: its default, the other value refused (one line, no output folder made), its own
# value trained and recorded in meta.bin (word 30: 1 bf16, 0 fp32)
# (the help held in a variable, not piped: with pipefail, grep -q ending first fails the pipe)
help=$("$work/train" -h)
grep -qE '^ .* default bf16 \(built with PRECISION=BF16\)$' <<<"$help" ||
  { "$work/train" -h | grep -A2 -- '-p fp32'; fail "-h on the BF16 build does not give bf16 as -p's default"; }
timeout -k 10 60 "$work/train" -e "$MODEL" -i "$TOKENS" -b 2 -t 32 -x 1 -v 0 -o "$work/p_fp32" -p fp32 >"$work/p_fp32.log" 2>&1 &&
  fail "-p fp32 on the BF16 build ran"
[ "$(cat "$work/p_fp32.log")" = "error: flag -p fp32: this build is bf16 (built with PRECISION=BF16); rebuild with PRECISION=FP32" ] ||
  { cat "$work/p_fp32.log"; fail "-p fp32 on the BF16 build: want one error line naming the flag and the build"; }
[ ! -e "$work/p_fp32" ] || fail "-p fp32 on the BF16 build made its output folder"
precision_word() {  # the precision word (30) of the one meta.bin under DIR
  $PY -c 'import struct, sys; print(struct.unpack_from("<q", open(sys.argv[1], "rb").read(), 30 * 8)[0])' \
    "$(find "$1" -name meta.bin | head -1)"
}
timeout -k 10 120 "$work/train" -e "$MODEL" -i "$TOKENS" -b 2 -t 32 -x 1 -v 0 -n 1 -o "$work/p_bf16" -p bf16 >"$work/p_bf16.log" 2>&1 ||
  { tail -5 "$work/p_bf16.log"; fail "-p bf16 on the BF16 build"; }
word=$(precision_word "$work/p_bf16")
[ "$word" = 1 ] || fail "the BF16 build's meta.bin records precision '$word', want 1 (bf16)"
echo "ok   -p on the BF16 build: -h's default bf16, -p fp32 refused in one line, -p bf16 runs, meta.bin records 1 (bf16)"

# -oo host against the run without it (header): host_offload WHAT BYTES_A_PARAM RANKS LAUNCH...
PSI=267912   # the small model's parameters: V*C + maxT*C + L*(12C^2 + 13C) + 2C at V=1024 maxT=64 C=72 L=3
host_offload() {
  local what=$1 per=$2 ranks=$3; shift 3
  local z a b f
  for z in 0 1 2 3; do
    a="$work/oo_${ranks}_${per}_z${z}_none"; b="$work/oo_${ranks}_${per}_z${z}_host"
    timeout -k 10 300 "$@" -e "$MODEL" -i "$TOKENS" -b 2 -t 32 -x 3 -v 0 -z $z -o "$a" >"$a.log" 2>&1 ||
      { tail -20 "$a.log"; fail "$what -z $z: exit $?"; }
    timeout -k 10 300 "$@" -e "$MODEL" -i "$TOKENS" -b 2 -t 32 -x 3 -v 0 -z $z -oo host -o "$b" >"$b.log" 2>&1 ||
      { tail -20 "$b.log"; fail "$what -z $z -oo host: exit $?"; }
    for f in model.bin $(cd "$a" && ls ckpt_*/shard_*.bin); do
      cmp -s "$a/$f" "$b/$f" || fail "$what -z $z -oo host: $f differs from the run's without it"
    done
    [ "$(cut -d, -f2 "$a/log.csv")" = "$(cut -d, -f2 "$b/log.csv")" ] || fail "$what -z $z -oo host: log.csv's losses differ"
    $PY - "$a/log.csv" "$b/log.csv" "$b.log" "$per" "$ranks" "$z" "$PSI" <<'EOF' || fail "$what -z $z -oo host: the memory figures"
import csv, re, sys
none_csv, host_csv, log = sys.argv[1:4]
per, ranks, z, psi = (int(x) for x in sys.argv[4:])
state = lambda path: int(list(csv.DictReader(open(path)))[-1]["mem_states_bytes"])
m = re.search(r"-oo host: the optimizer shard in pinned host memory, .*: (\d+) bytes \((\d+) a parameter; "
              r"the plan's, unpadded: (\d+)\); device (\d+) bytes", open(log).read())
if not m: sys.exit("no -oo host line in the report")
host, said, plan, device = (int(x) for x in m.groups())
shard = psi if z == 0 else psi / ranks   # DDP keeps the whole optimizer state on every rank
checks = [(said == per, f"{said} bytes a parameter, want {per}"),
          (device == state(host_csv), f"the report's device {device} != log.csv's {state(host_csv)}"),
          (state(none_csv) - state(host_csv) == host, f"the device's drop {state(none_csv) - state(host_csv)} != host {host}"),
          (plan == per * shard, f"the plan's {plan} != {per} x {shard} by hand"),
          (plan <= host < plan * 1.01, f"host {host} is not the plan's {plan} and its padding (< 1%)")]
for ok, why in checks:
    if not ok: sys.exit(why)
EOF
  done
  echo "ok   -oo host, $what: stages 0-3 bitwise the runs without it (model.bin, shards, losses); device state down by the host's $per bytes a parameter of the shard = the plan's + padding"
}
host_offload "BF16, 1 rank" 12 1 "$work/train"
# -ua 1 against -ua 0 (header): in_backward WHAT STAGES LAUNCH...
in_backward() {
  local what=$1 stages=$2; shift 2
  local z a b f
  for z in $stages; do
    a="$work/ua_${what// /_}_z${z}_0"; b="$work/ua_${what// /_}_z${z}_1"
    for f in "$a:0" "$b:1"; do
      timeout -k 10 300 "$@" -e "$MODEL" -i "$TOKENS" -b 2 -t 32 -x 3 -v 0 -z $z -gc 0 -ua ${f##*:} -n 3 -o "${f%:*}" \
        >"${f%:*}.log" 2>&1 || { tail -20 "${f%:*}.log"; fail "$what -z $z -ua ${f##*:}: exit $?"; }
    done
    for f in model.bin $(cd "$a" && ls ckpt_*/shard_*.bin); do
      cmp -s "$a/$f" "$b/$f" || fail "$what -z $z -ua 1: $f differs from -ua 0's"
    done
    [ "$(cut -d, -f2,5 "$a/log.csv")" = "$(cut -d, -f2,5 "$b/log.csv")" ] || fail "$what -z $z -ua 1: log.csv's losses or grad norms differ"
  done
  echo "ok   -ua 1, $what, -z $stages: bitwise -ua 0 (model.bin, shards, losses, grad norms)"
}
in_backward "BF16, 1 rank" 3 "$work/train"
# the step's pipeline in other pieces (ZERO3_GPU_HOST_PIECE elements at most; the default, 2^20, leaves
# this model's segments whole): 1000, which cuts a segment mid-way and off the host AdamW's 2048-lane
# stretches, and 0 (whole segments), each bitwise host_offload's -z 3 run without -oo host:
# host_pieces WHAT BYTES_A_PARAM RANKS PIECE LAUNCH...
host_pieces() {
  local what=$1 per=$2 ranks=$3 piece=$4; shift 4
  local a="$work/oo_${ranks}_${per}_z3_none" b="$work/oo_${ranks}_${per}_z3_piece$piece" f
  ZERO3_GPU_HOST_PIECE=$piece timeout -k 10 300 "$@" -e "$MODEL" -i "$TOKENS" -b 2 -t 32 -x 3 -v 0 -z 3 -oo host -o "$b" \
    >"$b.log" 2>&1 || { tail -20 "$b.log"; fail "$what -z 3 -oo host, pieces of $piece: exit $?"; }
  for f in model.bin $(cd "$a" && ls ckpt_*/shard_*.bin); do
    cmp -s "$a/$f" "$b/$f" || fail "$what -z 3 -oo host, pieces of $piece: $f differs from the run's without -oo host"
  done
  [ "$(cut -d, -f2 "$a/log.csv")" = "$(cut -d, -f2 "$b/log.csv")" ] || fail "$what -oo host, pieces of $piece: log.csv's losses differ"
  echo "ok   -oo host, $what, pieces of $piece elements: bitwise the run without it (model.bin, shards, losses)"
}
host_pieces "BF16, 1 rank" 12 1 1000 "$work/train"
host_pieces "BF16, 1 rank" 12 1 0 "$work/train"
# a malformed piece: one error line naming the variable, before any output
ZERO3_GPU_HOST_PIECE=4k timeout -k 10 60 "$work/train" -e "$MODEL" -i "$TOKENS" -x 1 -v 0 -oo host -o "$work/piece_bad" \
  >"$work/piece_bad.log" 2>&1 && fail "ZERO3_GPU_HOST_PIECE=4k ran"
[ "$(grep -c '^error: .*ZERO3_GPU_HOST_PIECE' "$work/piece_bad.log")" = 1 ] && [ ! -e "$work/piece_bad" ] ||
  { cat "$work/piece_bad.log"; fail "ZERO3_GPU_HOST_PIECE=4k: want one error line naming it and no output folder"; }
echo "ok   ZERO3_GPU_HOST_PIECE=4k refused in one line naming it, no output folder"
# a checkpoint written without -oo host, resumed with it (the state loaded into host memory): the
# straight run's model.bin (4 steps without it)
RES=(-e "$MODEL" -i "$TOKENS" -b 2 -t 32 -v 0 -z 2)
timeout -k 10 300 "$work/train" "${RES[@]}" -x 4 -o "$work/res_straight" >"$work/res_straight.log" 2>&1 || fail "resume: the straight run"
timeout -k 10 300 "$work/train" "${RES[@]}" -x 2 -o "$work/res" >"$work/res_1.log" 2>&1 || fail "resume: the first 2 steps"
timeout -k 10 300 "$work/train" "${RES[@]}" -x 4 -y 1 -oo host -o "$work/res" >"$work/res_2.log" 2>&1 || fail "resume: steps 3-4 with -oo host"
grep -q '^resume: .*ckpt_00000002' "$work/res_2.log" || { cat "$work/res_2.log"; fail "resume with -oo host: it did not resume at step 2"; }
cmp -s "$work/res_straight/model.bin" "$work/res/model.bin" || fail "resume with -oo host: model.bin differs from the straight run's"
echo "ok   -oo host resumed from a checkpoint written without it: model.bin the straight 4-step run's"

# fallbacks LOG: "N M" from the summary's line (exactly one line mentions fallbacks)
fallbacks() {
  [ "$(grep -c 'fallback' "$1")" -eq 1 ] || { cat "$1"; fail "want exactly one line mentioning fallbacks in $1"; }
  sed -n 's/^epilogue fallbacks: gelu \([0-9]*\), bgradb \([0-9]*\)$/\1 \2/p' "$1"
}
run() {  # run NAME ENV... -- ARGS...: the emulated trainer, its output in $work/NAME.log
  local name=$1; shift
  local envs=(); while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" timeout -k 10 300 "$work/train" -e "$MODEL" -i "$TOKENS" -b 2 -t 32 "$@" >"$work/$name.log" 2>&1 ||
    { tail -20 "$work/$name.log"; fail "$name: exit $?"; }
}

# 2 steps, no validation (-j names no file): 2*L GELU + 2*L DGELU, 2*4*L BGRADB
run unfused EMU_LT_NO_GELU=1 EMU_LT_NO_BGRAD=1 -- -x 2 -v 0 -j "$work/no_such_val.bin"
got=$(fallbacks "$work/unfused.log")
[ "$got" = "$((4 * L)) $((8 * L))" ] || fail "unfused, -v 0: fallbacks '$got', want '$((4 * L)) $((8 * L))'"
echo "ok   no epilogues, 2 steps, -v 0 (-j missing): epilogue fallbacks gelu ${got% *}, bgradb ${got#* } (by hand: 4L, 8L)"

# 2 steps validating each (-m 1) on the short split: L more GELU per validation
run unfused_val EMU_LT_NO_GELU=1 EMU_LT_NO_BGRAD=1 -- -x 2 -v 1 -m 1 -j "$work/short_val.bin"
got=$(fallbacks "$work/unfused_val.log")
[ "$got" = "$((6 * L)) $((8 * L))" ] || fail "unfused, 2 validations: fallbacks '$got', want '$((6 * L)) $((8 * L))'"
grep -q '^| val      50 tokens, fewer than one batch (B\*T+1 = 65): each validation batch is B=2 rows of T=32' \
  "$work/unfused_val.log" || fail "no line saying how the short split is read"
[ "$(grep -c '^step .*| val [0-9]' "$work/unfused_val.log")" -eq 2 ] || fail "want a val loss on both step lines"
echo "ok   no epilogues, 2 steps validating on a 50-token split: gelu ${got% *}, bgradb ${got#* } (by hand: 6L, 8L)"

# the emulated library with every epilogue: none falls back
run fused -- -x 5 -v 0
got=$(fallbacks "$work/fused.log")
[ "$got" = "0 0" ] || fail "with the epilogues: fallbacks '$got', want '0 0'"
echo "ok   with the epilogues: gelu 0, bgradb 0 ($(( $(date +%s) - t0 )) s in all)"

# The switches against that run. Why 2e-3: the paths differ only in where they round, bf16's unit
# roundoff u = 2^-8 = 3.9e-3 per rounding (an epilogue rounds the product with the bias and GELU
# applied in fp32; the plain path rounds the product, then the bias sum, then GELU's input and
# output; the two attentions round P and dS at other points). Per token that moves the loss by a few
# u at most, with signs that differ token to token, so the mean over B*T = 64 tokens moves by about
# u/sqrt(64) = 5e-4; 5 steps of lr-1e-3 updates add less. 2e-3 is four times that; a missing bias,
# GELU or attention term moves the losses by far more (tests/cuda/matmul.cu and attention.cu check each
# path element by element). Measured here: 1.5e-4 (epilogues off), 4e-5 (portable attention).
losses() { sed -n 's/^step .* | loss \([0-9.]*\) .*/\1/p' "$1"; }
same_losses() {  # same_losses WHAT LOG: LOG's 5 losses against the fused run's, within 2e-3 relative
  $PY - "$1" <(losses "$2") <(losses "$work/fused.log") <<'EOF' || fail "$1: losses differ from the default path's"
import sys
what, a, b = sys.argv[1], [float(x) for x in open(sys.argv[2])], [float(x) for x in open(sys.argv[3])]
worst = max(abs(x - y) / y for x, y in zip(a, b)) if len(a) == len(b) == 5 else float("inf")
print(f"ok   {what}: losses {a}, default path {b}, worst relative {worst:.1e} (bound 2e-3)")
sys.exit(0 if worst < 2e-3 else 1)
EOF
}
run no_epilogues ZERO3_GPU_EPILOGUES=0 -- -x 5 -v 0
grep -q '^epilogue fallbacks: gelu 0, bgradb 0 (every cuBLASLt epilogue off: ZERO3_GPU_EPILOGUES=0' "$work/no_epilogues.log" ||
  fail "ZERO3_GPU_EPILOGUES=0: the end-of-run line does not say the epilogues were off"
same_losses "ZERO3_GPU_EPILOGUES=0 (no cuBLASLt epilogue)" "$work/no_epilogues.log"
run portable ZERO3_GPU_ATTENTION=portable -- -x 5 -v 0
grep -q 'flash attention (portable: ZERO3_GPU_ATTENTION=portable)' "$work/portable.log" ||
  fail "ZERO3_GPU_ATTENTION=portable: the description does not name the portable attention"
grep -q 'flash attention (tensor cores)' "$work/fused.log" || fail "the default BF16 build does not name the tensor-core attention"
same_losses "ZERO3_GPU_ATTENTION=portable (portable attention, BF16 build)" "$work/portable.log"

# ZeRO++ through the GPU backend's own collectives (FP32, 2 ranks over MPI) against the CPU trainer
if command -v mpicxx >/dev/null; then
  tools/emu/build.sh "$work/train_mpi" train_gpt2_zero3.cu -DENABLE_FP32 -DUSE_MPI --library >"$work/build_mpi.log" 2>&1 ||
    { tail -20 "$work/build_mpi.log"; fail "emulator build of train_gpt2_zero3.cu with MPI"; }
  make -s train_gpt2_zero3 || fail "make train_gpt2_zero3"
  # the FP32 build takes only fp32
  timeout -k 10 60 mpirun -np 1 "$work/train_mpi" -e "$MODEL" -i "$TOKENS" -x 1 -v 0 -p bf16 >"$work/p_bf16_fp32.log" 2>&1 &&
    fail "-p bf16 on the FP32 build ran"
  grep -qx "error: flag -p bf16: this build is fp32 (built with PRECISION=FP32); rebuild with PRECISION=BF16" "$work/p_bf16_fp32.log" ||
    { cat "$work/p_bf16_fp32.log"; fail "-p bf16 on the FP32 build: want the error line naming the flag and the build"; }
  [ "$(grep -c '^error' "$work/p_bf16_fp32.log")" = 1 ] ||   # (the rest is mpirun's own report of the exit)
    { cat "$work/p_bf16_fp32.log"; fail "-p bf16 on the FP32 build: more than one error line"; }
  echo "ok   -p bf16 on the FP32 build: refused in one line"
  ZPP=(-e "$MODEL" -i "$TOKENS" -b 2 -t 32 -x 3 -v 0 -z 3 -qw 8 -hp 2 -qg 8)
  timeout -k 10 300 mpirun -np 2 "$work/train_mpi" "${ZPP[@]}" >"$work/zpp_gpu.log" 2>&1 || { tail -20 "$work/zpp_gpu.log"; fail "ZeRO++ on 2 emulated ranks"; }
  timeout -k 10 120 mpirun -np 2 ./train_gpt2_zero3 "${ZPP[@]}" >"$work/zpp_cpu.log" 2>&1 || { tail -20 "$work/zpp_cpu.log"; fail "ZeRO++ on 2 CPU ranks"; }
  $PY - <(losses "$work/zpp_gpu.log") <(losses "$work/zpp_cpu.log") <<'EOF' || fail "ZeRO++: the GPU backend's losses are not the CPU trainer's"
import sys
gpu = [float(x) for x in open(sys.argv[1])]; cpu = [float(x) for x in open(sys.argv[2])]
worst = max(abs(g - c) / c for g, c in zip(gpu, cpu)) if len(gpu) == len(cpu) == 3 else float("inf")
print(f"ok   ZeRO++ (-qw 8 -hp 2 -qg 8) on 2 emulated GPU ranks: losses {gpu}, CPU trainer {cpu}, worst relative {worst:.1e}")
sys.exit(0 if worst < 1e-5 else 1)
EOF
  grep -q "^ledger: measured = theory" "$work/zpp_gpu.log" || fail "ZeRO++ on the emulated GPU: the ledger is not theory"

  # -oo host on 1 and 2 ranks (FP32), then 2 ranks of a BF16 build (DDP's full master gathered
  # through device memory); -clip local's probe reads the moments in host memory through the copies
  host_offload "FP32, 1 rank" 8 1 mpirun -np 1 "$work/train_mpi"
  host_offload "FP32, 2 ranks" 8 2 mpirun -np 2 "$work/train_mpi"
  host_pieces "FP32, 2 ranks" 8 2 1000 mpirun -np 2 "$work/train_mpi"   # the master is the params: staged piece by piece
  in_backward "FP32, 2 ranks" "1 3" mpirun -np 2 "$work/train_mpi"
  tools/emu/build.sh "$work/train_mpi_bf16" train_gpt2_zero3.cu -DENABLE_BF16 -DUSE_MPI --library >"$work/build_mpi_bf16.log" 2>&1 ||
    { tail -20 "$work/build_mpi_bf16.log"; fail "emulator build of the BF16 trainer with MPI"; }
  host_offload "BF16, 2 ranks" 12 2 mpirun -np 2 "$work/train_mpi_bf16"
  for oo in none host; do
    timeout -k 10 300 mpirun -np 2 "$work/train_mpi" -e "$MODEL" -i "$TOKENS" -b 2 -t 32 -x 2 -v 0 -z 3 -clip local -oo $oo \
      >"$work/clip_$oo.log" 2>&1 || { tail -20 "$work/clip_$oo.log"; fail "-clip local -oo $oo on 2 emulated ranks"; }
  done
  probe() { grep -E '^step|clip local' "$1" | sed 's/ | [0-9.]* ms | .*//'; }
  grep -q 'clip local |' "$work/clip_host.log" && [ "$(probe "$work/clip_none.log")" = "$(probe "$work/clip_host.log")" ] ||
    { diff <(probe "$work/clip_none.log") <(probe "$work/clip_host.log"); fail "-clip local: the probe with -oo host differs"; }
  echo "ok   -clip local with -oo host: the probe's lines as without it ($(grep -c 'clip local |' "$work/clip_host.log") steps)"

  # -ct on the GPU backend (its NCCL watchdog), 2 ranks (~45 s). No fault: -ct 10 gives bitwise the
  # losses of the default -ct 300. (10, not less: on a loaded machine an emulated rank waits seconds
  # for its peer's emulated compute, which a shorter timeout would take for a dead peer.) Rank 1 stopped (SIGSTOP, the emulator's EMU_NCCL_FREEZE) at the
  # start of its N-th all-gather, N = the gathers of a step (forward and backward, read from the
  # fault-free run's ledger) + 2: the second gather of step 2, where rank 0 then waits for good.
  # Every rank is gone within -ct and 6 s of the freeze by this script's clock, the run exits
  # non-zero, and exactly one error line of rank 0's names that all-gather, step 2 and rank 1.
  CT=(-e "$MODEL" -i "$TOKENS" -b 2 -t 32 -v 0)
  timeout -k 10 300 mpirun -np 2 "$work/train_mpi" "${CT[@]}" -x 3 >"$work/ct_default.log" 2>&1 || { tail -20 "$work/ct_default.log"; fail "the 2-rank run (default -ct)"; }
  timeout -k 10 300 mpirun -np 2 "$work/train_mpi" "${CT[@]}" -x 3 -ct 10 >"$work/ct_10.log" 2>&1 || { tail -20 "$work/ct_10.log"; fail "the 2-rank run with -ct 10"; }
  [ "$(losses "$work/ct_10.log" | wc -l)" = 3 ] && [ "$(losses "$work/ct_10.log")" = "$(losses "$work/ct_default.log")" ] ||
    fail "-ct 10 without a fault changed the losses: $(losses "$work/ct_10.log" | tr '\n' ' ')vs $(losses "$work/ct_default.log" | tr '\n' ' ')"
  grep -q "not applied" "$work/ct_10.log" && fail "the GPU trainer still says -ct is not applied"
  gathers=$(awk '/^  (fwd|bwd)_gather/ { n += $2 } END { print n }' "$work/ct_default.log")
  [ "${gathers:-0}" -gt 0 ] || fail "no gathers in the fault-free run's ledger"
  nth=$((gathers + 2))
  (EMU_NCCL_FREEZE=1:$nth timeout -k 10 120 mpirun -np 2 -x EMU_NCCL_FREEZE "$work/train_mpi" "${CT[@]}" -x 100 -ct 10 \
     >"$work/ct_frozen.log" 2>&1; echo "exit $?" >"$work/ct_frozen.rc") &
  for _ in $(seq 1200); do grep -q "EMU_NCCL_FREEZE: rank 1 stops" "$work/ct_frozen.log" && break; sleep 0.1; done
  grep -q "EMU_NCCL_FREEZE: rank 1 stops" "$work/ct_frozen.log" || { tail "$work/ct_frozen.log"; fail "rank 1 did not stop in all-gather $nth"; }
  t0=$(date +%s.%N)
  for _ in $(seq 300); do [ -s "$work/ct_frozen.rc" ] && break; sleep 0.1; done
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  wait
  rc=$(sed 's/exit //' "$work/ct_frozen.rc")
  awk -v s="$secs" 'BEGIN { exit !(s >= 9.5 && s <= 16) }' || { tail "$work/ct_frozen.log"; fail "the run with rank 1 frozen ended ${secs}s after the freeze, want 10-16 s (-ct 10)"; }
  [ "${rc:-0}" -ne 0 ] || fail "the run with rank 1 frozen exited 0"
  for _ in $(seq 50); do pgrep -f "$work/train_mpi" >/dev/null || break; sleep 0.1; done
  pgrep -f "$work/train_mpi" >/dev/null && { pkill -KILL -f "$work/train_mpi"; fail "a rank outlived the run with rank 1 frozen"; }
  # one line from rank 0, and none but a rank's own timeout line from rank 1 (resumed by mpirun's
  # SIGCONT before its SIGKILL, its own watchdog may say what it waited for too)
  [ "$(grep -c '^error (rank 0 ' "$work/ct_frozen.log")" = 1 ] && [ "$(grep -c '^error' "$work/ct_frozen.log")" -le 2 ] &&
    [ "$(grep '^error (rank 1 ' "$work/ct_frozen.log" | grep -vc 'collective timeout')" = 0 ] ||
    { grep -E '^(error|warn)' "$work/ct_frozen.log"; fail "want exactly one error line from rank 0 (and at most its own timeout line from rank 1)"; }
  grep -qE "^error \(rank 0 on [^)]*\): collective timeout: the all-gather of unit [a-z0-9.]+ in step 2 has not completed 10 s after it started \(-ct 10\); its peers: [^ ]+ rank 1; a peer or its link is down: ending every rank$" "$work/ct_frozen.log" ||
    { grep '^error' "$work/ct_frozen.log"; fail "the timeout line does not name step 2's all-gather and rank 1"; }
  echo "ok   -ct on the GPU backend: -ct 10 keeps the losses bitwise; rank 1 frozen in all-gather $nth ($gathers a step): every rank gone ${secs}s later (exit $rc): $(grep -o 'collective timeout: [^;]*' "$work/ct_frozen.log")"
fi

# scripts/launch.sh ends its ranks: one fails, one ignores SIGTERM, one is stopped; launch.sh exits
# with the failed rank's status once the others are SIGKILLed, 10 s after their SIGTERM
t0=$(date +%s)
scripts/launch.sh -n 3 bash -c 'trap "" TERM; [ $RANK = 1 ] && { sleep 0.5; exit 3; }; [ $RANK = 2 ] && kill -STOP $$; sleep 600' \
  >"$work/launch.log" 2>&1 & lpid=$!
for _ in $(seq 300); do kill -0 $lpid 2>/dev/null || break; sleep 0.1; done
kill -0 $lpid 2>/dev/null && { kill -KILL $lpid; fail "launch.sh still waits 30 s after a rank failed"; }
wait $lpid; rc=$?
[ $rc = 3 ] || { cat "$work/launch.log"; fail "launch.sh exited $rc, want the failed rank's 3"; }
secs=$(( $(date +%s) - t0 ))
[ $secs -le 14 ] || fail "launch.sh took ${secs}s to end its ranks, want 10 s and a few"
[ "$(wc -l <"$work/launch.log")" = 1 ] || { cat "$work/launch.log"; fail "launch.sh: want one line saying which rank failed"; }
echo "ok   launch.sh: rank 1 failed (3), a rank ignoring SIGTERM and a stopped one SIGKILLed: ended in ${secs}s, exit 3"
