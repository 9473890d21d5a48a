#!/usr/bin/env bash
# The test suite: runs every tests/test_*.sh, each in its own process, SUITE_JOBS at once.
# A test script exits 0 on pass, 77 when this machine cannot run it (it says why in one line: counted
# as skipped), anything else on failure. Ends with "N passed, M failed, K skipped".
# TESTS="tokenizer engine" limits the run to tests/test_{tokenizer,engine}.sh.
#
# Two at a time (SUITE_JOBS=2, the default; SUITE_JOBS=1 runs them one after the other): many tests
# leave a core idle for much of their run (a lesson waits on its emulated link, nvcc compiles one file,
# a fault case sleeps until its signal), so a second test fills it. Before the first test starts, the
# targets the tests share are built once (make test_prerequisites), so no two tests ever build the same
# file at once. A test timed against margins of its own clock is listed in ALONE and runs with nothing
# beside it. Each test's output is held until it ends, then printed whole under its "=== name" line,
# so the log reads test by test, in the order they end.
# A test that runs past TEST_TIMEOUT seconds (900: the slowest takes about 5 minutes on 2 cores) is
# stopped with everything it started (timeout signals its whole process group) and fails, so one
# hang can never hold the suite.
TEST_TIMEOUT=${TEST_TIMEOUT:-900}
SUITE_JOBS=${SUITE_JOBS:-2}
# with nothing beside them: the cluster's link faults, the watchdog's timings (tests/test_edges.sh) and the
# emulated link's durations against the ring model (tests/test_links.sh),
# each held to seconds measured by the test's own clock
ALONE=" cluster edges links "
# the longest first, so that the last minutes are not one long test alone (the rest in name order)
LONG_FIRST="gpu_first cluster emu_gpt2 lessons translate operations gpu_build docs emu_streams exercises"
cd "$(dirname "$0")/.." || exit 1
case $SUITE_JOBS in ''|*[!0-9]*|0) echo "SUITE_JOBS=$SUITE_JOBS: want a whole number >= 1" >&2; exit 2 ;; esac

if [ -n "${TESTS:-}" ]; then names=$TESTS
else names=$(for t in tests/test_*.sh; do basename "$t" .sh | sed 's/^test_//'; done); fi
ordered=()
for n in $LONG_FIRST; do [[ " $(echo $names) " == *" $n "* ]] && ordered+=("$n"); done
for n in $names; do [[ " $LONG_FIRST " == *" $n "* ]] || ordered+=("$n"); done
alone=(); shared=()
for n in "${ordered[@]}"; do
  [ -f "tests/test_$n.sh" ] || { echo "run_all: tests/test_$n.sh does not exist" >&2; exit 2; }
  if [[ "$ALONE" == *" $n "* ]] || [ "$SUITE_JOBS" -eq 1 ]; then alone+=("$n"); else shared+=("$n"); fi
done

logs=$(mktemp -d)
# Open MPI 4 keeps every mpirun's scratch folder in one folder a user, which the last mpirun to end
# removes with the files in it, unless a folder is left in it; an mpirun starting in the test beside
# it can find it gone between its mkdirs ("orte_session_dir failed"). An empty folder of the suite's
# own in it keeps it for the suite's run.
ompi_top=${TMPDIR:-/tmp}/ompi.$(hostname).$(id -u)
keep=$ompi_top/run_all.$$
mkdir -p -m 700 "$keep" 2>/dev/null || keep=
unkeep() { [ -z "$keep" ] || { rmdir "$keep"; rmdir "$ompi_top"; } 2>/dev/null; }
declare -A pid_of start_of
stop_all() { local p; for p in "${pid_of[@]}"; do kill -TERM -- -"$p" 2>/dev/null; done
             echo "stopped during: ${!pid_of[*]}" >&2; rm -rf "$logs"; unkeep; exit 130; }
trap stop_all INT TERM

if ! make -s -j"$(nproc 2>/dev/null || echo 2)" test_prerequisites >"$logs/prerequisites.log" 2>&1; then
  cat "$logs/prerequisites.log"; echo "run_all: make test_prerequisites failed (each test will say what it lacks)"
fi

pass=0; fail=0; skip=0; failed=()
start_test() {   # in the background: timeout makes itself the leader of the test's process group
  start_of[$1]=$(date +%s)
  timeout -k 10 "$TEST_TIMEOUT" bash "tests/test_$1.sh" >"$logs/$1.log" 2>&1 </dev/null &
  pid_of[$1]=$!
}
finish_one() {   # waits for any running test, prints its output and its verdict
  local done_pid rc name n
  wait -n -p done_pid "${pid_of[@]}"; rc=$?
  for n in "${!pid_of[@]}"; do [ "${pid_of[$n]}" = "$done_pid" ] && name=$n; done
  unset "pid_of[$name]"
  local secs=$(( $(date +%s) - start_of[$name] ))
  echo "=== test_$name"
  cat "$logs/$name.log"
  if [ $rc -eq 0 ]; then pass=$((pass+1)); echo "--- PASS test_$name (${secs}s)"
  elif [ $rc -eq 77 ]; then skip=$((skip+1)); echo "--- SKIP test_$name"
  else
    fail=$((fail+1)); failed+=("test_$name")
    [ $rc -ne 124 ] && [ $rc -ne 137 ] || echo "test_$name: still running after $TEST_TIMEOUT s: stopped"
    echo "--- FAIL test_$name (${secs}s)"
  fi
}

for n in "${alone[@]}"; do start_test "$n"; finish_one; done
for n in "${shared[@]}"; do
  while [ "${#pid_of[@]}" -ge "$SUITE_JOBS" ]; do finish_one; done
  start_test "$n"
done
while [ "${#pid_of[@]}" -gt 0 ]; do finish_one; done
rm -rf "$logs"; unkeep

[ $fail -eq 0 ] || echo "failed: ${failed[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
