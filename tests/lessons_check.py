#!/usr/bin/env python3
"""The documents' quoted lesson figures against what the lessons measure now.

    tests/lessons_check.py [--cluster] VERDICTS.txt FILE.md ...
    tests/lessons_check.py --quotes FILE.md ...

A quoted figure is marked in the Markdown source, just before the paragraph that quotes it:

    <!-- lesson: ex6 ratio 1.34 -->
    ... ZeRO-3 took 1.34x ZeRO-2's step (median of 3 pairs, spread 1.31-1.38x) ...

The lessons come in two families, told apart by their names: those of scripts/lessons.sh (emulated
links, checked by tests/test_lessons.sh) and those named tcp_* of scripts/cluster_lessons.sh (real TCP
between namespace nodes, root only, checked by tests/test_cluster.sh). One run checks one family, the
first by default and the second with --cluster; the other family's markers are counted and left alone.

VERDICTS.txt holds the verdict lines of the family's runs (`verdict NAME: shown: ... R.RRx (median
of K pairs, spread LO-HIx)`). A marker is an error (exit 1) when
  - the paragraph after it does not quote its ratio with a spread (`R.RRx (median of ..., spread
    LO-HIx)`, or `R.RRx ... (spread LO-HIx)`): the text and the marker disagree;
  - the quoted ratio lies outside its own quoted spread;
  - its lesson has no verdict line in VERDICTS.txt, or its verdict is "the opposite came out";
  - the quoted spread does not meet the lesson's fresh spread widened by MARGIN (20%) on each side,
    LO / 1.2 to HI x 1.2: the fresh pairs contradict the quote. The margin is for the quick runs the
    check makes (2 pairs); the load moves a lesson's ratio too, so a quote pools runs at several loads
    (its spread holds them all: docs/time.md).
A lesson that said "not shown: the machine is too noisy" cannot confirm or refute its quote: its
markers are listed as not checked, and pass.

--quotes runs no lesson: it checks the copies of each figure against each other, across the files
given (tests/test_docs.sh gives README.md and docs/*.md), both families. An error (exit 1) when
  - two markers of one lesson quote different figures (the ratio, the number of pairs, the spread):
    one of them is a stale copy;
  - a figure in the form of a lesson's (`R.RRx (median of K pairs, spread LO-HIx)`) stands in no
    marker's paragraph and on no `verdict NAME:` line (which names its lesson): it could go stale
    unchecked.
"""
import re
import sys

MARGIN = 1.2
CLUSTER_PREFIX = "tcp_"   # the names of scripts/cluster_lessons.sh's lessons
MARKER = re.compile(r"^<!-- lesson: (\w+) ratio ([0-9.]+) -->$", re.M)
VERDICT = re.compile(r"^verdict (\w+): (shown|not shown): (.*)$", re.M)
FIGURE = re.compile(r"([0-9.]+)x \(median of (\d+) (?:pairs|rounds), spread ([0-9.]+)-([0-9.]+)x\)")


def quote_in(paragraph, quoted):
    """The paragraph's quote of the ratio with its spread: groups spread LO, HI, and the median's count (or None)."""
    return re.search(r"(?<![0-9.])" + re.escape(quoted) +
                     r"x\s[^()]{0,80}?\((?:median\s+of\s+([^,()]*),\s+)?spread\s+([0-9.]+)-([0-9.]+)x[);]", paragraph)


def marked(text):
    """Each marker of TEXT: (lesson, quoted ratio, its line, the paragraph after it, the paragraph's start)."""
    for m in MARKER.finditer(text):
        rest = text[m.end():]
        start = m.end() + len(rest) - len(rest.lstrip("\n"))
        yield m.group(1), m.group(2), text.count("\n", 0, m.start()) + 1, rest.lstrip("\n").split("\n\n", 1)[0], start


ANY_FIGURE = re.compile(r"[0-9.]+x\s[^()]{0,80}?\(median\s+of\s+\d+\s+(?:pairs|rounds),\s+spread\s+[0-9.]+-[0-9.]+x[);]")


