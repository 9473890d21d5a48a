#!/usr/bin/env bash
# The CPU emulator sees cross-stream races (tools/emu/include/emu_streams.h): the GPU trainer's test,
# emulated, fails when either event wait of gpu/backend_nccl.cuh is removed and passes with both.
#   ZERO3_TEST_DROP_WAIT=1  the comm stream no longer waits for the compute stream before a
#                           collective: a gather/reduce-scatter reads what no kernel wrote yet
#   ZERO3_TEST_DROP_WAIT=2  the compute stream no longer waits for a collective's handle: kernels
#                           read gathered parameters (or reuse buffers) before the collective ran
# Each build runs test_gpt2cu (FP32, two ranks over the emulated NCCL, stage 3: prefetch and every
# collective on the comm stream; on one rank the engine issues no collective at all) on the small
# dump; a dropped wait must fail with MISMATCHes, not crash. The three runs go side by side.
. "$(dirname "$0")/lib.sh"
make -s dumps >/dev/null || fail "make dumps"
SMALL="tests/reference/dumps/small.dump tests/reference/dumps/small_model.bin"
# (v = 0: the build as users get it, without the define, the same program test_emu_gpt2 runs, so the
# emulator's build cache hands it over)
for v in 0 1 2; do
  drop=(); [ $v -eq 0 ] || drop=(-DZERO3_TEST_DROP_WAIT=$v)
  tools/emu/build.sh "$work/test_drop$v" test_gpt2.cu -DENABLE_FP32 -DUSE_MPI "${drop[@]}" --library \
    > "$work/build$v.log" 2>&1 &
done
wait
for v in 0 1 2; do [ -x "$work/test_drop$v" ] || { cat "$work/build$v.log"; fail "emulator build with ZERO3_TEST_DROP_WAIT=$v"; }; done

for v in 0 1 2; do TEST_STAGES=3 mpirun -np 2 -x TEST_STAGES "$work/test_drop$v" $SMALL > "$work/run$v.log" 2>&1 & pids[$v]=$!; done
for v in 0 1 2; do wait "${pids[$v]}"; rc[$v]=$?; done

tail -1 "$work/run0.log"
[ "${rc[0]}" -eq 0 ] || { tail -20 "$work/run0.log"; fail "with both waits in place the emulated test must pass"; }
for v in 1 2; do
  echo "ZERO3_TEST_DROP_WAIT=$v: exit ${rc[$v]}, $(tail -1 "$work/run$v.log"); $(grep -c MISMATCH "$work/run$v.log") mismatches, first:"
  grep -m1 MISMATCH "$work/run$v.log" | cut -c1-160
  [ "${rc[$v]}" -ne 0 ] || fail "ZERO3_TEST_DROP_WAIT=$v: the race went unnoticed"
  grep -q MISMATCH "$work/run$v.log" || { tail -5 "$work/run$v.log"; fail "ZERO3_TEST_DROP_WAIT=$v failed without a mismatch (a crash?)"; }
done
echo "ok: both waits are needed, and the emulator shows it"
