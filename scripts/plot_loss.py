#!/usr/bin/env python3
"""
Plots the train and validation loss of one run from its log.csv (the trainer's -o DIR/log.csv)
into a PNG, and prints the first and last losses.

    scripts/plot_loss.py LOG.csv OUT.png [--replace]

OUT.png is never replaced unless --replace is given: the picture goes to the first free numbered
sibling (loss.1.png) and the line printed names it. Needs matplotlib (Debian: python3-matplotlib).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plotlib  # noqa: E402


def main():
    ap = plotlib.ArgumentParser(prog="plot_loss.py")
    ap.add_argument("log")
    ap.add_argument("png")
    ap.add_argument("--replace", action="store_true")
    a = ap.parse_args()
    log_path, png = a.log, plotlib.output_path(a.png, a.replace)
    rows = plotlib.read_log(log_path, ("step", "train_loss", "val_loss"))
    steps = [int(r["step"]) + 1 for r in rows]
    train = [r["train_loss"] for r in rows]
    val = [(int(r["step"]) + 1, r["val_loss"]) for r in rows if r["val_loss"] is not None]
    plt = plotlib.pyplot()
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, train, label="train", linewidth=1)
    if val:
        ax.plot([s for s, _ in val], [v for _, v in val], "o-", label="val", markersize=3)
    ax.set_xlabel("step")
    ax.set_ylabel("loss (cross-entropy, nats)")
    ax.set_title(log_path)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    plotlib.save(fig, png, dpi=120)
    line = f"loss plot: {png} (train {train[0]:.3f} -> {train[-1]:.3f}"
    if val:
        line += f", val {val[0][1]:.3f} -> {val[-1][1]:.3f}"
    print(line + f", {len(steps)} steps)")
    return 0


if __name__ == "__main__":
    plotlib.run(main)
