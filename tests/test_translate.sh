#!/usr/bin/env bash
# scripts/translate_config.py, DeepSpeed configs and FSDP arguments as this trainer's flags:
#  1. the three DeepSpeed configs of docs/examples/deepspeed (ds_zero{1,2,3}.json), the sized one
#     (ds_zero3_sized.json) and configs written here, for GPT-2 124M (d12) and 7.5B
#     (d36c4096h32t1024), and FSDP's arguments: the `flags:` line equals flags worked out by hand
#     below from GPT-2's shapes (each case says how);
#  2. every printed command is accepted by the trainer: the 124M ones run one step (-x 1, shorter
#     rows appended), the 7.5B ones are planned (-plan N; -p and -pt left out, which the planner
#     refuses to plan);
#  3. bad inputs (an unreadable file, bad JSON, an unknown stage or key, no model) end with one line
#     on stderr and exit status 2, no traceback.
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
# stage3_max_live_parameters M at most floor(M / unit) - 1 (pre holds 1 + P units).
expect() {   # name, expected flags, translator arguments...
  local name=$1 want=$2; shift 2
  local out
  out=$($PY $X "$@" 2>&1) || { echo "$out"; fail "$name: the translator failed"; }
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
# 5e7 / 7,087,872 = 7.05 -> 8 units; 1e9 holds 141 units: no bound; threshold 1e5 as given
expect "ds_zero3_sized 124M" "-z 3 -pd 8 -pt 100000" --model 124M $EX/ds_zero3_sized.json
# 5e7 / 201,379,840 = 0.25 -> 1; 1e9 holds 4 units: at most 3, no bound
expect "ds_zero3_sized 7.5B" "-z 3 -pd 1 -pt 100000" --model 7.5B $EX/ds_zero3_sized.json
# max live 3e7 holds floor(3e7 / 7,087,872) = 4 units, so -pd <= 3 though the bucket reaches 8
echo '{"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 5e7, "stage3_max_live_parameters": 3e7}}' >"$work/live.json"
expect "max live binds, 124M" "-z 3 -pd 3 -pt 100000" --model 124M "$work/live.json"
# accumulation 2 at B 4 on 2 ranks of T 32: -d 2*4*32*2 = 512; DeepSpeed's defaults (bucket 5e7 -> 8,
# threshold 1e5); ZeRO++: hpZ 2 -> -hp 2, quantized weights -> -qw 8, gradients -> -qg 8
cat >"$work/zpp.json" <<'EOF'
{"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
 "zero_optimization": {"stage": 3, "zero_hpz_partition_size": 2, "zero_quantized_weights": true,
                       "zero_quantized_gradients": true, "offload_optimizer": {"device": "cpu"}}}
EOF
expect "ZeRO++ and accumulation, 124M on 2" "-z 3 -b 4 -d 512 -pd 8 -pt 100000 -hp 2 -qw 8 -qg 8" \
  --model 124M --ranks 2 --seq-len 32 "$work/zpp.json"
grep -q "offload_optimizer (cpu): no offload" <<<"$($PY $X --model 124M --ranks 2 --seq-len 32 "$work/zpp.json")" ||
  fail "offload_optimizer: no line saying there is no equivalent"

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
# SHARD_GRAD_OP keeps params from forward to backward (-ra 0): no backward gather, so no -bp
expect "SHARD_GRAD_OP post, 124M" "-z 3 -ra 0 -wrap 1 -pd 1" --model 124M --fsdp "sharding_strategy=SHARD_GRAD_OP,backward_prefetch=BACKWARD_POST"
# no prefetch in either pass -> -pd 0; activation checkpointing -> -rc 1
expect "no prefetch, 124M" "-z 3 -wrap 1 -pd 0 -rc 1" --model 124M --fsdp "backward_prefetch=None,activation_checkpointing=True"
expect "NO_SHARD, 124M" "-z 0 -wrap 1 -pd 1" --model 124M --fsdp "sharding_strategy=NO_SHARD"

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
    run="$(sed -E 's/^mpirun -np [0-9]+ //; s/ -p bf16//; s/ -pt [0-9]+//' <<<"$cmd") -plan $n"
  fi
  side_by_side accepted "$run"
done
finish_cases

echo "bad inputs:"
bad() {   # name, pattern, arguments...
  local name=$1 pattern=$2; shift 2
  $PY $X "$@" >"$work/out" 2>"$work/err"; local rc=$?
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
bad "a folder" "^error: $work: cannot read it" --model 124M "$work"
bad "bad JSON" "^error: .*broken.json: not JSON: .* line 2" --model 124M "$work/broken.json"
bad "unknown stage" "^error: zero_optimization.stage: 4 is not a ZeRO stage" --model 124M "$work/stage4.json"
bad "unknown ZeRO key" "^error: zero_optimization.stage3_prefetch_bukket_size: not a DeepSpeed ZeRO knob" --model 124M "$work/key.json"
bad "a size that is no number" "^error: zero_optimization.reduce_bucket_size: expected a number" --model 124M "$work/size.json"
bad "no zero_optimization" "^error: the config has no zero_optimization" --model 124M <(echo '{"bf16": {"enabled": true}}')
bad "unknown FSDP key" "^error: --fsdp: unknown key 'limit_allgathers'" --model 124M --fsdp "limit_allgathers=True"
bad "FSDP value" "^error: --fsdp: backward_prefetch=BACKWARD_LATER" --model 124M --fsdp "backward_prefetch=BACKWARD_LATER"
bad "HSDP without nodes" "^error: --fsdp: sharding_strategy=HYBRID_SHARD .*--ranks-per-node" --model 124M --fsdp "sharding_strategy=HYBRID_SHARD"
bad "no model" "^error: --model: missing" $EX/ds_zero3.json
bad "a model that is none" "^error: --model: '7B' is neither" --model 7B $EX/ds_zero3.json
bad "neither input" "^error: give one of" --model 124M
echo "test_translate: ok"
