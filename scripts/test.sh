#!/usr/bin/env bash
# scripts/test.sh: runs the test suite from a fresh clone, every step included and each safe to
# repeat: installs the Debian packages (scripts/install_deps.sh), makes the data (local copies from
# $ZERO3_DATA_CACHE or ~/.cache/gpt2-zero3 when present, else downloads), then `make test`, which
# builds what it needs and the PyTorch reference dumps. Ends with "N passed, M failed, K skipped".
#   scripts/test.sh                     everything
#   TESTS="safety checkpoint" scripts/test.sh    a subset (tests/test_<name>.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/args.sh
[ $# -eq 0 ] || die "$1: test.sh takes no arguments (a subset: TESTS=\"safety checkpoint\" scripts/test.sh)"
for t in ${TESTS:-}; do [ -f "tests/test_$t.sh" ] || die "TESTS: $t is not a test (tests/test_$t.sh does not exist)"; done
bash scripts/install_deps.sh
make -s data
make test
