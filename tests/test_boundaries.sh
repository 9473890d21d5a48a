#!/usr/bin/env bash
# Flags at their edges, each against an independent reference (tests/boundaries.py says which): -gc 0,
# validation with -m > 1 on 2-4 ranks, -wrap K < L on 4 and 6 layers, checkpoints of every stage on
# several ranks resumed on another N and stage, model state against figures by hand, and the
# trace's durations against a wall clock.
. "$(dirname "$0")/lib.sh"
make -s train_gpt2_zero3 dumps >/dev/null || fail "build"
$PY tests/boundaries.py || fail "boundaries"
