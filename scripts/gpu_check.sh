#!/usr/bin/env bash
# scripts/gpu_check.sh: the one command a session with a GPU runs (DESIGN.md section 5). On one
# H200 it should take under 8 minutes. It
#   0. prints what it found: nvcc, GPU, NCCL, cuBLASLt, PyTorch, the shared data;
#   1. builds every GPU target: dev/cuda (BF16, FP32), train_gpt2_zero3cu and test_gpt2cu in BF16,
#      FP32 and DDP=1 (USE_MPI=0: no MPI is known on the GPU machine);
#   2. runs every dev/cuda kernel check;
#   3. regenerates the data (data/tinyshakespeare.py from the shared copy) and the reference dumps
#      (dev/gpt2_reference.py, presets tiny and d12);
#   4. runs test_gpt2cu, FP32 and BF16 (tiny on 1 and 2 ranks, d12 on 1), and the DDP build;
#   5. trains GPT-2 124M on tinyshakespeare for a fixed number of steps: tokens/s, MFU, memory;
#   6. runs ZeRO-3 against DDP on 2 ranks of the one GPU (scripts/launch.sh, one NCCL_HOSTID per rank);
# and prints a summary table last, also written to $OUT/gpu_check_summary.txt when OUT is set
# (with the full log and the kernel log beside it). Exit status 0 only if every part passed.
#   GPU_CHECK_SKIP="dumps_d12 train"   skips parts by name (see the summary for the names)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root="$PWD"
work="$root/build/gpu_check"
mkdir -p "$work/bin"
log="$work/gpu_check.log"
exec > >(tee "$log") 2>&1
t0=$(date +%s)
elapsed() { echo $(( $(date +%s) - t0 )); }
summary=()
failures=0
# record NAME PASS|FAIL|SKIP DETAIL
record() {
  summary+=("$(printf '%-22s %-5s %s' "$1" "$2" "$3")")
  [ "$2" = FAIL ] && failures=$((failures + 1))
  echo ">>> $1: $2 $3"
}
skipped() { [[ " ${GPU_CHECK_SKIP:-} " == *" $1 "* ]]; }
section() { echo; echo "==================== [$(elapsed) s] $*"; }
NPROC=$(nproc 2>/dev/null || echo 4)

# ------------------------------------------------------------------------------------------------
section "0. what is here"
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
CUDA_HOME=${CUDA_HOME:-$(dirname "$(dirname "$NVCC")")}
echo "nvcc:     $NVCC: $("$NVCC" --version 2>/dev/null | grep -o 'release [0-9.]*' || echo MISSING)"
echo "GPU:      $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo 'nvidia-smi failed')"
PY=""
for p in python3 /usr/bin/python3; do
  if $p -c 'import torch' >/dev/null 2>&1; then PY=$p; break; fi
done
[ -n "$PY" ] || PY=python3
echo "python:   $PY: $($PY -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available())' 2>&1 | tail -1)"
# NCCL: the toolkit's, else the one inside PyTorch's wheels (nvidia/nccl under site-packages)
NCCL_HOME_ARG=""
if [ -f "$CUDA_HOME/include/nccl.h" ] && ls "$CUDA_HOME"/lib64/libnccl.so* >/dev/null 2>&1; then
  echo "NCCL:     toolkit, $(ls "$CUDA_HOME"/lib64/libnccl.so* | head -1)"
