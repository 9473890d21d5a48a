#!/usr/bin/env bash
# scripts/gpu_first.sh, the time-boxed first run on a rented GPU, without a GPU:
#   - `--files` lists the files to copy: each one git does not track, every one the run reads from
#     data/ and tests/reference/dumps/ among them, each size and the total as du counts them;
#     `--caps` the caps table: the GPU caps fit the script's own GPU budget, each emulated cap its
#     emulated budget, and docs/gpu.md names the same default budget;
#   - the GPU build's prerequisites: no mpi.h chooses USE_MPI=0 by itself (a note), USE_MPI=1 given
#     there is refused in one line naming USE_MPI=0; scripts/gpu_find_libs.sh finds cuBLASLt and
#     NCCL in a wheel-shaped folder (-L, an rpath, the versioned file) when the toolkit lacks them;
#   - the train lines' learning check passes a falling loss and fails a flat one; the -oo host line's
#     loss comparison passes the same losses (stopping where the learning rates part) and fails one
#     digit off;
#   - the emulated first run (GPU_CHECK_EMULATE=1: every stage at tiny sizes on the CPU emulator),
#     with the B=4 training line forced past a 3 s cap (GPU_CHECK_CAPS): every line is PASS, FAIL,
#     TIMEOUT, UNKNOWN or MISS, the forced one TIMEOUT with how far it got, every later stage still
#     PASSes, in the script's order, within the emulated budget; the head-size-64 dump passes; the
#     summary grows line by line; the emulated GPU trainer's loss is the CPU trainer's to bf16
#     rounding; the -oo host line's losses are the run's without it, digit for digit;
#   - an 8-second budget: the BF16 build is cut off (or never starts), every later line is still
#     written (TIMEOUT: not started), and the script exits non-zero, in time.
# About 3 minutes on 2 quiet cores (10+ on a loaded one). Needs the tokenized data (make data).
. "$(dirname "$0")/lib.sh"
make -s train_gpt2_zero3 >/dev/null || fail "build"
make -s dumps >/dev/null || fail "make dumps"
for f in data/tinyshakespeare/tiny_shakespeare_train.bin tests/reference/dumps/small.dump tests/reference/dumps/hs64.dump; do
  [ -f "$f" ] || fail "no $f (make data dumps)"
done

