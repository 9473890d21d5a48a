#!/usr/bin/env bash
# GPT-2 tokenization of tinyshakespeare, checked against independent references:
#   1. data/tinyshakespeare.py (with the project's own encoder) gives llm.c's split, 32,768 + 305,260
#   2. js-tiktoken (npm, its own copy of GPT-2's ranks) agrees token for token with data/gpt2_bpe.py
#      on the whole text, with the val/train .bin files (rebuilt with llm.c's recipe), and with
#      every entry of gpt2_tokenizer.bin; also on a Unicode stress text (tinyshakespeare is ASCII),
#      with the pre-tokenizer on `regex` and on stdlib `re`; and it does catch one changed token
#   3. a C program decodes the .bin files through tokenizer.h + tokens.h back to input.txt exactly
#   4. tokenizer.h and tokens.h reject corrupt files with one line naming the file
# Needs /usr/bin/python3 with `regex` (python3-regex), node + npm (npm ci runs once, when node_modules is missing), gcc.
# The raw text and vocabulary: SHARED_DATA, else ZERO3_DATA_CACHE (a folder holding tinyshakespeare/input.txt
# and gpt2/{encoder.json,vocab.bpe}), else the copies `make data` keeps in data/tinyshakespeare/.
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
SHARED=${SHARED_DATA:-${ZERO3_DATA_CACHE:-}}
if [ -n "$SHARED" ]; then TEXT=$SHARED/tinyshakespeare/input.txt; VOCAB=$SHARED/gpt2
else TEXT=data/tinyshakespeare/tiny_shakespeare.txt; VOCAB=data/tinyshakespeare; fi
now() { date +%s.%N; }
[ -f "$TEXT" ] || fail "missing $TEXT (make data, or set ZERO3_DATA_CACHE to the folder holding tinyshakespeare/ and gpt2/)"

# ---------------------------------------------------------------- 1. the data files, own encoder
out=$work/data
t0=$(now)
$PY data/tinyshakespeare.py --input "$TEXT" --vocab "$VOCAB" --out "$out" --encoder own >"$work/gen.log" 2>&1 \
  || { cat "$work/gen.log"; fail "data/tinyshakespeare.py failed"; }
t1=$(now)
cat "$work/gen.log"
grep -q "writing 32,768 tokens" "$work/gen.log" && grep -q "writing 305,260 tokens" "$work/gen.log" \
  || fail "token counts are not llm.c's 32,768 val + 305,260 train"
# the sizes on disk say the same, independently of the script's own log
[ "$(stat -c %s "$out/tiny_shakespeare_val.bin")" -eq $((1024 + 2 * 32768)) ] || fail "val .bin size"
[ "$(stat -c %s "$out/tiny_shakespeare_train.bin")" -eq $((1024 + 2 * 305260)) ] || fail "train .bin size"
awk -v a="$t0" -v b="$t1" 'BEGIN { printf "data/tinyshakespeare.py: %.2f s end to end\n", b - a }'

# ---------------------------------------------------------------- 2. against js-tiktoken
command -v node >/dev/null && command -v npm >/dev/null || fail "node and npm are needed (scripts/install_deps.sh)"
if [ ! -d tests/tokenizer/node_modules/js-tiktoken ]; then
  (cd tests/tokenizer && npm ci --silent --no-audit --no-fund) \
    || fail "npm ci in tests/tokenizer failed (needs the npm registry once)"
fi
$PY data/gpt2_bpe.py --vocab "$VOCAB" "$TEXT" >"$work/ours.txt" || fail "data/gpt2_bpe.py failed"
node tests/tokenizer/compare.mjs --text "$TEXT" --ours "$work/ours.txt" --dir "$out" \
  || fail "our tokens differ from js-tiktoken's"

# tinyshakespeare is pure ASCII: a Unicode stress text checks multi-byte text and the
# pre-tokenizer's classes, with both of data/gpt2_bpe.py's pre-tokenizers (`regex`, stdlib `re`)
$PY tests/tokenizer/stress_text.py "$work/stress.txt" || fail "tests/tokenizer/stress_text.py failed"
for splitter in regex re; do
  GPT2_BPE_SPLITTER=$splitter $PY data/gpt2_bpe.py --vocab "$VOCAB" "$work/stress.txt" >"$work/stress_ids.txt" \
    || fail "data/gpt2_bpe.py ($splitter) failed on the stress text"
  echo -n "[stress text, pre-tokenizer on $splitter] "
  node tests/tokenizer/compare.mjs --text "$work/stress.txt" --ours "$work/stress_ids.txt" \
    || fail "our tokens ($splitter) differ from js-tiktoken's on the Unicode stress text"
