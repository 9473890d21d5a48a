#!/usr/bin/env bash
# The communication thread ahead of the compute (cpu/backend_cpu.c, compute_behind_worker), read from
# /proc while 2 ranks train: with ZERO3_COMM_NICE=K each rank's compute thread runs K nice levels
# above its worker (the thread named zero3-comm), and the OpenMP thread it starts with it; unset or
# 0, they stay level; a rank alone has no worker and keeps the nice it was started
# with; a value outside 0-19 is refused on every rank in one line, before anything is written.
# About 30 s.
. "$(dirname "$0")/lib.sh"
make -s train_gpt2_zero3 >/dev/null || fail "build"
base=$(awk '{print $19}' /proc/self/stat)   # the nice this script runs at, and the ranks start at

# sample RANKS [VAR=VALUE]: starts a run in the background (2 OpenMP threads a rank), waits until
# its RANKS processes run and its first step is in log.csv (so every thread has started), then prints
# one line a rank: "MAIN WORKER OTHERS" (the main thread's nice, the zero3-comm thread's or -, the
# sorted nices of the rest), and stops the run.
trainers() {   # the trainer processes writing into $work/o
  local p
  for p in $(pgrep -f -- "-o $work/o"); do [ "$(cat /proc/"$p"/comm 2>/dev/null)" = train_gpt2_zero ] && echo "$p"; done
}
sample() {
  local ranks=$1 var=${2:-} pids p t n i
  rm -rf "$work/o"
  local launch=(); [ "$ranks" -gt 1 ] && launch=(mpirun -np "$ranks")
  env ${var:+"$var"} OMP_NUM_THREADS=2 "${launch[@]}" $BIN -e d2c64h2t64 -b 2 -t 32 -x 100000 -v 0 \
    -o "$work/o" >"$work/run.out" 2>&1 &
  local job=$!
  for i in $(seq 1 300); do
    pids=$(trainers)
    [ "$(echo "$pids" | grep -c .)" = "$ranks" ] && [ "$(cat "$work/o/log.csv" 2>/dev/null | grep -c .)" -ge 2 ] && break
    sleep 0.2
  done
  for p in $pids; do
    local main worker="-" others=""
    main=$(awk '{print $19}' /proc/"$p"/stat)
    for t in /proc/"$p"/task/*; do
      [ "${t##*/}" = "$p" ] && continue
      n=$(awk '{print $19}' "$t"/stat 2>/dev/null) || continue
      if [ "$(cat "$t"/comm 2>/dev/null)" = zero3-comm ]; then worker=$n; else others="$others $n"; fi
    done
    echo "$main $worker$(echo $others | tr ' ' '\n' | sort -n | tr '\n' ' ' | sed 's/^/ /; s/ $//')"
  done
  kill -TERM "$job" 2>/dev/null; wait "$job" 2>/dev/null
  pkill -KILL -f -- "-o $work/o" 2>/dev/null
  return 0
}

# ZERO3_COMM_NICE=10: compute at base + 10, the worker at base, the OpenMP thread at base + 10
out=$(sample 2 ZERO3_COMM_NICE=10)
[ "$(echo "$out" | grep -c .)" = 2 ] || fail "2 ranks: not 2 trainer processes sampled:
$out
$(cat "$work/run.out")"
while read -r main worker others; do
  [ "$main" = $((base + 10)) ] && [ "$worker" = "$base" ] ||
    fail "ZERO3_COMM_NICE=10: the compute thread at nice $main and the worker at $worker, want $((base + 10)) and $base"
  echo " $others " | grep -q " $((base + 10)) " ||
    fail "ZERO3_COMM_NICE=10: no other thread at the compute's nice $((base + 10)) (the OpenMP thread): $others"
done <<<"$out"
echo "ok: ZERO3_COMM_NICE=10: the compute threads 10 nice levels behind the communication thread"

out=$(sample 2 ZERO3_COMM_NICE=3)
while read -r main worker others; do
  [ "$main" = $((base + 3)) ] && [ "$worker" = "$base" ] || fail "ZERO3_COMM_NICE=3: compute at $main, worker at $worker, want $((base + 3)) and $base"
done <<<"$out"
for var in "" ZERO3_COMM_NICE=0; do
  out=$(sample 2 $var)
  [ "$(echo "$out" | grep -c .)" = 2 ] || fail "${var:-unset}: not 2 trainer processes sampled: $out"
  while read -r main worker others; do
    [ "$main" = "$base" ] && [ "$worker" = "$base" ] || fail "${var:-ZERO3_COMM_NICE unset}: compute at $main, worker at $worker, want both $base"
  done <<<"$out"
done
echo "ok: ZERO3_COMM_NICE=3 sets the difference; unset or 0, none"

out=$(sample 1)
read -r main worker others <<<"$out"
[ "$main" = "$base" ] && [ "$worker" = - ] || fail "1 rank: the main thread at nice $main with worker '$worker', want $base and none"
echo "ok: a rank alone has no worker and keeps its nice"

for v in abc 20 -1 1x; do
  for np in 2 1; do   # a rank alone has no worker, and refuses the value all the same
    rm -rf "$work/bad"
    launch=(); [ $np -gt 1 ] && launch=(mpirun -np $np -x ZERO3_COMM_NICE)
    ZERO3_COMM_NICE=$v timeout 60 "${launch[@]}" $BIN -e d2c64h2t64 -b 2 -t 32 -x 1 -v 0 -o "$work/bad" \
      >"$work/out" 2>"$work/err"
    check_failed "ZERO3_COMM_NICE=$v, $np rank(s)" $? "$work/out" "$work/err" "ZERO3_COMM_NICE: expected an integer in \[0, 19\]" 60
    [ ! -e "$work/bad" ] || fail "ZERO3_COMM_NICE=$v, $np rank(s): the output folder was made"
  done
done
echo "ok: a bad ZERO3_COMM_NICE refused on every rank, on 2 ranks and on 1, nothing written"
echo "comm_nice: ok"
