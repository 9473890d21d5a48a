#!/usr/bin/env bash
# scripts/translate_config.py, DeepSpeed configs and FSDP arguments as this trainer's flags:
#  1. the three DeepSpeed configs of docs/examples/deepspeed (ds_zero{1,2,3}.json), the sized one
#     (ds_zero3_sized.json) and configs written here, for GPT-2 124M (d12) and 7.5B
#     (d36c4096h32t1024), and FSDP's arguments: the `flags:` line equals flags worked out by hand
#     below from GPT-2's shapes (each case says how);
#     Hugging Face's ZeRO-3 template ("auto" everywhere: tests/translate/hf_zero3_auto.json) and a
#     config with // /* */ # comments (tests/translate/ds_commented.json, as DeepSpeed reads them);
#  2. every printed command is accepted by the trainer: the 124M ones run one step (-x 1, shorter
#     rows appended), the 7.5B ones are planned (-plan N, the flags as printed); and
#     stage3_max_live_parameters binds in a run: a small GPT-2's bound translation holds at most the
#     bound's parameters at once (the run's "live params:" line), the unbound one more;
#  3. bad inputs (an unreadable file, a FIFO, a device, a folder, bad JSON, nesting 100,000 deep, a
#     wrong type or "auto" where none is filled, 1e400, NaN, an unknown stage or key, no model, a
#     value the trainer refuses) end with one line on stderr naming the key and exit status 2: no
#     traceback, no hang (each call under a timeout);
#  4. tests/translate_fuzz.py: 300 random and adversarial configs, the same three promises.
. "$(dirname "$0")/lib.sh"
make -s train_gpt2_zero3 >/dev/null || fail "build"
X=scripts/translate_config.py
EX=docs/examples/deepspeed
cmds=()

# GPT-2's shapes, by hand: a block holds 12 C^2 + 13 C parameters.
#   d12 (C = 768):   12 * 589824 + 13 * 768 = 7,087,872 a block
#   7.5B (C = 4096): 12 * 16777216 + 13 * 4096 = 201,379,840 a block
# Hugging Face's "auto": prefetch bucket 0.9 C^2, persistence threshold 10 C.
# -pd from a bucket of P parameters: the units it reaches into, ceil(P / unit), at least 1; under
# stage3_max_live_parameters M at most floor((M - E) / unit), E the largest unit (the embedding, V C +
# maxT C, V = 50257): -bp pre holds the unit in use and P ahead, and one of them may be the embedding.
expect() {   # name, expected flags, translator arguments...
  local name=$1 want=$2; shift 2
  local out
  out=$(timeout 60 $PY $X "$@" 2>&1) || { echo "$out"; fail "$name: the translator failed"; }
  local got; got=$(sed -n 's/^flags: //p' <<<"$out")
  [ "$got" = "$want" ] || { echo "$out"; fail "$name: flags '$got', want '$want'"; }
  cmds+=("$(sed -n 's/^command: //p' <<<"$out")")
  echo "  ok  $name: $got"
}

echo "DeepSpeed configs:"
# stage 1 and 2: -z, bf16 -> -p bf16, train_micro_batch_size_per_gpu 4 -> -b 4, lr 1e-4 -> -l 0.0001
expect "ds_zero1 124M" "-z 1 -p bf16 -b 4 -l 0.0001" --model 124M $EX/ds_zero1.json
expect "ds_zero2 124M" "-z 2 -p bf16 -b 4 -l 0.0001" --model 124M $EX/ds_zero2.json
# auto bucket 0.9 * 768^2 = 530,841 < one block -> -pd 1; auto threshold 10 * 768 = 7680
expect "ds_zero3 124M" "-z 3 -p bf16 -b 4 -l 0.0001 -pd 1 -pt 7680" --model 124M $EX/ds_zero3.json
# auto bucket 0.9 * 4096^2 = 15,099,494 < one block -> -pd 1; threshold 10 * 4096 = 40960
expect "ds_zero3 7.5B" "-z 3 -p bf16 -b 4 -l 0.0001 -pd 1 -pt 40960" --model 7.5B $EX/ds_zero3.json
# the same config with comments of all three kinds (and // and /* inside a string, kept): the same flags
expect "ds_zero3 with comments, 124M" "-z 3 -p bf16 -b 4 -l 0.0001 -pd 1 -pt 7680" --model 124M tests/translate/ds_commented.json
# Hugging Face's template: the sizes from C (as above), the TrainingArguments ones left to the trainer's
# defaults (each on an assumed: line), offload and the scheduler without equivalent
expect "Hugging Face's ZeRO-3 template, 124M" "-z 3 -pd 1 -pt 7680 -oo host" --model 124M tests/translate/hf_zero3_auto.json
hf=$($PY $X --model 124M tests/translate/hf_zero3_auto.json)
for key in bf16/fp16.enabled train_micro_batch_size_per_gpu gradient_accumulation_steps gradient_clipping optimizer.params.lr; do
  grep -q "^  $key auto: Hugging Face fills it from TrainingArguments" <<<"$hf" || { echo "$hf"; fail "HF template: no assumed line for $key"; }
