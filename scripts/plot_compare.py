#!/usr/bin/env python3
"""
Plots a DDP run against a ZeRO-3 run of the same model, data and init (scripts/compare_ddp_zero3.sh
makes the two runs): the two loss curves and their difference, the model-state memory each rank
holds (resident states and per-step peak), and the bytes each rank sends per step. Prints the
numbers the plot shows, the largest loss difference first.

    /usr/bin/python3 scripts/plot_compare.py --ddp OUT/ddp/log.csv --zero3 OUT/zero3/log.csv \\
        --out docs/compare_ddp_zero3.png --title "d2c64h2t64, 4 ranks"
    /usr/bin/python3 scripts/plot_compare.py --ddp ... --zero3 ... --table N
        the numbers alone as docs/primer.md's Markdown table (N: the ranks, for the 1/N beside the
        states' ratio), no picture

The logs are the trainer's log.csv (docs/DESIGN.md "Log"): step,train_loss,val_loss,lr,grad_norm,ms,
tokens_per_s,comm_bytes,mem_states_bytes,mem_engine_peak_bytes, with rank 0's bytes (the peak compared is
the engine's buffers; mem_peak_bytes, the process's, is printed beside it).
Needs matplotlib (Debian: python3-matplotlib).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import plotlib  # noqa: E402

REQUIRED = ("step", "train_loss", "val_loss", "ms", "comm_bytes", "mem_states_bytes", "mem_peak_bytes", "mem_engine_peak_bytes")
InputError = plotlib.InputError


def read_log(path):
    """-> dict of column -> list (floats; None for an empty val_loss)."""
    rows = plotlib.read_log(path, REQUIRED)
    return {c: [r[c] for r in rows] for c in REQUIRED}


def mib(x):
    return x / 1048576.0


def compare(ddp, zero3):
    """The numbers: largest train/val loss differences over the common steps, memory, comm."""
    steps = min(len(ddp["step"]), len(zero3["step"]))
    if ddp["step"][:steps] != zero3["step"][:steps]:
        raise InputError("the two logs do not cover the same steps")
    if ddp["mem_states_bytes"][-1] <= 0:
        raise InputError("the DDP log's mem_states_bytes is %g: not a trainer's log" % ddp["mem_states_bytes"][-1])
    train_diff = [abs(a - b) for a, b in zip(ddp["train_loss"][:steps], zero3["train_loss"][:steps])]
    val_pairs = [(a, b) for a, b in zip(ddp["val_loss"][:steps], zero3["val_loss"][:steps])
                 if a is not None and b is not None]
    worst = max(range(steps), key=lambda i: train_diff[i])
    later = slice(1, steps) if steps > 1 else slice(0, steps)   # step 0 fills the buffer pool
    mean = lambda xs: sum(xs) / len(xs)
    return {
        "steps": steps,
        "max_train_diff": train_diff[worst],
        "max_train_diff_step": int(ddp["step"][worst]),
        "max_val_diff": max((abs(a - b) for a, b in val_pairs), default=float("nan")),
        "final_train": (ddp["train_loss"][steps - 1], zero3["train_loss"][steps - 1]),
        "states": (ddp["mem_states_bytes"][-1], zero3["mem_states_bytes"][-1]),
        "peak": (max(ddp["mem_engine_peak_bytes"]), max(zero3["mem_engine_peak_bytes"])),
        "process": (max(ddp["mem_peak_bytes"]), max(zero3["mem_peak_bytes"])),
        "comm": (mean(ddp["comm_bytes"][later]), mean(zero3["comm_bytes"][later])),
        "ms": (mean(ddp["ms"][later]), mean(zero3["ms"][later])),
        "train_diff": train_diff,
    }


def plot(ddp, zero3, numbers, out, title):
    plt = plotlib.pyplot()

    colors = {"DDP": "#1f77b4", "ZeRO-3": "#d62728"}
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    fig.suptitle("DDP (stage 0) vs ZeRO-3: same model, data and init%s" % (" - " + title if title else ""))

    ax = axes[0][0]
    for name, log in (("DDP", ddp), ("ZeRO-3", zero3)):
        ax.plot(log["step"], log["train_loss"], color=colors[name], lw=1.2,
                ls="-" if name == "DDP" else "--", label=name + " train")
        val = [(s, v) for s, v in zip(log["step"], log["val_loss"]) if v is not None]
        if val:
            ax.plot([s for s, _ in val], [v for _, v in val], "o", color=colors[name], ms=4,
                    mfc="none" if name == "ZeRO-3" else colors[name], label=name + " val")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title("loss (the curves lie on top of each other)", fontsize=10)
    ax.legend()
    ax.grid(alpha=0.3)

    ax = axes[0][1]
    steps = ddp["step"][:numbers["steps"]]
    diffs = [max(d, 1e-9) for d in numbers["train_diff"]]
    ax.semilogy(steps, diffs, color="#444444", lw=1)
    ax.set_ylim(1e-9, max(1e-3, max(diffs) * 2))
    ax.set_xlabel("step")
    ax.set_ylabel("|train loss DDP - ZeRO-3|")
    same = sum(1 for d in numbers["train_diff"] if d == 0.0)
    if same == numbers["steps"]:
        title = "loss difference: none - the logged losses (9 digits)\nare identical at all %d steps (drawn at 1e-9)" % same
    else:
        title = ("loss difference: largest %.1e (step %d)\nidentical to 9 digits at %d of %d steps (drawn at 1e-9)"
                 % (numbers["max_train_diff"], numbers["max_train_diff_step"], same, numbers["steps"]))
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, which="both")

    ax = axes[1][0]
    groups = ("model states\n(params, grads, optimizer state)", "peak in a step\n(+ gathered units, grad buffers)")
    for k, name in enumerate(("DDP", "ZeRO-3")):
        values = [mib(numbers["states"][k]), mib(numbers["peak"][k])]
        xs = [g + (k - 0.5) * 0.38 for g in range(len(groups))]
        bars = ax.bar(xs, values, width=0.38, color=colors[name], label=name)
        for bar, v in zip(bars, values):
            ax.annotate("%.1f" % v, (bar.get_x() + bar.get_width() / 2, v), ha="center", va="bottom", fontsize=9)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups)
    ax.set_ylabel("MiB per rank (rank 0)")
    ax.set_title("memory per rank: ZeRO-3 holds %.2fx DDP's model states" % (numbers["states"][1] / numbers["states"][0]), fontsize=10)
    ax.legend()
    ax.grid(alpha=0.3, axis="y")

    ax = axes[1][1]
    for name, log in (("DDP", ddp), ("ZeRO-3", zero3)):
        ax.plot(log["step"], [mib(b) for b in log["comm_bytes"]], color=colors[name], lw=1.2, label=name)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("step")
    ax.set_ylabel("MiB sent per rank per step (ring model)")
    ax.set_title("bytes sent per step: ZeRO-3 %.2fx DDP's\n(2 gathers + 1 reduce-scatter vs 1 all-reduce)"
                 % (numbers["comm"][1] / numbers["comm"][0] if numbers["comm"][0] else float("nan")), fontsize=10)
    ax.legend()
    ax.grid(alpha=0.3)

    fig.tight_layout(rect=(0, 0, 1, 0.96))
    plotlib.save(fig, out)


def markdown_table(n, ranks):
    """docs/primer.md's table: DDP against ZeRO-3, and their ratio."""
    ratio = lambda pair: pair[1] / pair[0] if pair[0] else float("nan")
    return [
        "| | DDP | ZeRO-3 | ratio |",
        "|---|---|---|---|",
        "| model states per rank | %.2f MiB | %.2f MiB | %.2f (1/N = %.2f) |"
        % (mib(n["states"][0]), mib(n["states"][1]), ratio(n["states"]), 1.0 / ranks),
        "| peak per rank (states + gathered units + gradient buffers) | %.2f MiB | %.2f MiB | %.2f |"
        % (mib(n["peak"][0]), mib(n["peak"][1]), ratio(n["peak"])),
        "| bytes sent per rank per step | %.2f MiB | %.2f MiB | %.2f |"
        % (mib(n["comm"][0]), mib(n["comm"][1]), ratio(n["comm"])),
        "| final train loss (step %d) | %.6f | %.6f | |" % ((n["steps"],) + tuple(n["final_train"])),
        "| largest train loss difference over the %d steps | | | %.3g |" % (n["steps"], n["max_train_diff"]),
    ]


