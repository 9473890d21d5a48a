#!/usr/bin/env python3
"""The pictures of docs/ drawn from the program's own output (scripts/figures.sh runs them).

  scripts/figures/plot_figures.py memory  OUT.png                 model state per rank against N, stages 0-3, 7.5B
                                                      parameters, mixed precision (from -plan N)
  scripts/figures/plot_figures.py stages  TABLE.txt OUT.png TITLE what each stage and variant holds and sends, from
                                                      scripts/bench_variants.sh's table
  scripts/figures/plot_figures.py losses  OUT.png TITLE NAME=LOG.csv ...
                                                      train-loss curves of several runs on one axis

An OUT.png that exists is kept unless --replace is given (the picture goes to a numbered sibling).
Needs matplotlib (Debian: python3-matplotlib).
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import plotlib  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def plan_gb(n, params="7.5B"):
    """{stage: GB per rank} of the mixed-precision model state for n ranks."""
    binary = os.path.join(ROOT, "train_gpt2_zero3")
    if not os.access(binary, os.X_OK):
        raise plotlib.InputError(f"{binary}: not built (make train_gpt2_zero3)")
    p = subprocess.run([binary, "-plan", str(n), "-e", params], capture_output=True, text=True)
    section = p.stdout.split("model-state memory per rank, mixed")
    rows = re.findall(r"^  ([0-3]) (?:DDP)?\s+[\d,]+\s+([\d.]+)", section[-1], re.M) if len(section) > 1 else []
    if p.returncode != 0 or len(rows) < 4:
        raise plotlib.InputError(f"{binary} -plan {n} -e {params}: no mixed-precision table (exit {p.returncode}: "
                                 f"{p.stderr.strip()[-200:]})")
    return {int(s): float(gb) for s, gb in rows[:4]}


def memory(out_png):
    ns = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    per_n = [plan_gb(n) for n in ns]
    plt = plotlib.pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for stage, label in ((0, "DDP (stage 0)"), (1, "ZeRO-1: optimizer sharded"), (2, "ZeRO-2: + gradients"),
                         (3, "ZeRO-3: + parameters")):
        ax.plot(ns, [g[stage] for g in per_n], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("ranks N")
    ax.set_ylabel("model state per rank, GB")
    ax.set_title("7.5B parameters, bf16 params and grads, fp32 master and Adam\n"
                 "(./train_gpt2_zero3 -plan N -e 7.5B)")
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    fig.tight_layout()
    plotlib.save(fig, out_png)


def to_mib(text):
    value, unit = text.split()
    return float(value) * UNITS[unit] / 2**20


def read_variants(table):
    """The rows of scripts/bench_variants.sh's table: (variant, sent, collectives, state, engine peak), MiB."""
    rows = []
    try:
        with plotlib.open_input(table) as f:
            for i, line in enumerate(f, start=1):
                m = re.match(r"^(-z .*?)\s{2,}([\d.]+ \w+)\s+(\d+)\s+([\d.]+ \w+)\s+([\d.]+ \w+)", line)
                if m and all(u.split()[1] in UNITS for u in (m.group(2), m.group(4), m.group(5))):
                    rows.append((m.group(1), to_mib(m.group(2)), int(m.group(3)), to_mib(m.group(4)), to_mib(m.group(5))))
                elif line.startswith("-z "):
                    raise plotlib.InputError(f"{table}: line {i}: a damaged row: {line.strip()[:120]}")
    except UnicodeDecodeError:
        raise plotlib.InputError(f"{table}: not a text table")
    if not rows:
        raise plotlib.InputError(f"{table}: no row of scripts/bench_variants.sh's table in it")
    return rows


def stages(table, out_png, title):
    rows = read_variants(table)
    plt = plotlib.pyplot()
    names = [r[0] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(14, 0.45 * len(rows) + 1.6), sharey=True)
    for ax, col, title in ((axes[0], 3, "model state per rank, MiB"), (axes[1], 4, "the engine's peak per rank, MiB"),
                           (axes[2], 1, "sent per rank per step, MiB")):
        vals = [r[col] for r in rows]
        ax.barh(range(len(rows)), vals, color=["#4C72B0" if "-z 3" in n else "#8C8C8C" for n in names])
        for i, v in enumerate(vals):
            ax.text(v, i, f" {v:.0f}", va="center", fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(rows)))
    axes[0].set_yticklabels([f"{n}  ({r[2]} coll.)" for n, r in zip(names, rows)], fontsize=8)
    axes[0].invert_yaxis()
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    plotlib.save(fig, out_png)


def losses(out_png, title, runs):
    curves = []
    for run in runs:
        if "=" not in run:
            raise plotlib.InputError(f"'{run}': expected NAME=LOG.csv")
        name, path = run.split("=", 1)
        rows = plotlib.read_log(path, ("step", "train_loss"))
        curves.append((name, [int(r["step"]) + 1 for r in rows], [r["train_loss"] for r in rows]))
    plt = plotlib.pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, steps, loss in curves:
        ax.plot(steps, loss, label=name, lw=1.2)
    ax.set_xlabel("step")
    ax.set_ylabel("train loss")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    plotlib.save(fig, out_png)


def main():
    replace = "--replace" in sys.argv[1:]
    a = [x for x in sys.argv[1:] if x != "--replace"]
    shapes = {"memory": (2, 2), "stages": (4, 4), "losses": (4, None)}   # argument counts: least, most
    if not a or a[0] not in shapes or len(a) < shapes[a[0]][0] or len(a) > (shapes[a[0]][1] or len(a)):
        plotlib.fail("usage: plot_figures.py memory OUT.png | stages TABLE.txt OUT.png TITLE | "
                     "losses OUT.png TITLE NAME=LOG.csv ... [--replace]")
    out = plotlib.output_path(a[2] if a[0] == "stages" else a[1], replace)
    if a[0] == "memory":
        memory(out)
    elif a[0] == "stages":
        stages(a[1], out, a[3])
    else:
        losses(out, a[2], a[3:])
    print(out)
    return 0


if __name__ == "__main__":
    plotlib.run(main)
