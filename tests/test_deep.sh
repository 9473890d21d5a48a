#!/usr/bin/env bash
# A model deeper than any handle table: 140 blocks (142 units, more than the backends' 128 handle
# slots) at stages 1 and 2, where the post-step all-gather of every unit used to be started before
# any was waited on ("too many collectives in flight"). The engine now keeps at most
# ZERO3_GATHER_BATCH in flight (with the batching removed, this test fails on that error). On the CPU trainer over
# MPI, and on the GPU trainer under the CUDA emulator with the emulated NCCL over MPI, 2 ranks each.
. "$(dirname "$0")/lib.sh"
make -s train_gpt2_zero3 >/dev/null || fail "build"
D=(-e d140c16h1t16 -b 1 -t 16 -x 2 -v 0)
for z in 1 2; do
  mpirun -np 2 "$BIN" "${D[@]}" -z $z >"$work/cpu$z.out" 2>&1 || { tail -5 "$work/cpu$z.out"; fail "CPU trainer, 140 blocks, -z $z"; }
  grep -q "^step 2/2" "$work/cpu$z.out" || fail "CPU trainer, 140 blocks, -z $z: no step 2"
done
echo "ok   CPU trainer: 140 blocks (142 units) at -z 1 and -z 2 on 2 ranks"
if command -v mpicxx >/dev/null; then
  tools/emu/build.sh "$work/train_emu" train_gpt2_zero3.cu -DENABLE_FP32 -DUSE_MPI --library >"$work/build.log" 2>&1 \
    || { tail -20 "$work/build.log"; fail "emulator build of the GPU trainer"; }
  for z in 1 2; do
    timeout 300 mpirun -np 2 "$work/train_emu" "${D[@]}" -x 1 -z $z >"$work/gpu$z.out" 2>&1 \
      || { tail -5 "$work/gpu$z.out"; fail "GPU trainer (emulated), 140 blocks, -z $z"; }
    grep -q "^step 1/1" "$work/gpu$z.out" || fail "GPU trainer (emulated), 140 blocks, -z $z: no step"
  done
  echo "ok   GPU trainer under the emulator: 140 blocks at -z 1 and -z 2 on 2 ranks"
else
  echo "SKIP: no mpicxx for the emulated GPU trainer"
fi
echo "test_deep: all passed"