else
  nccl_dir=$($PY -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
  if [ -n "$nccl_dir" ] && [ -f "$nccl_dir/include/nccl.h" ]; then
    NCCL_HOME_ARG="NCCL_HOME=$nccl_dir"
    export LD_LIBRARY_PATH="$nccl_dir/lib:${LD_LIBRARY_PATH:-}"
    echo "NCCL:     PyTorch wheel, $nccl_dir ($(ls "$nccl_dir"/lib/ | tr '\n' ' '))"
  else
    echo "NCCL:     NOT FOUND (toolkit has no nccl.h; python has no nvidia.nccl)"
  fi
fi
echo "cuBLASLt: $(ls "$CUDA_HOME"/lib64/libcublasLt.so* 2>/dev/null | head -1 || echo 'not in the toolkit')"
SHARED=""
for d in "$root/shared" "$root/../shared"; do
  [ -f "$d/data/tinyshakespeare/input.txt" ] && { SHARED="$d"; break; }
done
echo "shared:   ${SHARED:-NOT FOUND (looked in ./shared and ../shared)}"
echo "cpus:     $NPROC; OUT=${OUT:-unset}"

# ------------------------------------------------------------------------------------------------
section "1. build"
build_ok=1
if make -C dev/cuda -j"$NPROC" all > "$work/build_dev_cuda.log" 2>&1; then
  record build_dev_cuda PASS "$(ls dev/cuda/bin | grep -c -v "\.") programs"; else record build_dev_cuda FAIL "see $work/build_dev_cuda.log"; tail -20 "$work/build_dev_cuda.log"; fi
# the three trainer configurations share output names: build one, move it aside, next
for cfg in "bf16 BF16 0" "fp32 FP32 0" "ddp BF16 1"; do
  set -- $cfg
  rm -f train_gpt2_zero3cu test_gpt2cu
  if make -j2 train_gpt2_zero3cu test_gpt2cu PRECISION="$2" DDP="$3" USE_MPI=0 $NCCL_HOME_ARG > "$work/build_$1.log" 2>&1; then
    mv train_gpt2_zero3cu "$work/bin/train_$1"
    mv test_gpt2cu "$work/bin/test_$1"
    record "build_$1" PASS "PRECISION=$2 DDP=$3 USE_MPI=0"
  else
    build_ok=0
    record "build_$1" FAIL "see $work/build_$1.log"
    tail -20 "$work/build_$1.log"
  fi
done
grep -h "Registers are spilled" "$work"/build_*.log | sort -u | head -5

# ------------------------------------------------------------------------------------------------
section "2. dev/cuda kernel checks"
if skipped kernels; then record kernels SKIP "GPU_CHECK_SKIP"; else
  export OMP_NUM_THREADS=$NPROC
  if timeout 300 make -C dev/cuda run > "$work/kernels.log" 2>&1; then kres=PASS; else kres=FAIL; fi
  sed -n '/dev\/cuda summary/,$p' "$work/kernels.log"
  record kernels "$kres" "$(grep -c '^KERNEL .* PASS' "$work/kernels.log") PASS, $(grep -c '^KERNEL .* FAIL' "$work/kernels.log") FAIL"
fi

# ------------------------------------------------------------------------------------------------
section "3. data and reference dumps"
if [ ! -f data/tinyshakespeare/tiny_shakespeare_val.bin ]; then
  if [ -n "$SHARED" ]; then
    $PY data/tinyshakespeare.py --input "$SHARED/data/tinyshakespeare/input.txt" --vocab "$SHARED/data/gpt2" 2>&1 | tail -3
  else
    echo "no shared data to tokenize"
  fi
fi
[ -f data/tinyshakespeare/tiny_shakespeare_val.bin ] && record data PASS "$(ls data/tinyshakespeare | tr '\n' ' ')" || record data FAIL "data/tinyshakespeare missing"
if [ ! -f dev/ref/tiny.dump ]; then
  timeout 300 $PY dev/gpt2_reference.py --preset tiny --device cuda 2>&1 | tail -2
fi
[ -f dev/ref/tiny.dump ] && record dump_tiny PASS "dev/ref/tiny.dump" || record dump_tiny FAIL "dev/gpt2_reference.py --preset tiny"
if skipped dumps_d12; then record dump_d12 SKIP "GPU_CHECK_SKIP"; else
  if [ ! -f dev/ref/d12.dump ]; then timeout 300 $PY dev/gpt2_reference.py --preset d12 --device cuda 2>&1 | tail -2; fi
  [ -f dev/ref/d12.dump ] && record dump_d12 PASS "dev/ref/d12.dump" || record dump_d12 FAIL "dev/gpt2_reference.py --preset d12"
fi

# ------------------------------------------------------------------------------------------------
section "4. test_gpt2cu against the PyTorch reference"
# run_test NAME TIMEOUT COMMAND...: the last line of the test's output goes in the summary
run_test() {
  local name=$1 limit=$2; shift 2
  echo "--- $name: $*"
  timeout "$limit" "$@" > "$work/$name.log" 2>&1
  local rc=$?
  grep -v '^rank .*MISMATCH' "$work/$name.log" | tail -12
  grep -m5 'MISMATCH' "$work/$name.log"
  local last; last=$(grep 'cases passed' "$work/$name.log" | tail -1)
  [ $rc -eq 124 ] && last="timed out after ${limit}s"
  record "$name" "$([ $rc -eq 0 ] && echo PASS || echo FAIL)" "${last:-exit $rc}"
}
B=$work/bin
[ -x "$B/test_fp32" ] && run_test test_fp32_tiny 120 "$B/test_fp32" dev/ref/tiny.dump dev/ref/tiny_model.bin
[ -x "$B/test_bf16" ] && run_test test_bf16_tiny 120 "$B/test_bf16" dev/ref/tiny.dump dev/ref/tiny_model.bin
[ -x "$B/test_ddp" ] && run_test test_ddp_tiny 120 "$B/test_ddp" dev/ref/tiny.dump dev/ref/tiny_model.bin
[ -x "$B/test_fp32" ] && run_test test_fp32_tiny_n2 180 scripts/launch.sh -n 2 --hostid-per-rank "$B/test_fp32" dev/ref/tiny.dump dev/ref/tiny_model.bin
if [ -f dev/ref/d12.dump ]; then
  [ -x "$B/test_fp32" ] && run_test test_fp32_d12 240 "$B/test_fp32" dev/ref/d12.dump dev/ref/d12_model.bin
  [ -x "$B/test_bf16" ] && run_test test_bf16_d12 240 "$B/test_bf16" dev/ref/d12.dump dev/ref/d12_model.bin
fi

# ------------------------------------------------------------------------------------------------
section "5. GPT-2 124M on tinyshakespeare, one GPU"
# step_stats LOG: "mean ms/step, mean tokens/s, last MFU, last loss, peak" over the steps after the first
step_stats() {
  awk -F'|' '/^step /{n++; for(i=1;i<=NF;i++){f=$i; gsub(/^ +| +$/,"",f);
      if(f ~ /^loss /){split(f,a," "); loss=a[2]} if(f ~ / ms$/){split(f,a," "); ms=a[1]}
      if(f ~ /tok\/s$/){split(f,a," "); tok=a[1]} if(f ~ /^MFU /){split(f,a," "); mfu=a[2]}
      if(f ~ /^peak /){sub(/^peak /,"",f); peak=f}}
      if(n>1){sms+=ms; stok+=tok; k++}}
    END{if(k==0){print "no steps"; exit} printf "%.1f ms/step, %.0f tok/s, MFU %s, loss %s, peak %s\n", sms/k, stok/k, mfu, loss, peak}' "$1"
}
if skipped train; then record train_d12 SKIP "GPU_CHECK_SKIP"; elif [ -x "$B/train_bf16" ]; then
  args=(-e d12 -b 16 -t 1024 -x 40 -l 6e-4 -u 10 -q 0.1 -c 0.1 -v 20 -m 4 -S 1337)
  for z in 3 0; do
    echo "--- train_bf16 ${args[*]} -z $z"
    timeout 240 "$B/train_bf16" "${args[@]}" -z $z > "$work/train_z$z.log" 2>&1
    rc=$?
    grep -E '^\||^step +(1|2|20|40)/|val ' "$work/train_z$z.log" | head -40
    [ $rc -ne 0 ] && tail -5 "$work/train_z$z.log"
    record "train_d12_z$z" "$([ $rc -eq 0 ] && echo PASS || echo FAIL)" "$(step_stats "$work/train_z$z.log")"
  done
