"""The end-of-run summaries and the time model's lines, against the Chrome trace of the same run and
the link's hold worked out by hand.

One run per case, 2 ranks, 5 steps of the V=1024 reference model over an emulated link of
1 GB/s + 1 ms a ring step (-link 1,1ms: every collective is held for a time known in advance, so most
of each step is waiting, and the compute share is small and known from the trace), with -tr. Then:

- "exposed communication by unit": each unit's figure is the sum of the trace's 'exposed' slices
  (rank 0) of that unit over the timed steps (all but the first) over their count; "norm" the
  slices of the norm's blocking all-reduce (unit "all"); their total is the mean of the step lines'
  "exposed comm" over the same steps. A summary that books one unit's waits under another, or
  counts a step twice, fails.
- "time model for this run: compute X ms per step measured on steps a-b": the mean over those steps
  of the trace's step slice less its exposed slices (the time the rank was not waiting). A
  calibration that counts waits as compute gives about the whole step instead (here 5-10 times
  more).
- "time: planner ... comm": the link's time for the ledger's collectives, by hand: each row's bytes
  / 1 GB/s + its collectives x (N-1) ring steps x 1 ms (2(N-1) for the norm's all-reduce).
- the startup report's memory lines: the stage table's model state and comm per rank, the marked
  stage, "theory bytes: state" and "this run holds", against 267,912 parameters worked out by hand.
- each step line's ms, tok/s and exposed comm (and its %): the trace's step slice, 32 tokens (B=2 x
  T=8 x N=2) over it, the trace's wait slices.
- the startup report's activations line: 517.00 KiB without recompute, 360.50 KiB with, by hand
  from the activations and the backward's scratch of B=2 T=8 (in the code below).
- the step lines' lr (warmup 2 steps, cosine to 0.1 of 1e-3): the NumPy reference's schedule
  (tests/reference/numpy_gpt2.py's lr_schedule, which the PyTorch dumps are checked against).
- the end of the run's "buffer pool" line: what the last step held at once, by hand from the live
  buffers at prefetch depth 1 (stage 3: during block 1's backward its params, block 0's prefetched,
  and the gradient buffers of the embedding, block 1 and block 2, still reducing: wte + wpe + 4
  blocks; stage 1 holds no transient buffer at all), and the same figure as the last step line's
  engine peak less "this run holds"; its fragmentation as the reserve less that, and its share. (The
  reserve itself is held against the backend's own count of what it allocated in
  tests/unit/test_engine_schedule.c.)
- "time: measured": the mean over the measured steps of the trace's step slices (step), exposed
  slices (exposed) and step less exposed (compute).

  /usr/bin/python3 tests/summary_oracle.py --binary ./train_gpt2_zero3
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference"))
import numpy_gpt2 as ref  # noqa: E402

N, STEPS, GBPS, LAT_MS = 2, 5, 1.0, 1.0
LR, WARMUP, FINAL = 1e-3, 2, 0.1   # a warmup and a cosine decay, so that every step's lr differs
failures = []


def check(ok, what):
    print(f"  {'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        failures.append(what)


def close(a, b, abs_tol, rel=0.0):
    return abs(a - b) <= abs_tol + rel * abs(b)


def run(binary, root, stage, cwd):
    trace = os.path.join(cwd, "trace.json")
    cmd = ["mpirun", "-np", str(N), binary, "-e", f"{root}/tests/reference/dumps/small_model.bin",
           "-i", f"{root}/tests/reference/dumps/small_tokens.bin", "-j", f"{root}/tests/reference/dumps/small_tokens.bin",
           "-b", "2", "-t", "8", "-x", str(STEPS), "-v", "0", "-z", str(stage), "-tr", trace,
           "-l", str(LR), "-u", str(WARMUP), "-q", str(FINAL), "-link", f"{GBPS:g},{LAT_MS:g}ms"]
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        sys.exit(f"summary oracle: {' '.join(cmd)} failed:\n{out.stderr[-2000:]}")
    return out.stdout, json.load(open(trace))["traceEvents"]


def slices(events, step, cat):
    return [e for e in events if e.get("ph") == "X" and e["pid"] == 0 and e["cat"] == cat and e["args"]["step"] == step]


def unit_of(e):   # the norm's all-reduce waits for every unit: the trace names it "all"
    u = e["args"].get("unit", "all")
    return "norm" if u == "all" else u


def ms(es):
    return sum(e["dur"] for e in es) / 1e3


MIB = {"B": 1 / 2**20, "KiB": 1 / 2**10, "MiB": 1.0, "GiB": 2**10}


def mib(value, unit):
    return float(value) * MIB[unit]


def check_pool(out, stage, holds, emb, block):
    """The buffer pool line against the live buffers by hand (fp32, -pd 1) and the step line's peak."""
    m = re.search(r"^buffer pool: (\d+) buffers reserve ([\d.]+) (\S+); the last step held at most ([\d.]+) (\S+) "
                  r"in them at once; fragmentation ([\d.]+) (\S+) \(([\d.]+)%\)$", out, re.M)
    check(m is not None, "the buffer pool line is printed")
    if m is None:
        return
    count, reserve, held, frag, share = int(m.group(1)), mib(*m.group(2, 3)), mib(*m.group(4, 5)), mib(*m.group(6, 7)), float(m.group(8))
    hand = (emb + 4 * block) * 4 / 2**20 if stage == 3 else 0.0
    check(close(held, hand, 0.006, 0.01), f"pool: the last step held {held:.3f} MiB = {hand:.3f} by hand (+ padding)")
    peaks = re.findall(r"\| peak [\d.]+ \S+ process, ([\d.]+) (\S+) engine", out)
    check(close(held, mib(*peaks[-1]) - holds, 0.011), f"pool: held {held:.3f} MiB = the last step's engine peak less the model state")
    check(count == 0 if stage != 3 else count > 0, f"pool: {count} buffers ({'some' if stage == 3 else 'none'} by hand)")
    check(reserve >= held - 0.006 and close(frag, reserve - held, 0.011), f"pool: fragmentation {frag:.3f} MiB = reserve less held")
    check(close(share, 100 * (reserve - held) / reserve if reserve else 0.0, 0.6), f"pool: fragmentation {share}% of the reserve")


