#!/usr/bin/env bash
# The flags' ranges and the checks between flags (docs/formats.md "Ranges", "Between flags"):
#   1. every numeric flag -h gives a range to refuses a value just outside each end, with one error
#      line naming the flag and that range, and accepts both ends (through -plan, which takes every
#      flag a run takes); the emulated link's GB/s and latency at and past their
#      ends; --help-md's table (docs/formats.md's flags, held there by test_docs) gives every flag
#      and range -h gives;
#   2. for a set of refused combinations a run on 2 ranks and -plan 2 print the same error line, and
#      for a set of flags a run accepts (-p, -pt, -clip among them) -plan 2 accepts them too, with a
#      line for each whose effect the plan leaves out;
#   3. -plan N with -hp G plans hpZ in groups of G: the model state it prints is the run's startup
#      report's for those flags, and both are the bytes worked out here by hand.
. "$(dirname "$0")/lib.sh"
make -s train_gpt2_zero3 >/dev/null || fail "build"
MODEL=(-e d2c64h2t64 -b 2 -t 32 -x 1 -v 0)   # a run of one step, about a second

# ---- 1. ranges ---------------------------------------------------------------------------------
# FLAG RANGE: the range as -h prints it, from the last line of the flag's help (a flag's first line
# starts "  -NAME"; its range ends its last line: "... range [1, 1048576]")
ranges=$("$BIN" -h | awk '/^  -[a-zA-Z]/ { name = $1 } match($0, / range [[(].*$/) { print name, substr($0, RSTART + 7) }')
[ "$(wc -l <<<"$ranges")" -ge 30 ] || fail "-h gives fewer than 30 ranges: $ranges"
# the same from --help-md's rows: | `-b B` | meaning | default | [1, 1048576] |
"$BIN" --help-md >"$work/md" || fail "--help-md failed"
md_ranges=$(sed -nE 's/^\| `(-[a-zA-Z]+)[^`]*` \|.* \| ([^|]+) \|$/\1 \2/p' "$work/md")
[ "$md_ranges" = "$ranges" ] || { diff <(echo "$ranges") <(echo "$md_ranges"); fail "--help-md's ranges are not -h's"; }
[ "$(grep -c '^| `-' "$work/md")" = "$("$BIN" -h | grep '^  -[a-zA-Z]' | grep -vc '^  -h ')" ] ||   # -h itself: not a row
  fail "--help-md and -h list different numbers of flags"
echo "ok   --help-md's table gives the flags and ranges -h gives ($(wc -l <<<"$ranges") ranges)"

