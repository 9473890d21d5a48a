#!/usr/bin/env bash
# Export and import of llm.c model files, and sampling across ranks:
#  1. a run on 2 ranks (ZeRO-3) exports DIR/model.bin; importing it (-e) on 3 ranks and exporting
#     again without training (-l 0) gives the same file byte for byte (no rank held the whole model
#     either way);
#  2. the imported model's validation loss equals the exporting run's final validation loss;
#  3. PyTorch (tests/reference/gpt2_reference.py --load, which validates llm.c's format independently) reads the
#     export and computes the same loss on the same batch as our trainer's forward;
#  4. the bf16 export (llm.c version 5) holds exactly torch's bf16 rounding of the fp32 weights, and
#     both PyTorch and our trainer load it and agree on its loss;
#  5. sampling from the imported model prints the same tokens on 1, 2 and 3 ranks (rank 0 prints;
#     every rank checks that it picked the same token).
# ZERO3_TRAINER=path tests another build of the trainer (default: make train_gpt2_zero3).
. "$(dirname "$0")/lib.sh"
BF16_BIN=${ZERO3_TRAINER_BF16EXPORT:-build/ops/train_gpt2_zero3_bf16export}
if [ -z "${ZERO3_TRAINER:-}" ]; then make -s train_gpt2_zero3 build/ops/train_gpt2_zero3_bf16export >/dev/null || fail "build"; fi
VAL=data/tinyshakespeare/tiny_shakespeare_val.bin

run() {   # run NAME NP ARGS...
  local name=$1 np=$2; shift 2
  if [ "$np" -eq 1 ]; then timeout 300 "$BIN" "$@" >"$work/$name.out" 2>&1
  else timeout 300 mpirun -np "$np" "$BIN" "$@" >"$work/$name.out" 2>&1; fi || { cat "$work/$name.out"; fail "$name: exit code $?"; }
}
last_val() { awk -F, 'NR > 1 && $3 != "" {v = $3} END {print v}' "$1/log.csv"; }
# close A B TOL: |A - B| <= TOL
close() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= t) }'; }
# ref_loss MODEL: PyTorch's loss on the first B*T window of the val file (its step 1 loss)
ref_loss() {
  $PY tests/reference/gpt2_reference.py --load "$1" --tokens "$VAL" --B 2 --T 16 --steps 1 --lr 0 >"$work/ref.out" 2>&1 \
    || { cat "$work/ref.out"; fail "tests/reference/gpt2_reference.py --load $1 failed"; }
  sed -n 's/^step  *1\/1: loss \([0-9.]*\).*/\1/p' "$work/ref.out"
}
M=(-e d2c48h2t32 -b 2 -t 16)
NOTRAIN=(-b 2 -t 16 -l 0 -x 1)   # one step with LR 0: the weights stay exactly as loaded

# ---------------------------------------------------------------- 1. export, import, export again
run train 2 "${M[@]}" -x 4 -l 1e-3 -v 4 -m 1 -o "$work/train"
[ -f "$work/train/model.bin" ] || fail "no model.bin after a run with -o"
[ ! -e "$work/train/model.bin.tmp" ] || fail "model.bin.tmp left behind"
run reimport 3 -e "$work/train/model.bin" "${NOTRAIN[@]}" -v 0 -o "$work/reimport"
cmp -s "$work/train/model.bin" "$work/reimport/model.bin" || fail "import on 3 ranks + export is not the same file"
echo "ok   exported on 2 ranks, imported and re-exported on 3 ranks: byte-identical"

# ---------------------------------------------------------------- 2. the same validation loss
# the training run's last val: 2 ranks x 1 batch = windows 0, 1; here 1 rank x 2 batches = the same
trained_val=$(last_val "$work/train")
run val1 1 -e "$work/train/model.bin" "${NOTRAIN[@]}" -v 1 -m 2 -o "$work/val1"
imported_val=$(last_val "$work/val1")
[ -n "$trained_val" ] && [ -n "$imported_val" ] || fail "missing val losses ($trained_val / $imported_val)"
close "$trained_val" "$imported_val" 2e-5 || fail "val loss: trained $trained_val, imported $imported_val"
echo "ok   val loss of the trained model $trained_val, of its import $imported_val"

