#!/usr/bin/env bash
# The variants the notes teach (HSDP -hs, -ra 0, -rc 1/2, -pt, -wrap, -clip local), through the CPU
# trainer on 1-4 ranks: stage 0's losses and norms, bytes equal to their theory, the collective
# ledger, the memory formula, checkpoints across variants, bad flags (tests/variants.py says how).
. "$(dirname "$0")/lib.sh"
make -s train_gpt2_zero3 >/dev/null || fail "build"
$PY tests/variants.py --binary ./train_gpt2_zero3 || fail "variants"
