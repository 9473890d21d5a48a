#!/usr/bin/env bash
# Bad inputs to the CPU trainer: broken model files, token files, flags, checkpoints and output
# directories. Each case runs on 1 rank and on 2 ranks (mpirun) and must: exit non-zero, finish
# within 60 s (no rank left waiting on another), and print exactly one line starting with "error"
# that matches what is wrong (on 1 rank that line is all of stderr). A failed resume leaves the
# output directory as it was.
# ZERO3_TRAINER=path tests another build of the trainer (default: make train_gpt2_zero3).
. "$(dirname "$0")/lib.sh"
[ -n "${ZERO3_TRAINER:-}" ] || make -s train_gpt2_zero3 >/dev/null || fail "build"
VAL=data/tinyshakespeare/tiny_shakespeare_val.bin
[ -f "$VAL" ] || fail "missing $VAL (make data)"
SMALL=(-e d2c48h2t32 -b 2 -t 16 -v 0)

# check_case WHAT PATTERN ARGS...: the trainer with ARGS on 1 and on 2 ranks (output in $work/case_*).
check_case() {
  local what=$1 pattern=$2; shift 2
  local np rc t0 secs out err
  for np in 1 2; do
    out=$work/case_$$_${BASHPID}_$np.out; err=$work/case_$$_${BASHPID}_$np.err
    t0=$(date +%s.%N)
    if [ $np -eq 1 ]; then timeout 60 "$BIN" "$@" >"$out" 2>"$err"
    else timeout 60 mpirun -np 2 "$BIN" "$@" >"$out" 2>"$err"; fi
    rc=$?
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
    check_failed "$what (np $np)" $rc "$out" "$err" "$pattern" 60
    if [ $np -eq 1 ] && [ "$(wc -l <"$err")" -ne 1 ]; then cat "$err"; fail "$what: stderr has more than the error line"; fi
    printf 'ok   %-34s np=%d exit %d %5.1fs  %s\n' "$what" $np $rc "$secs" "$(grep '^error' "$err")"
  done
}

# ---------------------------------------------------------------- inputs made from good ones
# a good model file and a good checkpoint (one step on one rank, exported at the end)
"$BIN" "${SMALL[@]}" -x 2 -n 1 -o "$work/good" >"$work/good.log" 2>&1 || { cat "$work/good.log"; fail "the good run failed"; }
[ -f "$work/good/model.bin" ] && [ -f "$work/good/latest" ] || fail "the good run wrote no model.bin / latest"
$PY - "$work" "$VAL" <<'EOF'
import os, struct, sys
work, val = sys.argv[1], sys.argv[2]
model = open(os.path.join(work, "good/model.bin"), "rb").read()
def put(name, data):
    open(os.path.join(work, name), "wb").write(data)
def with_int(data, index, value):
    return data[:4 * index] + struct.pack("<i", value) + data[4 * index + 4:]