done
# 5e7 / 7,087,872 = 7.05 -> 8 units; 1e9 holds the embedding (39,383,808) and 135 blocks: no bound; threshold 1e5 as given
expect "ds_zero3_sized 124M" "-z 3 -pd 8 -pt 100000" --model 124M $EX/ds_zero3_sized.json
# the threshold's semantics differ (DeepSpeed's per tensor, -pt's per unit), said in one line: at 1e5 a
# d12 block's tensors under it are its 8 biases and layernorms, 13 C = 9,984 parameters (6 of C, qkv's
# 3 C, fc's 4 C), 9,984 / 7,087,872 = 0.14% of the block
sized=$($PY $X --model 124M $EX/ds_zero3_sized.json)
grep -qxF "  stage3_param_persistence_threshold per tensor: DeepSpeed keeps each tensor under it replicated, here -pt keeps whole units: a block's 8 tensors under it (9,984 parameters: biases, layernorms) stay sharded and are gathered with the block, 0.14% of its bytes in the same one collective (scripts/persistence.py counts a step's)" <<<"$sized" ||
  { echo "$sized"; fail "ds_zero3_sized 124M: no line saying the persistence threshold is per unit here, per tensor in DeepSpeed"; }
# scripts/persistence.py, the same question over a step: its count of the per-unit engine's bytes is a
# run's log.csv (2 ranks, -pt 300: the head unit of 128 parameters replicated); per tensor, by hand,
# the 8 small tensors of each of the 2 blocks (13 C = 832 parameters at C = 64, fc.b 4 C = 256 the largest),
# gathered twice a step,
# fp32, half of each buffer sent on a ring of 2: 2 * 832 * 2 * 4 / 2 = 6,656 bytes fewer, no gather fewer
mpirun -np 2 $BIN -e d2c64h2t64 -b 2 -t 32 -x 1 -v 0 -z 3 -pt 300 -o "$work/pt" >"$work/pt.out" 2>&1 || { tail "$work/pt.out"; fail "the -pt 300 run"; }
pers=$($PY scripts/persistence.py --model d2c64h2t64 --threshold 300 --ranks 2 --log "$work/pt/log.csv" 2>&1) ||
  { echo "$pers"; fail "persistence.py: the per-unit count is not the run's log"; }
grep -qE "^  gathers a step +6 +6 +0$" <<<"$pers" && grep -qE "^  gather bytes a rank sends .* 6,656 \(" <<<"$pers" ||
  { echo "$pers"; fail "persistence.py: want 6 gathers either way and 6,656 bytes fewer per tensor"; }
$PY scripts/persistence.py --model d2c64h2t64 --threshold 300 --ranks 4 --log "$work/pt/log.csv" >/dev/null 2>&1 &&
  fail "persistence.py: a log of 2 ranks taken for 4"
