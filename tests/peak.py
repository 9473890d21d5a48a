#!/usr/bin/env python3
"""The planner's peak per rank (-plan N, host/peak.h) against the peak the CPU trainer measures.

The measured peak is the kernel's: at the end of a run rank 0 prints its peak resident set (VmHWM in
/proc/self/status) less its resident set before the model state was allocated (the program, the MPI
library and their buffers). Every buffer a step uses is written in the step (the state, the
activations, the pool's buffers, MPI's scratch), so after two steps (the second prefetches) the
difference is the memory the run itself needed at once, counted by the kernel page by page: nothing
the planner computes goes into it. Each run's planned peak (same flags, -plan N) must be within 10%;
runs with their state on disk (-oo disk, -op disk, -os) against the peak of the planner's offload table.

Then -bp pre against -bp post by hand: on a model whose blocks outweigh its embedding, the busiest
moment is a block's backward, where pre holds the block and the -pd blocks gathered ahead, post one
fewer (docs/formats.md: "one unit fewer live"): the gathered column is (1 + pd) and pd blocks.
And measured: two runs, pre and post, whose peaks differ by one block's parameters.

Then -mem M on one rank, where the peak is model state + activations alone, against the deepest L
worked out by hand from GPT-2's shapes.
Prints a table; exit status 0 when every row holds.
"""
import argparse, os, re, shutil, subprocess, sys, tempfile

SMALL, WIDE = "d2c64h2t64", "d2c128h4t64"
COMMON = ["-x", "2", "-v", "0"]
# (ranks, model, the run's flags): activations large (-t 64) or small beside the state and the pool
# (-b 1 -t 16: the embedding's buffers and MPI's copies of it are most of the peak)
CASES = [
    (1, SMALL, ["-b", "4", "-t", "64", "-z", "3"]),
    (2, SMALL, ["-b", "4", "-t", "64", "-z", "0"]),
    (2, SMALL, ["-b", "4", "-t", "64", "-z", "1", "-p", "bf16"]),
    (2, SMALL, ["-b", "4", "-t", "64", "-z", "2"]),
    (2, SMALL, ["-b", "4", "-t", "64", "-z", "3", "-pd", "0"]),
    (3, SMALL, ["-b", "2", "-t", "64", "-z", "3", "-pd", "2"]),
    (2, WIDE, ["-b", "2", "-t", "64", "-z", "3", "-wrap", "2", "-ra", "0"]),
    (4, WIDE, ["-b", "1", "-t", "64", "-z", "3", "-wrap", "half", "-rc", "1"]),
    (4, WIDE, ["-b", "2", "-t", "64", "-z", "3", "-p", "bf16", "-rc", "2"]),
    (3, WIDE, ["-b", "1", "-t", "64", "-z", "2", "-p", "bf16"]),
    (2, SMALL, ["-b", "1", "-t", "16", "-z", "0"]),
    (3, SMALL, ["-b", "1", "-t", "16", "-z", "3"]),
    (4, WIDE, ["-b", "1", "-t", "16", "-z", "3", "-ra", "0", "-pd", "2"]),
    (2, WIDE, ["-b", "1", "-t", "16", "-z", "1", "-p", "bf16"]),
    (4, SMALL, ["-b", "1", "-t", "16", "-z", "3", "-hs", "2"]),
    (2, SMALL, ["-b", "1", "-t", "16", "-z", "3", "-hs", "1"]),
    (3, SMALL, ["-b", "2", "-t", "64", "-z", "3", "-pd", "2", "-bp", "post"]),
    (3, SMALL, ["-b", "1", "-t", "16", "-z", "3", "-p", "bf16"]),
    (4, SMALL, ["-b", "1", "-t", "16", "-z", "3", "-hs", "2", "-p", "bf16"]),
]
# the state on disk (-oo disk, -op disk, -os): the planner's offload table, peak less what left the
# memory plus the staging slots (each as large as the largest unit it takes), against the run's
# measured peak; DIR is a temporary folder for the files. A 4-block model, so -os 3 and 5 leave
# slots that take a block where the embedding's slot is larger.
OFFLOAD_CASES = [
    (1, WIDE, ["-b", "2", "-t", "64", "-z", "3", "-oo", "disk:DIR"]),
    (2, "d4c128h4t64", ["-b", "1", "-t", "64", "-z", "3", "-oo", "disk:DIR", "-op", "disk:DIR", "-os", "5"]),
    (2, "d4c128h4t64", ["-b", "1", "-t", "64", "-z", "1", "-oo", "disk:DIR", "-os", "3", "-p", "bf16"]),
]
TOLERANCE = 0.10
# bf16's bound, tighter and one-sided: its plan leaves out the bf16 matmuls' packed operands (a few MiB,
# cpu/kernels_bf16.h), so it is under the measured peak, by at most 6% on the runs here (1-4.2% measured)
BF16_UNDER, BF16_OVER = 0.06, 0.01


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stdout[-1500:]}\n{p.stderr[-1500:]}")
    return p.stdout


