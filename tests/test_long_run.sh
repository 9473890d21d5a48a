#!/usr/bin/env bash
# Long runs under the engine's step-end invariant: 300 steps of a tiny model (the V=1024 reference
# model, L=3 C=72) at every stage and variant, with ZERO3_CHECK_STEPS=1, so zero3_check_step_end runs
# after every optimizer step on every rank: no collective in flight (the engine's list and the
# backend's handle table), every pool buffer returned, every unit SHARDED or RESIDENT as its layout
# says; and the trainer checks after every step that the process has no more open files than
# after the first. Validation, sampling and checkpoints run
# inside the loop (every 50 / 100 / 100 steps), so a file or buffer they leak shows too. A resource
# that leaks once per step passes any short test and fails here; the pool (at most 64 buffers) and
# the handle tables (64-128) run out long before step 300.
# Each run must also end where stage 0 on one rank ends (the losses of all 300 steps within 1e-4,
# relative): a long run that drifts is wrong even when nothing leaks.
. "$(dirname "$0")/lib.sh"
make -s train_gpt2_zero3 ddp dumps >/dev/null || fail "build"
STEPS=300
DATA=(-e tests/reference/dumps/small_model.bin -i tests/reference/dumps/small_tokens.bin -j tests/reference/dumps/small_tokens.bin)
COMMON=("${DATA[@]}" -t 8 -x $STEPS -v 50 -m 2 -s 100 -g 8 -n 100 -l 1e-3 -c 0.1)
export ZERO3_CHECK_STEPS=1
fds_before=$(ls /proc/$$/fd | wc -l)

# long_run NAME N BINARY FLAGS...: 12 rows per step over N ranks; CHECKED: the steps this run takes
long_run() {
  local name=$1 n=$2 bin=$3; shift 3
  local out="$work/$name"
  local cmd=("$bin" "${COMMON[@]}" -b $((12 / n)) -o "$out" "$@")
  [ "$n" -gt 1 ] && cmd=(mpirun -x ZERO3_CHECK_STEPS -np "$n" "${cmd[@]}")
  "${cmd[@]}" >"$work/$name.log" 2>&1 || { tail -5 "$work/$name.log"; fail "$name: the run failed"; }
  grep -q "step-end invariant held at ${CHECKED:-$STEPS} steps" "$work/$name.log" ||
    fail "$name: the step-end invariant did not run at every step"
  [ "$(($(wc -l <"$out/log.csv") - 1))" -eq $STEPS ] || fail "$name: log.csv does not hold $STEPS rows"
  grep "step-end invariant" "$work/$name.log" | sed "s/^/  $(printf '%-22s' "$name") /"
}

# same_losses NAME: every step's train loss within 1e-4 of stage 0 on one rank
same_losses() {
  $PY - "$work/ref/log.csv" "$work/$1/log.csv" <<'PY' || fail "$1: the losses leave stage 0's"
import csv, sys
ref, got = ([float(r["train_loss"]) for r in csv.DictReader(open(p))] for p in sys.argv[1:3])
worst = max(abs(a - b) / abs(a) for a, b in zip(ref, got))
sys.exit(0 if len(ref) == len(got) and worst < 1e-4 else f"worst relative loss difference {worst:.2e}: ")
PY
}

start=$(date +%s)
long_run ref 1 ./train_gpt2_zero3 -z 0
for args in "z0 2 -z 0" "z1 2 -z 1" "z2 2 -z 2" "z3 2 -z 3" "z3_pd0 2 -z 3 -pd 0" "z3_pd3 2 -z 3 -pd 3" \
            "z3_ra0 2 -z 3 -ra 0" "z3_pt 2 -z 3 -pt 3000" "z3_rc1 2 -z 3 -rc 1" "z3_rc2 2 -z 3 -rc 2" \
            "z3_wrap3 2 -z 3 -wrap 3" "z3_half 2 -z 3 -wrap half" "z2_accum 2 -z 2 -d 96 -b 3" \
            "z3_accum 3 -z 3 -d 96 -b 2" "z1_n3 3 -z 1" "z3_n1 1 -z 3" "z3_hsdp 4 -z 3 -hs 2" \
            "z2_hsdp_ra0_pt 4 -z 2 -hs 2 -pt 3000" "z3_ra0_pt_rc1 3 -z 3 -ra 0 -pt 3000 -rc 1"; do
  read -r name n flags <<<"$args"
  # shellcheck disable=SC2086
  long_run "$name" "$n" ./train_gpt2_zero3 $flags
  same_losses "$name"
done
long_run ddp_build 2 build/ddp/train_gpt2_zero3
same_losses ddp_build

# resumed from the step-200 checkpoint on another N and stage: the invariant holds after a resume
cp -r "$work/z3" "$work/resume" && rm -rf "$work/resume"/ckpt_00000300_* &&
  (cd "$work/resume" && ls -d ckpt_00000200_* >latest)
CHECKED=100 long_run resume 3 ./train_gpt2_zero3 -z 1 -y 1
same_losses resume

fds_after=$(ls /proc/$$/fd | wc -l)
[ "$fds_after" -le "$fds_before" ] || fail "the test itself leaks file descriptors ($fds_before -> $fds_after)"
echo "long runs: $STEPS steps each at every stage and variant, invariant held at every step ($(( $(date +%s) - start ))s)"
