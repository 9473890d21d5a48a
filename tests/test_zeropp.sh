#!/usr/bin/env bash
# ZeRO++ (docs/zeropp.md): the block quantization's round trip and its layout on N = 1..5
# (build/test_quantize), the trainer on 1-4 ranks with -qw 8, -hp G, -qg 8 and together (ledger =
# theory, -hp exact, the accuracy bound, figures by hand, checkpoints: tests/zeropp.py says how), and
# the flags' bad inputs: one error line naming the flag, non-zero exit on every rank.
. "$(dirname "$0")/lib.sh"
make -s train_gpt2_zero3 build/test_quantize >/dev/null || fail "build"
./build/test_quantize || fail "test_quantize"
$PY tests/zeropp.py "$BIN" || fail "zeropp"

ARGS=(-e d2c48h2t32 -t 32 -b 2 -x 1 -v 0)
check_case() {   # WHAT PATTERN FLAGS...: on 1 and 2 ranks, exit non-zero with one matching error line
  local what=$1 pattern=$2 np rc err="$work/err_$BASHPID"; shift 2
  for np in 1 2; do
    if [ $np -eq 1 ]; then timeout 60 "$BIN" "${ARGS[@]}" "$@" >/dev/null 2>"$err"
    else timeout 60 mpirun -np 2 "$BIN" "${ARGS[@]}" "$@" >/dev/null 2>"$err"; fi
    rc=$?
    check_failed "$what (np $np)" $rc /dev/null "$err" "$pattern" 60
  done
  echo "ok   $what (np 1, 2): $(grep '^error' "$err")"
}
expect_error "-qw 4" "flag -qw: 4-bit quantization is not supported" -qw 4
expect_error "-qg 16" "flag -qg: 16-bit quantization is not supported" -qg 16
expect_error "-qw x" "flag -qw: expected an integer" -qw x
expect_error "-hp 3" "flag -hp: the group size 3 does not divide" -hp 3
expect_error "-hp 0" "flag -hp: 0 is out of range" -hp 0
expect_error "-hp 2 -z 2" "flag -hp: ZeRO\+\+ builds on ZeRO-3" -hp 2 -z 2
expect_error "-qw 8 -z 1" "flag -qw: ZeRO\+\+ builds on ZeRO-3" -qw 8 -z 1
expect_error "-qg 8 -z 0" "flag -qg: ZeRO\+\+ builds on ZeRO-3" -qg 8 -z 0
expect_error "-hp 1 -hs 1" "flag -hp: with HSDP" -hp 1 -hs 1
finish_cases
echo "test_zeropp: all passed"