files=$(scripts/gpu_first.sh --files) || fail "--files: $files"
echo "$files"
read -r -a listed <<< "$(echo "$files" | sed -n 's/^files: //p')"
[ ${#listed[@]} -gt 0 ] || fail "--files: no 'files:' line"
# what the run reads that git does not track: the tokens, the tokenizer, the two references
for need in data/tinyshakespeare/tiny_shakespeare_train.bin data/tinyshakespeare/tiny_shakespeare_val.bin \
            data/tinyshakespeare/gpt2_tokenizer.bin tests/reference/dumps/small.dump tests/reference/dumps/small_model.bin \
            tests/reference/dumps/hs64.dump tests/reference/dumps/hs64_model.bin; do
  covered=0; for p in "${listed[@]}"; do [[ $need == "$p" || $need == "$p"/* ]] && covered=1; done
  [ $covered = 1 ] || fail "--files: $need, which the run reads, is not listed"
done
kib=0
for p in "${listed[@]}"; do
  [ -e "$p" ] || fail "--files: $p does not exist"
  git ls-files --error-unmatch -- "$p" >/dev/null 2>&1 && fail "--files: $p is tracked by git (a checkout has it)"
  kib=$((kib + $(du -sk "$p" | cut -f1)))
done
mib=$(echo "$files" | awk '$1 == "total" {print $2}')
awk -v m="$mib" -v k="$kib" 'BEGIN{d = m - k / 1024; exit !(d > -0.05 && d < 0.05)}' || fail "--files: total $mib MiB, du counts $kib KiB"
echo "ok   --files: ${#listed[@]} paths, $mib MiB, every file the run reads that git does not track"

# the budget, from the script's own STAGES table (--caps: budget GPU EMU reserve R margin M min LO,
# then stage emu_s gpu_x with gpu_cap emu_cap): each cap is its measured emulated seconds times its
# factor (GPU) or the margin (emulated), worked out here again; the caps of the stages that run alone
# plus the reserve fit each budget; a stage run beside another fits within that one's cap
caps=$(scripts/gpu_first.sh --caps)
read -r _ gpu_budget emu_budget _ reserve _ margin _ lo <<< "$(echo "$caps" | sed -n 1p)"
rows=$(echo "$caps" | sed 1d)
[ "$(echo "$rows" | wc -l)" -ge 15 ] || fail "--caps: $caps"
echo "$rows" | awk -v m="$margin" -v lo="$lo" 'NF != 6 {print "not 6 fields: " $0; bad = 1; next}
  { g = int($2 * $3 + 0.5); e = int($2 * m + 0.5); if (e < lo) e = lo
    if ($5 != g || $6 != e) {print $1 ": caps " $5 ", " $6 " are not " $2 " s times " $3 " and " m; bad = 1} }
  END {exit bad}' || fail "--caps: a cap not worked out from its row: $caps"
gpu_sum=$(echo "$rows" | awk -v r="$reserve" '$4 == "-" {s += $5} END {print s + r}')
emu_sum=$(echo "$rows" | awk -v r="$reserve" '$4 == "-" {s += $6} END {print s + r}')
echo "$rows" | awk 'NR == FNR && $4 == "-" {g[$1] = $5; e[$1] = $6; next} $4 != "-" && !($4 in g && $5 <= g[$4] && $6 <= e[$4]) {exit 1}' - <(echo "$rows") ||
  fail "a stage run beside another has a cap over that one's"
echo "budget: GPU caps + reserve $gpu_sum s of $gpu_budget s; emulated $emu_sum s of $emu_budget s"
[ "$gpu_sum" -le "$gpu_budget" ] || fail "the GPU caps and the reserve add up to $gpu_sum s, over the $gpu_budget s budget"
[ "$emu_sum" -le "$emu_budget" ] || fail "the emulated caps and the reserve add up to $emu_sum s, over the $emu_budget s budget"
budget="$gpu_budget $emu_budget"
grep -q "GPU_CHECK_BUDGET.*${budget% *}" docs/gpu.md || fail "docs/gpu.md does not name the ${budget% *} s budget (GPU_CHECK_BUDGET)"

# MPI: no mpi.h (an MPICC that does not exist) -> USE_MPI=0 with a note; USE_MPI=1 given -> refused
out=$(make -n -B train_gpt2_zero3cu MPICC=/nonexistent 2>&1) || fail "make -n without mpi.h: $out"
echo "$out" | grep -q 'no mpi.h here (/nonexistent): building without MPI' || fail "no note on building without MPI"
echo "$out" | grep 'nvcc' | grep -q -- '-DUSE_MPI' && fail "without mpi.h the nvcc line still has -DUSE_MPI"
err=$(make -s train_gpt2_zero3cu MPICC=/nonexistent USE_MPI=1 2>&1 >/dev/null) && fail "USE_MPI=1 without mpi.h: exit 0"
[ "$(echo "$err" | wc -l)" -eq 1 ] && echo "$err" | grep -q 'USE_MPI=0' || fail "USE_MPI=1 without mpi.h: want one line naming USE_MPI=0, got: $err"
echo "ok   MPI: chosen off without mpi.h; USE_MPI=1 there refused: $err"
# libraries: a toolkit with only the nvtx3 headers, cuBLAS(Lt) and NCCL in wheel-shaped folders
fake="$work/fake"
mkdir -p "$fake/cuda/include/nvtx3" "$fake/cuda/lib64" "$fake/w/cu13/include" "$fake/w/cu13/lib" "$fake/w/nccl/include" "$fake/w/nccl/lib"
touch "$fake/cuda/include/nvtx3/nvToolsExt.h" "$fake/w/cu13/include/cublasLt.h" "$fake/w/cu13/include/cublas_v2.h" \
  "$fake/w/cu13/lib/libcublasLt.so.13" "$fake/w/cu13/lib/libcublas.so.13" "$fake/w/nccl/include/nccl.h" "$fake/w/nccl/lib/libnccl.so.2"
finder() { CUDA_HOME="$fake/cuda" GPU_FIND_SYSTEM="$fake/none" GPU_FIND_WHEELS="$1" bash scripts/gpu_find_libs.sh "$2"; }  # WHEELS MODE
rep=$(finder "$fake/w/cu13 $fake/w/nccl" --report) || fail "finder with the wheels: $rep"
echo "$rep"
echo "$rep" | grep -q "^NCCL: wheel, $fake/w/nccl/lib/libnccl.so.2$" || fail "finder: NCCL not found in the wheel"
echo "$rep" | grep -q "^cuBLASLt: wheel, $fake/w/cu13/lib/libcublasLt.so.13$" || fail "finder: cuBLASLt not found in the wheel"
echo "$rep" | grep -q "^nvtx3: toolkit, " || fail "finder: nvtx3 not from the toolkit"
flags=$(finder "$fake/w/cu13 $fake/w/nccl" --flags)
for f in "-I$fake/w/nccl/include" "-L$fake/w/nccl/lib" "-Xlinker -rpath=$fake/w/nccl/lib" "-l:libnccl.so.2" "-l:libcublasLt.so.13"; do
  [[ " $flags " == *" $f "* ]] || fail "finder --flags: no '$f' in: $flags"
done
rep=$(finder "" --report) && fail "finder without the wheels: exit 0"
echo "$rep" | grep -q '^NCCL: NOT FOUND' || fail "finder without the wheels: NCCL not reported missing: $rep"
echo "ok   libraries: found in the wheels with -L, an rpath and the versioned file; missing ones reported"

# the learning check on two made-up logs: 10.8 -> 8.5 learns, 10.8 -> 10.7 does not
( . scripts/gpu_lib.sh
  printf 'step  1/3 | loss 10.800000 | x\nstep  2/3 | loss 9.700000 | x\nstep  3/3 | loss 8.500000 | x\n' > "$work/learns.log"
  printf 'step  1/3 | loss 10.800000 | x\nstep  2/3 | loss 10.750000 | x\nstep  3/3 | loss 10.700000 | x\n' > "$work/flat.log"
  printf 'step  1/3 | loss 10.800000 | x\nstep  2/3 | loss 8.000000 | x\n' > "$work/short.log"
  learned "$work/learns.log" >/dev/null || fail "learned: a loss falling to 0.79 of the first did not pass"
  learned "$work/flat.log" >/dev/null && fail "learned: a flat loss passed"
  learned "$work/short.log" >/dev/null && fail "learned: 2 of 3 steps passed"
  echo "ok   learning check: $(learned "$work/learns.log"); flat: $(learned "$work/flat.log")"
  # the -oo host comparison: steps 1-2 compared (step 3 follows another learning rate), then one digit off
  printf 'step 1/3 | loss 10.800000 | lr 1e-3 | x\nstep 2/3 | loss 9.700000 | lr 2e-3 | x\nstep 3/3 | loss 8.5 | lr 3e-3 | x\n' > "$work/base.log"
  printf 'step 1/3 | loss 10.800000 | lr 1e-3 | y\nstep 2/3 | loss 9.700000 | lr 1e-3 | y\nstep 3/3 | loss 8.4 | lr 1e-3 | y\n' > "$work/host.log"
  got=$(same_losses "$work/base.log" "$work/host.log") || fail "same_losses: the same losses failed: $got"
  [ "$got" = "losses of steps 1-2 digit for digit those without -oo host" ] || fail "same_losses: '$got'"
  sed -i 's/9.700000 | lr 1e-3/9.700001 | lr 1e-3/' "$work/host.log"
  got=$(same_losses "$work/base.log" "$work/host.log") && fail "same_losses: a loss one digit off passed: $got"
  [ "$got" = "step 2: loss 9.700001 with -oo host, loss 9.700000 without" ] || fail "same_losses, one digit off: '$got'"
  echo "ok   -oo host comparison: same losses pass, one digit off fails ($got)" ) || exit 1

# the emulated run, B=4's training forced past a 3 s cap, its summary's length sampled every second
out="$work/out"
start=$(date +%s)
GPU_CHECK_EMULATE=1 GPU_CHECK_CAPS="train_z3_b4=3" GPU_CHECK_OUT="$out" bash scripts/gpu_first.sh > "$work/run.log" 2>&1 &
pid=$!
while kill -0 $pid 2>/dev/null; do [ -f "$out/summary.txt" ] && wc -l < "$out/summary.txt" >> "$work/lengths"; sleep 1; done
wait $pid; rc=$?
secs=$(( $(date +%s) - start ))
sum="$out/summary.txt"
cat "$sum"
echo "emulated gpu_first: exit $rc, $secs s"
for f in gpu_first.log gpu_first_logs.tgz; do [ -s "$out/$f" ] || fail "no $f in GPU_CHECK_OUT"; done
[ $secs -le $(( ${budget#* } + 30 )) ] || fail "the emulated run took $secs s, over its ${budget#* } s budget"

# every capped command ran under its table cap (the log's "--- NAME (cap Ss)"; the forced one 3 s)
while read -r name cap; do
  key=$name
  case $name in train_z3_b2) key=train_z3_b16 ;; train_z3_b4) key=train_z3_b32 ;; train_z3_host_b2) key=train_z3_host_b16 ;;
    san_memcheck_*) key=san_memcheck ;;
    san_racecheck_*) key=san_racecheck ;; baseline_*) key=baseline ;; build_bf16|build_fp32) key=build ;;
    build_bf16_asan) key=build_asan ;; build_*_mpi) key=build_mpi ;; esac
  want_cap=$(echo "$rows" | awk -v k="$key" '$1 == k {print $6}')
  [ "$name" = train_z3_b4 ] && want_cap=3
  [ -n "$want_cap" ] || fail "the run capped $name, which has no STAGES row"
  [ "$cap" = "$want_cap" ] || fail "$name ran under a $cap s cap, its row says $want_cap s"
done < <(sed -n 's/^--- \([a-z0-9_]*\) (cap \([0-9]*\)s.*/\1 \2/p' "$out/gpu_first.log")
echo "ok   every capped command ran under its STAGES cap"

# line NAME STATUS PATTERN: the summary's line for NAME has STATUS (a regex) and matches PATTERN
line() {
  local l; l=$(grep -E "^$1 " "$sum") || fail "no $1 line"
  echo "$l" | grep -qE "^$1 +($2) " || fail "$1: not $2: $l"
  echo "$l" | grep -qE -- "$3" || fail "$1: no '$3' in: $l"
}
# every line answers: PASS, FAIL, TIMEOUT, UNKNOWN (or MISS, a target's figure); none SKIPs
bad=$(grep -vE '^gpu_first: ' "$sum" | grep -vE '^[a-z0-9_]+ +(PASS|FAIL|TIMEOUT|UNKNOWN|MISS) ')
[ -z "$bad" ] || fail "lines without an answer: $bad"
line env PASS 'CPU emulator; cuBLASLt=toolkit:[^ ]*libcublasLt[^ ]* .*gcc [0-9.]+, GNU Make .*data ok; dumps ok; cuBLASLt epilogues on, attention as built'
line gemm_peak PASS '[0-9.]+ TFLOP/s'
for b in bf16 fp32 bf16_asan; do line "build_$b" PASS 'register spill warnings: 0'; done
for t in test_bf16_n1 test_fp32_n1 test_bf16_hs64 test_fp32_hs64; do line $t PASS '2 of 2 cases passed'; done
line train_z3_b2 PASS 'loss [0-9.]+ -> [0-9.]+ in 20 of 20 steps \(0\.[0-9]+ of the first; learns if < 0.9\); [0-9]+ tok/s, .*MFU [0-9.]+% of the [0-9.]+ TFLOP/s datasheet peak, [0-9.]+% of the [0-9.]+ TFLOP/s measured GEMM peak; activations .*, flash attention \(tensor cores\); epilogue fallbacks: gelu 0, bgradb 0'
line train_z3_host_b2 PASS '-b 2 -oo host -z 3: losses of steps 1-5 digit for digit those without -oo host; [0-9]+ tok/s, [0-9.]+ ms/step, [0-9]+ tok/s without \(train_z3_b2\): [0-9.]+ of it; peak [0-9.]+ [KMG]iB engine \(peak [0-9.]+ [KMG]iB engine without\)'
# the forced cap: TIMEOUT, how far it got, and no failure
line train_z3_b4 TIMEOUT 'cut off by its 3 s cap: (reached step [0-9]+ of 20|no output|last line: )'
line kernels_attention PASS '^.* [1-9][0-9]* PASS, 0 FAIL; programs failed: 0'
# the tensor-core tilings timed at the training batch (the emulator's B=3 stands for the GPU's 16)
line attention_paths PASS 'flash_attention_tc_rows16_backward\[B=3\]/BF16 .*flash_attention_tc_rows32_backward\[HS=64\]/BF16'
line kernels_other PASS '[1-9][0-9]* PASS, 0 FAIL'
line san_memcheck_train_bf16 PASS 'emulated memcheck counterpart: [0-9]+ tok/s'
line san_racecheck_train_bf16 PASS 'emulated racecheck counterpart: [0-9]+ tok/s'
if command -v mpicxx >/dev/null; then
  line zero3_vs_ddp_n2 PASS 'z3: exit 0; ddp: exit 0; 3 steps, max rel loss diff .* \(bound 2e-2\)'
  line hsdp_n2 PASS '3 steps, max rel loss diff'
else line zero3_vs_ddp_n2 UNKNOWN 'MPI'; fi
line baseline_eager_b2 PASS 'tok/s.*this trainer \(stage 3\) / PyTorch = '
if $PY -c 'import torch; torch.compile' 2>/dev/null; then
  line compile_warmup PASS 'tok/s'
  line baseline_compile_b2 PASS 'tok/s'
  line target_b2 'PASS|MISS' 'tok/s, .*eager \(>= 1.3\), MFU'
else
  line compile_warmup UNKNOWN 'no torch.compile'
  line baseline_compile_b2 UNKNOWN 'no torch.compile'
  line target_b2 UNKNOWN 'no torch.compile figure'
fi
tail -1 "$sum" | grep -qE '^gpu_first: CPU emulator, [0-9]+ s of 2000, 0 failed, 1 timed out \(EMULATED\)$' || fail "closing line: $(tail -1 "$sum")"
[ $rc -ne 0 ] || fail "a TIMEOUT, yet exit 0"

# the stages in the script's order
order=$(awk '{print $1}' "$sum" | grep -vE '^(build_|gpu_first:)' | tr '\n' ' ')
want="env gemm_peak compile_warmup train_z3_b2 train_z3_host_b2 baseline_eager_b2 baseline_compile_b2 target_b2 test_bf16_n1 test_fp32_n1 test_bf16_hs64 test_fp32_hs64 kernels_attention attention_paths kernels_other train_z3_b4 zero3_vs_ddp_n2 "
command -v mpicxx >/dev/null && want+="hsdp_n2 "
want+="san_memcheck_train_bf16 san_racecheck_train_bf16 "
[ "$order" = "$want" ] || fail "order: $order"

# line by line: the summary was seen at many lengths while the script ran, not only empty and full
seen=$(sort -un "$work/lengths" | wc -l)
echo "summary lengths seen while running: $seen ($(sort -un "$work/lengths" | tr '\n' ' '))"
[ "$seen" -ge 8 ] || fail "the summary grew in $seen steps, not line by line"

# the emulated BF16 GPU trainer's last loss against the CPU trainer's on the same run (the CPU
# trainer is the reference the FP32 GPU trainer matches digit for digit; BF16 within 2e-2: 5 bf16
# unit roundoffs, as compare_losses in scripts/gpu_lib.sh says)
gpu_loss=$(grep -o -- '-> [0-9.]*' <<< "$(grep '^train_z3_b2 ' "$sum")" | awk '{print $2}')
$BIN -e d2c64h2t64 -t 32 -x 20 -v 0 -l 3e-3 -u 2 -S 1337 -b 2 -z 3 > "$work/cpu.log" 2>&1 || fail "CPU trainer run"
cpu_loss=$(grep '^step ' "$work/cpu.log" | tail -1 | grep -o '| loss [0-9.]*' | awk '{print $3}')
awk -v g="$gpu_loss" -v c="$cpu_loss" 'BEGIN{d=(g-c)/c; if(d<0)d=-d; exit !(c > 0 && d < 2e-2)}' ||
  fail "emulated GPU loss $gpu_loss vs CPU trainer $cpu_loss"
echo "train_z3_b2 last loss: emulated GPU (bf16) $gpu_loss, CPU trainer $cpu_loss"

# a cuBLASLt with no algorithm for any GEMM (EMU_LT_NO_ALGO=1): every GEMM through cublasGemmEx,
# named once on stderr and counted at the end; the losses the CPU trainer's to bf16 rounding
( . scripts/gpu_lib.sh
  EMU_LT_NO_ALGO=1 build/gpu_first/bin/train_bf16 -e d2c64h2t64 -t 32 -x 3 -v 0 -l 3e-3 -u 2 -S 1337 -b 2 -z 3 > "$work/noalgo.log" 2>&1 ||
    fail "no cuBLASLt algorithm: the trainer failed: $(tail -3 "$work/noalgo.log")"
  grep -q '^matmul: cuBLASLt has no algorithm for a [0-9]*x[0-9]*x[0-9]* GEMM (BF16, .*cublasGemmEx instead' "$work/noalgo.log" ||
    fail "no cuBLASLt algorithm: no line naming the shape"
  n=$(grep -o 'GEMMs through cublasGemmEx (no cuBLASLt algorithm): [0-9]*' "$work/noalgo.log" | awk '{print $NF}')
  [ "${n:-0}" -gt 0 ] || fail "no cuBLASLt algorithm: no count of the cuBLAS GEMMs in the end-of-run line"
  grep '^step ' "$work/cpu.log" | head -3 > "$work/cpu3.log"
  cmp=$(compare_losses "$work/noalgo.log" "$work/cpu3.log") || fail "no cuBLASLt algorithm: losses against the CPU trainer's: $cmp"
  echo "ok   no cuBLASLt algorithm: $n GEMMs through cublasGemmEx; against the CPU trainer: $cmp" ) || exit 1

# a budget too short for anything (8 s: the BF16 build alone takes 20 s and more; the emulator's
# build cache off, since the run above left that build in it): the build is cut
# off by the budget (on a machine so loaded that the probe alone takes 8 s, not started), every
# later line is still written, the exit status is non-zero, and the script ends within budget plus
# the kill delay
start=$(date +%s)
EMU_CACHE=0 GPU_CHECK_EMULATE=1 GPU_CHECK_BUDGET=8 GPU_CHECK_OUT="$work/short" bash scripts/gpu_first.sh > "$work/short.log" 2>&1 && fail "8 s budget: exit 0"
secs=$(( $(date +%s) - start ))
cat "$work/short/summary.txt"
[ $secs -le 50 ] || fail "8 s budget: took $secs s"
grep -E '^build_bf16 ' "$work/short/summary.txt" | grep -qE ' TIMEOUT .*(cut off by its [0-9]+ s cap|not started: the budget is spent)' ||
  fail "8 s budget: the BF16 build was neither cut off nor left unstarted"
for n in test_bf16_n1 test_bf16_hs64 train_z3_b2 train_z3_host_b2 kernels_attention baseline_eager_b2 san_memcheck_train_bf16 zero3_vs_ddp_n2 target_b2; do
  grep -qE "^$n +(FAIL|TIMEOUT|UNKNOWN) " "$work/short/summary.txt" || fail "8 s budget: no FAIL/TIMEOUT/UNKNOWN line for $n"
done
echo "8 s budget: exit non-zero after $secs s; $(grep -E '^build_bf16 ' "$work/short/summary.txt"); every stage's line written"
