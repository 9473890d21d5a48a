#!/usr/bin/env bash
# data/tinyshakespeare.py on bad inputs: every case must exit non-zero with exactly one line on
# stderr naming what is wrong, and leave no file (not even a temporary) in the output folder.
# Also: a good run after a failed one works, and a failed run keeps earlier good outputs intact.
# The raw text and vocabulary: SHARED_DATA, else ZERO3_DATA_CACHE (a folder holding tinyshakespeare/input.txt
# and gpt2/{encoder.json,vocab.bpe}), else the copies `make data` keeps in data/tinyshakespeare/.
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
SHARED=${SHARED_DATA:-${ZERO3_DATA_CACHE:-}}
if [ -n "$SHARED" ]; then TEXT=$SHARED/tinyshakespeare/input.txt; VOCAB=$SHARED/gpt2
else TEXT=data/tinyshakespeare/tiny_shakespeare.txt; VOCAB=data/tinyshakespeare; fi
[ -f "$TEXT" ] && [ -d "$VOCAB" ] || fail "missing $TEXT or $VOCAB (make data, or set ZERO3_DATA_CACHE)"

# expect_error WHAT PATTERN OUTDIR ARGS...: run the script with --out OUTDIR and ARGS; it must exit
# non-zero, print one stderr line matching PATTERN (grep -E), and leave OUTDIR empty or absent.
n_cases=0
SCRIPT=($PY data/tinyshakespeare.py)
expect_error() {
  local what=$1 pattern=$2 outdir=$3; shift 3
  "${SCRIPT[@]}" --out "$outdir" "$@" >"$work/stdout" 2>"$work/stderr"
  local rc=$?
  [ $rc -ne 0 ] || fail "$what: exit 0, want an error"
  [ "$(wc -l <"$work/stderr")" -eq 1 ] || { cat "$work/stderr"; fail "$what: want exactly one line on stderr"; }
  grep -qE -- "$pattern" "$work/stderr" || { cat "$work/stderr"; fail "$what: message does not match /$pattern/"; }
  # a download that completed and passed its hash check before the failure may stay, as a cache
  if [ -n "${CACHED_OK:-}" ]; then
    cmp -s "$outdir/$CACHED_OK" "$CACHED_SRC" || fail "$what: the cached $CACHED_OK is not the source"
    rm "$outdir/$CACHED_OK"
  fi
  if [ -d "$outdir" ] && [ -n "$(ls -A "$outdir")" ]; then
    ls -la "$outdir"; fail "$what: left files in $outdir"
  fi
  n_cases=$((n_cases + 1))
  echo "ok   $what (exit $rc): $(cat "$work/stderr")"
}

# ---------------------------------------------------------------- bad text
printf 'only a few words\n' >"$work/short.txt"
: >"$work/empty.txt"
head -c 20000 "$TEXT" >"$work/truncated.txt"
printf 'caf\xc3' >"$work/cut_utf8.txt"            # the file ends inside a two-byte character
printf 'x\xff\xfey\n' >"$work/binary.txt"
expect_error "missing text file"        "--input .*/nope.txt: cannot read"  "$work/o1" --input "$work/nope.txt" --vocab "$VOCAB"
expect_error "text is a folder"         "--input .*: cannot read"            "$work/o2" --input "$work" --vocab "$VOCAB"
expect_error "empty text file"          "empty.txt: the file is empty"       "$work/o3" --input "$work/empty.txt" --vocab "$VOCAB"
expect_error "truncated text (20 kB)"   "truncated.txt: gives only .* tokens" "$work/o4" --input "$work/truncated.txt" --vocab "$VOCAB"
expect_error "tiny text"                "short.txt: gives only 6 tokens"     "$work/o5" --input "$work/short.txt" --vocab "$VOCAB"
expect_error "text cut inside a UTF-8 character" "cut_utf8.txt: not valid UTF-8 at byte 3" "$work/o6" --input "$work/cut_utf8.txt" --vocab "$VOCAB"
expect_error "binary text"              "binary.txt: not valid UTF-8 at byte 1" "$work/o7" --input "$work/binary.txt" --vocab "$VOCAB"

# ---------------------------------------------------------------- bad vocabulary
mkdir -p "$work/v_trunc" "$work/v_edit" "$work/v_missing" "$work/v_swapped"
cp "$VOCAB/encoder.json" "$work/v_trunc/"; head -c -100 "$VOCAB/vocab.bpe" >"$work/v_trunc/vocab.bpe"
cp "$VOCAB/vocab.bpe" "$work/v_edit/";     sed 's/"the"/"thE"/' "$VOCAB/encoder.json" >"$work/v_edit/encoder.json"
cp "$VOCAB/encoder.json" "$work/v_missing/"
cp "$VOCAB/encoder.json" "$work/v_swapped/vocab.bpe"; cp "$VOCAB/vocab.bpe" "$work/v_swapped/encoder.json"
cmp -s "$VOCAB/encoder.json" "$work/v_edit/encoder.json" && fail "test setup: the sed edit changed nothing"
expect_error "truncated vocab.bpe"      "v_trunc/vocab.bpe: sha256 .* not GPT-2's vocab.bpe" "$work/o8"  --input "$TEXT" --vocab "$work/v_trunc"
expect_error "edited encoder.json"      "v_edit/encoder.json: sha256 .* not GPT-2's encoder.json" "$work/o9" --input "$TEXT" --vocab "$work/v_edit"
expect_error "vocab.bpe missing"        "v_missing/vocab.bpe: missing"        "$work/o10" --input "$TEXT" --vocab "$work/v_missing"
expect_error "vocab files swapped"      "v_swapped/encoder.json: sha256"      "$work/o11" --input "$TEXT" --vocab "$work/v_swapped"
expect_error "vocab folder missing"     "nodir/encoder.json: missing"          "$work/o12" --input "$TEXT" --vocab "$work/nodir"

