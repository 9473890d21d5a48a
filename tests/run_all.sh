#!/usr/bin/env bash
# The test suite: runs every tests/test_*.sh in name order, each in its own process.
# A test script exits 0 on pass, non-zero on failure. Ends with "N passed, M failed".
# TESTS="tokenizer engine" limits the run to tests/test_{tokenizer,engine}.sh.
cd "$(dirname "$0")/.." || exit 1
pass=0; fail=0; failed=()
if [ -n "${TESTS:-}" ]; then list=(); for t in $TESTS; do list+=("tests/test_$t.sh"); done
else list=(tests/test_*.sh); fi
for t in "${list[@]}"; do
  name=$(basename "$t" .sh)
  echo "=== $name"
  start=$(date +%s)
  if bash "$t"; then pass=$((pass+1)); echo "--- PASS $name ($(( $(date +%s) - start ))s)"
  else fail=$((fail+1)); failed+=("$name"); echo "--- FAIL $name ($(( $(date +%s) - start ))s)"; fi
done
[ $fail -eq 0 ] || echo "failed: ${failed[*]}"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
