#!/usr/bin/env bash
# scripts/gpu_first.sh, the first GPU visit's script, runs end to end on the CPU emulator
# (GPU_CHECK_EMULATE=1: every section at tiny sizes) and passes: each section's line is in
# summary.txt, in the script's order, with its figure (cases passed, tok/s, KERNEL counts, the
# attention paths at the training batch, the 2-rank loss comparisons); the summary grows line by line
# while the script runs (a run cut short keeps what it measured); the emulated GPU trainer's loss in
# the summary is the CPU trainer's to bf16 rounding; and `--carry` lists the carried files within the
# device tool's 64 MiB. Then a run with an 8-second budget: the BF16 build (two emulated compiles,
# 20+ s) is stopped by its timeout, every later section still writes its line (FAIL or SKIP), and the
# script exits non-zero, in time.
# About 4 minutes on 2 quiet cores. Needs the carried files (make data, make dev/ref/small.dump).
. "$(dirname "$0")/lib.sh"
make -s train_gpt2_zero3 >/dev/null || fail "build"
[ -f data/tinyshakespeare/tiny_shakespeare_train.bin ] && [ -f dev/ref/small.dump ] || fail "no data or small dump (make data dumps)"

carry=$(scripts/gpu_first.sh --carry) || fail "--carry: $carry"
echo "$carry"
echo "$carry" | grep -q '^carry: \["data/tinyshakespeare", "dev/ref/small.dump", "dev/ref/small_model.bin", "dev/ref/small_tokens.bin"\]$' ||
  fail "--carry: no carry list"
mib=$(echo "$carry" | awk '$1 == "total" {print $2}')
awk -v m="$mib" 'BEGIN{exit !(m > 1 && m <= 64)}' || fail "--carry: total $mib MiB"

# the emulated run, its summary's length sampled every second while it runs
out="$work/out"
start=$(date +%s)
GPU_CHECK_EMULATE=1 OUT="$out" bash scripts/gpu_first.sh > "$work/run.log" 2>&1 &
pid=$!
while kill -0 $pid 2>/dev/null; do [ -f "$out/summary.txt" ] && wc -l < "$out/summary.txt" >> "$work/lengths"; sleep 1; done
wait $pid; rc=$?
sum="$out/summary.txt"
cat "$sum"
echo "emulated gpu_first: exit $rc, $(( $(date +%s) - start )) s"
[ $rc -eq 0 ] || { tail -30 "$work/run.log"; fail "emulated gpu_first.sh exit $rc"; }
for f in gpu_first.log gpu_first_logs.tgz; do [ -s "$out/$f" ] || fail "no $f in OUT"; done

# line NAME STATUS PATTERN: the summary's line for NAME has STATUS (a regex) and matches PATTERN
line() {
  local l; l=$(grep -E "^$1 " "$sum") || fail "no $1 line"
  echo "$l" | grep -qE "^$1 +($2) " || fail "$1: not $2: $l"
  echo "$l" | grep -qE -- "$3" || fail "$1: no '$3' in: $l"
}
line env PASS 'CPU emulator.*data ok; small dump ok'
for b in bf16 fp32 bf16_asan; do line "build_$b" PASS 'register spill warnings: 0'; done
line test_bf16_n1 PASS '2 of 2 cases passed'
line test_fp32_n1 PASS '2 of 2 cases passed'
line train_z3_b2 PASS '[0-9]+ tok/s, .* MFU .*; activations .*; (.*fallback.*)'
line kernels_attention PASS '^.* [1-9][0-9]* PASS, 0 FAIL; programs failed: 0'
# the tensor-core tilings timed at the training batch (the emulator's B=3 stands for the GPU's 16)
line attention_paths PASS 'flash_attention_tc_rows16_backward\[B=3\]/BF16 .*flash_attention_tc_rows32_backward\[B=3\]/BF16'
line kernels_other PASS '[1-9][0-9]* PASS, 0 FAIL'
line baseline_eager_b2 PASS 'tok/s.*this trainer \(stage 3\) / PyTorch = '
if $PY -c 'import torch; torch.compile' 2>/dev/null; then line baseline_compile_b2 PASS 'tok/s'
else line baseline_compile_b2 SKIP 'no torch.compile'; fi
line target_b2 'PASS|MISS' 'tok/s, .*eager \(>= 1.3\), MFU'
line san_memcheck_train_bf16 PASS 'emulated memcheck counterpart: [0-9]+ tok/s'
line san_racecheck_train_bf16 PASS 'emulated racecheck counterpart: [0-9]+ tok/s'
line train_z3_b4 PASS 'tok/s'
if command -v mpicxx >/dev/null; then
  line zero3_vs_ddp_n2 PASS 'z3 exit 0, ddp exit 0; 3 steps, max rel loss diff'
  line hsdp_n2 PASS '3 steps, max rel loss diff'
