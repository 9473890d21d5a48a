#!/usr/bin/env bash
# The CPU trainer against the PyTorch dump: activations, logits, loss, every gradient (each rank's
# shard), the reference's training losses; stages 0-3, A=1,2. GPT-2's full vocabulary (tiny dump) on
# 1 rank; the same model with V=1024 (small dump) on 1, 2, 3, 4 ranks; the DDP build on 1 and 2.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
make -s train_gpt2_zero3 test_gpt2 ddp >/dev/null
make -s dumps >/dev/null
TINY="dev/ref/tiny.dump dev/ref/tiny_model.bin"
SMALL="dev/ref/small.dump dev/ref/small_model.bin"
OMP_NUM_THREADS=2 ./test_gpt2 $TINY
OMP_NUM_THREADS=2 ./test_gpt2 $SMALL
for n in 2 3 4; do OMP_NUM_THREADS=1 mpirun -np $n ./test_gpt2 $SMALL; done
OMP_NUM_THREADS=2 build/ddp/test_gpt2 $SMALL
OMP_NUM_THREADS=1 mpirun -np 2 build/ddp/test_gpt2 $SMALL