# ---------------------------------------------------------------- 3. PyTorch reads our export
run win0 1 -e "$work/train/model.bin" "${NOTRAIN[@]}" -v 1 -m 1 -o "$work/win0"
ours=$(last_val "$work/win0")
theirs=$(ref_loss "$work/train/model.bin")
[ -n "$theirs" ] || { cat "$work/ref.out"; fail "no loss from the reference"; }
close "$ours" "$theirs" 1e-4 || fail "window 0 loss: ours $ours, PyTorch's $theirs"
echo "ok   PyTorch --load of our fp32 export: loss $theirs, our forward $ours"

# ---------------------------------------------------------------- 4. bf16 export (version 5)
OMP_NUM_THREADS=1 timeout 300 mpirun -np 2 "$BF16_BIN" -e "$work/train/model.bin" "${NOTRAIN[@]}" -v 0 -o "$work/bf16" >"$work/bf16.out" 2>&1 \
  || { cat "$work/bf16.out"; fail "the bf16-export build failed"; }
$PY - "$work/train/model.bin" "$work/bf16/model.bin" <<'EOF' || fail "the bf16 export is not torch's rounding of the fp32 model"
import sys
import numpy as np
import torch
f32 = np.fromfile(sys.argv[1], dtype=np.int32, count=256), np.fromfile(sys.argv[1], dtype=np.float32, offset=1024)
b16 = np.fromfile(sys.argv[2], dtype=np.int32, count=256), np.fromfile(sys.argv[2], dtype=np.uint16, offset=1024)
assert b16[0][1] == 5, "version %d, want 5" % b16[0][1]
assert (b16[0][2:8] == f32[0][2:8]).all(), "header shape differs"
want = torch.from_numpy(f32[1].copy()).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
assert want.shape == b16[1].shape, "size differs"
bad = np.flatnonzero(want != b16[1])
assert bad.size == 0, "%d of %d values differ, first at %d" % (bad.size, want.size, bad[0])
print("bf16 export: %d values, all equal to torch's rounding" % want.size)
EOF
run win0_bf16 1 -e "$work/bf16/model.bin" "${NOTRAIN[@]}" -v 1 -m 1 -o "$work/win0_bf16"
ours=$(last_val "$work/win0_bf16")
theirs=$(ref_loss "$work/bf16/model.bin")
close "$ours" "$theirs" 1e-4 || fail "bf16 model, window 0 loss: ours $ours, PyTorch's $theirs"
echo "ok   bf16 export (version 5) is torch's rounding; loads in PyTorch ($theirs) and here ($ours)"

# ---------------------------------------------------------------- 5. sampling on 1, 2, 3 ranks
sample() { sed -n '/^---- sample/,/^----$/p' "$work/$1.out"; }
run sample1 1 -e "$work/train/model.bin" "${NOTRAIN[@]}" -v 0 -s 1 -g 24
run sample2 2 -e "$work/train/model.bin" "${NOTRAIN[@]}" -v 0 -s 1 -g 24 -z 3
run sample3 3 -e "$work/train/model.bin" "${NOTRAIN[@]}" -v 0 -s 1 -g 24 -z 0 -S 1337
[ "$(sample sample1 | wc -l)" -ge 3 ] || { cat "$work/sample1.out"; fail "no sample printed"; }
for n in 2 3; do
  diff <(sample sample1) <(sample sample$n) >"$work/diff" || { cat "$work/diff"; fail "the sample on $n ranks differs from 1 rank's"; }
done
echo "ok   sampling prints the same text on 1, 2 (ZeRO-3) and 3 (DDP) ranks:"
sample sample1 | sed 's/^/       /'
echo "test_export: all passed"