def main(argv):
    parser = plotlib.ArgumentParser(prog="plot_compare.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--ddp", required=True, help="log.csv of the DDP run")
    parser.add_argument("--zero3", required=True, help="log.csv of the ZeRO-3 run")
    parser.add_argument("--out", help="PNG to write")
    parser.add_argument("--table", type=int, metavar="N", help="print the Markdown table of N ranks' runs instead")
    parser.add_argument("--title", default="", help="what the runs were (model, ranks)")
    parser.add_argument("--replace", action="store_true", help="replace --out if it exists (else: a numbered sibling)")
    args = parser.parse_args(argv)
    if (args.out is None) == (args.table is None):
        raise InputError("give --out PNG (a picture) or --table N (the table), one of them")
    if args.table is not None and args.table < 1:
        raise InputError("--table: the runs' ranks, at least 1, got %d" % args.table)
    ddp, zero3 = read_log(args.ddp), read_log(args.zero3)
    numbers = compare(ddp, zero3)
    if args.table is not None:
        print("\n".join(markdown_table(numbers, args.table)))
        return 0
    args.out = plotlib.output_path(args.out, args.replace)
    plot(ddp, zero3, numbers, args.out, args.title)
    n = numbers
    print("steps compared           %d" % n["steps"])
    print("largest train loss diff  %.3e (step %d)" % (n["max_train_diff"], n["max_train_diff_step"]))
    print("largest val loss diff    %.3e" % n["max_val_diff"])
    print("final train loss         DDP %.6f   ZeRO-3 %.6f" % n["final_train"])
    print("model states per rank    DDP %.2f MiB   ZeRO-3 %.2f MiB   (x%.3f)"
          % (mib(n["states"][0]), mib(n["states"][1]), n["states"][1] / n["states"][0]))
    print("engine peak per rank     DDP %.2f MiB   ZeRO-3 %.2f MiB" % (mib(n["peak"][0]), mib(n["peak"][1])))
    print("process peak, rank 0     DDP %.2f MiB   ZeRO-3 %.2f MiB   (the kernel's count)" % (mib(n["process"][0]), mib(n["process"][1])))
    print("sent per rank per step   DDP %.2f MiB   ZeRO-3 %.2f MiB   (x%.3f)"
          % (mib(n["comm"][0]), mib(n["comm"][1]), n["comm"][1] / n["comm"][0] if n["comm"][0] else float("nan")))
    print("mean step time           DDP %.1f ms   ZeRO-3 %.1f ms" % (n["ms"][0], n["ms"][1]))
    print("wrote %s" % args.out)
    return 0


if __name__ == "__main__":
    plotlib.run(lambda: main(sys.argv[1:]))
