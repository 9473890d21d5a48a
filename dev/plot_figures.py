#!/usr/bin/env python3
"""The pictures of docs/ drawn from the program's own output (scripts/figures.sh runs them).

  dev/plot_figures.py memory  OUT.png                 model state per rank against N, stages 0-3, 7.5B
                                                      parameters, mixed precision (from -plan N)
  dev/plot_figures.py stages  TABLE.txt OUT.png TITLE what each stage and variant holds and sends, from
                                                      scripts/bench_variants.sh's table
  dev/plot_figures.py losses  OUT.png TITLE NAME=LOG.csv ...
                                                      train-loss curves of several runs on one axis

Needs matplotlib (Debian: python3-matplotlib).
"""
import csv
import os
import re
import subprocess
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def plan_gb(n, params="7.5B"):
    """{stage: GB per rank} of the mixed-precision model state for n ranks."""
    out = subprocess.run([os.path.join(ROOT, "train_gpt2_zero3"), "-plan", str(n), "-e", params],
                         capture_output=True, text=True, check=True).stdout
    section = out.split("model-state memory per rank, mixed")[1]
    rows = re.findall(r"^  ([0-3]) (?:DDP)?\s+[\d,]+\s+([\d.]+)", section, re.M)
    return {int(s): float(gb) for s, gb in rows[:4]}


def memory(out_png):
    ns = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    per_n = [plan_gb(n) for n in ns]
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
    fig.savefig(out_png, dpi=110)


def to_mib(text):
    value, unit = text.split()
    return float(value) * UNITS[unit] / 2**20


def stages(table, out_png, title):
    rows = []
    for line in open(table):
        m = re.match(r"^(-z .*?)\s{2,}([\d.]+ \w+)\s+(\d+)\s+([\d.]+ \w+)\s+([\d.]+ \w+)", line)
        if m:
            rows.append((m.group(1), to_mib(m.group(2)), int(m.group(3)), to_mib(m.group(4)), to_mib(m.group(5))))
    names = [r[0] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(14, 0.45 * len(rows) + 1.6), sharey=True)
    for ax, col, title in ((axes[0], 3, "model state per rank, MiB"), (axes[1], 4, "peak per rank, MiB"),
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
    fig.savefig(out_png, dpi=110)


def losses(out_png, title, runs):
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for run in runs:
        name, path = run.split("=", 1)
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        ax.plot([int(r["step"]) + 1 for r in rows], [float(r["train_loss"]) for r in rows], label=name, lw=1.2)
    ax.set_xlabel("step")
    ax.set_ylabel("train loss")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out_png, dpi=110)


def main():
    a = sys.argv[1:]
    if a[:1] == ["memory"] and len(a) == 2:
        memory(a[1])
    elif a[:1] == ["stages"] and len(a) == 4:
        stages(a[1], a[2], a[3])
    elif a[:1] == ["losses"] and len(a) >= 4:
        losses(a[1], a[2], a[3:])
    else:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    print(a[1] if a[0] == "memory" else a[2] if a[0] == "stages" else a[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