# the context a value at an end of its range needs to be planned (its other flags in range too)
context() {
  case "$1:$2" in
    -t:hi|-b:hi) echo "-plan 1 -e 1M" ;;                      # no maxT for a bare parameter count
    -d:lo) echo "-plan 1 -e 1M -b 1 -t 1" ;;                   # N*B*T = 1 divides 1
    -d:hi) echo "-plan 1000 -e 1M -b 1000000 -t 1000" ;;       # 1e15 / (1000*1e9) = 1000 micro-steps
    -hs:lo) echo "-plan 2 -e 1M" ;;
    -hs:hi) echo "-plan 2097152 -e 1M" ;;                      # G below N, dividing it
    -hp:hi) echo "-plan 1048576 -e 1M" ;;
    -wrap:*) echo "-plan 2 -e d8" ;;                           # 8 blocks: 1 and 8 divide them
    -mem:*) echo "-plan 2 -e d2c64h2t64" ;;                    # a shape to grow (a bare count has none)
    -n:*|-y:*) echo "-plan 2 -e 1M -o $work/o" ;;
    -linkx:*) echo "-plan 4 -e 1M -rpn 2" ;;                   # two nodes
    -os:*) echo "-plan 2 -e 1M -oo disk" ;;                   # a file on disk to stage (a bare count: no units to bound it)
    -ua:hi) echo "-plan 2 -e 1M -gc 0" ;;                      # AdamW inside the backward: no clipping
    *) echo "-plan 2 -e 1M" ;;
  esac
}
# one value past an end: an integer one beyond, a real a millionth beyond (or 1e-6 below 0)
past() {   # KIND(int|real) END(lo|hi) BOUND
  $PY -c "
import sys; kind, end, b = sys.argv[1], sys.argv[2], sys.argv[3]
if kind == 'int': print(int(b) - 1 if end == 'lo' else int(b) + 1)
else:
    b = float(b); d = abs(b) * 1e-6 if b else 1e-6
    print(repr(b - d if end == 'lo' else b + d))" "$1" "$2" "$3"
}
refused() {   # WHAT RANGE ARGS...: one error line naming the flag of WHAT and the range, non-zero exit
  local what=$1 range=$2 rc err=$work/err_$BASHPID; shift 2
  timeout 60 "$BIN" "$@" >/dev/null 2>"$err"; rc=$?
  check_failed "$what" $rc /dev/null "$err" "^error: flag ${what%% *}: " 60
  grep '^error' "$err" | grep -qF -- "$range" || { cat "$err"; fail "$what: the error does not give the range $range"; }
}
accepted() {   # WHAT ARGS...: exit 0, no error line
  local err=$work/err_$BASHPID
  timeout 120 "$BIN" "${@:2}" >/dev/null 2>"$err" || { cat "$err"; fail "$1 refused"; }
  ! grep -q '^error' "$err" || { cat "$err"; fail "$1: an error line"; }
}
# range_ends FLAG RANGE: just outside each end refused, both ends accepted (each flag side by side)
range_ends() {
  local flag=$1 range=$2 lo hi bracket kind end bound bad
  case "$flag" in
    -qw|-qg) refused "$flag 7" "[8, 8]" -plan 2 -e 1M $flag 7; refused "$flag 9" "[8, 8]" -plan 2 -e 1M $flag 9
             accepted "$flag 8" -plan 2 -e 1M $flag 8; return ;;
  esac
  lo=$(sed -E 's/^\[([^,]*), .*/\1/' <<<"$range"); hi=$(sed -E 's/^\[[^,]*, ([^]]*)\].*/\1/' <<<"$range")
  bracket=$(grep -oE '^\[[^]]*\]' <<<"$range")
  kind=int; [[ "$lo$hi" =~ [.eE] ]] && kind=real
  case "$flag" in -l|-q|-c|-gc|-bw|-bwx|-tf) kind=real ;; esac
  for end in lo hi; do
    bound=$lo; [ $end = hi ] && bound=$hi
    bad=$(past $kind $end "$bound")
    # shellcheck disable=SC2046
    refused "$flag $bad" "$bracket" $(context "$flag" "$end") "$flag" "$bad"
    # shellcheck disable=SC2046
    accepted "$flag $bound" $(context "$flag" "$end") "$flag" "$bound"
  done
}
n_checked=0
while read -r flag range; do
  case "$flag" in -link|-linkx) continue ;; esac               # GB/s and latency: below
  side_by_side range_ends "$flag" "$range"; n_checked=$((n_checked + 1))
done <<<"$ranges"
finish_cases
echo "ok   $n_checked numeric flags: just outside each end refused with the flag and its range, both ends accepted"

# the emulated link: GB/s [0.001, 10000], latency (0, 1] s, on -link and -linkx; the known case
for f in -link -linkx; do
  ctx=(-plan 4 -e 1M -rpn 2)
  side_by_side refused "$f 1e-300" "[0.001, 10000] GB/s" "${ctx[@]}" $f 1e-300
  side_by_side refused "$f 0.000999" "[0.001, 10000] GB/s" "${ctx[@]}" $f 0.000999
  side_by_side refused "$f 10000.01" "[0.001, 10000] GB/s" "${ctx[@]}" $f 10000.01
  side_by_side refused "$f 1,0s" "(0, 1] s" "${ctx[@]}" $f 1,0s
  side_by_side refused "$f 1,1.000001s" "(0, 1] s" "${ctx[@]}" $f 1,1.000001s
  for ok in 0.001 1MB/s 10000 10TB/s 1,1s 1,1000ms 1,1ns; do
    side_by_side accepted "$f $ok" "${ctx[@]}" $f "$ok"
  done