done
# the whole pipeline on it: .bin files vs js-tiktoken, and the C round trip further down. (Here the
# literal "<|endoftext|>" is renamed: llm.c's recipe would read it as a document break, ours as text.)
sed 's/<|endoftext|>/<|eot|>/g' "$work/stress.txt" >"$work/stress_doc.txt"
$PY data/tinyshakespeare.py --input "$work/stress_doc.txt" --vocab "$VOCAB" --out "$work/stress_data" --encoder own \
  >/dev/null || fail "data/tinyshakespeare.py failed on the stress text"
$PY data/gpt2_bpe.py --vocab "$VOCAB" "$work/stress_doc.txt" >"$work/stress_ids.txt" || fail "gpt2_bpe.py on stress_doc"
node tests/tokenizer/compare.mjs --text "$work/stress_doc.txt" --ours "$work/stress_ids.txt" --dir "$work/stress_data" \
  >"$work/stress_cmp.log" 2>&1
rc=$?
sed 's/^/[stress text pipeline] /' "$work/stress_cmp.log"
[ $rc -eq 0 ] || fail "the stress text's .bin files differ from js-tiktoken's"
GPT2_BPE_SPLITTER=re $PY data/gpt2_bpe.py --vocab "$VOCAB" "$TEXT" >"$work/ours_re.txt" || fail "data/gpt2_bpe.py (re) failed"
cmp -s "$work/ours.txt" "$work/ours_re.txt" || fail "the stdlib-re pre-tokenizer gives other tokens on input.txt"
echo "ok   input.txt: the stdlib-re pre-tokenizer gives the same $(wc -l <"$work/ours.txt") tokens"

