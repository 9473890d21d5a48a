#!/usr/bin/env bash
# The bf16 matmuls (cpu/kernels_bf16.h) against a float64 reference on the bf16-rounded operands,
# within the bound derived from fp32 accumulation (see tests/unit/test_bf16_kernels.c): both paths
# (VDPBF16PS where the CPU has AVX512_BF16, and the portable C), built for -march=native and for
# baseline x86-64 (which must still find and run the VDPBF16PS path at run time), and the portable
# path alone. Then bugs are planted in copies of the kernels, and the test must fail on each:
# the last element of K dropped in the packing (both paths share it, so only the reference can tell),
# one accumulator of the VDPBF16PS tile fed the wrong columns, dweight's old value forgotten, two
# words swapped by the transpose that packs W^T, and a ragged tile stored whole (past the output's edge).
# The benchmarks are compiled (not run), so they cannot rot.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
CFLAGS_TEST="-O2 -fopenmp -std=gnu11 -Wall -Wextra -Werror"
export OMP_NUM_THREADS=1

has_bf16=0
grep -qw avx512_bf16 /proc/cpuinfo 2>/dev/null && has_bf16=1
targets=(native)
[ "$(uname -m)" = x86_64 ] && targets+=(x86-64)
for march in "${targets[@]}"; do
  gcc $CFLAGS_TEST -march="$march" -o "$tmp/test_$march" tests/unit/test_bf16_kernels.c -lm
done
gcc $CFLAGS_TEST -O3 -march=native -o "$tmp/bench_peak" tools/bench/bench_peak.c -lm
gcc $CFLAGS_TEST -O3 -march=native -o "$tmp/bench_bf16" tools/bench/bench_bf16_kernels.c -lm
echo "test_bf16_kernels: test and benchmarks compile cleanly (-Wall -Wextra -Werror)"

for march in "${targets[@]}"; do
  echo "-- -march=$march"
  "$tmp/test_$march"
done
echo "-- -march=native, --portable-only"
"$tmp/test_native" --portable-only | sed -n '1p;$p'

# planted bugs: each a one-line change to a copy of cpu/; the test must fail
plant() {   # name, file, sed expression, needs AVX512_BF16 (1/0)
  local name=$1 file=$2 expr=$3 needs=$4
  if [ "$needs" = 1 ] && [ "$has_bf16" = 0 ]; then echo "planted bug '$name': skipped (no AVX512_BF16 here)"; return; fi
  rm -rf "$tmp/m" && mkdir -p "$tmp/m/tests/unit" && cp -r cpu proc "$tmp/m/" && cp tests/unit/test_bf16_kernels.c "$tmp/m/tests/unit/"
  sed -i "$expr" "$tmp/m/cpu/$file"
  if cmp -s "cpu/$file" "$tmp/m/cpu/$file"; then echo "test_bf16_kernels: planting '$name' changed nothing" >&2; exit 1; fi
  gcc -O2 -fopenmp -std=gnu11 -march=native -o "$tmp/m/t" "$tmp/m/tests/unit/test_bf16_kernels.c" -lm
  if ( "$tmp/m/t"; rc=$?; exit $rc ) >"$tmp/m/log" 2>&1; then echo "test_bf16_kernels: planted bug '$name' was NOT caught" >&2; exit 1; fi
  echo "planted bug '$name': caught ($(grep -m1 FAIL "$tmp/m/log" | sed 's/^ *//'))"
}
plant "last k dropped" kernels_bf16.h 's/int has_hi = (int)k + 1 < depth;/int has_hi = (int)k + 2 < depth;/' 0
plant "wrong columns" kernels_bf16.h 's/acc\[r\]\[1\] = _mm512_dpbf16_ps(acc\[r\]\[1\], b1, a);/acc[r][1] = _mm512_dpbf16_ps(acc[r][1], b0, a);/' 1
plant "old dweight lost" kernels_bf16.h 's/(accumulate ? bf16_to_f32(\*o) : 0.0f)/0.0f/' 0
plant "W^T transpose swaps two words" kernels_bf16.h 's/{8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31}}/{8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 31, 30}}/' 0
plant "ragged tile stored whole" kernels_bf16.h '/static inline void bk_store_sums/,/^}/ s/n < cols/n < BK_TILE_COLS/' 0
echo "test_bf16_kernels: PASS"