def check_case(binary, root, stage):
    print(f"stage {stage}, {N} ranks, -link {GBPS:g},{LAT_MS:g}ms, {STEPS} steps:")
    with tempfile.TemporaryDirectory() as cwd:
        out, ev = run(binary, root, stage, cwd)
    step_ms = {s: ms(slices(ev, s, "step")) for s in range(STEPS)}
    exposed_ms = {s: ms(slices(ev, s, "exposed")) for s in range(STEPS)}
    timed = list(range(1, STEPS))
    # the startup report's memory lines: 267,912 parameters by hand (L=3, C=72, V=1024, maxT=64: wte 73,728 +
    # wpe 4,608 + 3 x (12 C^2 + 13 C = 63,144) + lnf 144); fp32 model state on N ranks 16, 8 + 8/N, 4 + 12/N, 16/N
    # bytes a parameter for stages 0-3; the comm column: 2(N-1)/N x 4P (stages 0-2), 1.5 x that (stage 3)
    P = 73728 + 4608 + 3 * 63144 + 144
    hand = [16 * P, (8 + 8 / N) * P, (4 + 12 / N) * P, 16 / N * P]
    comm = [2 * (N - 1) / N * 4 * P] * 3 + [1.5 * 2 * (N - 1) / N * 4 * P]
    rows = re.findall(r"^\|   ([0-3])(?: DDP)? +([\d.]+) MiB +([\d.]+) MiB( +<- this run)?$", out, re.M)
    check(len(rows) == 4 and [r[0] for r in rows] == list("0123"), "the report's memory table has stages 0-3")
    for st, mem, cm, here in rows:
        st = int(st)
        check(close(float(mem), hand[st] / 2**20, 0.006), f"report: stage {st} model state {mem} MiB = {hand[st] / 2**20:.3f} by hand")
        check(close(float(cm), comm[st] / 2**20, 0.006, 0.01), f"report: stage {st} comm {cm} MiB = {comm[st] / 2**20:.3f} by hand (+ padding)")
        check(bool(here) == (st == stage), f"report: stage {st} {'is' if st == stage else 'is not'} marked as this run")
    state = int(re.search(r"theory bytes: state (\d+)", out).group(1))
    check(state == round(hand[stage]), f"report: theory bytes: state {state} = {round(hand[stage])} by hand")
    holds = float(re.search(r"this run holds ([\d.]+) MiB of model state", out).group(1))
    check(close(holds, hand[stage] / 2**20, 0.006, 0.01), f"report: holds {holds} MiB = {hand[stage] / 2**20:.3f} by hand + padding (< 1%)")
    # the activations line, by hand for B=2 T=8 C=72 L=3 NH=3 Vp=1024 (BT = 16, in floats): per layer
    # ln1, atty, attproj, residual2, ln2, fcproj, residual3 BT*C = 7 x 1152, four BT means and rstds 64,
    # qkv 3 BT C 3456, att B NH T T 384, fch and its GELU 2 x 4 BT C 9216: 21,184; once: encoded, lnf
    # 2 x 1152, lnf mean and rstd 32, logits and probs 2 x 16,384, losses 16, preatt 384, and the
    # backward's scratch (dresidual, dln, datty 3 x 1152, dqkv 3456, dfch and its GELU 9216, dpreatt and
    # datt 768, dlogits 16,384, dlosses 16): 68,800. 3 x 21,184 + 68,800 = 132,352 floats = 517.00 KiB;
    # recompute keeps one block's (layers 1-2 only their residual3): 132,352 - 2 x 20,032 = 360.50 KiB
    acts = re.search(r"activations per rank: ([\d.]+) KiB without recompute, ([\d.]+) KiB with", out)
    check(acts and float(acts.group(1)) == 517.0 and float(acts.group(2)) == 360.5,
          f"report: activations {acts.group(1) if acts else '?'} / {acts.group(2) if acts else '?'} KiB = 517.00 / 360.50 by hand")
    check_pool(out, stage, holds, 73728 + 4608, 63144)
    # the per-unit summary
    m = re.search(r"exposed communication by unit \(rank 0, mean ms per step over (\d+) steps\):\n(.*)\n  norm ([\d.]+)", out)
    check(m is not None and int(m.group(1)) == len(timed), f"the summary covers the {len(timed)} steps after the first")
    summary = dict(zip(m.group(2).split()[::2], map(float, m.group(2).split()[1::2])))
    summary["norm"] = float(m.group(3))
    units = sorted({unit_of(e) for s in timed for e in slices(ev, s, "exposed")})
    check(set(units) <= set(summary), f"every unit that waited in the trace is in the summary ({' '.join(units)})")
    for u in summary:
        want = sum(ms([e for e in slices(ev, s, "exposed") if unit_of(e) == u]) for s in timed) / len(timed)
        check(close(summary[u], want, 0.006), f"{u}: summary {summary[u]:.2f} ms = the trace's waits {want:.3f} ms a step")
    lines = {int(a): float(b) for a, b in re.findall(r"^step +(\d+)/\d+ .*exposed comm ([\d.]+) ms", out, re.M)}
    mean_line = sum(lines[s + 1] for s in timed) / len(timed)
    check(close(sum(summary.values()), mean_line, 0.01 * len(summary) + 0.06),
          f"the summary's total {sum(summary.values()):.2f} ms = the step lines' mean exposed {mean_line:.2f} ms")
    lrs = {int(a): float(b) for a, b in re.findall(r"^step +(\d+)/\d+ .*\| lr ([\d.e+-]+) \|", out, re.M)}
    for s in range(STEPS):
        want = ref.lr_schedule(s, LR, WARMUP, FINAL, STEPS)
        check(close(lrs[s + 1], want, 0.0, 0.006), f"step {s + 1}'s lr {lrs[s + 1]:.2e} = the NumPy reference's schedule {want:.3e}")
    # each step line's ms, tok/s and exposed comm: the trace's step slice, B x T x N = 32 tokens over it,
    # the trace's wait slices
    for s, line in re.findall(r"^step +(\d+)/\d+ (.*)$", out, re.M):
        s = int(s) - 1
        f = re.search(r"\| ([\d.]+) ms \| (\d+) tok/s .*exposed comm ([\d.]+) ms \((\d+)%\)", line)
        line_ms, tok_s, exp, pct = float(f.group(1)), int(f.group(2)), float(f.group(3)), int(f.group(4))
        check(close(line_ms, step_ms[s], 0.06, 0.005) and close(tok_s, 32 / (step_ms[s] / 1e3), 1.0, 0.01)
              and close(exp, exposed_ms[s], 0.06, 0.005) and close(pct, 100 * exposed_ms[s] / step_ms[s], 0.6),
              f"step {s + 1}: {line_ms} ms, {tok_s} tok/s, exposed {exp} ms ({pct}%) = the trace's {step_ms[s]:.2f} ms, "
              f"{32 / (step_ms[s] / 1e3):.0f} tok/s, {exposed_ms[s]:.2f} ms")
    # the time model's calibration of compute
    m = re.search(r"time model for this run: compute ([\d.]+) ms per step measured on steps? (\d+)(?:-(\d+))?", out)
    first, last = int(m.group(2)), int(m.group(3) or m.group(2))
    calib = [s - 1 for s in range(first, last + 1)]
    want = sum(step_ms[s] - exposed_ms[s] for s in calib) / len(calib)
    step_mean = sum(step_ms[s] for s in calib) / len(calib)
    check(close(float(m.group(1)), want, 0.06, 0.02),
          f"compute {m.group(1)} ms = the trace's step less its waits {want:.2f} ms (steps {first}-{last}; the whole step "
          f"is {step_mean:.1f} ms)")
    # the planner's comm over the link, by hand from the ledger's rows
    rows = re.findall(r"^  (\w+) +(\d+) collectives?, +([\d,]+) bytes in all \|", out, re.M)
    link_ms = 0.0
    for kind, count, sent in rows:
        ring_steps = 2 * (N - 1) if kind in ("norm", "all_reduce") else N - 1
        link_ms += int(sent.replace(",", "")) / (GBPS * 1e9) * 1e3 + int(count) * ring_steps * LAT_MS
    planner = re.search(r"^time: planner +compute +([\d.]+) ms \| comm +([\d.]+) ms", out, re.M)
    check(close(float(planner.group(2)), link_ms, 0.06),
          f"planner comm {planner.group(2)} ms = the ledger over the link by hand {link_ms:.2f} ms")
    check(close(float(planner.group(1)), want, 0.06, 0.02), f"planner compute {planner.group(1)} ms = the calibration's")
    # the measured line
    m = re.search(r"measured: the mean of steps? (\d+)(?:-(\d+))?", out)
    meas = [s - 1 for s in range(int(m.group(1)), int(m.group(2) or m.group(1)) + 1)]
    got = re.search(r"^time: measured +compute +([\d.]+) ms \| comm +[\d.]+ ms \| exposed +([\d.]+) ms \| step +([\d.]+) ms", out, re.M)
    k = len(meas)
    for name, value, want in (("compute", got.group(1), sum(step_ms[s] - exposed_ms[s] for s in meas) / k),
                              ("exposed", got.group(2), sum(exposed_ms[s] for s in meas) / k),
                              ("step", got.group(3), sum(step_ms[s] for s in meas) / k)):
        check(close(float(value), want, 0.06, 0.01), f"measured {name} {value} ms = the trace's {want:.2f} ms")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="./train_gpt2_zero3")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for stage in (3, 1):
        check_case(os.path.abspath(args.binary), root, stage)
    if failures:
        sys.exit(f"summary oracle: {len(failures)} figures differ from the trace or the link by hand")
    print("summary oracle: every summary and time-model figure agrees with the trace and the link")


if __name__ == "__main__":
    main()