put("bad_magic.bin", with_int(model, 0, 12345))
put("bad_version.bin", with_int(model, 1, 4))
put("absurd_layers.bin", with_int(model, 4, 100000))
put("absurd_channels.bin", with_int(model, 6, -48))
put("truncated_model.bin", model[:len(model) - 100])
put("header_only.bin", model[:1024])
tokens = open(val, "rb").read()
put("bad_magic_tokens.bin", with_int(tokens, 0, 12345))
put("short_tokens.bin", tokens[:1024 + 200])            # the header still says 32768 tokens
ids = list(range(1000)); ids[500] = 60000                # one id past GPT-2's vocabulary
put("big_id_tokens.bin", struct.pack("<3i", 20240520, 1, len(ids)) + b"\0" * (1024 - 12) + struct.pack("<%dH" % len(ids), *ids))
put("tiny_tokens.bin", struct.pack("<3i", 20240520, 1, 10) + b"\0" * (1024 - 12) + struct.pack("<10H", *range(10)))
put("a_file", b"not a directory\n")
EOF
# checkpoint copies, each broken one way
ckpt=$(cat "$work/good/latest")
corrupt_copy() { rm -rf "$work/$1"; cp -r "$work/good" "$work/$1"; }
corrupt_copy flipped
$PY - "$work/flipped/$ckpt/shard_00000.bin" <<'EOF'
import sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
data[len(data) // 2] ^= 0x40          # one bit in the middle of the weights
open(path, "wb").write(data)
EOF
corrupt_copy truncated_meta; truncate -s -8 "$work/truncated_meta/$ckpt/meta.bin"
corrupt_copy truncated_shard; truncate -s -4 "$work/truncated_shard/$ckpt/shard_00000.bin"
corrupt_copy missing_shard; rm "$work/missing_shard/$ckpt/shard_00000.bin"
corrupt_copy bad_latest; echo "../../etc" >"$work/bad_latest/latest"
corrupt_copy dangling_latest; echo "ckpt_00000099_g9" >"$work/dangling_latest/latest"
corrupt_copy wrong_meta; cp "$work/good/$ckpt/shard_00000.bin" "$work/wrong_meta/$ckpt/meta.bin"
corrupt_copy good2   # a second good folder: cases run at once, and a folder takes one run at a time
mkdir -p "$work/empty_out" "$work/a_dir"
mkfifo "$work/val_fifo"   # a reader that opened it would wait for a writer forever

# ---------------------------------------------------------------- model files (-e)
expect_error "model: wrong magic"          "bad_magic.bin: bad magic 12345"      -e "$work/bad_magic.bin" -b 2 -t 16 -x 1
expect_error "model: unknown version"      "unsupported version 4"               -e "$work/bad_version.bin" -b 2 -t 16 -x 1
expect_error "model: absurd layer count"   "num_layers out of range"             -e "$work/absurd_layers.bin" -b 2 -t 16 -x 1
expect_error "model: negative channels"    "channels out of range"               -e "$work/absurd_channels.bin" -b 2 -t 16 -x 1
expect_error "model: truncated"            "truncated_model.bin: size .* implies" -e "$work/truncated_model.bin" -b 2 -t 16 -x 1
expect_error "model: header only"          "header_only.bin: size"               -e "$work/header_only.bin" -b 2 -t 16 -x 1
expect_error "model: missing file"         "cannot open model file"              -e "$work/nope.bin" -b 2 -t 16 -x 1
expect_error "model: bad descriptor"       "cannot open model file d2c48h2"      -e d2c48h2 -b 2 -t 16 -x 1
# ---------------------------------------------------------------- token files (-i / -j)
expect_error "tokens: wrong magic"         "bad_magic_tokens.bin: bad magic 12345" "${SMALL[@]}" -x 1 -i "$work/bad_magic_tokens.bin"
expect_error "tokens: shorter than header" "flag -i: .*short_tokens.bin.*truncated" "${SMALL[@]}" -x 1 -i "$work/short_tokens.bin"
expect_error "tokens: id >= V"             "flag -j: .*token 500 is id 60000"    "${SMALL[@]}" -v 1 -x 1 -j "$work/big_id_tokens.bin"
expect_error "tokens: fewer than a batch"  "flag -b: .* -t 16 = 32 tokens needs 33 .*tiny_tokens.bin \(-i\) holds 10" "${SMALL[@]}" -x 1 -i "$work/tiny_tokens.bin"
expect_error "tokens: missing file"        "flag -i: .*cannot open"              "${SMALL[@]}" -x 1 -i "$work/nope.bin"
# the validation split (-j), read only when the run validates (-v > 0)
expect_error "val: under one sequence"     "flag -t: -t 16 needs 17 tokens for one validation sequence.*tiny_tokens.bin \(-j\) holds 10" "${SMALL[@]}" -v 1 -x 1 -j "$work/tiny_tokens.bin"
expect_error "val: missing file"           "flag -j: .*nope.bin: cannot open token file .*; validation \(every -v 1 steps\) reads it, -v 0 turns it off" "${SMALL[@]}" -v 1 -x 1 -j "$work/nope.bin"
expect_error "val: a directory"            "flag -j: .*a_dir: cannot open token file \(a folder, not a regular file\)" "${SMALL[@]}" -v 1 -x 1 -j "$work/a_dir"
expect_error "val: a FIFO"                 "flag -j: .*val_fifo: cannot open token file \(a FIFO, not a regular file\)" "${SMALL[@]}" -v 1 -x 1 -j "$work/val_fifo"
# ---------------------------------------------------------------- flags
expect_error "flag: -t above maxT"         "flag -t: .*64 is larger than the model's maxT 32" -e d2c48h2t32 -b 2 -t 64 -x 1
expect_error "flag: unknown"               "unknown flag -Q"                     "${SMALL[@]}" -Q 1
expect_error "flag: not a number"          "flag -b: expected an integer"        "${SMALL[@]}" -b four
expect_error "flag: out of range"          "flag -z: 7 is out of range"          "${SMALL[@]}" -z 7
expect_error "flag: missing value"         "flag -x: missing its value"          "${SMALL[@]}" -x
expect_error "flag: impossible -d"         "flag -d: 100 tokens per step is not a multiple" "${SMALL[@]}" -x 1 -d 100
expect_error "flag: -n without -o"         "flag -n: checkpoints need an output directory" "${SMALL[@]}" -x 1 -n 1
# ---------------------------------------------------------------- output directory (-o)
expect_error "-o: parent is a file"        "flag -o: cannot create directory .*a_file/out" "${SMALL[@]}" -x 1 -o "$work/a_file/out"
expect_error "-o: is a file"               "flag -o: cannot write into .*a_file"  "${SMALL[@]}" -x 1 -o "$work/a_file"
# ---------------------------------------------------------------- checkpoints (-y 1)
expect_error "resume: no checkpoint"       "flag -y: no checkpoint to resume from" "${SMALL[@]}" -x 3 -o "$work/empty_out" -y 1
expect_error "resume: flipped bit"         "shard_00000.bin: .* checksum mismatch" "${SMALL[@]}" -x 3 -o "$work/flipped" -y 1
expect_error "resume: truncated meta"      "meta.bin: file size does not match"  "${SMALL[@]}" -x 3 -o "$work/truncated_meta" -y 1
expect_error "resume: truncated shard"     "shard_00000.bin: file size does not match" "${SMALL[@]}" -x 3 -o "$work/truncated_shard" -y 1
expect_error "resume: missing shard"       "shard_00000.bin: cannot open"        "${SMALL[@]}" -x 3 -o "$work/missing_shard" -y 1
expect_error "resume: latest is a path"    "latest: does not name a checkpoint"  "${SMALL[@]}" -x 3 -o "$work/bad_latest" -y 1
expect_error "resume: latest dangles"      "ckpt_00000099_g9/meta.bin: cannot open" "${SMALL[@]}" -x 3 -o "$work/dangling_latest" -y 1
expect_error "resume: meta is a shard"     "meta.bin: bad magic"                 "${SMALL[@]}" -x 3 -o "$work/wrong_meta" -y 1
expect_error "resume: other model shape"   "holds a model L=2 C=48 .* resume with the same model shape" -e d3c48h2t32 -b 2 -t 16 -v 0 -x 3 -o "$work/good" -y 1
expect_error "resume: past -x"             "flag -x: the checkpoint .* is at step 2, past the 1 steps" "${SMALL[@]}" -x 1 -o "$work/good2" -y 1
finish_cases
# a failed resume leaves the directory as it was: the log and latest untouched
cmp -s "$work/good/log.csv" "$work/flipped/log.csv" || fail "a failed resume changed log.csv"
[ "$(cat "$work/flipped/latest")" = "$ckpt" ] || fail "a failed resume changed latest"
[ -z "$(find "$work/empty_out" -mindepth 1)" ] || fail "a failed resume left files in an empty -o"
echo "$n_cases cases, each on 1 and 2 ranks: all rejected with one clear line"
