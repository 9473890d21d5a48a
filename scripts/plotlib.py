"""
What every plotting script shares (scripts/plot_*.py, scripts/figures/plot_*.py, scripts/doc_figures.py): a bad
input is one line on stderr and exit 1, never a traceback, never a partial or replaced picture.

    ArgumentParser             argparse's, but a bad argument is one 'error:' line and exit 1
    run(main)                  calls main(); InputError, a missing file, Ctrl-C: one 'error:' line, exit 1
    fail(message)              'error: MESSAGE' on stderr, exit 1
    InputError(message)        what a reader raises: the file or argument, then what is wrong with it
    output_path(path, replace) checked before any work: the folder exists and can be written, the path
                               is not a folder; an existing file is kept (unless replace) and the new
                               picture goes to the first free numbered sibling (loss.png -> loss.1.png),
                               the rule of the trainer's -tr
    read_log(path, columns)    a trainer's log.csv: a list of rows, each {column: float, or None where empty}
    pyplot()                   matplotlib's pyplot on the Agg backend
    save(fig, path)            the picture written beside its name, then renamed into place

A script imports it from its own folder, or from scripts/figures/ with
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
"""
import argparse
import csv
import math
import os
import sys


PICTURES = (".png", ".pdf", ".svg")


class InputError(Exception):
    pass


def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(1)


class ArgumentParser(argparse.ArgumentParser):
    def error(self, message):
        fail(f"{message} ({' '.join(self.format_usage().split())})")


def run(main):
    """The entry point of a plotting script: main()'s return value is the exit status."""
    try:
        sys.exit(main())
    except InputError as e:
        fail(str(e))
    except KeyboardInterrupt:
        fail("interrupted")
    except BrokenPipeError:   # stdout closed by a reader (| head): nothing more to say
        sys.exit(1)


def output_path(path, replace=False):
    """The path a picture will be written to, checked before any work is done."""
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        raise InputError(f"{path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"{path}: the folder {folder} cannot be written")
    if os.path.isdir(path):
        raise InputError(f"{path}: is a folder, not a file name")
    if os.path.lexists(path) and not os.path.isfile(path):
        raise InputError(f"{path}: exists and is not a regular file")
    if os.path.splitext(path)[1].lower() not in PICTURES:
        raise InputError(f"{path}: a picture's name ends in {', '.join(PICTURES)}")
    if replace or not os.path.lexists(path):
        return path
    stem, ext = os.path.splitext(path)
    k = 1
    while os.path.lexists(f"{stem}.{k}{ext}"):
        k += 1
    return f"{stem}.{k}{ext}"


def open_input(path):
    """A text file to read: a regular file (a FIFO would block, a folder is a mistake)."""
    if not os.path.exists(path):
        raise InputError(f"{path}: no such file")
    if not os.path.isfile(path):
        raise InputError(f"{path}: not a regular file")
    try:
        return open(path, newline="", encoding="utf-8", errors="strict")
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror})")


def number(path, line, column, text, allow_empty=False):
    if allow_empty and text == "":
        return None
    try:
        v = float(text)
    except (TypeError, ValueError):
        raise InputError(f"{path}: line {line}: {column} is {text!r}, not a number (a truncated or damaged log?)")
    if not math.isfinite(v) and column != "train_loss" and column != "val_loss":
        raise InputError(f"{path}: line {line}: {column} is {text}, not a finite number")
    return v


def read_log(path, columns):
    """The rows of a trainer's log.csv (docs/formats.md), each {column: float}; val_loss may be None."""
    try:
        with open_input(path) as f:
            rows = list(csv.reader(f))
    except (UnicodeDecodeError, csv.Error) as e:
        raise InputError(f"{path}: not a CSV log ({e})")
    if not rows:
        raise InputError(f"{path}: empty (no header, no rows)")
    header = rows[0]
    missing = [c for c in columns if c not in header]
    if missing:
        raise InputError(f"{path}: not a trainer's log.csv: no column {', '.join(missing)} in its header")
    where = {c: header.index(c) for c in columns}
    out = []
    for i, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise InputError(f"{path}: line {i}: {len(row)} fields where the header has {len(header)} "
                             "(a truncated or damaged log?)")
        out.append({c: number(path, i, c, row[where[c]], allow_empty=(c == "val_loss")) for c in columns})
    if not out:
        raise InputError(f"{path}: a header and no rows (the run logged no step)")
    return out


def pyplot():
    try:
        import matplotlib
    except ImportError:   # a python3 on PATH without matplotlib (pyenv, a venv): Debian's has it
        if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3"):
            os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
        raise InputError("matplotlib is not installed (Debian: apt-get install python3-matplotlib)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save(fig, path, dpi=110):
    """Writes the figure beside path and renames it into place: a crash leaves no partial picture."""
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.tmp")
    ext = os.path.splitext(path)[1].lstrip(".").lower()
    try:
        fig.savefig(tmp, dpi=dpi, format=ext)
        os.replace(tmp, path)
    except (OSError, ValueError) as e:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise InputError(f"{path}: cannot write the picture ({getattr(e, 'strerror', None) or e})")
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise
