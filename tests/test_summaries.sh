#!/usr/bin/env bash
# The startup report's memory lines against the parameter count by hand, the step lines' lr against
# the NumPy schedule, and the end-of-run summaries and the time model's lines of a run over an
# emulated link (-link 1,1ms), stages 3 and 1 on 2 ranks: the per-unit exposed waits against the
# trace's wait slices and the step lines, the calibrated compute and the measured line against the
# trace's steps less their waits, the planner's comm against the ledger over the link by hand
# (tests/summary_oracle.py). About 5 s.
. "$(dirname "$0")/lib.sh"
make -s train_gpt2_zero3 >/dev/null || fail "build"
$PY tests/summary_oracle.py --binary ./train_gpt2_zero3 || fail "the summaries against the trace and the link"
echo "summaries: ok"
