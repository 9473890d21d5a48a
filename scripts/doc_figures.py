#!/usr/bin/env python3
"""
The figures in the documents, kept equal to what the program prints.

A figure in a Markdown file is a fenced block between two markers; the first names the command
that prints it, run from the repository root with bash:

    <!-- figure: ./train_gpt2_zero3 -plan 64 -e 7.5B | sed -n '1,12p' -->
    ```
    ...the command's output, exactly...
    ```
    <!-- end -->

A command that prints a Markdown table may have its figure without the fence, the table's lines
between the two markers, so that it shows as a table.

A figure whose command takes longer than a test can spend (minutes of training) is marked slow,
`<!-- figure slow: CMD -->`, and is rerun only when --slow is given; without it, its marker and
block are still checked for form, and every repository file its command runs as a program (or hands
to bash or python) must exist, a program with its run bit:

    scripts/doc_figures.py --check [--slow] [FILE.md ...]   rerun every figure's command (the slow ones
                                                            too with --slow); a figure that differs from
                                                            its command's output is an error (exit 1)
    scripts/doc_figures.py --write [--slow] [FILE.md ...]   rewrite every figure (and the slow ones with
                                                            --slow) with its command's output
    scripts/doc_figures.py --list  [FILE.md ...]            the figures, one line each: FILE:LINE: COMMAND,
                                                            a slow one FILE:LINE: (slow) COMMAND

Without files: README.md and docs/*.md. Only figures that do not depend on the clock belong in a
marked block (bytes, memory, plans, ledgers, losses of a fixed seed); timings are shown unmarked,
with the command, the machine and its load beside them. The commands run with one OpenMP thread
per rank and Open MPI allowed to oversubscribe the cores (the environment the README's afternoon
sets up).
"""

import difflib
import glob
import os
import re
import shlex
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plotlib  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
USAGE = "usage: doc_figures.py --check | --write | --list [--slow] [FILE.md ...]"
BLOCK = re.compile(r"^<!-- figure(?P<slow> slow)?: (?P<cmd>.*?) -->\n(?:(?P<fence>```[a-z]*\n)|(?!```))"
                   r"(?P<body>.*?)^(?(fence)```\n)<!-- end -->$", re.M | re.S)
MARKER = re.compile(r"^<!-- figure(?P<slow> slow)?: .* -->$")
OPERATORS = {"|", "||", "&&", ";", "&", "(", ")", "|&", ";;"}
INTERPRETERS = {"bash", "sh", "python", "python3"}


def run_env():
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", OMPI_MCA_rmaps_base_oversubscribe="1",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


# A command that several figures show (the README's and the primer's ledger, say) runs once a call:
# its output, or its failure, is kept by the command's text. A figure's output must not depend on
# when it runs (else no check could hold it), so once is as good as twice.
_RUNS = {}


def output_of(cmd):
    if cmd not in _RUNS:
        p = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=ROOT, env=run_env(),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _RUNS[cmd] = (p.returncode, p.stderr.strip()[-400:], "".join(line.rstrip() + "\n" for line in p.stdout.splitlines()))
    rc, err, out = _RUNS[cmd]
    if rc != 0:
        raise RuntimeError(f"exit {rc}: {err}")
    return out


def figures(text):
    for m in BLOCK.finditer(text):
        yield m, text.count("\n", 0, m.start()) + 1


def malformed_markers(name, text):
    """One error line per '<!-- figure' line that does not open a whole figure."""
    opened = {line for _, line in figures(text)}
    errors = []
    for line, marker in enumerate(text.split("\n"), 1):
        if not marker.startswith("<!-- figure") or line in opened:
            continue
        m = MARKER.match(marker)
        if m:
            kind = "figure slow" if m.group("slow") else "figure"
            errors.append(f"{name}: a '<!-- {kind}: CMD -->' marker without its fenced block and '<!-- end -->' (line {line})")
        else:
            errors.append(f"{name}: line {line}: {marker[:60]!r} is neither '<!-- figure: CMD -->' nor '<!-- figure slow: CMD -->'")
    return errors


def programs_of(cmd):
    """The words of a command that name what it runs: each simple command's first word (after VAR=value
    and env), and the script an interpreter is handed; (word, must_run) pairs."""
    lex = shlex.shlex(cmd, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    words, at_start, after_interpreter = [], True, False
    for w in lex:
        if w in OPERATORS:
            at_start, after_interpreter = True, False
        elif at_start and (re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w) or w == "env"):
            continue
        elif at_start:
            words.append((w, True))
            at_start, after_interpreter = False, os.path.basename(w) in INTERPRETERS
        elif after_interpreter and not w.startswith("-"):
            words.append((w, False))
            after_interpreter = False
    return words


