#!/usr/bin/env bash
# "ZeRO-3's price is time": the planner (-plan), its bad inputs, and through the trainer
# (tests/time_consistency.py) the collective ledger against its theory at every stage for A = 1, 2,
# the trace's JSON, lanes and bytes, log.csv's time columns, losses with and without the
# communication thread, and stage 3 on one rank holding no more than DDP.
. "$(dirname "$0")/lib.sh"
make -s train_gpt2_zero3 >/dev/null || fail "build"

# the planner: the notes' figures, 7.5B parameters on 64 GPUs, 16 bytes per parameter
out=$($BIN -plan 64 -e 7.5B) || fail "-plan 64 -e 7.5B exited $?"
echo "$out" | grep -Eq '^  0 DDP +120,000,000,000 +120\.000' || fail "-plan: stage 0 is not 120,000,000,000 bytes:
$out"
echo "$out" | grep -Eq '^  3 +1,875,000,000 +1\.875' || fail "-plan: stage 3 on 64 ranks is not 1,875,000,000 bytes"
echo "$out" | grep -Eq '^  1 +31,406,250,000' || fail "-plan: mixed-precision stage 1 is not 31,406,250,000 bytes (the notes' 31.4 GB)"
echo "$out" | grep -Eq '^  2 +16,640,625,000' || fail "-plan: mixed-precision stage 2 is not 16,640,625,000 bytes (16.6 GB)"
for e in 1.5e9 350M; do $BIN -plan 8 -e $e >/dev/null || fail "-plan 8 -e $e"; done
# nothing allocated, no data read: GPT-2 d48 (1.5B parameters, 24 GB at stage 0) in 2 GB of address
# space, with a training file that does not exist; the time estimate with links and a compute rate
out=$( (ulimit -v 2000000; $BIN -plan 64 -e d48 -i /nonexistent -d 524288 -t 1024 -b 8 -bw 300 -bwx 25 -rpn 8 -tf 400) ) \
  || fail "-plan 64 -e d48 needed memory or data (exit $?)"
echo "$out" | grep -q "time per step" || fail "-plan: no time estimate with -bw and -tf"
echo "$out" | grep -Eq '^  3 .*(hidden|NOT hidden)' || fail "-plan: no verdict for stage 3"
# -bp post at -pd 1: the verdict names what the model leaves exposed, the backward gathers, at their
# ring time from the plan's own traffic table (bwd_gather GB a rank at -bw GB/s), which is also
# what post's exposed time adds to pre's; -bp pre hides them
plan_bp() { $BIN -plan 8 -e d12 -b 4 -t 1024 -bw 2 -tf 5 "$@" || fail "-plan -bp: exit $?"; }
pre=$(plan_bp -bp pre) && post=$(plan_bp -bp post) || exit 1
echo "$pre" | grep -Eq '^  3 .*hidden \(but for the first/last unit\)$' || fail "-plan -bp pre: stage 3 is not hidden:
$(echo "$pre" | grep '^  3 ')"
row() { echo "$1" | awk '/exposed ms +step ms/ {on = 1; next} on && $1 == 3 {print; exit}'; }
bwd_gb=$(echo "$post" | awk '/fwd_gather +bwd_gather/ {on = 1; next} on && $1 == 3 {print $3; exit}')
waited=$(row "$post" | sed -nE 's/.*the backward gathers exposed \(([0-9.]+) ms: -bp post -pd 1\)$/\1/p')
[ -n "$waited" ] || fail "-plan -bp post: the verdict does not name the backward gathers it leaves exposed: $(row "$post")"
awk -v w="$waited" -v g="$bwd_gb" -v pre="$(row "$pre" | awk '{print $6}')" -v post="$(row "$post" | awk '{print $6}')" \
  'BEGIN {exit !(w - 1000 * g / 2 < 1 && 1000 * g / 2 - w < 1 && (post - pre) - w < 0.2 && w - (post - pre) < 0.2)}' ||
  fail "-plan -bp post: $waited ms of backward gathers exposed, against $bwd_gb GB at 2 GB/s and the exposed times $(row "$pre" | awk '{print $6}') / $(row "$post" | awk '{print $6}') ms"
echo "planner: -bp post -pd 1 names its exposed backward gathers, $waited ms = $bwd_gb GB at 2 GB/s = post's exposed time less pre's"
echo "planner: 7.5B on 64 ranks = 120,000,000,000 / 1,875,000,000 bytes at stages 0 / 3; d48 planned in 2 GB"

# bad input: one error line, non-zero exit
bad() {
  local what=$1; shift
  "$BIN" "$@" >"$work/out" 2>"$work/err" && fail "$what: exit 0"
  [ "$(grep -c '^error:' "$work/err")" = 1 ] || fail "$what: not one error line: $(cat "$work/err")"
  echo "  $what: $(cat "$work/err")"
}
echo "bad inputs:"
bad "-plan 0" -plan 0 -e d12
bad "-plan -3" -plan -3 -e d12
bad "-e 7.5X" -plan 8 -e 7.5X
bad "-e 0B" -plan 8 -e 0B
bad "-e 7.5B without -plan" -e 7.5B -x 1
bad "unwritable -tr" -e d2c48h2t32 -t 32 -x 1 -v 0 -tr /nonexistent/dir/trace.json

$PY tests/time_consistency.py
