#!/usr/bin/env bash
# The suite keeps its teeth, the part that fits in CI: every planted bug of tests/mutation_check.sh
# still finds its text once in the code (a moved line is an ERROR there, not a kill), and the first
# eleven (the clip branch, the loss scale, the per-rank norm, the decay mask, a GELU constant, the
# prefetch, the data window, the sampling RNG on resume, the accumulation, a checkpoint's data
# position, a unit's reduction) are each caught by their test, after a control run shows those tests
# pass on the unmutated code, and so is 45 (a step given up with its reductions in flight). The
# whole table (64 bugs over every CPU source file, about 20 minutes on 2 cores) runs nightly:
# `make mutations` (docs/testing.md).
. "$(dirname "$0")/lib.sh"
bash tests/mutation_check.sh --dry-run || fail "a planted bug's text is no longer in the code"
bash tests/mutation_check.sh 1 2 3 4 5 6 7 8 9 10 11 45 || fail "a planted bug went uncaught (or the unmutated code fails)"
