#!/usr/bin/env bash
# Builds a CUDA source of this project for the CPU emulator (see README.md here).
#   tools/emu/build.sh [--asan] OUT SRC.cu [-DFLAG ...] [extra.c ...] [--library]
# For the trainer and its test, --library adds the C files both trainers link (the process layer,
# the engine and its measurement, the host library: the Makefile's ENGINE_SRC and HOST_SRC, which
# `make library-sources` prints):
#   tools/emu/build.sh OUT test_gpt2.cu -DENABLE_FP32 --library
# With -DUSE_MPI the program is compiled and linked with MPI (mpicxx --showme), and the emulated
# NCCL runs its collectives over MPI: run the result under mpirun -np N.
# SRC.cu is a path from the repository root (e.g. tests/cuda/layernorm.cu or test_gpt2.cu). The
# repository's CUDA and C sources are copied to a staging tree with the <<<>>> launches rewritten,
# then compiled with g++ against the emulator's headers; extra .c files are compiled with gcc.
# A finished program is kept in a cache (EMU_CACHE_DIR, default build/emu_cache; EMU_CACHE=0 turns it
# off) under the hash of everything that made it: every staged source, the emulator's headers,
# cu2cpp.py and this script by content, the arguments, and the compilers' versions and MPI flags. A
# build asked again with the same inputs is a copy; any edit to a source, header, flag or compiler
# makes a new key, so a stale program is never handed out. The 32 most recently used programs are kept.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
asan=()
if [ "${1:-}" = "--asan" ]; then asan=(-fsanitize=address -fno-omit-frame-pointer); shift; fi
[ $# -ge 2 ] || { echo "usage: $0 [--asan] OUT SRC.cu [-DFLAG ...] [extra.c ...] [--library]" >&2; exit 2; }
out="$1"; src="$2"; shift 2
defs=(); extra_c=()
read -r -a LIBRARY_C <<<"$(make -s --no-print-directory -C "$root" library-sources)"
for a in "$@"; do
  case "$a" in
    --library) extra_c+=("${LIBRARY_C[@]}") ;;
    -D*|-U*) defs+=("$a") ;;
    *.c) extra_c+=("$a") ;;
    *) echo "build.sh: unexpected argument $a" >&2; exit 2 ;;
  esac
done
mpi_cflags=(); mpi_libs=()
if [[ " ${defs[*]:-} " == *" -DUSE_MPI "* ]]; then
  command -v mpicxx >/dev/null || { echo "build.sh: -DUSE_MPI needs mpicxx (Open MPI or MPICH)" >&2; exit 2; }
  read -r -a mpi_cflags <<< "$(mpicxx --showme:compile 2>/dev/null || mpicxx -compile_info | cut -d' ' -f2-)"
  read -r -a mpi_libs <<< "$(mpicxx --showme:link 2>/dev/null || mpicxx -link_info | cut -d' ' -f2-)"
fi
stage="$(mktemp -d "${TMPDIR:-/tmp}/cuda_emu.XXXXXX")"
trap 'rm -rf "$stage"' EXIT
# the staging tree mirrors the repository's sources (wherever they sit) so relative includes keep
# working: copied in one tar, then the CUDA files' launches rewritten in place by one cu2cpp.py
(cd "$root" && find . \( -name .git -o -path ./build -o -path ./data -o -path ./tests/reference/dumps -o -path ./tests/cuda/bin \
   -o -path ./tools/emu -o -name node_modules \) -prune -o \
   -type f \( -name '*.h' -o -name '*.c' -o -name '*.cu' -o -name '*.cuh' \) -print0) >"$stage/.sources"

# build_key: the hash of every input of this build (sources, the emulator's headers, cu2cpp.py and this
# script by name and content, the arguments, the compilers and MPI as they report themselves)
build_key() {
  { (cd "$root" && { sort -z "$stage/.sources"; find tools/emu/include tools/emu/cu2cpp.py tools/emu/build.sh -type f -print0 | sort -z; } | xargs -0 sha256sum)
    printf '%s\n' "asan: ${asan[*]:-}" "src: $src" "defs: ${defs[*]:-}" "c: ${extra_c[*]:-}" \
      "mpi: ${mpi_cflags[*]:-} | ${mpi_libs[*]:-}"
    gcc --version; g++ --version; } | sha256sum | cut -c1-32
}
cache=""
if [ "${EMU_CACHE:-1}" != 0 ]; then
  cache_dir="${EMU_CACHE_DIR:-$root/build/emu_cache}"
  cache="$cache_dir/$(build_key)"
  # a hit: the kept program, copied (then renamed, so OUT is never half written)
  if [ -x "$cache/program" ] && mkdir -p "$(dirname "$out")" && cp "$cache/program" "$out.tmp.$$" && mv -f "$out.tmp.$$" "$out"; then
    touch "$cache"; echo "build.sh: $out from the cache ($cache)"; exit 0
  fi
  rm -f "$out.tmp.$$"
fi

tar -C "$root" --null -T "$stage/.sources" -cf - | tar -C "$stage" -xf -
cuda=()
while IFS= read -r -d '' f; do
  case "$f" in *.cu|*.cuh) cuda+=("$stage/$f" "$stage/$f") ;; esac
done <"$stage/.sources"
[ ${#cuda[@]} -eq 0 ] || python3 "$here/cu2cpp.py" "${cuda[@]}"
# the C files, one gcc a core (xargs fails when any of them does)
objs=()
for c in "${extra_c[@]}"; do mkdir -p "$stage/obj/$(dirname "$c")"; objs+=("$stage/obj/${c%.c}.o"); done
[ ${#extra_c[@]} -eq 0 ] || printf '%s\n' "${extra_c[@]%.c}" | xargs -P "$(nproc 2>/dev/null || echo 2)" -I{} \
  gcc -std=gnu11 -O2 -g -fno-strict-aliasing -fopenmp "${asan[@]}" "${defs[@]}" "${mpi_cflags[@]}" -I"$root" -c "$root/{}.c" -o "$stage/obj/{}.o"
mkdir -p "$(dirname "$out")"
g++ -std=c++17 -O2 -g -fno-strict-aliasing -fopenmp -x c++ "${asan[@]}" "${defs[@]}" "${mpi_cflags[@]}" -I"$here/include" -I"$stage" \
    -Wall -Wno-unknown-pragmas -Wno-unused-function -Wno-unused-variable -Wno-maybe-uninitialized \
    "$stage/$src" -x none "${objs[@]}" -o "$out" "${mpi_libs[@]}" -lm
# kept for the next build with these inputs: written beside, then renamed (two builds of one key side by
# side each rename a whole program); the least recently used beyond 32 removed
if [ -n "$cache" ]; then
  mkdir -p "$cache" && cp "$out" "$cache/program.tmp.$$" && mv -f "$cache/program.tmp.$$" "$cache/program" ||
    echo "build.sh: could not keep $out in $cache (built all the same)" >&2
  ls -1dt "$cache_dir"/*/ 2>/dev/null | tail -n +33 | xargs -r rm -rf
fi
