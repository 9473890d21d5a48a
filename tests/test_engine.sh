#!/usr/bin/env bash
# Engine tests: layout/padding/decay masks/theory (tests/unit/test_engine_layout.c), the prefetch
# schedule and the peak memory against a model of the live buffers (tests/unit/test_engine_schedule.c),
# the passes' order of gathers, releases and reductions against a trace written out by hand, with a
# fake compute (tests/unit/test_pass_order.c), the contract by hand, with both state machines' tables
# of moves and check mode stopping on an illegal gradient move (tests/unit/test_engine_contract.c),
# a step given up after k of A micro-steps against a run that never stopped (tests/unit/test_stop_path.c),
# then the trainer run every way it can shard one model (tests/engine_consistency.py): same losses for every stage and N,
# and gradient norms for every stage and N, accumulation A=2 on N == A=1 on 2N, comm ratio 1.5 / 1.0,
# 16 bytes/param/N, DDP build == stage 0.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
make -s build/test_engine_layout build/test_engine_schedule build/test_pass_order build/test_engine_contract build/test_stop_path train_gpt2_zero3 ddp >/dev/null
build/test_engine_layout
build/test_engine_schedule
build/test_pass_order
build/test_engine_contract
build/test_stop_path
PY=python3; command -v /usr/bin/python3 >/dev/null && PY=/usr/bin/python3
$PY tests/engine_consistency.py --binary ./train_gpt2_zero3 --ddp-binary build/ddp/train_gpt2_zero3