def check_quotes(names):
    """The errors of --quotes over the files NAMES: stale copies, and figures no marker holds."""
    errors, seen = [], {}
    for name in names:
        with open(name, encoding="utf-8") as f:
            text = f.read()
        spans = []
        for lesson, quoted, line, paragraph, start in marked(text):
            spans.append((start, start + len(paragraph)))
            q = quote_in(paragraph, quoted)
            if not q:
                continue   # the fresh check names it (the paragraph does not quote its marker)
            figure = (quoted, " ".join((q.group(1) or "").split()) or None, q.group(2), q.group(3))
            where = f"{name}:{line}"
            if lesson in seen and seen[lesson][1] != figure:
                first, f0 = seen[lesson]
                errors.append(f"error: {where}: lesson {lesson} quoted {describe(figure)}, but {first} quotes {describe(f0)}: "
                              "one of them is a stale copy")
            seen.setdefault(lesson, (where, figure))
        for m in ANY_FIGURE.finditer(text):
            line_start = text.rfind("\n", 0, m.start()) + 1
            if text.startswith("verdict ", line_start) or any(a <= m.start() < b for a, b in spans):
                continue
            errors.append(f"error: {name}:{text.count(chr(10), 0, m.start()) + 1}: the lesson figure '{' '.join(m.group(0).split())}' has no "
                          "<!-- lesson: NAME ratio R --> marker before its paragraph: no check would see it go stale")
    return errors, len(seen)


def describe(figure):
    r, count, lo, hi = figure
    return f"{r}x ({'median of ' + ' '.join(count.split()) + ', ' if count else ''}spread {lo}-{hi}x)"


def verdicts(path):
    with open(path, encoding="utf-8") as f:
        return {m.group(1): (m.group(2), m.group(3)) for m in VERDICT.finditer(f.read())}


def script_of(lesson):
    return "scripts/cluster_lessons.sh" if lesson.startswith(CLUSTER_PREFIX) else f"scripts/lessons.sh {lesson}"


def check_file(name, seen, cluster):
    """The errors of FILE's markers of one family (cluster: the tcp_ lessons); the count of the others."""
    with open(name, encoding="utf-8") as f:
        text = f.read()
    errors, others = [], 0
    for lesson, quoted, line, paragraph, _ in marked(text):
        if lesson.startswith(CLUSTER_PREFIX) != cluster:
            others += 1
            continue
        where = f"{name}:{line}"
        q = quote_in(paragraph, quoted)
        if not q:
            errors.append(f"error: {where}: the paragraph after the marker does not quote lesson {lesson}'s ratio {quoted}x "
                          "with its spread")
            continue
        qlo, qhi = float(q.group(2)), float(q.group(3))
        if not qlo <= float(quoted) <= qhi:
            errors.append(f"error: {where}: lesson {lesson}'s quoted ratio {quoted}x lies outside its own quoted spread "
                          f"{q.group(2)}-{q.group(3)}x")
            continue
        if lesson not in seen:
            errors.append(f"error: {where}: lesson {lesson} printed no verdict ({script_of(lesson)})")
            continue
        kind, rest = seen[lesson]
        if kind == "not shown":
            if rest.startswith("the opposite"):
                errors.append(f"error: {where}: lesson {lesson} now shows the opposite of its quoted {quoted}x: {rest}")
            else:
                print(f"{where}: lesson {lesson} not checked: {rest}")
            continue
        fig = FIGURE.search(rest)
        if not fig:
            errors.append(f"error: {where}: lesson {lesson}'s verdict has no ratio with its spread: {rest}")
            continue
        lo, hi = float(fig.group(3)) / MARGIN, float(fig.group(4)) * MARGIN
        if qhi < lo or qlo > hi:
            errors.append(f"error: {where}: lesson {lesson}'s quoted {quoted}x (spread {q.group(2)}-{q.group(3)}x) is outside "
                          f"what it measures now ({fig.group(3)}-{fig.group(4)}x, with the margin {lo:.2f}-{hi:.2f}x)")
        else:
            print(f"{where}: lesson {lesson} quoted {quoted}x (spread {q.group(2)}-{q.group(3)}x), measured "
                  f"{fig.group(1)}x (spread {fig.group(3)}-{fig.group(4)}x): ok")
    return errors, others


def main():
    args = sys.argv[1:]
    if args and args[0] == "--quotes":
        if len(args) < 2:
            print("usage: lessons_check.py --quotes FILE.md ...", file=sys.stderr)
            return 2
        errors, lessons = check_quotes(args[1:])
        for e in errors:
            print(e, file=sys.stderr)
        if not errors:
            print(f"lesson quotes: every copy of the {lessons} quoted lessons' figures agrees, and every figure has its marker")
        return 1 if errors else 0
    cluster = bool(args) and args[0] == "--cluster"
    args = args[cluster:]
    if len(args) < 2:
        print("usage: lessons_check.py [--cluster] VERDICTS.txt FILE.md ...", file=sys.stderr)
        return 2
    seen = verdicts(args[0])
    errors, others = [], 0
    for name in args[1:]:
        e, o = check_file(name, seen, cluster)
        errors += e
        others += o
    if others:
        print(f"{others} markers of the {'emulated' if cluster else 'cluster (tcp_)'} lessons left to "
              f"{'tests/test_lessons.sh' if cluster else 'tests/test_cluster.sh'}")
    for e in errors:
        print(e, file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
