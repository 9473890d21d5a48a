#!/usr/bin/env bash
# Prints every figure of a run that does not depend on the clock: the test_gpt2 error figures on the
# PyTorch dumps (1-4 ranks, every stage, A = 1 and 2) and the losses, norms, bytes sent and held of
# short training runs (several N, every stage and variant, every ZeRO++ flag). Run it at two commits
# and diff the outputs: a change that must not change the results (a refactor) shows no line.
#   tests/same_results.sh > /tmp/before.txt; (change); tests/same_results.sh > /tmp/after.txt
#   diff /tmp/before.txt /tmp/after.txt
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=1 OMPI_MCA_rmaps_base_oversubscribe=1
[ "$(id -u)" = 0 ] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
make -s train_gpt2_zero3 test_gpt2 ddp dumps >/dev/null
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
strip_time() { grep -v -e '^init:' -e '^  CPU fp32' | sed -E 's/ in [0-9.]+ s$//'; }
for d in tiny small; do
  echo "== test_gpt2 $d, 1 rank"
  ./test_gpt2 tests/reference/dumps/$d.dump tests/reference/dumps/${d}_model.bin | strip_time
done
for n in 1 2 3 4; do
  echo "== test_gpt2 clip, $n ranks"
  mpirun -np $n ./test_gpt2 tests/reference/dumps/clip.dump tests/reference/dumps/clip_model.bin | strip_time
done
echo "== test_gpt2 clip, DDP build, 2 ranks"
mpirun -np 2 build/ddp/test_gpt2 tests/reference/dumps/clip.dump tests/reference/dumps/clip_model.bin | strip_time
# name ranks flags...: a short run; prints log.csv without its clock columns (ms, tokens_per_s,
# compute_ms, exposed_comm_ms)
run() {
  local name=$1 n=$2; shift 2
  echo "== train $name: np $n $*"
  mpirun -np "$n" ./train_gpt2_zero3 -e d2c64h2t64 -b 2 -t 32 -x 6 -v 3 -m 1 -n 3 -o "$out/$name" "$@" >/dev/null
  cut -d, -f1-5,8,9,10 "$out/$name/log.csv"
  md5sum < "$out/$name/model.bin"
}
run z3n2 2 -z 3
run z2n3 3 -z 2
run z1n4 4 -z 1
run z0n2 2 -z 0
run z3n4a2 4 -z 3 -d 512
run z2n2a3 2 -z 2 -d 384
run hs2 4 -z 3 -hs 2
run ra0 2 -z 3 -ra 0
run rc1 2 -z 3 -rc 1
run rc2 2 -z 3 -rc 2
run wraphalf 2 -z 3 -wrap half
run wrap2 2 -z 3 -wrap 2
run pt 3 -z 3 -pt 10000
run pd2 3 -z 3 -pd 2
run clip 2 -z 3 -clip local
run qw8 4 -z 3 -qw 8
run hp2 4 -z 3 -hp 2
run qg8 4 -z 3 -qg 8 -hp 2
run zpp 4 -z 3 -qw 8 -hp 2 -qg 8
echo "== resume z3n2 on 3 ranks at stage 2"
mpirun -np 3 ./train_gpt2_zero3 -e d2c64h2t64 -b 2 -t 32 -x 8 -v 3 -m 1 -o "$out/z3n2" -y 1 -z 2 >/dev/null
cut -d, -f1-5,8,9,10 "$out/z3n2/log.csv"
echo "== plan"
./train_gpt2_zero3 -plan 64 -e 7.5B -rpn 8 -hs 8 | grep -v -i 'time\|ms'