echo "  ok  the persistence threshold: per unit here, per tensor in DeepSpeed, said; persistence.py's count is the run's bytes"
# 5e7 / 201,379,840 = 0.25 -> 1; 1e9 holds the embedding (210,010,112) and 3 blocks: no bound
expect "ds_zero3_sized 7.5B" "-z 3 -pd 1 -pt 100000" --model 7.5B $EX/ds_zero3_sized.json
# max live 6e7 holds the embedding and floor((6e7 - 39,383,808) / 7,087,872) = 2 blocks: -pd 2 though
# the bucket reaches 8; 3e7 is under the embedding alone: -pd 0 (one unit at a time)
echo '{"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 5e7, "stage3_max_live_parameters": 6e7}}' >"$work/live.json"
expect "max live binds, 124M" "-z 3 -pd 2 -pt 100000" --model 124M "$work/live.json"
echo '{"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 5e7, "stage3_max_live_parameters": 3e7}}' >"$work/live0.json"
expect "max live under the embedding, 124M" "-z 3 -pd 0 -pt 100000" --model 124M "$work/live0.json"
# accumulation 2 at B 4 on 2 ranks of T 32: -d 2*4*32*2 = 512; DeepSpeed's defaults (bucket 5e7 -> 8,
# threshold 1e5); ZeRO++: hpZ 2 -> -hp 2, quantized weights -> -qw 8, gradients -> -qg 8
cat >"$work/zpp.json" <<'EOF'
{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
 "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 2, "zero_quantized_weights": true,
                       "zero_quantized_gradients": true, "offload_optimizer": {"device": "cpu"}}}
EOF
expect "ZeRO++ and accumulation, 124M on 2" "-z 3 -b 4 -t 32 -d 512 -pd 8 -pt 100000 -hp 2 -qw 8 -qg 8 -oo host" \
  --model 124M --ranks 2 --seq-len 32 "$work/zpp.json"
# offload: device cpu -> -oo host (above; the template's offload_param cpu has no flag: -op takes disk);
# ZeRO-Infinity's nvme for both -> -oo disk:PATH -op disk:PATH; bf16, B 1; 5e7 / 201,379,840 -> -pd 1;
# buffer_count 4 and 5 -> the larger as the files' slots, -os 5
expect "ZeRO-Infinity, 7.5B on 8" "-z 3 -p bf16 -b 1 -pd 1 -pt 100000 -oo disk:/local_nvme -op disk:/local_nvme -os 5" \
  --model 7.5B --ranks 8 tests/translate/ds_zero_infinity.json
inf=$($PY $X --model 7.5B --ranks 8 tests/translate/ds_zero_infinity.json)
for knob in offload_optimizer.pin_memory offload_optimizer.pipeline_read offload_optimizer.fast_init \
            offload_param.buffer_size offload_param.max_in_cpu; do
  grep -q "^  $knob [^:]*: ." <<<"$inf" || { echo "$inf"; fail "ZeRO-Infinity: no line saying why $knob has no meaning here"; }
done
grep -q "^  offload_param.device cpu: no parameters in host memory" <<<"$hf" || { echo "$hf"; fail "offload_param cpu: no line"; }

echo "FSDP arguments:"
# a typical FSDP setup: FULL_SHARD -> -z 3, one block a unit -> -wrap 1, limit_all_gathers -> -pd 1, PRE -> -bp pre
TYPICAL="sharding_strategy=ShardingStrategy.FULL_SHARD,auto_wrap_policy=transformer,backward_prefetch=BackwardPrefetch.BACKWARD_PRE,limit_all_gathers=True,use_orig_params=True"
expect "typical FSDP, 124M" "-z 3 -wrap 1 -pd 1 -bp pre" --model 124M --fsdp "$TYPICAL"
grep -q "use_orig_params True: " <<<"$($PY $X --model 124M --fsdp "$TYPICAL")" || fail "use_orig_params: no line saying why"
# size:1e8 needs ceil(1e8 / 7,087,872) = 15 blocks > 12: the coarsest K dividing 12 and <= 8 is 6
expect "size policy 1e8, 124M" "-z 3 -wrap 6 -pd 1 -bp pre" --model 124M --fsdp "auto_wrap_policy=size:1e8"
# a 7.5B block (201M) is over 1e8 alone: -wrap 1; HYBRID_SHARD over nodes of 8 -> -hs 8; POST; bf16
expect "HSDP post bf16, 7.5B on 16" "-z 3 -hs 8 -wrap 1 -pd 1 -bp post -p bf16" --model 7.5B --ranks 16 --ranks-per-node 8 \
  --fsdp "sharding_strategy=HYBRID_SHARD,auto_wrap_policy=size:1e8,backward_prefetch=BACKWARD_POST,mixed_precision=bf16"