done
finish_cases
# a run refuses it too, on every rank, before any work
timeout 60 mpirun -np 2 "$BIN" "${MODEL[@]}" -link 1e-300 >"$work/out" 2>"$work/err"
check_failed "run -link 1e-300 (np 2)" $? "$work/out" "$work/err" "^error: flag -link: bandwidth 1e-300 is out of range \[0.001, 10000\] GB/s" 60
# and at the slowest link a short collective is held for a finite, printed time
timeout 120 "$BIN" -e d2c16h2t16 -b 1 -t 16 -x 1 -v 0 -link 0.001 >"$work/out" 2>"$work/err" ||
  { cat "$work/err"; fail "-link 0.001: a one-rank run failed"; }
! grep -qE '[0-9]{30}' "$work/out" || { grep -E '[0-9]{30}' "$work/out"; fail "-link 0.001: a 30-digit figure"; }
echo "ok   -link/-linkx: 1e-300, just outside both ends of GB/s and latency refused; both ends accepted (units too)"

# ---- 2. the run and the planner refuse the same combinations with the same line -----------------
same_refusal() {   # FLAGS...: mpirun -np 2 (a run) and -plan 2 fail with the same one error line
  local rc run_err=$work/run_err_$BASHPID plan_err=$work/plan_err_$BASHPID
  timeout 60 mpirun -np 2 "$BIN" "${MODEL[@]}" "$@" >/dev/null 2>"$run_err"; rc=$?
  check_failed "run $*" $rc /dev/null "$run_err" "^error: flag" 60
  timeout 60 "$BIN" -plan 2 "${MODEL[@]}" "$@" >/dev/null 2>"$plan_err"; rc=$?
  check_failed "-plan 2 $*" $rc /dev/null "$plan_err" "^error: flag" 60
  [ "$(grep '^error' "$run_err")" = "$(grep '^error' "$plan_err")" ] ||
    fail "$*: the run says '$(grep '^error' "$run_err")', -plan 2 '$(grep '^error' "$plan_err")'"
  echo "  $*: $(grep '^error' "$run_err")"
}
echo "refused alike by a run on 2 ranks and -plan 2:"
for flags in "-z 2 -qw 8" "-z 1 -hp 2" "-z 0 -qg 8" "-z 0 -hs 1" "-z 1 -ra 0" "-z 0 -pt 5" "-rc 2 -wrap half" \
             "-hs 1 -hp 1" "-n 1" "-y 1" "-y 1 -f 1 -o $work/yf" "-hp 3" "-hs 3" "-hs 2" "-d 100" "-linkx 1" \
             "-linkx 1 -rpn 2" "-b 65536 -t 65536" "-t 128" "-wrap 3" "-ua 1"; do
  # shellcheck disable=SC2086
  side_by_side same_refusal $flags
done
finish_cases
[ ! -e "$work/yf" ] || fail "-y 1 -f 1: the run made its output folder before refusing"
echo "ok   21 combinations: the same error line from the run and the planner"

same_verdict() {   # FLAGS...: a run on 2 ranks and -plan 2 both accept (or both refuse with the same line)
  local run_rc plan_rc run_err=$work/vrun_err_$BASHPID plan_out=$work/vplan_out_$BASHPID plan_err=$work/vplan_err_$BASHPID
  timeout 60 mpirun -np 2 "$BIN" "${MODEL[@]}" "$@" >/dev/null 2>"$run_err"; run_rc=$?
  timeout 60 "$BIN" -plan 2 "${MODEL[@]}" "$@" >"$plan_out" 2>"$plan_err"; plan_rc=$?
  [ $((run_rc == 0)) = $((plan_rc == 0)) ] ||
    fail "$*: the run's exit status $run_rc ('$(grep '^error' "$run_err")'), -plan 2's $plan_rc ('$(grep '^error' "$plan_err")')"
  [ "$(grep '^error' "$run_err")" = "$(grep '^error' "$plan_err")" ] ||
    fail "$*: the run says '$(grep '^error' "$run_err")', -plan 2 '$(grep '^error' "$plan_err")'"
  [ $plan_rc -ne 0 ] || case " $* " in *" -pt "[1-9]*|*" -clip local "*|*" -ua 1 "*)   # what the plan does not show: its own line
    grep -q "^not in this plan: flag -\(pt\|clip\|ua\): " "$plan_out" || fail "-plan 2 $*: no line saying what the plan leaves out" ;;
  esac
  if [ $plan_rc -eq 0 ]; then echo "  accepted by both: $*"; else echo "  refused by both: $*: $(grep '^error' "$run_err")"; fi
}
echo "the same verdict from a run on 2 ranks and -plan 2:"
for flags in "-p bf16" "-p fp32" "-pt 1000" "-clip local" "-clip global" "-z 1 -p bf16 -pt 5000 -clip local" \
             "-z 2 -pt 100000" "-p fp16" "-clip none" "-z 0 -pt 1" "-hp 2 -p bf16" "-bp post -p bf16" "-ua 1 -gc 0"; do
  # shellcheck disable=SC2086
  side_by_side same_verdict $flags
