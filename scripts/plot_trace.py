#!/usr/bin/env python3
"""Renders one step of a trainer trace (-tr FILE) as a PNG timeline: per rank a compute lane and a
communication lane, on the step's time axis, so the overlap (or the lack of it) can be seen.

  scripts/plot_trace.py TRACE.json OUT.png [--step S] [--title TEXT]

Compute: forward (blue), backward (green), AdamW (grey), waits for a collective (red: the exposed
communication). Communication: gathers (orange), reduce-scatters (purple), all-reduces (brown).
Bars wide enough carry their unit's name (embedding, b0, b1, ..., head).
Without --step the last step of the trace is drawn (the first one records the prefetch schedule).
"""
import argparse, json, os, sys
try:
    import matplotlib
except ImportError:   # a python3 on PATH without matplotlib (pyenv, a venv): Debian's has it (python3-matplotlib)
    if os.path.exists("/usr/bin/python3") and sys.executable != "/usr/bin/python3":
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    sys.exit("plot_trace.py: error: matplotlib is not installed (Debian: apt-get install python3-matplotlib)")
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import Patch

COLORS = {"fwd": "#4C72B0", "bwd": "#55A868", "adamw": "#8C8C8C", "wait": "#D62728",
          "fwd_gather": "#FF9F1C", "bwd_gather": "#F4B860", "step_gather": "#C9A227",
          "reduce_scatter": "#8172B2", "all_reduce": "#8C564B", "norm": "#000000"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--step", type=int, default=None)
    ap.add_argument("--title", default=None)
    a = ap.parse_args()
    with open(a.trace) as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    step = a.step if a.step is not None else max(e["args"]["step"] for e in ev)
    ev = [e for e in ev if e["args"].get("step") == step]
    ranks = sorted({e["pid"] for e in ev})
    t0 = min(e["ts"] for e in ev if e["cat"] == "step")
    label_ms = max(e["dur"] for e in ev if e["cat"] == "step") / 1e3 / 40   # a bar of 1/40 of the step or more
    fig, ax = plt.subplots(figsize=(14, 1.2 + 1.1 * len(ranks)))
    labels, ypos = [], []
    exposed = {}
    for i, r in enumerate(ranks):
        base = (len(ranks) - 1 - i) * 2.6
        for e in ev:
            if e["pid"] != r or e["cat"] == "step":
                continue
            x, w = (e["ts"] - t0) / 1e3, e["dur"] / 1e3
            if e["tid"] == 0:
                key = "wait" if e["cat"] == "exposed" else e["name"].split()[0]
                y = base + 1.3
                if key == "wait":
                    exposed[r] = exposed.get(r, 0.0) + w
            else:
                key, y = e["args"]["kind"], base
            ax.broken_barh([(x, max(w, 0.05))], (y, 1.0), facecolors=COLORS.get(key, "#999999"), edgecolor="white",
                           linewidth=0.3)
            unit = e["args"].get("unit", "")
            if unit and key != "wait" and w >= label_ms:   # the unit's name on bars wide enough to hold it
                ax.text(x + w / 2, y + 0.5, unit.replace("block", "b"), ha="center", va="center", fontsize=6,
                        color="white", clip_on=True)
        step_ms = [e["dur"] / 1e3 for e in ev if e["pid"] == r and e["cat"] == "step"][0]
        labels += [f"rank {r} comm", f"rank {r} compute\n(exposed {exposed.get(r, 0.0):.0f} of {step_ms:.0f} ms)"]
        ypos += [base + 0.5, base + 1.8]
    ax.set_yticks(ypos)
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlabel(f"ms from the start of step {step}")
    ax.set_title(a.title or f"{a.trace}: step {step}")
    handles = [Patch(color=COLORS[k], label=k) for k in ("fwd", "bwd", "adamw", "wait", "fwd_gather", "bwd_gather",
                                                          "reduce_scatter", "all_reduce", "step_gather")]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=9, fontsize=8, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)
    print(f"{a.out}: step {step}, {len(ranks)} ranks")


if __name__ == "__main__":
    main()