# SHARD_GRAD_OP keeps params from forward to backward (-ra 0): no backward gather, so no -bp; no
# auto_wrap_policy is FSDP's default, the root only: the coarsest -wrap, 6 of 12 blocks (K <= 8)
expect "SHARD_GRAD_OP post, 124M" "-z 3 -ra 0 -wrap 6 -pd 1" --model 124M --fsdp "sharding_strategy=SHARD_GRAD_OP,backward_prefetch=BACKWARD_POST"
# no prefetch in either pass -> -pd 0; activation checkpointing -> -rc 1
expect "no prefetch, 124M" "-z 3 -wrap 1 -pd 0 -rc 1" --model 124M --fsdp "auto_wrap_policy=transformer,backward_prefetch=None,activation_checkpointing=True"
expect "NO_SHARD, 124M" "-z 0 -wrap 6 -pd 1" --model 124M --fsdp "sharding_strategy=NO_SHARD"
fsdp=$($PY $X --model 124M --fsdp "sharding_strategy=NO_SHARD")
grep -q "^  auto_wrap_policy=none: FSDP's default (no policy): the root module is the only unit" <<<"$fsdp" &&
  grep -q "^  forward_prefetch=False: FSDP's default" <<<"$fsdp" || { echo "$fsdp"; fail "FSDP: the defaults assumed are not listed"; }

# FSDP's CPUOffload(offload_params=True): the optimizer shard in host memory, the params' and grads' line
expect "FSDP CPUOffload, 7.5B on 8" "-z 3 -wrap 1 -pd 1 -bp pre -oo host" --model 7.5B --ranks 8 \
  --fsdp "auto_wrap_policy=transformer,cpu_offload=CPUOffload(offload_params=True)"
expect "FSDP CPUOffload(offload_params=False), 7.5B on 8" "-z 3 -wrap 1 -pd 1 -bp pre" --model 7.5B --ranks 8 \
  --fsdp "auto_wrap_policy=transformer,cpu_offload=CPUOffload(offload_params=False)"
echo "every command accepted by the trainer:"
accepted() {   # RUN: the command runs to its end
  local out
  out=$(timeout 600 bash -c "$1" 2>&1) || { echo "$out" | tail -5; fail "not accepted: $1"; }
  echo "  ok  $1"
}
SIDE_JOBS=$(nproc 2>/dev/null || echo 2)   # a 124M step keeps a core busy: one run a core
for cmd in "${cmds[@]}"; do
  if [[ $cmd == *"-e d12 "* ]]; then   # one step, short rows: the flags as printed, then -x 1 -t 32
    run="$cmd -x 1 -v 0 -m 1 -t 32"
  else                                 # too large to run here: planned for its ranks
    n=$(sed -n 's/^mpirun -np \([0-9]*\) .*/\1/p' <<<"$cmd"); n=${n:-64}
    run="$(sed -E 's/^mpirun -np [0-9]+ //' <<<"$cmd") -plan $n"
  fi
  side_by_side accepted "$run"
done
finish_cases

# stage3_max_live_parameters binding in a run: d4c128h4t64's block is 12 * 128^2 + 13 * 128 = 198,272
# and its embedding 50257 * 128 + 64 * 128 = 6,441,088. A bucket of 2e6 reaches ceil(2e6 / 198,272) =
# 11 units; max live 7e6 holds the embedding and floor((7e6 - 6,441,088) / 198,272) = 2 blocks: -pd 2.
# Run (2 steps, the second prefetching), the closing "live params:" line: the bound run holds 1 + 2
# units and at most 7e6 parameters; the same bucket without the bound (DeepSpeed's default 1e9) holds
# more than 7e6 at once, so the bound is what keeps the first run under it.
echo "stage3_max_live_parameters binding, in a run:"
live_run() {   # config, want -pd: prints "UNITS PARAMS" of the run's closing line
  local out cmd
  out=$(timeout 60 $PY $X --model d4c128h4t64 --ranks 2 "$1" 2>&1) || { echo "$out"; fail "live: the translator failed"; }
  grep -q "^flags: -z 3 -pd $2 " <<<"$out" || { echo "$out"; fail "live: want -pd $2"; }
  cmd=$(sed -n 's/^command: //p' <<<"$out")
  out=$(timeout 600 bash -c "$cmd -x 2 -v 0 -b 1 -t 32" 2>&1) || { echo "$out" | tail -5; fail "live: $cmd failed"; }
  sed -n 's/^live params: the last step held at most \([0-9]*\) gathered units at once, \([0-9]*\) parameters .*/\1 \2/p' <<<"$out"
}
echo '{"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 2e6, "stage3_max_live_parameters": 7e6}}' >"$work/bound.json"
echo '{"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 2e6}}' >"$work/unbound.json"
read -r u1 p1 <<<"$(live_run "$work/bound.json" 2)"
read -r u2 p2 <<<"$(live_run "$work/unbound.json" 11)"
[ -n "$p1" ] && [ -n "$p2" ] || fail "live: a run printed no live params line"
[ "$u1" -eq 3 ] && [ "$p1" -le 7000000 ] || fail "live: bound run held $u1 units, $p1 parameters: want 3 units and at most 7e6"
[ "$p2" -gt 7000000 ] || fail "live: the unbound run held $p2 parameters: want more than 7e6 (else the bound shows nothing)"
echo "  ok  max live 7e6 -> -pd 2: $u1 units, $p1 parameters at once; without it -pd 11: $u2 units, $p2"

