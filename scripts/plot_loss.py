#!/usr/bin/env python3
"""
Plots the train and validation loss of one run from its log.csv (the trainer's -o DIR/log.csv)
into a PNG, and prints the first and last losses.

    /usr/bin/python3 scripts/plot_loss.py out/cpu/log.csv out/cpu/loss.png

Needs matplotlib (Debian: python3-matplotlib).
"""

import csv
import sys


def main():
    if len(sys.argv) != 3:
        print("usage: plot_loss.py LOG.csv OUT.png", file=sys.stderr)
        sys.exit(2)
    log_path, png_path = sys.argv[1], sys.argv[2]
    steps, train, val_steps, val = [], [], [], []
    try:
        with open(log_path, newline="") as f:
            for row in csv.DictReader(f):
                steps.append(int(row["step"]) + 1)
                train.append(float(row["train_loss"]))
                if row.get("val_loss"):
                    val_steps.append(int(row["step"]) + 1)
                    val.append(float(row["val_loss"]))
    except (OSError, KeyError, ValueError) as e:
        print(f"plot_loss.py: error: {log_path}: cannot read the log ({e})", file=sys.stderr)
        sys.exit(1)
    if not steps:
        print(f"plot_loss.py: error: {log_path}: no rows", file=sys.stderr)
        sys.exit(1)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, train, label="train", linewidth=1)
    if val:
        ax.plot(val_steps, val, "o-", label="val", markersize=3)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (cross-entropy, nats)")
    ax.set_title(log_path)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png_path, dpi=120)
    line = f"loss plot: {png_path} (train {train[0]:.3f} -> {train[-1]:.3f}"
    if val:
        line += f", val {val[0]:.3f} -> {val[-1]:.3f}"
    print(line + f", {len(steps)} steps)")


if __name__ == "__main__":
    main()