def missing_programs(cmd):
    """What is wrong with the files a command runs: a path that is not there, a program without its
    run bit. Words without a '/' are found on PATH when the command runs and are not checked."""
    try:
        words = programs_of(cmd)
    except ValueError as e:
        return [f"the command cannot be read as shell words ({e})"]
    problems = []
    for word, must_run in words:
        if "/" not in word or "$" in word:
            continue
        path = os.path.join(ROOT, word)
        if not os.path.isfile(path):
            problems.append(f"{word} does not exist")
        elif must_run and not os.access(path, os.X_OK):
            problems.append(f"{word} lacks its run bit")
    return problems


def error(message):
    print(f"error: {message}", file=sys.stderr)


def read_document(name):
    path = os.path.join(ROOT, name)
    if not name.endswith(".md"):
        raise plotlib.InputError(f"{name}: not a Markdown file (.md)")
    try:
        with plotlib.open_input(path) as f:
            return f.read()
    except UnicodeDecodeError:
        raise plotlib.InputError(f"{name}: not UTF-8 text")


def write_document(name, text):
    """The document replaced whole or not at all: written to a temporary file of its own folder (a name
    no other run holds), then renamed over it; a write that fails (a full disk, a read-only folder, a
    file size limit) removes the temporary file and leaves the document as it was, with one line."""
    path = os.path.join(ROOT, name)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=os.path.dirname(path))
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode))   # the document's own permissions, not mkstemp's 0600
        os.replace(tmp, path)
    except OSError as e:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        plotlib.fail(f"{name}: cannot rewrite its figures ({e.strerror}); the document is left as it was")
    print(f"{name}: figures rewritten")


def rerun(name, line, m, mode):
    """One figure's command run again: its output, or None with what went wrong said (under --check, a
    figure that differs from the output is wrong)."""
    cmd = m.group("cmd")
    try:
        got = output_of(cmd)
    except RuntimeError as e:
        error(f"{name}:{line}: the figure's command failed ({e}): {cmd}")
        return None
    if mode == "--check" and got != m.group("body"):
        error(f"{name}:{line}: the figure no longer matches the output of: {cmd}")
        diff = difflib.unified_diff(m.group("body").splitlines(), got.splitlines(),
                                    "in the document", "printed by the program", lineterm="", n=1)
        print("\n".join("    " + d for d in diff), file=sys.stderr)
        return None
    return got


def process(name, text, mode, slow):
    """One document's figures listed, checked or rewritten: (its text with the figures rewritten under
    --write, figures run, slow figures not run, failures)."""
    problems = malformed_markers(name, text)
    for p in problems:
        error(p)
    failures, ran, left, pieces, last = len(problems), 0, 0, [], 0
    for m, line in figures(text):
        cmd, is_slow = m.group("cmd"), m.group("slow") is not None
        if mode == "--list":
            print(f"{name}:{line}: {'(slow) ' if is_slow else ''}{cmd}")
        elif is_slow and not slow:
            left += 1
            for p in missing_programs(cmd):
                error(f"{name}:{line}: the slow figure's command cannot run: {p}: {cmd}")
                failures += 1
        else:
            ran += 1
            got = rerun(name, line, m, mode)
            if got is None:
                failures += 1
            elif mode == "--write":
                pieces += [text[last:m.start("body")], got]
                last = m.end("body")
    return "".join(pieces) + text[last:], ran, left, failures


def parse_args(args):
    """(mode, whether the slow figures run, the documents)"""
    if not args or args[0] not in ("--check", "--write", "--list"):
        plotlib.fail(f"{USAGE} (the first argument, got {args[0] if args else 'none'!r})")
    mode, slow = args[0], "--slow" in args[1:]
    files = [a for a in args[1:] if a != "--slow"]
    for a in files:
        if a.startswith("-"):
            plotlib.fail(f"{a}: not an option of doc_figures.py ({USAGE})")
    if slow and mode == "--list":
        plotlib.fail(f"--slow: --list shows every figure, the slow ones marked (slow) ({USAGE})")
    return mode, slow, files or ["README.md"] + sorted(glob.glob("docs/*.md", root_dir=ROOT))


def main():
    mode, slow, files = parse_args(sys.argv[1:])
    texts = {name: read_document(name) for name in files}   # every file read before any command runs
    ran = left = failures = 0
    for name in files:
        new, r, s, f = process(name, texts[name], mode, slow)
        ran, left, failures = ran + r, left + s, failures + f
        if mode == "--write" and new != texts[name]:
            write_document(name, new)
    if mode != "--list":
        slow_note = (f"; {left} slow figure{'s' if left > 1 else ''} not run (--slow runs {'them' if left > 1 else 'it'}),"
                     " form and programs checked") if left else ""
        print(f"{ran} figures, {failures} differ or failed{slow_note}")
    return 1 if failures else 0


if __name__ == "__main__":
    plotlib.run(main)
