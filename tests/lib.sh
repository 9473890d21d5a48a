# tests/lib.sh: the preamble the shell tests share. Source it first:  . "$(dirname "$0")/lib.sh"
# It moves to the repository root, lets mpirun run as root and oversubscribe the cores, gives each
# rank one OpenMP thread, picks the Python with torch, makes a scratch folder removed on exit, and
# defines fail(), skip() and BIN (the trainer under test: ZERO3_TRAINER, else ./train_gpt2_zero3).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
skip() { echo "skipped: $*"; exit 77; }   # this machine cannot run the test (tests/run_all.sh counts it)
BIN=${ZERO3_TRAINER:-./train_gpt2_zero3}

# check_failed WHAT RC OUT ERR PATTERN LIMIT: a run that must fail as a bad input does (exit status
# RC, stdout in OUT, stderr in ERR, run under `timeout LIMIT`): not stopped by its timeout, a non-zero
# exit, exactly one line starting 'error' on stderr, and that line matching PATTERN. FAIL otherwise.
check_failed() {
  local what=$1 rc=$2 out=$3 err=$4 pattern=$5 limit=$6 n
  [ "$rc" -ne 124 ] || fail "$what: still running after $limit s"
  [ "$rc" -ne 0 ] || { cat "$out"; fail "$what: exit 0, want an error"; }
  n=$(grep -c '^error' "$err")
  [ "$n" -eq 1 ] || { cat "$err"; fail "$what: want exactly one 'error' line, got $n"; }
  grep '^error' "$err" | grep -qE -- "$pattern" || { cat "$err"; fail "$what: message does not match /$pattern/"; }
}

# side_by_side COMMAND...: COMMAND (a function of the calling script that fails with fail()) in the
# background, SIDE_JOBS at once (4: a run of the trainer spends most of its time starting MPI and
# tearing it down; a script whose runs compute gives its cores); finish_cases waits, prints the outputs
# in order, fails on any FAIL. A COMMAND writes its scratch files under names with $BASHPID, its own.
# expect_error WHAT PATTERN ARGS...: side_by_side the calling script's check_case (the trainer with
# ARGS must fail with one error line matching PATTERN).
n_cases=0; SIDE_JOBS=4
side_by_side() {
  while [ "$(jobs -rp | wc -l)" -ge "$SIDE_JOBS" ]; do wait -n; done
  n_cases=$((n_cases + 1))
  ( "$@" ) >"$work/result_$(printf %03d $n_cases)" 2>&1 &
}
expect_error() { side_by_side check_case "$@"; }
finish_cases() {
  wait
  local f failed=0
  for f in "$work"/result_*; do cat "$f"; grep -q '^FAIL' "$f" && failed=1; rm -f "$f"; done
  [ $failed -eq 0 ] || exit 1
}
