#!/usr/bin/env bash
# The CPU backend's bf16 sums (cpu/backend_cpu.c, sum_start): a reduce-scatter (in place and
# not) and all-reduces (uneven chunks, two in flight) on 1-4 ranks, with and without the
# communication thread, each element against the float64 sum of the contributions rounded once to
# bf16 by hand (tests/unit/test_bf16_reduce.c says why that sum is exact). Then bugs are planted in
# a copy of the backend, and the test must fail on each: the parts rounded to bf16 after every add
# (what a bf16 operator inside MPI's pairwise reduction does), the first rank's part left out, and
# the all-reduce's gather of the rounded chunks skipped. On one machine fp32 sums are moves too: the
# same cases in fp32, each element against its contributions added in rank order, and planted: the
# first rank's fp32 part left out, and fp32 handed back to MPI's own sum (libnbc's tree: another order).
. "$(dirname "$0")/lib.sh"
make -s build/obj/cpu/backend_cpu_mpi.o build/obj/libzero3.a >/dev/null || fail "build"
CFLAGS_TEST=(-O2 -fopenmp -std=gnu11 -Wall -Wextra -Werror -Wno-unused-parameter -DUSE_MPI)
build() {   # OUT BACKEND_OBJ
  mpicc "${CFLAGS_TEST[@]}" -o "$1" tests/unit/test_bf16_reduce.c "$2" build/obj/libzero3.a -lm -lpthread
}
build "$work/t" build/obj/cpu/backend_cpu_mpi.o || fail "test_bf16_reduce.c does not compile cleanly"
for n in 1 2 3 4; do
  timeout -k 5 60 mpirun -np $n "$work/t" > "$work/out" 2>&1 || { cat "$work/out"; fail "$n ranks"; }
  sed -n '$p' "$work/out"
done
ZERO3_COMM_THREAD=0 timeout -k 5 60 mpirun -np 3 "$work/t" > "$work/out" 2>&1 || { cat "$work/out"; fail "3 ranks, ZERO3_COMM_THREAD=0"; }
echo "ok   3 ranks without the communication thread: $(grep -c '^ok' "$work/out") cases"

# planted bugs: each a one-line change to a copy of cpu/backend_cpu.c; the test must fail on 3 ranks (the
# last on 4: at 3 ranks Open MPI's tree happens to add in rank order)
plant() {   # name, sed expression [ranks, default 3]
  local name=$1 expr=$2 np=${3:-3}
  rm -rf "$work/m" && mkdir -p "$work/m" && cp -r cpu proc zero3.h zero3_offload.h observe "$work/m/"
  sed -i "$expr" "$work/m/cpu/backend_cpu.c"
  cmp -s cpu/backend_cpu.c "$work/m/cpu/backend_cpu.c" && fail "planting '$name' changed nothing"
  mpicc -O2 -march=native -fopenmp -std=gnu11 -DUSE_MPI -c "$work/m/cpu/backend_cpu.c" -o "$work/m/b.o" || fail "planting '$name': build"
  build "$work/m/t" "$work/m/b.o" || fail "planting '$name': build"
  if timeout -k 5 60 mpirun -np "$np" "$work/m/t" > "$work/m/log" 2>&1; then fail "planted bug '$name' was NOT caught"; fi
  echo "planted bug '$name': caught ($(grep -m1 FAIL "$work/m/log" | cut -c1-150))"
}
plant "rounded at every add" 's/sum\[i\] += bf16_to_f32(part\[i\]);/sum[i] = bf16_to_f32(f32_to_bf16(sum[i] + bf16_to_f32(part[i])));/'
plant "first rank's part left out" 's/sum\[i\] = bf16_to_f32(parts\[i0 + i\]);/sum[i] = 0.0f;/'
plant "gather skipped" 's/if (o->kind == OP_ALL_REDUCE) {/if (0) {/'
plant "fp32: the first rank's part left out" 's/for (size_t i = 0; i < n; i++) d\[i\] = parts\[i\];/for (size_t i = 0; i < n; i++) d[i] = 0.0f;/'
plant "fp32: the parts handed to MPI's sum on one machine" 's/{ return mpi_sums(t, g->one_machine); }/{ return mpi_sums(t, 0); }/' 4
echo "test_bf16_reduce: all passed"
