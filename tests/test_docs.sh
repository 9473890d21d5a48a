#!/usr/bin/env bash
# The documents against the program: every figure in a marked block of README.md and docs/*.md
# (<!-- figure: CMD --> ... <!-- end -->, scripts/doc_figures.py) is rerun and must equal its
# command's output; a figure changed by hand is caught (checked on a copy with one digit changed, and
# on a Markdown table's figure, which goes without the fence);
# a slow figure (<!-- figure slow: CMD -->) is rerun only under SLOW=1, but always held to its form and
# to the programs its command runs, and a change by hand is caught by --check --slow (on a copy with a
# cheap figure marked slow);
# the README is a front door (under 300 lines); every script a document runs as scripts/NAME has
# its run bit; every image a document shows exists; no document sends the reader to files they
# do not have; no tracked file describes how the project itself was developed (its words below).
. "$(dirname "$0")/lib.sh"

# The product speaks to its users, who own a GPU or rent one by the hour: no tracked file tells how
# the project was developed (a GPU lent or borrowed for it, the tool of that arrangement, its options
# and limits, the sessions and other work that shared the machine). One grep of the tracked files,
# each hit printed as file:line; first the pattern itself on phrases it must refuse and must pass.
DEV_WORDS='\blent\b|\bborrow(ed|ing)?\b|\blend(s|ing)? (a |the |this )?(GPU|device|machine)|device[ -]tools?\b|device time'
DEV_WORDS+='|\bsessions?\b|\bfiles_at\b|\bfiles_fetch\b|give_back|budget_left|can_start_another|GPU_LOG|warm machine|timeout_s [0-9]'
DEV_WORDS+='|--carry\b|\bcarry (list|limit)|\bcarried (files?|paths?|to)\b|print_carry|\bcarry_'
DEV_WORDS+="|\\b(the|a|this|each|earlier|longer|first|GPU) visits?\\b|visit's\\b"
for refused in "no GPU was lent" "a borrowed GPU" "the device tool's 64 MiB" "its --carry list" "in this session" \
               "the files_at folder" "call give_back" "the first GPU visit" "an earlier visit's answers" "timeout_s 570"; do
  grep -qiE "$DEV_WORDS" <<<"$refused" || fail "the development-words check does not refuse '$refused'"
done
for passed in "the link cannot carry more" "units are visited in reverse" "the verbs its files lend each other" \
               "collective_timeout_s" "a GPU you rent by the hour" "talent" "output_files_at_exit"; do
  grep -qiE "$DEV_WORDS" <<<"$passed" && fail "the development-words check refuses the plain '$passed'"
done
if git grep -n -I -i -E "$DEV_WORDS" -- . ':!tests/test_docs.sh'; then
  fail "the files above describe how the project was developed, not what it is (rewrite them for its users)"
fi
echo "no tracked file describes how the project was developed (lent GPUs, the tool, sessions, carry, visits)"
make -s train_gpt2_zero3 >/dev/null || fail "build"
[ -f data/tinyshakespeare/tiny_shakespeare_train.bin ] || make -s data >/dev/null || fail "make data"

# SLOW=1: the slow figures rerun too (docs/testing.md lists them and their cost)
case ${SLOW:-0} in 0) tier= ;; 1) tier=--slow ;; *) fail "SLOW=$SLOW: must be 0 or 1" ;; esac
copy=docs/.test_docs_tamper.md slow=docs/.test_docs_slow.md
trap 'rm -f "$copy" "$slow"; rm -rf "$work"' EXIT

# figure_copy DEST KIND OLD NEW [EXTRA]: a document holding primer.md's 7.5B figure, marked
# '<!-- figure KIND: ' ('' or 'slow'), with its first OLD changed to NEW, then the text EXTRA
figure_copy() {
  $PY - "$@" <<'PY' || fail "could not make the copy $1"
import re, sys
dest, kind, old, new = sys.argv[1:5]
text = open("docs/primer.md", encoding="utf-8").read()
m = re.search(r"^<!-- figure: \./train_gpt2_zero3 -plan 64 -e 7.5B.*?^<!-- end -->$", text, re.M | re.S)
block = m.group(0).replace("<!-- figure:", f"<!-- figure{' ' + kind if kind else ''}:", 1).replace(old, new, 1)
open(dest, "w", encoding="utf-8").write("# a copy\n\n" + block + "\n" + "".join(sys.argv[5:]))
PY
}

# a figure changed by hand fails, naming the file, the line and the command
figure_copy "$copy" "" 1.875 1.876
if out=$($PY scripts/doc_figures.py --check "$copy" 2>&1); then fail "a figure changed by hand passed the check:
$out"; fi
echo "$out" | grep -q "^error: $copy:3: the figure no longer matches the output of: ./train_gpt2_zero3 -plan 64" \
  || fail "the tampered figure's error line is not the expected one:
$out"
echo "a figure changed by hand is caught: $(echo "$out" | grep '^error:')"

# a Markdown table's figure without the fence is held the same way, and rewritten without one
table_doc() { printf '%s\n' "# a table" "" "<!-- figure: printf '| a | %s |\\n' 1 -->" "| a | $1 |" "<!-- end -->"; }
table_doc 1 >"$copy"
$PY scripts/doc_figures.py --check "$copy" >/dev/null || fail "an unfenced table figure equal to its command's output failed"
table_doc 2 >"$copy"
if out=$($PY scripts/doc_figures.py --check "$copy" 2>&1); then fail "an unfenced table changed by hand passed: $out"; fi
echo "$out" | grep -q "^error: $copy:3: the figure no longer matches" || fail "the changed table's error line: $out"
$PY scripts/doc_figures.py --write "$copy" >/dev/null && table_doc 1 | cmp -s - "$copy" || fail "--write did not restore the unfenced table"
echo "an unfenced table figure: checked, a change caught, rewritten without a fence"
rm -f "$copy"

