#!/usr/bin/env bash
# Every batch the model allows trains on tinyshakespeare's splits (CPU trainer):
#   1. -b 32 -t 1024 on a d2 model with maxT 1024 trains one step (B*T+1 = 32,769 tokens: one more
#      than the validation split holds), with -v 0 and the validation file never opened (-j names a
#      file that does not exist);
#   2. the same batch with -v 1 validates on the 32,768-token split: one batch of 32 rows spread over
#      it, said in one report line;
#   3. that spread validation is exact (on a model whose rows' losses differ): with -l 0 (the step leaves the model as it was) the val loss
#      of a short split read as B=4 spread rows equals the mean of four runs at B=1, each validating
#      on a file holding just one of those rows (row b starts at token b*(ntok-1-T)/(B-1), worked
#      out here, not by the trainer), on 1 rank and on 2.
# The model has a vocabulary of 1024 (the splits' ids taken modulo 1024, tests/reference/remap_tokens.py): GPT-2's
# 50,257 would need 20 GiB of logits and probabilities at B*T = 32,768 on the CPU.
# The bad inputs (-b/-t no split serves, a -j folder, FIFO or missing file) are in test_bad_inputs.sh.
. "$(dirname "$0")/lib.sh"
make -s train_gpt2_zero3 >/dev/null || fail "build"
TRAIN=data/tinyshakespeare/tiny_shakespeare_train.bin
VAL=data/tinyshakespeare/tiny_shakespeare_val.bin
[ -f "$TRAIN" ] && [ -f "$VAL" ] || fail "missing $TRAIN or $VAL (make data)"
$PY tests/reference/remap_tokens.py "$TRAIN" "$work/train.bin" 1024 && $PY tests/reference/remap_tokens.py "$VAL" "$work/val.bin" 1024 ||
  fail "remap_tokens.py"

# d2c64h2t1024 with V = Vp = 1024 as llm.c fp32 model files (version 3): model.bin with GPT-2's init,
# N(0, 0.02) matrices and embeddings, unit layernorm weights, zero biases; sharp.bin the same with
# N(0, 1) token embeddings, whose confident predictions make every row's loss its own
$PY - "$work" <<'EOF' || fail "writing the model files"
import sys, numpy as np
L, C, NH, V, maxT = 2, 64, 2, 1024, 1024
shapes = [("wte", V * C), ("wpe", maxT * C), ("ln1w", L * C), ("ln1b", L * C), ("qkvw", L * 3 * C * C),
          ("qkvb", L * 3 * C), ("attprojw", L * C * C), ("attprojb", L * C), ("ln2w", L * C), ("ln2b", L * C),
          ("fcw", L * 4 * C * C), ("fcb", L * 4 * C), ("fcprojw", L * C * 4 * C), ("fcprojb", L * C),
          ("lnfw", C), ("lnfb", C)]
header = np.zeros(256, np.int32)
header[:8] = [20240326, 3, maxT, V, L, NH, C, V]
for file, wte_std in (("model.bin", 0.02), ("sharp.bin", 1.0)):
    rng = np.random.default_rng(1337)
    with open(sys.argv[1] + "/" + file, "wb") as f:
        f.write(header.tobytes())
        for name, n in shapes:
            w = np.ones(n) if name.endswith("w") and name.startswith("ln") else \
                np.zeros(n) if name.endswith("b") else rng.normal(0.0, wte_std if name == "wte" else 0.02, n)
            f.write(w.astype(np.float32).tobytes())
EOF
MODEL=(-e "$work/model.bin" -i "$work/train.bin")
SHARP=(-e "$work/sharp.bin" -i "$work/train.bin")

# step_field LOG NAME: the number after NAME in the last step line of LOG
step_field() { grep '^step ' "$1" | tail -1 | grep -o "| $2 [-0-9.e+]*" | awk '{print $3}'; }

# ---- 1. B=32, T=1024, -v 0: trains, the validation file never opened
t0=$(date +%s)
"$BIN" "${MODEL[@]}" -b 32 -t 1024 -v 0 -x 1 -j "$work/no_such_val.bin" >"$work/b32.log" 2>&1 ||
  { tail -5 "$work/b32.log"; fail "-b 32 -t 1024 -v 0 did not train"; }
