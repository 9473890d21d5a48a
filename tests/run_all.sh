#!/usr/bin/env bash
# The test suite: runs every tests/test_*.sh in name order, each in its own process.
# A test script exits 0 on pass, 77 when this machine cannot run it (it says why in one line: counted
# as skipped), anything else on failure. Ends with "N passed, M failed, K skipped".
# TESTS="tokenizer engine" limits the run to tests/test_{tokenizer,engine}.sh.
# A test that runs past TEST_TIMEOUT seconds (900: the slowest takes about 2 minutes on 2 cores) is
# stopped with everything it started (timeout signals its whole process group) and fails, so one
# hang can never hold the suite.
TEST_TIMEOUT=${TEST_TIMEOUT:-900}
cd "$(dirname "$0")/.." || exit 1
pass=0; fail=0; skip=0; failed=()
if [ -n "${TESTS:-}" ]; then list=(); for t in $TESTS; do list+=("tests/test_$t.sh"); done
else list=(tests/test_*.sh); fi
for t in "${list[@]}"; do
  name=$(basename "$t" .sh)
  echo "=== $name"
  start=$(date +%s)
  # in the background, so that a Ctrl-C here (which the test's own process group does not get)
  # can stop the test and all it started
  timeout -k 10 "$TEST_TIMEOUT" bash "$t" & running=$!
  trap 'kill -TERM -- -$running 2>/dev/null; echo "stopped during $name" >&2; exit 130' INT TERM
  wait $running; rc=$?
  trap - INT TERM
  if [ $rc -eq 0 ]; then pass=$((pass+1)); echo "--- PASS $name ($(( $(date +%s) - start ))s)"
  elif [ $rc -eq 77 ]; then skip=$((skip+1)); echo "--- SKIP $name"
  else
    fail=$((fail+1)); failed+=("$name")
    [ $rc -ne 124 ] && [ $rc -ne 137 ] || echo "$name: still running after $TEST_TIMEOUT s: stopped"
    echo "--- FAIL $name ($(( $(date +%s) - start ))s)"
  fi
done
[ $fail -eq 0 ] || echo "failed: ${failed[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
