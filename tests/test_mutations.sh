#!/usr/bin/env bash
# The suite keeps its teeth: dev/mutation_check.sh plants ten one-line bugs in the code users run
# (one at a time, in scratch copies) and each must be caught by the test named beside it, after a
# control run shows those tests pass on the unmutated code. A change that moves the mutated line or
# makes its test blind (e.g. a one-rank fast path that skips the mutated code) fails here.
. "$(dirname "$0")/lib.sh"
bash dev/mutation_check.sh || fail "a planted bug went uncaught (or the unmutated code fails)"
