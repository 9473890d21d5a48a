#!/usr/bin/env python3
"""Renders one step of a trainer trace (-tr FILE) as a PNG timeline: per rank a compute lane and a
communication lane, on the step's time axis, so the overlap (or the lack of it) can be seen.

  scripts/plot_trace.py TRACE.json OUT.png [--step S] [--title TEXT] [--replace]

Compute: forward (blue), backward (green), AdamW (grey), waits for a collective (red: the exposed
communication). Communication: gathers (orange), reduce-scatters (purple), all-reduces (brown).
Bars wide enough carry their unit's name (embedding, b0, b1, ..., head).
Without --step the last step of the trace is drawn (the first one records the prefetch schedule).
OUT.png is never replaced unless --replace is given: the picture goes to the first free numbered
sibling (trace.1.png), and the line printed names it.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plotlib  # noqa: E402

COLORS = {"fwd": "#4C72B0", "bwd": "#55A868", "adamw": "#8C8C8C", "wait": "#D62728",
          "fwd_gather": "#FF9F1C", "bwd_gather": "#F4B860", "step_gather": "#C9A227",
          "reduce_scatter": "#8172B2", "all_reduce": "#8C564B", "norm": "#000000"}


def parse_args(argv):
    ap = plotlib.ArgumentParser(prog="plot_trace.py")
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--step", type=int, default=None)
    ap.add_argument("--title", default=None)
    ap.add_argument("--replace", action="store_true")
    return ap.parse_args(argv)


def read_events(path):
    """The trace's complete events ("ph": "X"), each checked for the fields the picture reads."""
    try:
        with plotlib.open_input(path) as f:
            doc = json.load(f)
    except (ValueError, UnicodeDecodeError) as e:
        raise plotlib.InputError(f"{path}: not a trace: not JSON ({e}; a truncated trace?)")
    events = doc.get("traceEvents") if isinstance(doc, dict) else None
    if not isinstance(events, list):
        raise plotlib.InputError(f"{path}: not a trace of the trainer's -tr: no traceEvents list")
    ev = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]
    for e in ev:
        ok = (all(isinstance(e.get(k), (int, float)) for k in ("pid", "tid", "ts", "dur"))
              and isinstance(e.get("cat"), str) and isinstance(e.get("name"), str) and isinstance(e.get("args"), dict)
              and isinstance(e["args"].get("step"), int) and (e["tid"] == 0 or isinstance(e["args"].get("kind"), str)))
        if not ok:
            raise plotlib.InputError(f"{path}: a damaged event (a field missing or of the wrong type): {json.dumps(e)[:200]}")
    if not any(e["cat"] == "step" for e in ev):
        raise plotlib.InputError(f"{path}: the trace holds no step (a run stopped before its first step ended?)")
    return ev


def step_events(path, ev, step):
    """The events of one step (the last when step is None), every rank's step span among them."""
    steps = sorted({e["args"]["step"] for e in ev if e["cat"] == "step"})
    if step is None:
        step = steps[-1]
    if step not in steps:
        raise plotlib.InputError(f"--step {step}: {path} holds steps {steps[0]}..{steps[-1]}"
                                 + ("" if len(steps) == steps[-1] - steps[0] + 1 else f" (some: {steps})"))
    ev = [e for e in ev if e["args"]["step"] == step]
    ranks = sorted({e["pid"] for e in ev})
    for r in ranks:
        if not any(e["pid"] == r and e["cat"] == "step" for e in ev):
            raise plotlib.InputError(f"{path}: rank {r} has events of step {step} but not its step span (a damaged trace?)")
    return step, ranks, ev


def main():
    a = parse_args(sys.argv[1:])
    out, trace = plotlib.output_path(a.out, a.replace), a.trace
    step, ranks, ev = step_events(trace, read_events(trace), a.step)
    t0 = min(e["ts"] for e in ev if e["cat"] == "step")
    label_ms = max(e["dur"] for e in ev if e["cat"] == "step") / 1e3 / 40   # a bar of 1/40 of the step or more
    plt = plotlib.pyplot()
    from matplotlib.patches import Patch
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
            unit = str(e["args"].get("unit", ""))
            if unit and key != "wait" and w >= label_ms:   # the unit's name on bars wide enough to hold it
                ax.text(x + w / 2, y + 0.5, unit.replace("block", "b"), ha="center", va="center", fontsize=6,
                        color="white", clip_on=True)
        step_ms = [e["dur"] / 1e3 for e in ev if e["pid"] == r and e["cat"] == "step"][0]
        labels += [f"rank {r} comm", f"rank {r} compute\n(exposed {exposed.get(r, 0.0):.0f} of {step_ms:.0f} ms)"]
        ypos += [base + 0.5, base + 1.8]
    ax.set_yticks(ypos)
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xlabel(f"ms from the start of step {step}")
    ax.set_title(a.title or f"{trace}: step {step}")
    handles = [Patch(color=COLORS[k], label=k) for k in ("fwd", "bwd", "adamw", "wait", "fwd_gather", "bwd_gather",
                                                          "reduce_scatter", "all_reduce", "step_gather")]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=9, fontsize=8, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    plotlib.save(fig, out)
    print(f"{out}: step {step}, {len(ranks)} ranks")
    return 0


if __name__ == "__main__":
    plotlib.run(main)
