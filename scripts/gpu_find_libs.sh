#!/usr/bin/env bash
# scripts/gpu_find_libs.sh: where this machine keeps what the GPU build links and includes beyond
# nvcc itself: cuBLASLt (and cuBLAS, its sibling, for the attention's batched GEMMs), NCCL and the
# nvtx3 headers. Each is looked for in three places, first found wins:
#   toolkit   $CUDA_HOME/include, $CUDA_HOME/lib64 (or targets/x86_64-linux/lib)
#   system    /usr/include, /usr/lib/x86_64-linux-gnu, /usr/lib64, /usr/local/include, /usr/local/lib
#   wheel     the nvidia/* folders of the Python packages PyTorch ships (nvidia/cublas, nvidia/nccl,
#             nvidia/nvtx, or CUDA 13's single nvidia/cu13), each with include/ and lib/
# A library found outside the loader's default folders gets -L and an rpath, so the program runs
# without LD_LIBRARY_PATH; one with only a versioned file (libnccl.so.2, as wheels ship) is linked
# by that name (-l:libnccl.so.2).
#
#   scripts/gpu_find_libs.sh --flags     one line of nvcc flags (the Makefile's GPU section reads it)
#   scripts/gpu_find_libs.sh --report    one line per item: where it was found, or NOT FOUND
# Environment: CUDA_HOME (default: from nvcc on PATH, else /usr/local/cuda), PYTHON (the one whose
# packages are searched), GPU_FIND_SYSTEM (the system prefixes, default "/usr /usr/local"),
# GPU_FIND_WHEELS (the nvidia package folders; default: asked of $PYTHON). Exit 1 when one is missing.
set -uo pipefail
mode=${1:---report}
case "$mode" in --flags|--report) ;; *) echo "error: $mode: unknown argument (usage: $0 --flags|--report)" >&2; exit 2 ;; esac
[ $# -le 1 ] || { echo "error: $2: one argument only (usage: $0 --flags|--report)" >&2; exit 2; }
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$nvcc")")}
[ ! -e "$CUDA_HOME" ] || [ -d "$CUDA_HOME" ] || { echo "error: CUDA_HOME=$CUDA_HOME: not a folder" >&2; exit 2; }
PYTHON=${PYTHON:-python3}
SYSTEM=${GPU_FIND_SYSTEM:-/usr /usr/local}
if [ -z "${GPU_FIND_WHEELS+x}" ]; then
  GPU_FIND_WHEELS=$("$PYTHON" -c 'import nvidia, os; [print(os.path.join(p, d)) for p in nvidia.__path__ for d in sorted(os.listdir(p))]' 2>/dev/null | tr '\n' ' ')
fi

# places KIND: "KIND INCLUDE_DIR LIB_DIR" lines, in the order they are searched
places() {
  local p w
  for p in lib64 targets/x86_64-linux/lib; do echo "toolkit $CUDA_HOME/include $CUDA_HOME/$p"; done
  for p in $SYSTEM; do
    for w in lib/x86_64-linux-gnu lib64 lib; do echo "system $p/include $p/$w"; done
  done
  for w in $GPU_FIND_WHEELS; do echo "wheel $w/include $w/lib"; done
}

# find_item NAME HEADER LIBRARY: the first place with the header (and with LIBRARY, unless it is
# "-": header only); prints "KIND INCLUDE_DIR LIB_DIR LIBFILE" or nothing
find_item() {
  local name=$1 header=$2 lib=$3 kind inc dir f
  while read -r kind inc dir; do
    [ -e "$inc/$header" ] || continue
    if [ "$lib" = - ]; then echo "$kind $inc - -"; return; fi
    for f in "$dir/lib$lib.so" "$dir"/lib"$lib".so.[0-9]*; do
      [ -e "$f" ] && { echo "$kind $inc $dir $(basename "$f")"; return; }
    done
  done < <(places)
}

# flags_of KIND INC DIR FILE LIB: nvcc flags for one found item (the toolkit's own include folder
# and a system include need no -I; every library folder gets -L and an rpath)
flags_of() {
  local kind=$1 inc=$2 dir=$3 file=$4 lib=$5 out=""
  [ "$kind" = toolkit ] || [ "$inc" = /usr/include ] || [ "$inc" = /usr/local/include ] || out+="-I$inc "
  if [ "$dir" != - ]; then
    out+="-L$dir -Xlinker -rpath=$dir "
    if [ "$file" = "lib$lib.so" ]; then out+="-l$lib"; else out+="-l:$file"; fi
  fi
  echo "$out"
}

missing=0
flags=()
for item in "cuBLASLt cublasLt.h cublasLt" "cuBLAS cublas_v2.h cublas" "NCCL nccl.h nccl" "nvtx3 nvtx3/nvToolsExt.h -"; do
  read -r name header lib <<< "$item"
  found=$(find_item "$name" "$header" "$lib")
  if [ -z "$found" ]; then
    missing=1
    [ "$mode" = --report ] && echo "$name: NOT FOUND ($header in the toolkit $CUDA_HOME, the system ($SYSTEM) or PyTorch's wheels)"
    continue
  fi
  read -r kind inc dir file <<< "$found"
  if [ "$mode" = --report ]; then
    echo "$name: $kind, $([ "$dir" = - ] && echo "$inc/$header" || echo "$dir/$file")"
  else
    flags+=("$(flags_of "$kind" "$inc" "$dir" "$file" "$lib")")
  fi
done
[ "$mode" = --flags ] && echo "${flags[*]}"
exit $missing
