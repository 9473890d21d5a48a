#!/usr/bin/env python3
"""Flags at their edges, each against an independent reference, through the trainer users run.

  1. -gc 0 (no clipping) gives the losses of a threshold no norm reaches (-gc 1e6: the other branch of
     the clip), on 2 ranks at stage 3; and -gc 1 differs from it (the norms pass 1, so clipping bites).
  2. validation with -m > 1 on N = 2, 3, 4 ranks: the val losses of one rank reading all N*m windows
     with the same training (A = N micro-steps on one rank = A = 1 on N ranks). A wrong window
     formula reads other tokens: with -m 1 it could not show.
  3. -wrap K on models deep enough for K < L (L = 4: K = 2, 4; L = 6: K = 2, 3): the losses and
     norms of -wrap 1, at stage 3 on 2 ranks.
  4. checkpoints of every stage written on 2 or 3 ranks, resumed on another N at another stage: the
     losses of the uninterrupted run.
  5. the model state the run reports for stages 0-3 on 2 ranks against the figure worked by hand
     (267,912 parameters of the V=1024 reference model x 16, 12, 10, 8 bytes / 2... see below).
  6. the trace's step durations against a wall clock read around the run, and the compute and wait
     spans inside each step against the step.
  7. the random init, exported after a step at learning rate 0 on 2 ranks at stage 3: every tensor's
     mean and std against GPT-2's recipe by hand (0.02; 0.02 / sqrt(2L) for the two residual
     projections; layernorm weights 1, biases 0; the padded vocabulary rows 0).
Prints a line per check; exit status 0 when every check holds.
"""
import csv, json, os, re, shutil, subprocess, sys, tempfile, time

BIN = "./train_gpt2_zero3"
SMALL = ["-e", "tests/reference/dumps/small_model.bin", "-i", "tests/reference/dumps/small_tokens.bin", "-j", "tests/reference/dumps/small_tokens.bin"]
failures = []


def run(n, args, out=None, ok=True):
    cmd = [BIN] + args + (["-o", out] if out else [])
    if n > 1:
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n)] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if ok and p.returncode != 0:
        sys.exit(f"run failed: {' '.join(cmd)}\n{p.stdout[-1500:]}\n{p.stderr[-1500:]}")
    return p


def log(out):
    with open(os.path.join(out, "log.csv")) as f:
        return list(csv.DictReader(f))


def col(rows, name):
    return [float(r[name]) for r in rows if r.get(name, "") not in ("", None)]


def worst(a, b):
    if len(a) != len(b) or not a:
        return float("inf")
    return max(abs(x - y) / max(abs(y), 1e-30) for x, y in zip(a, b))


