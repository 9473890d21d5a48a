#!/usr/bin/env bash
# Fuzzing every file reader under libFuzzer with AddressSanitizer and UndefinedBehaviorSanitizer
# (fuzz/): the llm.c model file (gpt2.h), token files (tokens.h + dataloader.h), the tokenizer
# (tokenizer.h), the PyTorch activation dump (dump.h) and checkpoints (checkpoint.h). Each runs
# FUZZ_SECONDS (default 10) with a fixed seed from a corpus of small valid files that
# tests/fuzz/make_seeds.c writes, as many harnesses side by side as there are cores. Fails on any
# crash, sanitizer report, leak, timeout or out-of-memory.
# SKIPs (exit 0 with a SKIP line) only when no compiler with -fsanitize=fuzzer is installed
# (Debian: clang and libclang-rt-14-dev).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
SECONDS_EACH=${FUZZ_SECONDS:-10}
CC=${FUZZ_CC:-clang}
work=$(mktemp -d)
# the harnesses rewrite their scratch files thousands of times a second: keep them in memory
scratch=$(mktemp -d -p /dev/shm 2>/dev/null || mktemp -d)
trap 'rm -rf "$work" "$scratch"' EXIT
export FUZZ_SCRATCH=$scratch
fail() { echo "FAIL: $*"; exit 1; }

printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }\n' >"$work/probe.c"
if ! command -v "$CC" >/dev/null || ! "$CC" -fsanitize=fuzzer,address,undefined "$work/probe.c" -o "$work/probe" 2>/dev/null; then
  echo "SKIP: no fuzzing compiler ($CC with -fsanitize=fuzzer; apt-get install clang libclang-rt-14-dev)"
  exit 0
fi
cores=$(nproc 2>/dev/null || echo 2)
make -s -j"$cores" fuzz FUZZ_CC="$CC" >"$work/build.log" 2>&1 || { cat "$work/build.log"; fail "building the harnesses"; }
build/fuzz/make_seeds "$work/seeds" || fail "writing the seed corpus"

# fuzz HARNESS: one harness for SECONDS_EACH on its corpus (a copy of its seeds); its exit status in HARNESS.rc
fuzz() {
  local h=$1
  mkdir -p "$work/corpus_$h"
  cp "$work/seeds/$h"/* "$work/corpus_$h/"
  ls "$work/corpus_$h" | wc -l >"$work/$h.nseeds"
  timeout $((SECONDS_EACH + 120)) build/fuzz/fuzz_$h -seed=1 -max_total_time="$SECONDS_EACH" \
    -max_len=32768 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$work/crash_$h-" \
    "$work/corpus_$h" >"$work/$h.log" 2>&1
  echo $? >"$work/$h.rc"
}
# a harness keeps one core busy: as many side by side as there are cores
harnesses=(model tokens tokenizer dump checkpoint)
for h in "${harnesses[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$cores" ]; do wait -n; done
  fuzz "$h" &
done
wait

total=0
for h in "${harnesses[@]}"; do
  rc=$(cat "$work/$h.rc"); nseeds=$(cat "$work/$h.nseeds")
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$h.log")
  if [ $rc -ne 0 ] || grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:' "$work/$h.log"; then
    grep -E -A30 'ERROR|runtime error' "$work/$h.log" | head -60
    ls "$work"/crash_$h-* 2>/dev/null && for f in "$work"/crash_$h-*; do echo "crashing input (base64):"; base64 "$f" | head -20; done
    fail "fuzz_$h: exit $rc after ${runs:-?} inputs"
  fi
  [ -n "$runs" ] && [ "$runs" -gt 0 ] || { tail "$work/$h.log"; fail "fuzz_$h ran no input"; }
  total=$((total + runs))
  printf 'ok   fuzz_%-10s %8d inputs in %ss, corpus %d -> %d files, %s\n' "$h" "$runs" "$SECONDS_EACH" "$nseeds" \
    "$(ls "$work/corpus_$h" | wc -l)" "$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$work/$h.log" | tail -1)"
done
echo "test_fuzz: $total inputs, no crash, no sanitizer report"