loss=$(step_field "$work/b32.log" loss)
grep -q 'val off (-v 0' "$work/b32.log" || fail "the report does not say validation is off"
# a fresh model of N(0, 0.02) weights predicts nearly uniformly: loss ln 1024 = 6.931
awk -v l="$loss" 'BEGIN { exit !(l > 6.8 && l < 7.1) }' || fail "-b 32 -t 1024: first loss $loss, want about ln 1024 = 6.93"
echo "ok   -b 32 -t 1024 -v 0 (-j missing): one step, loss $loss (ln 1024 = 6.931), $(( $(date +%s) - t0 )) s"

# ---- 2. the same batch validating on the 32,768-token split (one token short of a batch)
t0=$(date +%s)
"$BIN" "${MODEL[@]}" -b 32 -t 1024 -v 1 -m 1 -x 1 -j "$work/val.bin" >"$work/b32_val.log" 2>&1 ||
  { tail -5 "$work/b32_val.log"; fail "-b 32 -t 1024 -v 1 on the 32,768-token split failed"; }
note=$(grep -c '^| val      32768 tokens, fewer than one batch (B\*T+1 = 32769): each validation batch is B=32 rows of T=1024' "$work/b32_val.log")
[ "$note" -eq 1 ] || { grep '^| ' "$work/b32_val.log" | head -12; fail "no single line saying how the short split is read"; }
val=$(step_field "$work/b32_val.log" val)
awk -v l="$val" 'BEGIN { exit !(l > 6.8 && l < 7.1) }' || fail "-b 32 -t 1024: val loss '$val', want about ln 1024"
echo "ok   -b 32 -t 1024 -v 1 on the 32,768-token split: val $val over 32 spread rows, $(( $(date +%s) - t0 )) s"

# ---- 3. the spread rows, exactly: a 200-token split at B=4, T=64 against each row alone at B=1
$PY - "$work/val.bin" "$work" <<'EOF' || fail "writing the short split and its rows"
import struct, sys
src, work = sys.argv[1], sys.argv[2]
data = open(src, "rb").read()
def write(path, ids):
    open(path, "wb").write(struct.pack("<3i", 20240520, 1, len(ids)) + b"\0" * (1024 - 12) + struct.pack("<%dH" % len(ids), *ids))
ids = struct.unpack_from("<200H", data, 1024)
write(work + "/short_val.bin", ids)
B, T, n = 4, 64, len(ids)
for b in range(B):
    start = b * (n - 1 - T) // (B - 1)        # 0, 45, 90, 135: overlapping rows, the last ends at token 199
    write("%s/row%d.bin" % (work, b), ids[start:start + T + 1])
EOF
# val_of NAME ARGS...: the val loss (log.csv, 9 digits) of one step at -l 0 with ARGS
val_of() {
  local name=$1; shift
  "$@" -t 64 -l 0 -v 1 -m 1 -x 1 -o "$work/$name" >"$work/$name.log" 2>&1 || { tail -5 "$work/$name.log"; fail "$name"; }
  awk -F, 'NR == 2 { print $3 }' "$work/$name/log.csv"
}
spread1=$(val_of spread_n1 "$BIN" "${SHARP[@]}" -b 4 -j "$work/short_val.bin")
spread2=$(val_of spread_n2 mpirun -np 2 "$BIN" "${SHARP[@]}" -b 4 -j "$work/short_val.bin")
rows=()
for b in 0 1 2 3; do rows+=("$(val_of "row$b" "$BIN" "${SHARP[@]}" -b 1 -j "$work/row$b.bin")"); done
mean=$(printf '%s\n' "${rows[@]}" | awk '{ s += $1 } END { printf "%.9g", s / NR }')
for v in "$spread1" "$spread2"; do
  awk -v a="$v" -v b="$mean" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-5 * b) }' ||
    fail "spread validation $v, want the rows' mean $mean (rows ${rows[*]})"
done
echo "ok   a 200-token split at B=4 T=64: val $spread1 (1 rank), $spread2 (2 ranks) = mean of its 4 rows alone at B=1: $mean"