def check(ok, what):
    print(f"  {'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        failures.append(what)


def check_init(o):
    import numpy as np
    L, C, maxT, V, Vp = 4, 64, 32, 50257, 50304
    run(2, ["-e", f"d{L}c{C}h2t{maxT}", "-b", "1", "-t", "8", "-x", "1", "-v", "0", "-l", "0", "-z", "3"], o)
    w = np.fromfile(os.path.join(o, "model.bin"), dtype=np.float32, offset=1024)
    shapes = [("wte", Vp * C), ("wpe", maxT * C), ("ln1w", L * C), ("ln1b", L * C), ("qkvw", L * 3 * C * C),
              ("qkvb", L * 3 * C), ("attprojw", L * C * C), ("attprojb", L * C), ("ln2w", L * C), ("ln2b", L * C),
              ("fcw", L * 4 * C * C), ("fcb", L * 4 * C), ("fcprojw", L * 4 * C * C), ("fcprojb", L * C), ("lnfw", C), ("lnfb", C)]
    want_std = {"wte": 0.02, "wpe": 0.02, "qkvw": 0.02, "fcw": 0.02, "attprojw": 0.02 / (2 * L) ** 0.5, "fcprojw": 0.02 / (2 * L) ** 0.5}
    at, bad = 0, []
    check(w.size == sum(n for _, n in shapes), f"init: model.bin holds {w.size} parameters, by hand {sum(n for _, n in shapes)}")
    for name, n in shapes:
        x = w[at:at + n].astype(np.float64)
        at += n
        if name == "wte":
            bad += [name + " padding"] if np.any(x[V * C:] != 0) else []
            x = x[:V * C]
        if name in want_std:
            if abs(x.std() / want_std[name] - 1) > 0.03 or abs(x.mean()) > 0.1 * want_std[name]:
                bad.append(f"{name} std {x.std():.5f} (want {want_std[name]:.5f})")
        elif np.any(x != (1.0 if name.endswith("w") else 0.0)):
            bad.append(f"{name} not {'1' if name.endswith('w') else '0'}")
    check(not bad, f"init (d{L}c{C}, lr 0, stage 3 on 2 ranks): every tensor's std and value as GPT-2's recipe says {bad}")


def main():
    tmp = tempfile.mkdtemp(prefix="boundaries_")
    k = [0]

    def out():
        k[0] += 1
        return os.path.join(tmp, f"r{k[0]}")

    try:
        base = SMALL + ["-t", "16", "-x", "8", "-v", "0", "-l", "3e-3"]
        # 1. -gc 0
        o0, o1, oc = out(), out(), out()
        run(2, base + ["-b", "6", "-z", "3", "-gc", "0"], o0)
        run(2, base + ["-b", "6", "-z", "3", "-gc", "1e6"], o1)
        run(2, base + ["-b", "6", "-z", "3", "-gc", "1"], oc)
        l0, l1, lc, norms = col(log(o0), "train_loss"), col(log(o1), "train_loss"), col(log(oc), "train_loss"), col(log(o0), "grad_norm")
        check(worst(l0, l1) == 0.0, f"-gc 0 = -gc 1e6, losses bitwise (worst {worst(l0, l1):.1e})")
        check(max(norms) > 1.0 and worst(lc, l0) > 1e-4,
              f"-gc 1 clips (norms up to {max(norms):.2f}) and leaves -gc 0's losses by {worst(lc, l0):.1e}")

        # 2. validation with -m > 1 against one rank reading all the windows
        for n, m in ((2, 2), (3, 2), (4, 3)):
            v = ["-t", "8", "-x", "4", "-v", "2", "-l", "3e-3", "-b", "3"]
            one, many = out(), out()
            run(1, SMALL + v + ["-m", str(n * m), "-d", str(3 * 8 * n), "-z", "0"], one)
            run(n, SMALL + v + ["-m", str(m), "-z", "3"], many)
            a, b = col(log(many), "val_loss"), col(log(one), "val_loss")
            check(len(a) == 2 and worst(a, b) < 1e-5,
                  f"validation -m {m} on {n} ranks = 1 rank reading {n * m} windows ({len(a)} val rows, worst {worst(a, b):.1e})")

        # 3. -wrap K < L against -wrap 1
        for L, ks in ((4, (2, 4)), (6, (2, 3))):
            w = ["-e", f"d{L}c32h2t32", "-b", "2", "-t", "16", "-x", "3", "-v", "0", "-z", "3"]
            ref = out()
            run(2, w, ref)
            for K in ks:
                o = out()
                p = run(2, w + ["-wrap", str(K)], o)
                units = re.search(r"(\d+) units", p.stdout)
                dl = worst(col(log(o), "train_loss"), col(log(ref), "train_loss"))
                dn = worst(col(log(o), "grad_norm"), col(log(ref), "grad_norm"))
                check(dl < 1e-5 and dn < 1e-5 and "ledger: measured = theory" in p.stdout,
                      f"L={L} -wrap {K}: losses {dl:.1e}, norms {dn:.1e} from -wrap 1; ledger = theory")

        # 4. every stage's checkpoint on several ranks, resumed on another N at another stage
        c = SMALL + ["-t", "16", "-x", "6", "-v", "0", "-l", "3e-3", "-c", "0.1"]
        full = out()
        run(1, c + ["-b", "12", "-z", "0"], full)
        want = col(log(full), "train_loss")
        for stage, n_write, n_resume, stage_resume in ((0, 2, 3, 3), (1, 3, 2, 2), (2, 2, 4, 1), (3, 3, 2, 0), (3, 2, 1, 3)):
            d = out()
            env = dict(os.environ, ZERO3_INJECT_NAN_STEP="4")
            cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-x", "ZERO3_INJECT_NAN_STEP", "-np", str(n_write),
                   BIN] + c + ["-b", str(12 // n_write), "-z", str(stage), "-n", "3", "-o", d]
            subprocess.run(cmd, capture_output=True, text=True, env=env)
            p = run(n_resume, c + ["-b", str(12 // n_resume), "-z", str(stage_resume), "-y", "1"], d)
            got = col(log(d), "train_loss")
            check(worst(got, want) < 1e-5 and "ckpt_00000003" in p.stdout,
                  f"stage {stage} checkpoint on {n_write} ranks, resumed at stage {stage_resume} on {n_resume}: "
                  f"{len(got)} losses, worst {worst(got, want):.1e} from the uninterrupted run")

        # 5. model state against the figure by hand: 267,912 parameters (V=1024 C=72 L=3 maxT=64:
        # 1024*72 + 64*72 + 3*(12*72*72 + 13*72) + 2*72), fp32, 2 ranks: params 4 + grads 4 + m, v 8
        # bytes each, whole or halved as the stage says
        psi = 1024 * 72 + 64 * 72 + 3 * (12 * 72 * 72 + 13 * 72) + 2 * 72
        for stage, per_param in ((0, 16), (1, 4 + 4 + 8 / 2), (2, 4 + 4 / 2 + 8 / 2), (3, 16 / 2)):
            p = run(2, SMALL + ["-b", "2", "-t", "8", "-x", "1", "-v", "0", "-z", str(stage)])
            m = re.search(r"theory bytes: state (\d+)", p.stdout)
            check(psi == 267912 and m and int(m.group(1)) == psi * per_param,
                  f"stage {stage}, 2 ranks: model state {m.group(1) if m else '?'} bytes, by hand {psi * per_param:.0f}")

        # ... and the planner's what-if table for the same model on 2 ranks: fp32 16, 12, 10, 8 bytes a
        # parameter; mixed precision (bf16 params 2 + grads 2, fp32 master + m + v 12) 16, 2 + 2 + 12/2 = 10,
        # 2 + 2/2 + 12/2 = 9, 16/2 = 8
        p = run(1, ["-plan", "2", "-e", "tests/reference/dumps/small_model.bin"])
        # the bytes column (a whole number) of each stage row; the split tables after each show decimals
        rows = [int(m.group(1).replace(",", "")) for m in re.finditer(r"^  \d (?:DDP)?\s+([\d,]+)\s", p.stdout, re.M)]
        want = [psi * b for b in (16, 12, 10, 8, 16, 10, 9, 8)]
        check(rows[:8] == want, f"-plan 2: model state by stage, fp32 then mixed precision, {rows[:8]} = by hand {want}")

        # 6. the trace's durations against a wall clock around the run
        tr, o = os.path.join(tmp, "trace.json"), out()
        t0 = time.monotonic()
        run(2, SMALL + ["-b", "6", "-t", "16", "-x", "12", "-v", "0", "-z", "3", "-tr", tr], o)
        wall_us = (time.monotonic() - t0) * 1e6
        ev = json.load(open(tr))
        ev = ev["traceEvents"] if isinstance(ev, dict) else ev
        steps = [e for e in ev if e.get("cat") == "step" and e.get("pid") == 0]
        inner = [e for e in ev if e.get("cat") in ("compute", "exposed") and e.get("pid") == 0]
        step_us = sum(e["dur"] for e in steps)
        logged_ms = sum(col(log(o), "ms")) if "ms" in log(o)[0] else None
        covered = []
        for s in steps:
            inside = sum(e["dur"] for e in inner if s["ts"] <= e["ts"] and e["ts"] + e["dur"] <= s["ts"] + s["dur"] + 1)
            covered.append(inside / s["dur"])
        check(len(steps) == 12 and step_us < wall_us,
              f"trace: 12 steps of rank 0 last {step_us / 1e3:.1f} ms in all, inside the wall clock's {wall_us / 1e3:.1f} ms")
        # no step's spans overlap (they would cover more than all of it); together they cover most of the
        # run's step time (the rest: the host between engine calls, longer on a loaded machine)
        inside_all = sum(c * s["dur"] for c, s in zip(covered, steps)) / step_us
        check(all(c <= 1.0 + 1e-6 for c in covered) and inside_all >= 0.5,
              f"trace: each step's compute and wait spans cover {min(covered):.2f}-{max(covered):.2f} of it (overlap would exceed 1), "
              f"{inside_all:.2f} of all steps together")
        if logged_ms is not None:
            check(abs(step_us / 1e3 - logged_ms) <= 0.05 * logged_ms + 1.0,
                  f"trace: the steps' durations ({step_us / 1e3:.1f} ms) = log.csv's ms ({logged_ms:.1f})")
        check_init(out())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"boundaries: {len(failures)} failures")
        sys.exit(1)
    print("boundaries: all passed")


if __name__ == "__main__":
    main()
