#!/usr/bin/env bash
# The CPU trainer against the PyTorch dump, through the trainer's own step (trainer_step in
# host/train.c, the code train_main runs): activations, logits, loss, every gradient (each rank's
# shard), then every step's loss, gradient norm, clip coefficient and LR; stages 0-3, A=1,2.
#   tiny: GPT-2's full vocabulary, 10 steps, every step clipped, on 1 rank;
#   small: the same model with V=1024, on 1 rank;
#   clip: small with the clip threshold inside the range of the norms (5 of 12 steps clipped, 7 not),
#         on 1, 2, 3 and 4 ranks, and the DDP build on 1 and 2.
. "$(dirname "$0")/lib.sh"
make -s train_gpt2_zero3 test_gpt2 ddp >/dev/null || fail "build"
make -s dumps >/dev/null || fail "make dumps"
TINY="tests/reference/dumps/tiny.dump tests/reference/dumps/tiny_model.bin"
SMALL="tests/reference/dumps/small.dump tests/reference/dumps/small_model.bin"
CLIP="tests/reference/dumps/clip.dump tests/reference/dumps/clip_model.bin"
# the clip reference must cross its threshold in some steps and not in others, or it tests nothing
$PY - <<'PY' || fail "tests/reference/dumps/clip.dump does not have both clipped and unclipped steps"
import sys; sys.path.insert(0, "tests/reference")
import numpy_gpt2 as ng
h, r, _ = ng.read_dump("tests/reference/dumps/clip.dump")
norms = r["train_grad_norms"]; G = h["grad_clip"]
above, below = int((norms > G).sum()), int((norms < G).sum())
print(f"clip.dump: threshold {G:g}, {above} steps above it, {below} below, closest {abs(norms - G).min():.3g} away")
sys.exit(0 if above and below and abs(norms - G).min() > 1e-3 * G else 1)
PY
OMP_NUM_THREADS=2 ./test_gpt2 $TINY | grep -v "^init:" || fail "tiny, 1 rank"
OMP_NUM_THREADS=2 ./test_gpt2 $SMALL | grep -v "^init:" || fail "small, 1 rank"
for n in 1 2 3 4; do
  mpirun -np $n ./test_gpt2 $CLIP | grep -v "^init:" || fail "clip, $n ranks"
done
OMP_NUM_THREADS=2 build/ddp/test_gpt2 $CLIP | grep -v "^init:" || fail "DDP build, clip, 1 rank"
mpirun -np 2 build/ddp/test_gpt2 $CLIP | grep -v "^init:" || fail "DDP build, clip, 2 ranks"
echo "test_gpt2: all passed"