def launch(n, args):
    return (["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n)] if n > 1 else []) + args


def measured_peak(binary, n, model, flags):
    """The run's measured peak (bytes), and the plan's peak the run prints beside it (bytes)."""
    out = run(launch(n, [binary, "-e", model] + COMMON + flags))
    m = re.search(r"\((\d+) bytes\) the run's peak; the plan's ([0-9.]+) (KiB|MiB|GiB)", out)
    if not m:
        sys.exit(f"no measured peak with the plan's beside it in the run's output:\n{out[-1500:]}")
    return int(m.group(1)), float(m.group(2)) * {"KiB": 2 ** 10, "MiB": 2 ** 20, "GiB": 2 ** 30}[m.group(3)]


def planned_peak(binary, n, model, flags):
    """The peak column of the run's stage in the table of its precision (the planner prints both)."""
    bf16 = "-p" in flags and flags[flags.index("-p") + 1] == "bf16"
    plan_flags = [f for i, f in enumerate(flags) if f != "-p" and (i == 0 or flags[i - 1] != "-p")]
    stage = plan_flags[plan_flags.index("-z") + 1]
    plan_flags = plan_flags[:plan_flags.index("-z")] + plan_flags[plan_flags.index("-z") + 2:]
    if "-oo" in flags or "-op" in flags:   # the offload table's peak column, in GiB (of the run's -p alone)
        at = flags.index("-z")
        out = run([binary, "-plan", str(n), "-e", model] + COMMON + flags[:at] + flags[at + 2:])
        for line in out.split("\noffload (")[1].splitlines()[2:]:
            cells = line.split()
            if cells and cells[0] == stage:
                return float(cells[2 if cells[1] == "DDP" else 1]) * 2.0 ** 30
        sys.exit(f"no stage {stage} row in the plan's offload table:\n{out[-1500:]}")
    out = run([binary, "-plan", str(n), "-e", model] + COMMON + plan_flags)
    table = out.split("  bf16 (-p bf16), MiB per rank:" if bf16 else "  fp32, MiB per rank:")[1]
    for line in table.splitlines():
        cells = line.split()
        if cells and cells[0] == stage:
            numbers = [c for c in cells[1:] if re.fullmatch(r"-?\d+\.\d+", c)]
            return float(numbers[6]) * 1048576.0
    sys.exit(f"no stage {stage} row in the plan:\n{out[-1500:]}")


def hand_worked_fit(binary):
    """-plan 1 -e d2c64h2t64 -b 1 -t 64 -mem 0.5: on one rank nothing is sharded or gathered and no
    collective runs, so the peak of L blocks is 16 bytes a parameter + the activations."""
    C, NH, T, Vp, maxT, B, M = 64, 2, 64, 50304, 64, 1, 0.5
    params_fixed = Vp * C + maxT * C + 2 * C              # wte, wpe, the final layernorm
    params_block = 12 * C * C + 13 * C                    # ln1, qkv, attproj, ln2, fc, fcproj and biases
    acts_layer = 18 * C + 4 + NH * T                      # floats per token each layer keeps
    acts_fixed = (2 * C + 3 + 2 * Vp + NH * T) + (14 * C + 2 * NH * T + Vp + 1)   # once, and the backward's scratch
    fixed = 16 * params_fixed + 4 * B * T * acts_fixed
    per_block = 16 * params_block + 4 * B * T * acts_layer
    want = int((M * 2 ** 30 - fixed) // per_block)
    out = run([binary, "-plan", "1", "-e", "d2c64h2t64", "-b", str(B), "-t", str(T), "-mem", str(M)])
    fit = out.split("whose peak fits in")[1]
    got = re.findall(r"^  [0-3].*?L=(\d+)\+?\s.*?L=(\d+)", fit, re.M)
    print(f"-mem {M} on one rank, C={C}: deepest L by hand {want}; the planner's per stage (fp32, bf16) {got}")
    return len(got) == 4 and all(int(a) == want and int(b) == want for a, b in got)


def hand_worked_backward_prefetch(binary):
    """-plan 4 -e d8c4096h32t64 -b 1 -t 64 -pd 2, -bp pre and post: a block is 12 C^2 + 13 C fp32
    parameters (201 MB at C = 4096, beside the embedding's 206 MB gathered once), so the pool is
    busiest in the top block's backward: the block itself and the blocks gathered ahead, -pd of them
    under pre (gathers started before its compute), -pd - 1 under post (after it)."""
    C, pd = 4096, 2
    block_mib = (12 * C * C + 13 * C) * 4 / 2 ** 20
    ok = True
    for bp, units in (("pre", 1 + pd), ("post", pd)):
        out = run([binary, "-plan", "4", "-e", "d8c4096h32t64", "-b", "1", "-t", "64", "-pd", str(pd), "-bp", bp])
        row = [l for l in out.split("  fp32, MiB per rank:")[1].splitlines() if l.split()[:1] == ["3"]][0].split()
        gathered, moment, want = float(row[2]), " ".join(row[8:]), units * block_mib
        good = abs(gathered / want - 1.0) <= 5e-4 and moment == "block backward"
        ok &= good
        print(f"-bp {bp} -pd {pd}: gathered {gathered:.2f} MiB at the {moment!r}; by hand {units} blocks of "
              f"{block_mib:.2f} MiB = {want:.2f}{'' if good else '  FAIL'}")
    return ok


def measured_backward_prefetch(binary):
    """-bp pre against -bp post, measured: d3c512h8t16 on 2 ranks at stage 3, -pd 1, -b 1 -t 16. The
    busiest moment is the LM head's backward (the embedding gathered, with its gradient buffer), where
    pre has already started the top block's gather and post has not, so the measured peaks (rank 0's
    VmHWM less its resident set before the model state) differ by one block's gathered parameters,
    (12 C^2 + 13 C) fp32 = 12,609,536 bytes, worked out here; within 10% of it (the bound of the
    planner's peak above). The two runs go side by side: each process's VmHWM is its own."""
    C, model = 512, "d3c512h8t16"
    block = (12 * C * C + 13 * C) * 4
    cmds = {bp: launch(2, [binary, "-e", model, "-b", "1", "-t", "16", "-z", "3", "-pd", "1", "-bp", bp] + COMMON)
            for bp in ("pre", "post")}
    procs = {bp: subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  env=dict(os.environ, OMP_NUM_THREADS="1")) for bp, c in cmds.items()}
    peaks = {}
    for bp, p in procs.items():
        out = p.communicate()[0]
        m = re.search(r"\((\d+) bytes\) the run's peak", out)
        if p.returncode != 0 or not m:
            sys.exit(f"failed: {' '.join(cmds[bp])}\n{out[-1500:]}")
        peaks[bp] = int(m.group(1))
    diff = peaks["pre"] - peaks["post"]
    ok = abs(diff / block - 1.0) <= TOLERANCE
    print(f"measured, {model} on 2 ranks, -z 3 -pd 1: -bp pre {peaks['pre']:,} bytes, post {peaks['post']:,}: pre - post "
          f"{diff:,} bytes, one block by hand {block:,} ({100 * (diff / block - 1):+.1f}%){'' if ok else '  FAIL'}")
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="./train_gpt2_zero3")
    args = ap.parse_args()
    print(f"  {'N':>2} {'model':<12} {'flags':<46} {'measured MiB':>13} {'planned MiB':>12} {'off':>7}")
    bad = 0
    folder = tempfile.mkdtemp()
    cases = CASES + [(n, m, [f.replace("DIR", folder) for f in flags]) for n, m, flags in OFFLOAD_CASES]
    for n, model, flags in cases:
        measured, said = measured_peak(args.binary, n, model, flags)
        planned = planned_peak(args.binary, n, model, flags)
        off = planned / measured - 1.0
        ok = abs(off) <= TOLERANCE
        if "bf16" in flags:
            ok = -BF16_UNDER <= off <= BF16_OVER
        # the run's own line names the plan's peak: the -plan table's, to its 2 decimals and the
        # startup check's own peak_run (a rank's data position aside): within 0.5%
        agrees = abs(said / planned - 1.0) <= 0.005
        bad += not ok or not agrees
        print(f"  {n:>2} {model:<12} {' '.join(flags).replace(folder, 'DIR'):<46} {measured / 2**20:>13.2f} "
              f"{planned / 2**20:>12.2f} {100 * off:>+6.1f}%{'' if ok else '  FAIL'}"
              f"{'' if agrees else f'  FAIL: the run says the plan is {said / 2**20:.2f} MiB'}")
    shutil.rmtree(folder, ignore_errors=True)
    for cmd, why in (([args.binary, "-e", SMALL, "-mem", "1"], "give it with -plan N"),
                     ([args.binary, "-plan", "2", "-e", "1M", "-mem", "1"], "has no shape to grow")):
        p = subprocess.run(cmd, capture_output=True, text=True)
        errors = [l for l in p.stderr.splitlines() if l.startswith("error")]
        if p.returncode == 0 or len(errors) != 1 or why not in errors[0] or "-mem" not in errors[0]:
            print(f"FAIL: {' '.join(cmd[1:])}: want one error line naming -mem ({why}), got {p.stderr.strip()!r}")
            bad += 1
    print("-mem without -plan, and with a bare parameter count: one error line each")
    if not hand_worked_backward_prefetch(args.binary):
        print("FAIL: -bp post does not hold one block fewer than -bp pre, as worked out by hand")
        bad += 1
    if not measured_backward_prefetch(args.binary):
        print("FAIL: the measured peaks of -bp pre and -bp post do not differ by one block's parameters")
        bad += 1
    if not hand_worked_fit(args.binary):
        print("FAIL: -mem's deepest model differs from the one worked out by hand")
        bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
