#!/usr/bin/env bash
# dev/mutation_check.sh: plants one-line bugs, one at a time, and checks that the test suite catches
# each: the suite keeps its teeth as the code changes. Every mutation is a realistic slip in the code
# users run (a clip branch, a loss scale, a per-rank norm, a decay mask, a GELU constant, a prefetch
# off by one, a data window, a lost RNG on resume, a dropped accumulation, a wrong data position in a
# checkpoint) with the test that must fail on it. Each runs in a scratch copy of the repository
# (tracked files plus the generated data/ and dev/ref/), so the checkout is never touched.
#
#   bash dev/mutation_check.sh            all mutations (about 5-8 minutes on 2 cores)
#   bash dev/mutation_check.sh 3 6        only mutations 3 and 6
# Ends with "N of M mutations caught"; exit 0 only when all are caught.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$PWD
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
make -s dumps >/dev/null || { echo "mutation_check: make dumps failed" >&2; exit 1; }
CLIP="dev/ref/clip.dump dev/ref/clip_model.bin"

# id | file | the exact text | its replacement | make targets | the test that must fail
MUTATIONS=(
"1|host/train.c|return coef < 1.0 ? (float)coef : 1.0f;|return coef > 1.0 ? (float)coef : 1.0f;|test_gpt2|TEST_STAGES=3 ./test_gpt2 $CLIP"
"2|host/train.c|float dloss = 1.0f / ((float)a->B * a->T * A * N);|float dloss = 1.0f / ((float)a->B * a->T * A);|test_gpt2|TEST_STAGES=3 mpirun -np 2 ./test_gpt2 $CLIP"
"3|zero3.c|double total = be->all_reduce_scalar(be->ctx, local);|double total = local;|test_gpt2|TEST_STAGES=3 mpirun -np 2 ./test_gpt2 $CLIP"
"4|zero3.c|T->decay ? weight_decay : 0.0f|weight_decay|build/test_engine_layout|build/test_engine_layout"
"5|cpu/kernels.h|ck_tanh_sech2(GELU_SCALE * (x + 0.044715f * x * x * x), &th, NULL);|ck_tanh_sech2(GELU_SCALE * (x + 0.04476f * x * x * x), &th, NULL);||mkdir -p build && $PY tests/unit/cpu_kernels_ref.py build/mut_ref.bin >/dev/null && gcc -O3 -march=native -fopenmp -std=gnu11 -o build/mut_tck tests/unit/test_cpu_kernels.c -lm && build/mut_tck build/mut_ref.bin"
"6|zero3.c|int pos = z->schedule_pos + k;|int pos = z->schedule_pos + k + 1;|build/test_engine_schedule|build/test_engine_schedule"
"7|host/train.c|((long long)step * A + k) * N + r|((long long)step * A + k) * N|test_gpt2|TEST_STAGES=0 mpirun -np 2 ./test_gpt2 $CLIP"
"8|host/train.c|tr->sample_rng = m.sample_rng;|(void)m.sample_rng;|train_gpt2_zero3|bash tests/test_checkpoint.sh"
"9|zero3.c|if (z->micro > 0)|if (0)|test_gpt2|TEST_STAGES=3 mpirun -np 2 ./test_gpt2 $CLIP"
"10|host/checkpoint.c|w[M_DATA_WINDOW] = m->data_window;|w[M_DATA_WINDOW] = m->data_window + 1;|train_gpt2_zero3|bash tests/test_checkpoint.sh"
)

# scratch DIR: a copy of the repository (tracked files, the generated data and reference dumps)
copy_repo() { (git ls-files -z | xargs -0 tar -cf - data/tinyshakespeare dev/ref 2>/dev/null) | tar -xf - -C "$1"; }

# The control: every test used below passes on the unmutated code (else "caught" would mean nothing).
control=$(mktemp -d "${TMPDIR:-/tmp}/mutation.XXXXXX")
copy_repo "$control"
declare -A seen
for m in "${MUTATIONS[@]}"; do
  IFS='|' read -r id file old new targets test <<<"$m"
  [ -n "${seen[$test]:-}" ] && continue
  seen[$test]=1
  if ! ( cd "$control" && { [ -z "$targets" ] || make -s $targets >/dev/null 2>&1; } && eval "$test" ) >"$control/out.log" 2>&1; then
    tail -20 "$control/out.log"; echo "mutation_check: the unmutated code fails: $test" >&2; rm -rf "$control"; exit 1
  fi
done
rm -rf "$control"
echo "control: every test passes on the unmutated code"

only=" $* "
caught=0; total=0; missed=()
for m in "${MUTATIONS[@]}"; do
  IFS='|' read -r id file old new targets test <<<"$m"
  [ $# -gt 0 ] && [[ "$only" != *" $id "* ]] && continue
  total=$((total + 1))
  scratch=$(mktemp -d "${TMPDIR:-/tmp}/mutation.XXXXXX")
  copy_repo "$scratch"
  if ! OLD="$old" NEW="$new" "$PY" - "$scratch/$file" <<'PY'
import os, sys
p = sys.argv[1]; s = open(p).read(); old, new = os.environ["OLD"], os.environ["NEW"]
if s.count(old) != 1: sys.exit(f"mutation_check: the text to mutate occurs {s.count(old)} times in {p}")
open(p, "w").write(s.replace(old, new))
PY
  then missed+=("$id (could not apply)"); rm -rf "$scratch"; continue; fi
  start=$(date +%s)
  # a mutation that does not build is not a caught bug: the build must succeed, the test must fail
  if ! ( cd "$scratch" && { [ -z "$targets" ] || make -s $targets; } ) >"$scratch/build.log" 2>&1; then
    tail -5 "$scratch/build.log"; missed+=("$id (does not build)"); rm -rf "$scratch"; continue
  fi
  ( cd "$scratch" && eval "$test" ) >"$scratch/out.log" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then
    caught=$((caught + 1))
    printf 'caught  %-3s %-18s %-60.60s (%ds)\n' "$id" "$file" "$new" $(( $(date +%s) - start ))
  else
    missed+=("$id"); printf 'MISSED  %-3s %-18s %-60.60s\n' "$id" "$file" "$new"
  fi
  rm -rf "$scratch"
done
echo "$caught of $total mutations caught${missed:+; missed: ${missed[*]}}"
[ "$caught" -eq "$total" ]