# negative control: one token changed in the middle of train.bin must be caught
mkdir -p "$work/bad"
cp "$out"/*.bin "$work/bad/"
printf '\x01\x00' | dd of="$work/bad/tiny_shakespeare_train.bin" bs=1 seek=$((1024 + 2 * 150000)) conv=notrunc status=none
if node tests/tokenizer/compare.mjs --text "$TEXT" --ours "$work/ours.txt" --dir "$work/bad" >"$work/neg.log" 2>&1; then
  cat "$work/neg.log"; fail "compare.mjs did not notice a changed token"
fi
grep -q "FAIL train .bin.*mismatch at token 150000" "$work/neg.log" || { cat "$work/neg.log"; fail "negative control: wrong report"; }
echo "ok   negative control: a changed train token is reported at its position"

# ---------------------------------------------------------------- 3. C round trip
dec=$work/test_tokenizer_decode
gcc -O2 -Wall -Wextra -Werror -std=gnu11 -o "$dec" tests/unit/test_tokenizer_decode.c || fail "gcc tests/unit/test_tokenizer_decode.c"
"$dec" "$out/gpt2_tokenizer.bin" "$out/tiny_shakespeare_val.bin" "$out/tiny_shakespeare_train.bin" >"$work/all.txt" \
  || fail "decoding val + train failed"
cmp "$work/all.txt" "$TEXT" || fail "decode(val) + decode(train) without EOT is not input.txt"
"$dec" "$out/gpt2_tokenizer.bin" "$out/tiny_shakespeare_val.bin" >"$work/val.txt" 2>/dev/null || fail "decoding val failed"
n=$(stat -c %s "$work/val.txt")
[ "$n" -gt 0 ] && cmp "$work/val.txt" <(head -c "$n" "$TEXT") || fail "decode(val) is not the start of input.txt"
echo "ok   C round trip: decode(val) + decode(train) == input.txt ($(stat -c %s "$TEXT") bytes; val is its first $n)"
sd=$work/stress_data
"$dec" "$sd/gpt2_tokenizer.bin" "$sd/tiny_shakespeare_val.bin" "$sd/tiny_shakespeare_train.bin" 2>/dev/null \
  | cmp - "$work/stress_doc.txt" || fail "C round trip of the Unicode stress text"
echo "ok   C round trip of the Unicode stress text ($(stat -c %s "$work/stress_doc.txt") bytes)"

# ---------------------------------------------------------------- 4. C readers reject corrupt files
# corrupt SRC DST PYTHON: runs PYTHON on b = bytearray(SRC) and writes b to DST
corrupt() {
  $PY - "$1" "$2" "$3" <<'EOF'
import struct, sys
src, dst, edit = sys.argv[1:]
b = bytearray(open(src, "rb").read())
exec(edit)
open(dst, "wb").write(b)
EOF
}
# expect_reject WHAT FILE ARGS...: the decoder must exit 1 with exactly one stderr line naming FILE
expect_reject() {
  local what=$1 file=$2; shift 2
  "$dec" "$@" >/dev/null 2>"$work/err"
  local rc=$?
  [ $rc -eq 1 ] || fail "$what: exit $rc, want 1"
  [ "$(wc -l <"$work/err")" -eq 1 ] || { cat "$work/err"; fail "$what: want exactly one line on stderr"; }
  grep -qF "$file" "$work/err" || { cat "$work/err"; fail "$what: message does not name $file"; }
  echo "ok   rejects $what: $(cat "$work/err")"
}
tk=$out/gpt2_tokenizer.bin
val=$out/tiny_shakespeare_val.bin
c=$work/corrupt.bin
expect_reject "missing tokenizer" "$work/none.bin" "$work/none.bin"
corrupt "$tk" "$c" 'b[:] = b[:100]';                               expect_reject "tokenizer shorter than header" "$c" "$c"
corrupt "$tk" "$c" 'b[0:4] = struct.pack("<I", 20240326)';        expect_reject "tokenizer bad magic" "$c" "$c"
corrupt "$tk" "$c" 'b[4:8] = struct.pack("<I", 1)';               expect_reject "tokenizer version 1" "$c" "$c"
corrupt "$tk" "$c" 'b[8:12] = struct.pack("<I", 0)';              expect_reject "tokenizer vocab size 0" "$c" "$c"
corrupt "$tk" "$c" 'b[8:12] = struct.pack("<I", 1 << 30)';        expect_reject "tokenizer huge vocab size" "$c" "$c"
corrupt "$tk" "$c" 'b[12:16] = struct.pack("<I", 50257)';         expect_reject "tokenizer EOT id out of range" "$c" "$c"
corrupt "$tk" "$c" 'b[:] = b[:-5]';                                expect_reject "tokenizer truncated" "$c" "$c"
corrupt "$tk" "$c" 'b += b"x"';                                   expect_reject "tokenizer trailing garbage" "$c" "$c"
corrupt "$tk" "$c" 'b[1024] = 0';                                 expect_reject "tokenizer zero-length token" "$c" "$c"
corrupt "$tk" "$c" 'b[1024] = 255';                               expect_reject "tokenizer token length past its record" "$c" "$c"
expect_reject "missing token file" "$work/none.bin" "$tk" "$work/none.bin"
expect_reject "token file is a folder" "$work" "$tk" "$work"
corrupt "$val" "$c" 'b[:] = b[:1000]';                             expect_reject "tokens shorter than header" "$c" "$tk" "$c"
corrupt "$val" "$c" 'b[0:4] = struct.pack("<i", 20240801)';        expect_reject "tokens bad magic (llm.c uint32 file)" "$c" "$tk" "$c"
corrupt "$val" "$c" 'b[4:8] = struct.pack("<i", 2)';               expect_reject "tokens version 2" "$c" "$tk" "$c"
corrupt "$val" "$c" 'b[8:12] = struct.pack("<i", 0)';              expect_reject "tokens ntok 0" "$c" "$tk" "$c"
corrupt "$val" "$c" 'b[:] = b[:-2]';                               expect_reject "tokens truncated" "$c" "$tk" "$c"
corrupt "$val" "$c" 'b += b"\0\0"';                               expect_reject "tokens padded" "$c" "$tk" "$c"
corrupt "$val" "$c" 'b[1024+2*7:1024+2*8] = struct.pack("<H", 50257)'; expect_reject "token id >= vocab size" "$c" "$tk" "$c"
grep -q "token 7 is id 50257" "$work/err" || fail "out-of-vocab message should give position 7 and id 50257"

# tokenizer.h and tokens.h are shared with the C++/CUDA trainer: they must compile as C++ too
g++ -x c++ -std=c++17 -Wall -Wextra -Werror -fsyntax-only tests/unit/test_tokenizer_decode.c || fail "headers do not compile as C++"
echo "ok   tokenizer.h and tokens.h compile as C (gnu11) and C++ (c++17) without warnings"
echo "PASS test_tokenizer"