else line zero3_vs_ddp_n2 SKIP 'MPI'; fi
tail -1 "$sum" | grep -qE '^gpu_first: CPU emulator, [0-9]+ s, 0 failed \(EMULATED\)$' || fail "closing line: $(tail -1 "$sum")"

# the sections in the script's order
order=$(awk '{print $1}' "$sum" | grep -vE '^(build_|gpu_first:)' | tr '\n' ' ')
want="env test_bf16_n1 test_fp32_n1 train_z3_b2 kernels_attention attention_paths kernels_other baseline_eager_b2 baseline_compile_b2 target_b2 san_memcheck_train_bf16 san_racecheck_train_bf16 train_z3_b4 zero3_vs_ddp_n2 "
command -v mpicxx >/dev/null && want+="hsdp_n2 "
[ "$order" = "$want" ] || fail "order: $order"

# line by line: the summary was seen at many lengths while the script ran, not only empty and full
seen=$(sort -un "$work/lengths" | wc -l)
echo "summary lengths seen while running: $seen ($(sort -un "$work/lengths" | tr '\n' ' '))"
[ "$seen" -ge 8 ] || fail "the summary grew in $seen steps, not line by line"

# the emulated BF16 GPU trainer's last loss against the CPU trainer's on the same run (the CPU
# trainer is the reference the FP32 GPU trainer matches digit for digit; BF16 within 2e-2)
gpu_loss=$(grep -o 'loss [0-9.]*' <<< "$(grep '^train_z3_b2 ' "$sum")" | awk '{print $2}')
$BIN -e d2c64h2t64 -t 32 -x 3 -v 0 -l 1e-3 -S 1337 -b 2 -z 3 > "$work/cpu.log" 2>&1 || fail "CPU trainer run"
cpu_loss=$(grep '^step ' "$work/cpu.log" | tail -1 | grep -o '| loss [0-9.]*' | awk '{print $3}')
awk -v g="$gpu_loss" -v c="$cpu_loss" 'BEGIN{d=(g-c)/c; if(d<0)d=-d; exit !(c > 0 && d < 2e-2)}' ||
  fail "emulated GPU loss $gpu_loss vs CPU trainer $cpu_loss"
echo "train_z3_b2 last loss: emulated GPU (bf16) $gpu_loss, CPU trainer $cpu_loss"

# a budget too short for anything (8 s: the BF16 build alone takes 20 s and more): the build is stopped by its timeout (on a machine so loaded
# that the probe alone takes 20 s, it is not started: "no time left"), every later line is still
# written, the exit status is non-zero, and the script ends within budget plus the kill delay
start=$(date +%s)
GPU_CHECK_EMULATE=1 GPU_CHECK_BUDGET=8 OUT="$work/short" bash scripts/gpu_first.sh > "$work/short.log" 2>&1 && fail "8 s budget: exit 0"
secs=$(( $(date +%s) - start ))
cat "$work/short/summary.txt"
[ $secs -le 50 ] || fail "8 s budget: took $secs s"
grep -E '^build_bf16 ' "$work/short/summary.txt" | grep -qE ' FAIL .*timed out| SKIP .*no time left' ||
  fail "8 s budget: the BF16 build was neither timed out nor skipped"
for n in test_bf16_n1 train_z3_b2 kernels_attention baseline_eager_b2 san_memcheck_train_bf16 zero3_vs_ddp_n2; do
  grep -qE "^$n +(FAIL|SKIP) " "$work/short/summary.txt" || fail "8 s budget: no FAIL/SKIP line for $n"
done
echo "8 s budget: exit non-zero after $secs s; $(grep -E '^build_bf16 ' "$work/short/summary.txt"); every section's line written"
