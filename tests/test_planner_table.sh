#!/usr/bin/env bash
# The planner's tables (-plan N) at the edges of every flag it takes, every row against closed forms
# worked out by hand for a bare parameter count (tests/planner_oracle.py: N = 1, 2, 7, 8, 9, 16;
# -rpn none, 1, 8; -hs none, 1, 2, N/2; the ZeRO++ flags). About 12 s.
. "$(dirname "$0")/lib.sh"
make -s train_gpt2_zero3 >/dev/null || fail "build"
$PY tests/planner_oracle.py --binary ./train_gpt2_zero3 || fail "the planner's rows against the figures by hand"
echo "planner table: ok"