fi

# ------------------------------------------------------------------------------------------------
section "6. ZeRO-3 vs DDP on 2 ranks of one GPU (NCCL over loopback sockets)"
if skipped two_ranks; then record zero3_vs_ddp SKIP "GPU_CHECK_SKIP"; elif [ -x "$B/train_bf16" ] && [ -x "$B/train_ddp" ]; then
  args=(-e d12 -b 4 -t 1024 -x 8 -l 6e-4 -v 0 -S 1337)
  timeout 240 scripts/launch.sh -n 2 --hostid-per-rank "$B/train_bf16" "${args[@]}" -z 3 > "$work/n2_z3.log" 2>&1; rc3=$?
  timeout 240 scripts/launch.sh -n 2 --hostid-per-rank "$B/train_ddp" "${args[@]}" > "$work/n2_ddp.log" 2>&1; rcd=$?
  grep -E '^\|   [0-3]|^step ' "$work/n2_z3.log" | head -14
  grep -E '^step ' "$work/n2_ddp.log" | head -8
  [ $rc3 -ne 0 ] && tail -8 "$work/n2_z3.log"
  [ $rcd -ne 0 ] && tail -8 "$work/n2_ddp.log"
  # the two runs see the same data and math: their losses agree to bf16 rounding
  cmp=$(paste <(grep '^step ' "$work/n2_z3.log" | grep -o '| loss [0-9.]*' | awk '{print $3}') \
              <(grep '^step ' "$work/n2_ddp.log" | grep -o '| loss [0-9.]*' | awk '{print $3}') |
        awk '{d=$1-$2; if(d<0)d=-d; r=d/$2; if(r>m)m=r; n++} END{if(n==0){print "no steps"; exit 1} printf "%d steps, max rel loss diff %.2e\n", n, m; exit (m > 2e-2)}')
  cmp_rc=$?
  if [ $rc3 -eq 0 ] && [ $rcd -eq 0 ] && [ $cmp_rc -eq 0 ]; then res=PASS; else res=FAIL; fi
  record zero3_vs_ddp_n2 "$res" "z3 exit $rc3, ddp exit $rcd; $cmp; z3 $(step_stats "$work/n2_z3.log" | grep -o 'peak .*'), ddp $(step_stats "$work/n2_ddp.log" | grep -o 'peak .*')"
fi

# ------------------------------------------------------------------------------------------------
section "summary ($(elapsed) s)"
{
  echo "gpu_check: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1), $(elapsed) s, $failures failed"
  printf '%s\n' "${summary[@]}"
} | tee "$work/summary.txt"
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  cp "$work/summary.txt" "$OUT/gpu_check_summary.txt"
  cp "$log" "$OUT/gpu_check.log"
  [ -f "$work/kernels.log" ] && cp "$work/kernels.log" "$OUT/dev_cuda.log"
  # the logs of what failed, up to the 8 files OUT takes back
  n=3
  for f in "$work"/test_*.log "$work"/train_*.log "$work"/n2_*.log; do
    [ -f "$f" ] && [ $n -lt 8 ] && grep -q -E 'FAIL|MISMATCH|error|Error' "$f" && { cp "$f" "$OUT/"; n=$((n + 1)); }
  done
fi
[ "$failures" -eq 0 ]