done
finish_cases
echo "ok   13 flag sets (-p, -pt, -clip, -ua among them): the run and the planner accept and refuse alike"

# ---- 3. -plan N -hp G: the run's model state for that G -----------------------------------------
# d2c64h2t64: wte Vp*C + wpe maxT*C + L*(12C^2 + 13C) + lnf 2C parameters, Vp = 50304
psi=$((50304 * 64 + 64 * 64 + 2 * (12 * 64 * 64 + 13 * 64) + 2 * 64))
for NG in "4 2" "4 1" "2 2" "1 1"; do
  read -r N G <<<"$NG"
  # fp32: params, grads, m, v sharded over N; the secondary shard over G (none on one rank: nothing to gather)
  hand=$((16 * psi / N + (N > 1 ? 4 * psi / G : 0)))
  timeout 120 mpirun -np "$N" "$BIN" "${MODEL[@]}" -hp "$G" >"$work/run_out" 2>"$work/err" || { cat "$work/err"; fail "run -np $N -hp $G"; }
  run=$(sed -nE 's/.*theory bytes: state ([0-9]+) .*/\1/p' "$work/run_out")
  "$BIN" -plan "$N" "${MODEL[@]}" -hp "$G" >"$work/plan_out" 2>"$work/err" || { cat "$work/err"; fail "-plan $N -hp $G"; }
  plan=$(sed -nE 's/.*this run \(-z 3 -hp [0-9]+\): model state ([0-9]+) bytes per rank in fp32.*/\1/p' "$work/plan_out")
  [ "$run" = "$hand" ] || fail "-hp $G on $N ranks: the run reports $run bytes of model state, by hand $hand"
  [ "$plan" = "$hand" ] || fail "-plan $N -hp $G prints '$plan' bytes of model state, the run's is $hand"
  grep -q "mixed precision, -hp groups G = $G of $N rank" "$work/plan_out" || { grep "ZeRO++" "$work/plan_out"; fail "-plan $N -hp $G: the ZeRO++ table is not in groups of $G"; }
  echo "ok   -plan $N -hp $G: model state $plan bytes per rank = the run's = 16*$psi/$N + 4*$psi/$G"
done
# the ZeRO++ table's -hp row in groups of the G given, mixed precision: 16 psi/N + 2 psi/G (d12, N=8, G=2)
psi12=$((50304 * 768 + 1024 * 768 + 12 * (12 * 768 * 768 + 13 * 768) + 2 * 768))
"$BIN" -plan 8 -e d12 -hp 2 >"$work/plan_out" 2>"$work/err" || { cat "$work/err"; fail "-plan 8 -e d12 -hp 2"; }
want=$($PY -c "print('%.3f' % ((16 * $psi12 / 8 + 2 * $psi12 / 2) / 1e9))")
got=$(awk '$1 == "-hp" && $2 == "G" {print $NF}' "$work/plan_out")
[ "$got" = "$want" ] || fail "-plan 8 -e d12 -hp 2: the -hp G row's model state is $got GB, by hand $want"
echo "ok   -plan 8 -e d12 -hp 2: the ZeRO++ table's -hp row holds $got GB per rank, in groups of 2"
echo "PASS test_flags"
