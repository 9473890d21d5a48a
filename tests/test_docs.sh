#!/usr/bin/env bash
# The documents against the program: every figure in a marked block of README.md and docs/*.md
# (<!-- figure: CMD --> ... <!-- end -->, scripts/doc_figures.py) is rerun and must equal its
# command's output; a figure changed by hand is caught (checked on a copy with one digit changed);
# the README is a front door (under 300 lines); every script a document runs as scripts/NAME has
# its run bit; every image a document shows exists; no document sends the reader to files they
# do not have.
. "$(dirname "$0")/lib.sh"
make -s train_gpt2_zero3 >/dev/null || fail "build"
[ -f data/tinyshakespeare/tiny_shakespeare_train.bin ] || make -s data >/dev/null || fail "make data"

# a figure changed by hand fails, naming the file, the line and the command
copy=docs/.test_docs_tamper.md
trap 'rm -f "$copy"; rm -rf "$work"' EXIT
python3 - "$copy" <<'PY' || fail "could not make the tampered copy"
import re, sys
text = open("docs/primer.md", encoding="utf-8").read()
m = re.search(r"^<!-- figure: \./train_gpt2_zero3 -plan 64 -e 7.5B.*?^<!-- end -->$", text, re.M | re.S)
block = m.group(0).replace("1.875", "1.876", 1)
open(sys.argv[1], "w", encoding="utf-8").write("# tampered\n\n" + block + "\n")
PY
if out=$($PY scripts/doc_figures.py --check "$copy" 2>&1); then fail "a figure changed by hand passed the check:
$out"; fi
echo "$out" | grep -q "^error: $copy:3: the figure no longer matches the output of: ./train_gpt2_zero3 -plan 64" \
  || fail "the tampered figure's error line is not the expected one:
$out"
echo "a figure changed by hand is caught: $(echo "$out" | grep '^error:')"
rm -f "$copy"

# every figure, rerun
$PY scripts/doc_figures.py --check || fail "a figure in the documents differs from the program's output (scripts/doc_figures.py --write rewrites them; check the diff)"

lines=$(wc -l < README.md)
[ "$lines" -lt 300 ] || fail "README.md has $lines lines (the front door stays under 300)"
echo "README.md: $lines lines"

bad=0
for s in $(grep -ohE '(^|[ `(])scripts/[a-z_0-9]+\.(sh|py)' README.md docs/*.md | sed -E 's/^[ `(]//' | sort -u); do
  [ -f "$s" ] || { echo "a document names $s, which does not exist"; bad=1; continue; }
  [ -x "$s" ] || { echo "$s lacks its run bit (chmod +x)"; bad=1; }
done
for f in README.md docs/*.md; do
  for img in $(grep -oE '!\[[^]]*\]\([^)]+\.png\)' "$f" | sed -E 's/.*\(([^)]+)\)/\1/'); do
    [ -f "$(dirname "$f")/$img" ] || { echo "$f shows $img, which does not exist"; bad=1; }
  done
done
if grep -nE '\.\./shared|shared/notes|the notes' README.md docs/*.md; then
  echo "the documents above cite notes the reader does not have"; bad=1
fi
[ $bad -eq 0 ] || fail "documents name missing files or scripts without their run bit"
echo "scripts named by the documents exist and run; images exist; no notes cited"
