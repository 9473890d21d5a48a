#!/usr/bin/env bash
# -bp pre|post (FSDP's backward_prefetch) through the CPU trainer. Where the backward starts its
# gathers moves only time and memory, so for every case below -bp post must give -bp pre's run
# bitwise: the same losses, gradient norms, bytes sent, model state, and exported model.bin, and
# each run's collective ledger must equal its theory; post's peak may not exceed pre's. Cases: ZeRO-3
# at -pd 1 and 2 on 2-4 ranks, with accumulation (A = 2), -wrap half, -wrap 2, -rc 1, -rc 2, -pt,
# HSDP and ZeRO++. Stages 1 and 2 gather nothing in the backward, so there -bp post is refused, as
# it is with -ra 0 and -pd 0 (one error line each, every rank). The unit order and the live units
# of post are checked against a model written out by hand in tests/unit/test_engine_schedule.c.
. "$(dirname "$0")/lib.sh"
make -s train_gpt2_zero3 >/dev/null || fail "build"
COMMON="-e d2c48h2t32 -b 3 -t 32 -x 4 -v 2 -m 1 -l 1e-3 -c 0.1"

same() {   # ranks, flags...: pre and post, compared
  local n=$1; shift
  local name="np $n $*" d="$work/$(echo "$n $*" | tr -c 'a-z0-9' _)"
  for bp in pre post; do
    mpirun -np "$n" $BIN $COMMON "$@" -bp $bp -o "$d.$bp" >"$d.$bp.out" 2>&1 ||
      { tail -5 "$d.$bp.out"; fail "$name -bp $bp: the run failed"; }
    grep -q "ledger: measured = theory" "$d.$bp.out" || fail "$name -bp $bp: the ledger differs from its theory"
  done
  # step, train_loss, val_loss, lr, grad_norm, comm_bytes, mem_states_bytes: every digit
  cmp -s <(cut -d, -f1-5,8,9 "$d.pre/log.csv") <(cut -d, -f1-5,8,9 "$d.post/log.csv") ||
    { diff <(cut -d, -f1-5,8,9 "$d.pre/log.csv") <(cut -d, -f1-5,8,9 "$d.post/log.csv"); fail "$name: post's log differs from pre's"; }
  cmp -s "$d.pre/model.bin" "$d.post/model.bin" || fail "$name: post's model.bin differs from pre's"
  local peak_pre peak_post
  # the engine's peak (mem_engine_peak_bytes, the last column): the buffers the rule decides; the
  # process's (mem_peak_bytes) moves by pages from run to run
  peak_pre=$(tail -1 "$d.pre/log.csv" | cut -d, -f13); peak_post=$(tail -1 "$d.post/log.csv" | cut -d, -f13)
  [ "$peak_post" -le "$peak_pre" ] || fail "$name: post's engine peak $peak_post bytes is above pre's $peak_pre"
  echo "  ok  $name: losses, norms, bytes, model.bin the same; engine peak pre $peak_pre, post $peak_post bytes"
}

echo "-bp post against -bp pre, bitwise:"
same 2 -z 3 -pd 1
same 2 -z 3 -pd 2
same 3 -z 3 -pd 1
same 3 -z 3 -pd 2 -d 576
same 2 -z 3 -pd 1 -wrap half
same 2 -z 3 -pd 2 -wrap 2 -rc 2
same 3 -z 3 -pd 1 -rc 1 -pt 3000
same 4 -z 3 -pd 2 -hs 2
same 4 -z 3 -pd 1 -qw 8 -hp 2 -qg 8

echo "refused where it changes nothing:"
check_case() {
  local what=$1 pattern=$2; shift 2
  local f="$work/case.$BASHPID"   # this case's own files (cases run four at once)
  timeout 120 mpirun -np 2 $BIN $COMMON "$@" >"$f.out" 2>"$f.err"
  check_failed "$what" $? "$f.out" "$f.err" "$pattern" 120
  echo "  ok  $what: $(grep -m1 '^error' "$f.err")"
}
expect_error "-z 1 -bp post" "flag -bp post: only ZeRO-3 gathers params in the backward \(-z 3\); at -z 1" -z 1 -bp post
expect_error "-z 2 -bp post" "flag -bp post: only ZeRO-3 .* at -z 2" -z 2 -bp post
expect_error "-ra 0 -bp post" "flag -bp post: with -ra 0 .* gathers nothing to prefetch" -z 3 -ra 0 -bp post
expect_error "-pd 0 -bp post" "flag -bp post: with -pd 0 nothing is prefetched" -z 3 -pd 0 -bp post
expect_error "-bp sideways" "flag -bp: expected pre or post, got 'sideways'" -z 3 -bp sideways
expect_error "-plan with -z 2 -bp post" "flag -bp post: only ZeRO-3" -plan 2 -z 2 -bp post
finish_cases
echo "test_backward_prefetch: ok"
