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

    scripts/doc_figures.py --check [FILE.md ...]   rerun every figure's command; a figure that differs from
                                                   its command's output is an error (exit 1)
    scripts/doc_figures.py --write [FILE.md ...]   rewrite every figure with its command's output
    scripts/doc_figures.py --list  [FILE.md ...]   the figures, one line each: FILE:LINE: COMMAND

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
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plotlib  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BLOCK = re.compile(r"^<!-- figure: (?P<cmd>.*?) -->\n(?P<fence>```[a-z]*)\n(?P<body>.*?)^```\n<!-- end -->$",
                   re.M | re.S)


def run_env():
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", OMPI_MCA_rmaps_base_oversubscribe="1",
               OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    return env


def output_of(cmd):
    p = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=ROOT, env=run_env(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"exit {p.returncode}: {p.stderr.strip()[-400:]}")
    return "".join(line.rstrip() + "\n" for line in p.stdout.splitlines())


def figures(text):
    for m in BLOCK.finditer(text):
        yield m, text.count("\n", 0, m.start()) + 1


def read_document(name):
    path = os.path.join(ROOT, name)
    if not name.endswith(".md"):
        raise plotlib.InputError(f"{name}: not a Markdown file (.md)")
    try:
        with plotlib.open_input(path) as f:
            return f.read()
    except UnicodeDecodeError:
        raise plotlib.InputError(f"{name}: not UTF-8 text")


def main():
    args = sys.argv[1:]
    if not args or args[0] not in ("--check", "--write", "--list"):
        plotlib.fail("usage: doc_figures.py --check | --write | --list [FILE.md ...] (the first argument, "
                     f"got {args[0] if args else 'none'!r})")
    mode, files = args[0], args[1:]
    if not files:
        files = ["README.md"] + sorted(glob.glob("docs/*.md", root_dir=ROOT))
    texts = {name: read_document(name) for name in files}   # every file read before any command runs
    failures = checked = 0
    for name in files:
        path, text = os.path.join(ROOT, name), texts[name]
        if len(re.findall(r"^<!-- figure:", text, re.M)) != len(list(figures(text))):
            print(f"error: {name}: a '<!-- figure: CMD -->' marker without its fenced block and '<!-- end -->'",
                  file=sys.stderr)
            failures += 1
        pieces, last = [], 0
        for m, line in figures(text):
            cmd = m.group("cmd")
            if mode == "--list":
                print(f"{name}:{line}: {cmd}")
                continue
            checked += 1
            try:
                got = output_of(cmd)
            except RuntimeError as e:
                print(f"error: {name}:{line}: the figure's command failed ({e}): {cmd}", file=sys.stderr)
                failures += 1
                continue
            if mode == "--write":
                pieces += [text[last:m.start("body")], got]
                last = m.end("body")
            elif got != m.group("body"):
                print(f"error: {name}:{line}: the figure no longer matches the output of: {cmd}", file=sys.stderr)
                diff = difflib.unified_diff(m.group("body").splitlines(), got.splitlines(),
                                            "in the document", "printed by the program", lineterm="", n=1)
                print("\n".join("    " + d for d in diff), file=sys.stderr)
                failures += 1
        if mode == "--write" and pieces:
            pieces.append(text[last:])
            new = "".join(pieces)
            if new != text:
                with open(path + ".tmp", "w", encoding="utf-8") as f:
                    f.write(new)
                os.replace(path + ".tmp", path)
                print(f"{name}: figures rewritten")
    if mode != "--list":
        print(f"{checked} figures, {failures} differ or failed")
    return 1 if failures else 0


if __name__ == "__main__":
    plotlib.run(main)
