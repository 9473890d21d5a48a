#!/usr/bin/env bash
# The GPU trainer's test (test_gpt2cu) run on the CPU emulator of CUDA (tools/emu) against the
# PyTorch dump, with streams reordered adversarially and, built with -DUSE_MPI, real NCCL
# collectives between processes over MPI: the whole GPU code path on N ranks, without a GPU.
#
# The emulator runs a CUDA thread as a fiber, so a case costs ~12 s of CPU on the small dump (V=1024).
# Every stage runs on several ranks once, chosen for the most coverage per second (~3 minutes on
# 2 idle cores; each line is 2 cases, A=1 and A=2, unless said):
#   FP32 2 ranks, stages 0 and 1                                               ~45 s
#   FP32 3 ranks, stages 2 and 3 (shards with unequal padding; prefetch 2)      ~45 s
#   FP32 4 ranks, stage 3 (A=1 only: 12 sequences do not split into 4x2)        ~20 s
#   FP32 DDP build (-DZERO3_DDP_ONLY), 2 ranks                                  ~15 s
#   BF16 1 rank, stage 3 (bf16 kernels, casts and the bf16 collectives' path)   ~25 s
# Not here, for time: every stage on every N (mpirun -np N ... with TEST_STAGES unset, ~90 s per
# N), the full vocabulary (tiny dump, tools/emu/run_trainer_check.sh, ~15 min), BF16 on N ranks.
. "$(dirname "$0")/lib.sh"
make -s dumps >/dev/null || fail "make dumps"
command -v mpicxx >/dev/null && command -v mpirun >/dev/null || { echo "SKIP: no MPI (mpicxx, mpirun)"; exit 0; }
SMALL="tests/reference/dumps/small.dump tests/reference/dumps/small_model.bin"
start=$(date +%s)

build() {  # build NAME FLAGS...: one emulated test_gpt2cu into $work/NAME
  local name=$1; shift
  tools/emu/build.sh "$work/$name" test_gpt2.cu "$@" --library > "$work/build_$name.log" 2>&1 ||
    { cat "$work/build_$name.log"; fail "emulator build $name ($*)"; }
}
build fp32_mpi -DENABLE_FP32 -DUSE_MPI &
build ddp_mpi -DENABLE_FP32 -DUSE_MPI -DZERO3_DDP_ONLY &
build bf16 -DENABLE_BF16 &
wait
for b in fp32_mpi ddp_mpi bf16; do [ -x "$work/$b" ] || fail "emulator build $b"; done
echo "builds: $(( $(date +%s) - start )) s"

# check NAME COMMAND...: runs one configuration; its summary line, or the failure and its mismatches
check() {
  local name=$1; shift
  local t=$(date +%s)
  "$@" > "$work/$name.log" 2>&1
  local rc=$?
  echo "$name: $(grep 'cases passed' "$work/$name.log" | tail -1) ($(( $(date +%s) - t )) s)"
  [ $rc -eq 0 ] || { grep -m10 -E 'MISMATCH|emulator|error' "$work/$name.log"; tail -5 "$work/$name.log"; fail "$name (exit $rc)"; }
}
check fp32_n2_stages01 mpirun -np 2 env TEST_STAGES=01 "$work/fp32_mpi" $SMALL
check fp32_n3_stages23 mpirun -np 3 env TEST_STAGES=23 "$work/fp32_mpi" $SMALL
check fp32_n4_stage3 mpirun -np 4 env TEST_STAGES=3 "$work/fp32_mpi" $SMALL
check ddp_n2 mpirun -np 2 "$work/ddp_mpi" $SMALL
check bf16_n1_stage3 env TEST_STAGES=3 "$work/bf16" $SMALL
echo "total: $(( $(date +%s) - start )) s"
