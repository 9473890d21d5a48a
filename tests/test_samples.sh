#!/usr/bin/env bash
# The sample a run prints: the sampler's arithmetic by hand on a tiny vocabulary and the RNG's first
# draws by hand (tests/unit/test_sampler.c), then every token of -g 12 samples on 1 and 2 ranks
# against the NumPy GPT-2 and the same draws redone in Python (tests/sample_oracle.py). About 5 s.
. "$(dirname "$0")/lib.sh"
make -s train_gpt2_zero3 build/test_sampler >/dev/null || fail "build"
build/test_sampler || fail "the sampler's arithmetic by hand"
$PY tests/sample_oracle.py --binary ./train_gpt2_zero3 || fail "the printed sample against the NumPy reference"
echo "samples: ok"
