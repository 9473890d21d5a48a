#!/usr/bin/env python3
"""
The loss curves of exact ZeRO-3 and of ZeRO++'s three ideas side by side (scripts/figures/zeropp_curves.sh writes
the runs): one picture, OUT/zeropp_loss.png (train loss smoothed over 10 steps, left; its difference
from exact ZeRO-3, right; validation losses as markers), and the table of final validation losses,
printed as markdown.

    /usr/bin/python3 scripts/figures/plot_zeropp.py OUT [--replace]      (OUT/{exact,qw8,hp2,qg8,all}/log.csv)

An OUT/zeropp_loss.png that exists is kept unless --replace is given (a numbered sibling then).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import plotlib  # noqa: E402

RUNS = [("exact", "exact ZeRO-3"), ("qw8", "-qw 8 (qwZ)"), ("hp2", "-hp 2 (hpZ)"), ("qg8", "-qg 8 (qgZ)"),
        ("all", "-qw 8 -hp 2 -qg 8")]


def read(path):
    rows = plotlib.read_log(path, ("step", "train_loss", "val_loss"))
    val = [(int(r["step"]) + 1, r["val_loss"]) for r in rows if r["val_loss"] is not None]
    if not val:
        raise plotlib.InputError(f"{path}: no validation loss in any row (the table needs the last one)")
    return [int(r["step"]) + 1 for r in rows], [r["train_loss"] for r in rows], val


def smooth(x, k=10):
    return [sum(x[max(0, i - k + 1):i + 1]) / len(x[max(0, i - k + 1):i + 1]) for i in range(len(x))]


def main():
    ap = plotlib.ArgumentParser(prog="plot_zeropp.py")
    ap.add_argument("out", help="the folder of scripts/figures/zeropp_curves.sh's runs")
    ap.add_argument("--replace", action="store_true")
    a = ap.parse_args()
    out = a.out
    if not os.path.isdir(out):
        raise plotlib.InputError(f"{out}: no such folder (scripts/figures/zeropp_curves.sh OUT writes the runs)")
    png = plotlib.output_path(os.path.join(out, "zeropp_loss.png"), a.replace)
    logs = {}
    for name, _ in RUNS:
        p = os.path.join(out, name, "log.csv")
        if os.path.exists(p):
            logs[name] = read(p)
    if "exact" not in logs:
        raise plotlib.InputError(f"{out}/exact/log.csv is missing (run scripts/figures/zeropp_curves.sh first)")
    plt = plotlib.pyplot()
    fig, (ax, dx) = plt.subplots(1, 2, figsize=(13, 4.8))
    ex_steps, ex_train, _ = logs["exact"]
    for (name, label), style in zip(RUNS, ["-", "--", ":", "-.", "-"]):
        if name not in logs:
            continue
        steps, train, val = logs[name]
        line, = ax.plot(steps, smooth(train), style, label=label, lw=1.3)
        ax.plot([s for s, _ in val], [v for _, v in val], "o", color=line.get_color(), ms=4)
        n = min(len(train), len(ex_train))
        dx.plot(steps[:n], smooth([a - b for a, b in zip(train[:n], ex_train[:n])]), style, color=line.get_color(), label=label, lw=1.3)
    ax.set_xlabel("step"); ax.set_ylabel("train loss (10-step mean); val loss (dots)")
    ax.set_title("quick-start model d4c128h4t64 on 4 ranks")
    ax.legend()
    dx.axhline(0.0, color="gray", lw=0.8)
    dx.set_xlabel("step"); dx.set_ylabel("train loss minus exact ZeRO-3's (10-step mean)")
    dx.set_title("the cost of each idea in loss")
    fig.tight_layout()
    plotlib.save(fig, png)
    print(f"wrote {png}")
    ex_val = logs["exact"][2][-1][1]
    print("| run | final train loss | final val loss | val minus exact |")
    print("|---|---|---|---|")
    for name, label in RUNS:
        if name not in logs:
            continue
        steps, train, val = logs[name]
        print(f"| `{label}` | {train[-1]:.4f} | {val[-1][1]:.4f} | {val[-1][1] - ex_val:+.4f} |")
    return 0


if __name__ == "__main__":
    plotlib.run(main)
