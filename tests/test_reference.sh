#!/usr/bin/env bash
# Tests of the PyTorch reference (tests/reference/gpt2_reference.py) and the C dump reader (dump.h), against
# independent computations in tests/reference/ (NumPy forward, backward and AdamW; finite
# differences; a hand-checkable model), plus bad inputs and corrupted dumps. About 20 s on 2 cores.
set -u
cd "$(dirname "$0")/.." || exit 1
# a Python with torch and numpy: $PYTHON, else python3 (the GPU machine), else /usr/bin/python3 (Debian)
PY=${PYTHON:-}
if [ -z "$PY" ]; then
    for candidate in python3 /usr/bin/python3; do
        if $candidate -c 'import torch, numpy' > /dev/null 2>&1; then PY=$candidate; break; fi
    done
fi
if [ -z "$PY" ]; then echo "FAIL  no python3 with torch and numpy (set PYTHON=...)"; exit 1; fi
REF=tests/reference/gpt2_reference.py
CHK=tests/reference/checks.py
WORK=$(mktemp -d /tmp/test_reference.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
failed=0
fail() { echo "FAIL  $*"; failed=1; }
# runs a check command, failing the test when it fails; the command prints its own ok/FAIL lines
run() { "$@" || fail "$*"; }
# the small model most checks use: 2 layers, V=200 (padded to 256), heads of 8 channels
SMALL=(--L 2 --C 24 --NH 3 --V 200 --maxT 16 --B 2 --T 8)

echo "--- token files (random ids; the small one has 4 windows of B*T=16 so 6 steps wrap around)"
run $PY $CHK make-tokens "$WORK/small.bin" 200 67 1
run $PY $CHK make-tokens "$WORK/gpt.bin" 50257 200 2

# Every reference run is started in the background (torch's import dominates a small run) and
# awaited before its outputs are checked: ref_start NAME ARGS..., ref_wait NAME...
ref_start() { local name=$1; shift; ( $PY $REF "$@" > "$WORK/$name.log" 2>&1; echo $? > "$WORK/$name.rc" ) & }
ref_wait() {
    wait
    for name in "$@"; do
        [ "$(cat "$WORK/$name.rc" 2>/dev/null)" = 0 ] || { fail "reference run $name"; cat "$WORK/$name.log"; }
    done
}
T="--tokens $WORK/small.bin"
ref_start small "${SMALL[@]}" --steps 6 $T --model-out "$WORK/small.model" --dump-out "$WORK/small.dump"
ref_start order "${SMALL[@]}" --steps 2 --lr 0.05 --wd 0.5 --warmup 0 --clip 0.5 --seed 7 $T \
    --model-out "$WORK/order.model" --dump-out "$WORK/order.dump"
ref_start constant "${SMALL[@]}" --steps 3 --warmup 0 --final-frac 1 $T --model-out "$WORK/constant.model" --dump-out "$WORK/constant.dump"
ref_start longwarm "${SMALL[@]}" --steps 3 --warmup 5 --clip 0 $T --model-out "$WORK/longwarm.model" --dump-out "$WORK/longwarm.dump"
ref_start f32 "${SMALL[@]}" --steps 2 --dtype float32 $T --dump-out "$WORK/f32.dump"
ref_start gpt --L 3 --C 72 --NH 3 --V 50257 --maxT 64 --B 2 --T 16 --steps 3 --tokens "$WORK/gpt.bin" \
    --model-out "$WORK/gpt.model" --dump-out "$WORK/gpt.dump"
ref_wait small order constant longwarm f32 gpt
# runs that start from the small model's file
run $PY $CHK zero-lnf "$WORK/small.model" "$WORK/zero.model"
run $PY $CHK to-bf16 "$WORK/small.model" "$WORK/bf16.model"
ref_start zero --load "$WORK/zero.model" --B 2 --T 8 --steps 1 $T --dump-out "$WORK/zero.dump"
ref_start again --load "$WORK/small.model" --B 2 --T 8 --steps 6 $T --model-out "$WORK/again.model" --dump-out "$WORK/again.dump"
ref_start from_bf16 --load "$WORK/bf16.model" --B 2 --T 8 --steps 1 $T --model-out "$WORK/from_bf16.model"
ref_wait zero again from_bf16

echo "--- small model, float64: NumPy forward/backward, finite differences, training replay"
run $PY $CHK forward "$WORK/small.model" "$WORK/small.bin" "$WORK/small.dump"
run $PY $CHK finite-diff "$WORK/small.model" "$WORK/small.dump"
run $PY $CHK train "$WORK/small.model" "$WORK/small.dump"

echo "--- large lr*wd and tight clipping: the replay must see the update order and the clipping"
run $PY $CHK train "$WORK/order.model" "$WORK/order.dump"

echo "--- schedule corners: constant lr (W=0, F=1); warmup longer than the run, no clipping"
for name in constant longwarm; do
    run $PY $CHK train "$WORK/$name.model" "$WORK/$name.dump"
done

echo "--- GPT-2 vocabulary (V=50257, the tiny preset's shape, C=72 NH=3 L=3) at a short batch"
run $PY $CHK init "$WORK/gpt.model"
cmp -s "$WORK/small.model" "$WORK/order.model" && fail "seeds 1337 and 7 gave the same model"
run $PY $CHK forward "$WORK/gpt.model" "$WORK/gpt.bin" "$WORK/gpt.dump"
run $PY $CHK finite-diff "$WORK/gpt.model" "$WORK/gpt.dump" wte,lnfw
run $PY $CHK train "$WORK/gpt.model" "$WORK/gpt.dump"

echo "--- float32 compute agrees with NumPy float64 to 1e-6 (loss) and 1e-4 (activations)"
$PY $CHK forward "$WORK/small.model" "$WORK/small.bin" "$WORK/f32.dump" > "$WORK/f32.check"
grep -E "^ok    loss .* matches" "$WORK/f32.check" || fail "float32 loss is not within 1e-6 of NumPy float64"
grep -E "activations|differs" "$WORK/f32.check" | awk '{ for (i = 1; i <= NF; i++) if ($i == "error") e = $(i+1) + 0; if (e > m) m = e }
    END { printf("float32 worst activation relative error %.2e\n", m); exit !(m < 1e-4) }' \
    || fail "float32 activations are more than 1e-4 from float64"

echo "--- hand check: lnfw = lnfb = 0 makes every logit 0, so the loss is ln(V)"
run $PY $CHK zero-lnf-dump "$WORK/zero.model" "$WORK/zero.dump"

echo "--- model file round trip: --model-out, then --load, gives identical files and dumps; bf16 loads"
cmp -s "$WORK/small.model" "$WORK/again.model" && echo "ok    model file identical" || fail "model file differs after --load"
cmp -s "$WORK/small.dump" "$WORK/again.dump" && echo "ok    dump identical" || fail "dump differs after --load"
run $PY $CHK same-model "$WORK/bf16.model" "$WORK/from_bf16.model"

echo "--- the C reader (dump.h) agrees with an independent Python reading"
if gcc -O2 -std=gnu11 -Wall -Wextra -Werror -I. -o "$WORK/test_dump_reader" tests/unit/test_dump_reader.c -lm; then
    for dump in small.dump gpt.dump; do
        if "$WORK/test_dump_reader" "$WORK/$dump" > "$WORK/c_out"; then
            run $PY $CHK reader-summary "$WORK/$dump" "$WORK/c_out"
        else
            fail "test_dump_reader rejected $dump"
        fi
    done
    echo "--- the C reader rejects corrupted dumps with one clear line"
    mkdir -p "$WORK/bad"
    $PY $CHK corrupt "$WORK/small.dump" "$WORK/bad" > "$WORK/cases" || fail "making corrupted dumps"
    echo "missing_file cannot open" >> "$WORK/cases"
    while read -r name keyword; do
        "$WORK/test_dump_reader" "$WORK/bad/$name.dump" > /dev/null 2> "$WORK/err"
        rc=$?
        lines=$(wc -l < "$WORK/err")
        if [ $rc -eq 1 ] && [ "$lines" -eq 1 ] && grep -q "$keyword" "$WORK/err"; then
            echo "ok    $name: $(cat "$WORK/err")"
        else
            fail "$name: exit $rc, $lines stderr lines, expected '$keyword': $(cat "$WORK/err")"
        fi
    done < "$WORK/cases"
else
    fail "tests/unit/test_dump_reader.c does not compile"
fi

echo "--- bad inputs: non-zero exit, one line on stderr naming the problem, no output files"
run $PY $CHK make-tokens "$WORK/bad_token.bin" 200 67 3 20
head -c 2000 "$WORK/small.model" > "$WORK/truncated.model"
cp "$WORK/small.model" "$WORK/trailing.model"; printf 'x' >> "$WORK/trailing.model"
printf 'not a model file at all' > "$WORK/short.model"
head -c 4096 /dev/urandom > "$WORK/garbage.model"
$PY -c "import sys; d=bytearray(open(sys.argv[1],'rb').read()); d[4]=4; open(sys.argv[2],'wb').write(d)" \
    "$WORK/small.model" "$WORK/version4.model"
$PY -c "import sys; d=bytearray(open(sys.argv[1],'rb').read()); d[24:28]=(0).to_bytes(4,'little'); open(sys.argv[2],'wb').write(d)" \
    "$WORK/small.model" "$WORK/c_zero.model"
expect_error() {  # expect_error KEYWORD ARGS...: the script must fail with one line containing KEYWORD
    local keyword=$1; shift
    rm -rf "$WORK/out"; mkdir -p "$WORK/out"
    $PY $REF "$@" --model-out "$WORK/out/m.bin" --dump-out "$WORK/out/d.dump" > /dev/null 2> "$WORK/err"
    local rc=$? lines leftovers
    lines=$(wc -l < "$WORK/err")
    leftovers=$(ls -A "$WORK/out")
    if [ $rc -ne 0 ] && [ "$lines" -eq 1 ] && grep -q -- "$keyword" "$WORK/err" && [ -z "$leftovers" ]; then
        echo "ok    $(cat "$WORK/err")"
    else
        fail "args [$*]: exit $rc, $lines stderr lines, files [$leftovers], expected '$keyword': $(head -3 "$WORK/err")"
    fi
}
expect_error "cannot read token file" "${SMALL[@]}" --tokens "$WORK/no_such_file.bin"
expect_error "is >= V=200" "${SMALL[@]}" --tokens "$WORK/bad_token.bin"
expect_error "exceeds the model's maxT" --L 2 --C 24 --NH 3 --V 200 --maxT 16 --B 2 --T 17 --tokens "$WORK/small.bin"
expect_error "not divisible by NH" --L 2 --C 25 --NH 3 --V 200 --maxT 16 --B 2 --T 8 --tokens "$WORK/small.bin"
expect_error "need at least B\*T+1" --L 2 --C 24 --NH 3 --V 200 --maxT 16 --B 8 --T 16 --tokens "$WORK/small.bin"
expect_error "not a llm.c token file" "${SMALL[@]}" --tokens "$WORK/small.model"
expect_error "bad magic" --load "$WORK/garbage.model" --B 2 --T 8 --tokens "$WORK/small.bin"
expect_error "too short for a llm.c model file header" --load "$WORK/short.model" --B 2 --T 8 --tokens "$WORK/small.bin"
expect_error "needs exactly" --load "$WORK/truncated.model" --B 2 --T 8 --tokens "$WORK/small.bin"
expect_error "needs exactly" --load "$WORK/trailing.model" --B 2 --T 8 --tokens "$WORK/small.bin"
expect_error "unsupported model version 4" --load "$WORK/version4.model" --B 2 --T 8 --tokens "$WORK/small.bin"
expect_error "C must be >= 1" --load "$WORK/c_zero.model" --B 2 --T 8 --tokens "$WORK/small.bin"
expect_error "cannot read model file" --load "$WORK/no_such.model" --B 2 --T 8 --tokens "$WORK/small.bin"
expect_error "conflicts with" --load "$WORK/small.model" --L 3 --B 2 --T 8 --tokens "$WORK/small.bin"
expect_error "invalid int value" "${SMALL[@]}" --B two --tokens "$WORK/small.bin"
expect_error "unrecognized arguments" "${SMALL[@]}" --tokens "$WORK/small.bin" --bogus 1
expect_error "--L is required" --B 2 --T 8 --tokens "$WORK/small.bin"
expect_error "--steps must be >= 1" "${SMALL[@]}" --steps 0 --tokens "$WORK/small.bin"
expect_error "--lr must be a finite number" "${SMALL[@]}" --lr nan --tokens "$WORK/small.bin"

[ $failed -eq 0 ] && echo "test_reference: all checks passed"
exit $failed