# the slow tier, on a copy holding the same figure marked slow (a cheap one, made up), then changed by
# hand, then beside a slow figure whose script is missing, one without its run bit, one without its end
figure_copy "$slow" slow 1.875 1.875
out=$($PY scripts/doc_figures.py --check "$slow" 2>&1) && echo "$out" | grep -q "^0 figures, 0 differ or failed; 1 slow figure not run" \
  || fail "a well-formed slow figure is not left out of the fast check: $out"
out=$($PY scripts/doc_figures.py --check --slow "$slow" 2>&1) && echo "$out" | grep -q "^1 figures, 0 differ" \
  || fail "--check --slow does not pass a slow figure equal to its command's output: $out"
$PY scripts/doc_figures.py --list "$slow" | grep -q "^$slow:3: (slow) ./train_gpt2_zero3 -plan 64" || fail "--list does not mark the slow figure"
figure_copy "$slow" slow 1.875 1.876
$PY scripts/doc_figures.py --check "$slow" >/dev/null 2>&1 || fail "the fast check ran a slow figure"
if out=$($PY scripts/doc_figures.py --check --slow "$slow" 2>&1); then fail "a slow figure changed by hand passed --check --slow:
$out"; fi
echo "$out" | grep -q "^error: $slow:3: the figure no longer matches the output of: ./train_gpt2_zero3 -plan 64" \
  || fail "the changed slow figure's error line is not the expected one: $out"
$PY scripts/doc_figures.py --write "$slow" >/dev/null && grep -q 1.876 "$slow" || fail "--write without --slow rewrote a slow figure"
$PY scripts/doc_figures.py --write --slow "$slow" >/dev/null && ! grep -q 1.876 "$slow" || fail "--write --slow did not rewrite the slow figure"
echo "a slow figure: left out of --check, checked by --check --slow, a change by hand caught: $(echo "$out" | grep '^error:')"
figure_copy "$slow" slow 1.875 1.875 $'<!-- figure slow: dev/no_such_script.sh -x 1 -->\n```\n1\n```\n<!-- end -->\n<!-- figure slow: B=2 scripts/args.sh -->\n```\n1\n```\n<!-- end -->\n<!-- figure slow: echo one -->\n```\n'
if out=$($PY scripts/doc_figures.py --check "$slow" 2>&1); then fail "slow figures that cannot run passed the fast check:
$out"; fi
at() { grep -n -m1 -F "$1" "$slow" | cut -d: -f1; }   # the line of a marker in the copy
for want in "^error: $slow:$(at no_such_script): the slow figure's command cannot run: dev/no_such_script.sh does not exist" \
            "^error: $slow:$(at args.sh): the slow figure's command cannot run: scripts/args.sh lacks its run bit" \
            "^error: $slow: a '<!-- figure slow: CMD -->' marker without its fenced block and '<!-- end -->' (line $(at 'echo one'))"; do
  echo "$out" | grep -q "$want" || fail "the fast check did not say /$want/: $out"
done
echo "the fast check holds every slow figure to its form and its programs ($(echo "$out" | grep -c '^error:') errors)"
rm -f "$slow"

# every figure, rerun (the slow ones too under SLOW=1)
$PY scripts/doc_figures.py --check $tier || fail "a figure in the documents differs from the program's output (scripts/doc_figures.py --write $tier rewrites them; check the diff)"

# the lesson figures quoted in several documents: every copy of one agrees, every one has its marker
# (tests/lessons_check.py --quotes; tests/test_lessons.sh reruns the lessons themselves); a stale copy
# (the primer's HSDP figure, its spread changed) and a figure without its marker are caught on copies
$PY tests/lessons_check.py --quotes README.md docs/*.md || fail "a lesson's figure is quoted differently in two places, or without its marker"
mkdir -p "$work/quotes" && cp README.md docs/*.md "$work/quotes/" || fail "copy the documents"
sed -i 's/full sharding 3\.10x slower on a slow cross-node link (median of 11 pairs, spread 1\.90-3\.77x)/full sharding 3.10x slower on a slow cross-node link (median of 6 pairs, spread 1.90-3.10x)/' "$work/quotes/primer.md"
printf '\nA figure: 2.00x faster (median of 3 pairs, spread 1.50-2.50x).\n' >>"$work/quotes/README.md"
out=$($PY tests/lessons_check.py --quotes "$work"/quotes/*.md 2>&1) && fail "a stale copy and an unmarked figure passed --quotes: $out"
echo "$out" | grep -qE "^error: $work/quotes/(primer|time)\.md:[0-9]+: lesson hsdp quoted .* one of them is a stale copy" ||
  fail "--quotes did not name the stale HSDP copy: $out"
echo "$out" | grep -qE "^error: $work/quotes/README\.md:[0-9]+: the lesson figure '2\.00x faster .*' has no .* marker" ||
  fail "--quotes did not name the unmarked figure: $out"
echo "lesson quotes across the documents agree; a stale copy and an unmarked figure are caught"

# the flags are described once: docs/formats.md's table is the figure of --help-md (ARGS_FLAGS, the
# table -h prints), so the figures' check above holds it to the program
grep -qxF -- '<!-- figure: ./train_gpt2_zero3 --help-md -->' docs/formats.md ||
  fail "docs/formats.md's flags table is not the figure of ./train_gpt2_zero3 --help-md"
echo "docs/formats.md's flags table: the figure of --help-md"

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