echo "bad inputs:"
bad() {   # name, pattern, arguments...
  local name=$1 pattern=$2; shift 2
  timeout 60 $PY $X "$@" >"$work/out" 2>"$work/err"; local rc=$?
  [ -s "$work/out" ] && { cat "$work/out"; fail "$name: printed a translation"; }
  [ $rc -eq 2 ] || { cat "$work/err"; fail "$name: exit status $rc, want 2"; }
  [ "$(wc -l <"$work/err")" -eq 1 ] || { cat "$work/err"; fail "$name: want one line on stderr"; }
  grep -qE -- "$pattern" "$work/err" || { cat "$work/err"; fail "$name: '$(cat "$work/err")' does not match /$pattern/"; }
  echo "  ok  $name: $(cat "$work/err")"
}
printf '{"zero_optimization": {"stage": 3,\n' >"$work/broken.json"
echo '{"zero_optimization": {"stage": 4}}' >"$work/stage4.json"
echo '{"zero_optimization": {"stage": 3, "stage3_prefetch_bukket_size": 5e7}}' >"$work/key.json"
echo '{"zero_optimization": {"stage": 3, "reduce_bucket_size": "big"}}' >"$work/size.json"
bad "unreadable file" "^error: $work/none.json: cannot read it" --model 124M "$work/none.json"
bad "a folder" "^error: $work: not a regular file \(a folder\)" --model 124M "$work"
mkfifo "$work/fifo"
bad "a FIFO (no writer: a plain open would wait forever)" "^error: $work/fifo: not a regular file \(a FIFO\)" --model 124M "$work/fifo"
bad "/dev/zero" "^error: /dev/zero: not a regular file \(a device\)" --model 124M /dev/zero
head -c 1100000 /dev/zero | tr '\0' ' ' >"$work/big.json"
bad "a 1.1 MB file" "^error: .*big.json: 1100000 bytes is more than a config's" --model 124M "$work/big.json"
$PY -c "print('[' * 100000 + ']' * 100000)" >"$work/deep.json"
bad "JSON nested 100,000 deep" "^error: .*deep.json: nested deeper than 64 levels" --model 124M "$work/deep.json"
printf '{"zero_optimization": {"stage": 3}} /* never closed' >"$work/open_comment.json"
bad "a comment never closed" "^error: .*open_comment.json: not JSON: a /\* comment that never ends" --model 124M "$work/open_comment.json"
# a wrong type or value, one line naming the key
wrong() {   # name, pattern, the JSON, translator arguments...
  local name=$1 pattern=$2 f=$work/wrong_$n_wrong.json; n_wrong=$((n_wrong + 1))
  echo "$3" >"$f"; shift 3
  bad "$name" "$pattern" --model 124M "$@" "$f"
}
n_wrong=0; Z='"zero_optimization": {"stage": 3'
wrong '"auto" max live' '^error: zero_optimization.stage3_max_live_parameters: "auto" is not one Hugging Face fills' "{$Z, \"stage3_max_live_parameters\": \"auto\"}}"
wrong 'a string accumulation' '^error: gradient_accumulation_steps: expected a positive number .*got "2"' "{$Z}, \"gradient_accumulation_steps\": \"2\"}"
wrong 'a null accumulation' '^error: gradient_accumulation_steps: expected .*got null' "{$Z}, \"gradient_accumulation_steps\": null}"
wrong '"bf16": true' '^error: bf16: expected an object, got true' "{$Z}, \"bf16\": true}"
wrong 'a string optimizer' '^error: optimizer: expected an object, got "AdamW"' "{$Z}, \"optimizer\": \"AdamW\"}"
wrong '1e400' '^error: zero_optimization.stage3_prefetch_bucket_size: 1e400 is not a finite number' "{$Z, \"stage3_prefetch_bucket_size\": 1e400}}"
wrong 'NaN' '^error: optimizer.params.lr: NaN is not a finite number' "{$Z}, \"optimizer\": {\"params\": {\"lr\": NaN}}}"
wrong '-b 2.5' '^error: train_micro_batch_size_per_gpu: expected a number of rows' "{$Z}, \"train_micro_batch_size_per_gpu\": 2.5}"
wrong 'a key twice' '^error: stage: given twice in one object' "{$Z, \"stage\": 2}}"
# values whose range is the trainer's: its own line, after the knob
wrong 'lr -0.001' '^error: optimizer.params.lr -0.001 -> -l -0.001: the trainer refuses it: flag -l: -0.001 is out of range \[0, 10\]' "{$Z}, \"optimizer\": {\"params\": {\"lr\": -0.001}}}"
wrong '-pt 1e30' '^error: stage3_param_persistence_threshold 1e30 -> -pt [0-9]+: the trainer refuses it: flag -pt:' "{$Z, \"stage3_param_persistence_threshold\": 1e30}}"
wrong '-b 0' '^error: train_micro_batch_size_per_gpu 0 -> -b 0: the trainer refuses it: flag -b: 0 is out of range' "{$Z}, \"train_micro_batch_size_per_gpu\": 0}"
wrong '-gc -1' '^error: gradient_clipping -1 -> -gc -1: the trainer refuses it: flag -gc:' "{$Z}, \"gradient_clipping\": -1}"
wrong '-c 100' '^error: optimizer.params.weight_decay 100 -> -c 100: the trainer refuses it: flag -c:' "{$Z}, \"optimizer\": {\"params\": {\"weight_decay\": 100}}}"
wrong '-hp 3 on 2 ranks' '^error: zero_hpz_partition_size 3 -> -hp 3: the trainer refuses it: flag -hp: the group size 3 does not divide the 2 ranks' "{$Z, \"zero_hpz_partition_size\": 3}}" --ranks 2
wrong '-hs 2 on 2 ranks' '^error: mics_shard_size 2 -> -hs 2: the trainer refuses it: flag -hs: one group of all 2 ranks' "{$Z, \"mics_shard_size\": 2}}" --ranks 2
# offload blocks, carelessly written
touch "$work/a_file"
wrong 'offload device true' '^error: zero_optimization.offload_optimizer.device: expected "cpu", "nvme" or "none", got true' "{$Z, \"offload_optimizer\": {\"device\": true}}}"
wrong 'offload device gpu' '^error: zero_optimization.offload_param.device: expected "cpu", "nvme" or "none", got "gpu"' "{$Z, \"offload_param\": {\"device\": \"gpu\"}}}"
wrong 'offload a string' '^error: zero_optimization.offload_optimizer: expected an object, got "cpu"' "{$Z, \"offload_optimizer\": \"cpu\"}}"
wrong 'nvme_path a file' "^error: zero_optimization.offload_optimizer.nvme_path: $work/a_file is not a folder" "{$Z, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_path\": \"$work/a_file\"}}}"
wrong 'nvme_path a number' '^error: zero_optimization.offload_param.nvme_path: expected a folder name, got 5' "{$Z, \"offload_param\": {\"device\": \"nvme\", \"nvme_path\": 5}}}"
wrong 'offload_param at stage 2' '^error: zero_optimization.offload_param: DeepSpeed offloads parameters at stage 3 only; this config is stage 2' '{"zero_optimization": {"stage": 2, "offload_param": {"device": "nvme", "nvme_path": "/x"}}}'
wrong 'pin_memory "yes"' '^error: zero_optimization.offload_optimizer.pin_memory: expected true or false, got "yes"' "{$Z, \"offload_optimizer\": {\"device\": \"cpu\", \"pin_memory\": \"yes\"}}}"
wrong 'buffer_count 0' '^error: zero_optimization.offload_optimizer.buffer_count: expected at least 1 buffer, got 0' "{$Z, \"offload_optimizer\": {\"device\": \"nvme\", \"buffer_count\": 0}}}"
wrong 'buffer_count 100 on 124M' '^error: offload_optimizer.buffer_count 100 -> -os 100: the trainer refuses it: flag -os: 100 slots for a model of 14 units' "{$Z, \"offload_optimizer\": {\"device\": \"nvme\", \"buffer_count\": 100}}}"
wrong 'an offload key misspelt' '^error: zero_optimization.offload_optimizer.nvme_pth: not a key of' "{$Z, \"offload_optimizer\": {\"device\": \"nvme\", \"nvme_pth\": \"/x\"}}}"
bad "FSDP CPUOffload misspelt" "^error: --fsdp: cpu_offload=CPUOffload\(offload_param=True\): expected" --model 124M --fsdp "cpu_offload=CPUOffload(offload_param=True)"
# 3.0 is the integer 3 (as DeepSpeed's pydantic reads it): printed as 3, and -d as an integer
echo '{"zero_optimization": {"stage": 3.0}, "gradient_accumulation_steps": 5.0}' >"$work/float_ints.json"
expect "stage 3.0, accumulation 5.0" "-z 3 -d 1280 -pd 8 -pt 100000" --model 124M "$work/float_ints.json"
bad "bad JSON" "^error: .*broken.json: not JSON: .* line 2" --model 124M "$work/broken.json"
bad "unknown stage" "^error: zero_optimization.stage: 4 is not a ZeRO stage" --model 124M "$work/stage4.json"
bad "unknown ZeRO key" "^error: zero_optimization.stage3_prefetch_bukket_size: not a DeepSpeed ZeRO knob" --model 124M "$work/key.json"
bad "a size that is no number" "^error: zero_optimization.reduce_bucket_size: expected a number" --model 124M "$work/size.json"
echo '{"bf16": {"enabled": true}}' >"$work/no_zero.json"
bad "no zero_optimization" "^error: zero_optimization: the config has no zero_optimization" --model 124M "$work/no_zero.json"
bad "unknown FSDP key" "^error: --fsdp: unknown key 'limit_allgathers'" --model 124M --fsdp "limit_allgathers=True"
bad "FSDP value" "^error: --fsdp: backward_prefetch=BACKWARD_LATER" --model 124M --fsdp "backward_prefetch=BACKWARD_LATER"
bad "HSDP without nodes" "^error: --fsdp: sharding_strategy=HYBRID_SHARD .*--ranks-per-node" --model 124M --fsdp "sharding_strategy=HYBRID_SHARD"
bad "HSDP 3 a node on 4" "^error: --ranks-per-node 3 \(HYBRID_SHARD's node groups\) -> -hs 3: the trainer refuses it: flag -hs: the group size 3 does not divide the 4 ranks" \
  --model 124M --ranks 4 --ranks-per-node 3 --fsdp "sharding_strategy=HYBRID_SHARD"
for size in 1e400 1e5.5 1.5.3 +; do
  bad "size:$size" "^error: --fsdp: auto_wrap_policy=size:$(sed 's/[.+]/\\&/g' <<<"$size"): " --model 124M --fsdp "auto_wrap_policy=size:$size"
done
bad "a trainer that is not there" "^error: --trainer: .*/none is not an executable file" --model 124M --trainer "$work/none" $EX/ds_zero3.json
bad "no model" "^error: --model: missing" $EX/ds_zero3.json
bad "a model that is none" "^error: --model: '7B' is neither" --model 7B $EX/ds_zero3.json
bad "neither input" "^error: give one of" --model 124M
echo "random and adversarial configs:"
$PY tests/translate_fuzz.py --trainer "$BIN" --count 300 --seed 40 || fail "tests/translate_fuzz.py"
echo "test_translate: ok"