# ---------------------------------------------------------------- output folder that cannot be written
# (tests may run as root, which ignores permissions: a regular file in the path is always unwritable)
: >"$work/a_file"
expect_error "--out below a regular file" "--out .*a_file/sub: cannot write" "$work/a_file/sub" --input "$TEXT" --vocab "$VOCAB"
expect_error "--out is a regular file"    "--out .*a_file: exists and is not a folder" "$work/a_file"     --input "$TEXT" --vocab "$VOCAB"

# ---------------------------------------------------------------- downloads (offline: file:// URLs)
# no local copies to find: the cache folders point at an empty place
export ZERO3_DATA_CACHE=$work/no_cache XDG_CACHE_HOME=$work/no_cache
# run the script with its download URLs pointed at local files: TEXT_URL and VOCAB_URL (a folder)
with_urls() {
  $PY - "$@" <<'EOF'
import os, sys
sys.path.insert(0, "data")
import tinyshakespeare as ts
ts.TEXT_URL = os.environ["TEXT_URL"]
ts.VOCAB_URLS = {name: os.environ["VOCAB_URL"] + "/" + name for name in ts.VOCAB_URLS}
sys.argv = ["tinyshakespeare.py"] + sys.argv[1:]
ts.main()
EOF
}
SCRIPT=(with_urls)
export VOCAB_URL="file://$(realpath "$VOCAB")"
TEXT_URL="file://$work/nope.txt" expect_error "download fails" "could not download file://.*nope.txt" "$work/d1"
TEXT_URL="file://$work/truncated.txt" expect_error "download is truncated" "download of .*truncated.txt has sha256 .*, want 86c4e6aa" "$work/d2"
VOCAB_URL="file://$work/v_edit" TEXT_URL="file://$(realpath "$TEXT")" CACHED_OK=tiny_shakespeare.txt CACHED_SRC=$TEXT \
  expect_error "downloaded encoder.json is wrong" "download of .*v_edit/encoder.json has sha256" "$work/d3"
SCRIPT=($PY data/tinyshakespeare.py)

dl=$work/dl
TEXT_URL="file://$(realpath "$TEXT")" with_urls --out "$dl" --encoder own >"$work/stdout" 2>"$work/stderr" \
  || { cat "$work/stderr"; fail "download run failed"; }
[ "$(grep -c '^downloading' "$work/stdout")" -eq 3 ] || { cat "$work/stdout"; fail "want 3 downloads"; }
cmp -s "$dl/tiny_shakespeare.txt" "$TEXT" || fail "downloaded text differs from the source"
TEXT_URL="file://$work/nope.txt" VOCAB_URL="file://$work/nodir" with_urls --out "$dl" >"$work/stdout" 2>"$work/stderr" \
  || { cat "$work/stderr"; fail "a second run should use the cached downloads"; }
grep -q '^downloading' "$work/stdout" && fail "a second run downloaded again"
printf 'x' >>"$dl/tiny_shakespeare.txt"
"${SCRIPT[@]}" --out "$dl" >/dev/null 2>"$work/stderr" && fail "a corrupt cached text was accepted"
[ "$(wc -l <"$work/stderr")" -eq 1 ] && grep -q "tiny_shakespeare.txt: does not match the canonical" "$work/stderr" \
  || { cat "$work/stderr"; fail "corrupt cached text: want one line naming it"; }
echo "ok   downloads: 3 fetched and hash-checked, reused from the cache, a corrupt cache is refused"

# ---------------------------------------------------------------- a failed run keeps earlier outputs whole
good=$work/good
$PY data/tinyshakespeare.py --out "$good" --input "$TEXT" --vocab "$VOCAB" --encoder own >/dev/null 2>"$work/stderr" \
  || { cat "$work/stderr"; fail "good run failed"; }
(cd "$good" && sha256sum *.bin) >"$work/before"
$PY data/tinyshakespeare.py --out "$good" --input "$work/truncated.txt" --vocab "$VOCAB" >/dev/null 2>&1 \
  && fail "truncated text into an existing folder: exit 0"
(cd "$good" && sha256sum *.bin) >"$work/after"
cmp -s "$work/before" "$work/after" || fail "a failed run changed the earlier outputs"
[ "$(ls -A "$good" | wc -l)" -eq 3 ] || { ls -la "$good"; fail "a failed run left extra files"; }
echo "ok   a failed run leaves the earlier outputs untouched and adds no file"
for f in tiny_shakespeare_val.bin tiny_shakespeare_train.bin gpt2_tokenizer.bin; do
  cmp -s "$dl/$f" "$good/$f" || fail "$f from downloaded files differs from the one from --input/--vocab"
done
echo "ok   downloaded and local inputs give identical outputs"
echo "PASS test_data_errors ($n_cases bad inputs)"
