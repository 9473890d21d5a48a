#!/usr/bin/env python3
"""The variants the notes teach, checked as exactly as the stages, through the real trainer.

Runs ./train_gpt2_zero3 with HSDP (-hs), no reshard after forward (-ra 0), activation recompute
(-rc 1, and the naive -rc 2), the persistence threshold (-pt) and their combinations, on N = 1..4,
and checks from each run's startup report and log.csv that
  1. the losses and gradient norms equal stage 0 on one rank, step by step (rel 1e-5);
  2. the bytes sent per step equal the run's theory (gpt2_theory_step_comm, printed in the report)
     exactly, and the resident model state equals its formula up to the units' padding;
  3. the variants move the bytes the way the notes say: -ra 0 sends what DDP sends (2 units, not 3),
     -rc 2 sends more than -rc 1, HSDP's bytes across groups are those of one gradient all-reduce of
     a shard;
  4. -clip local (the pitfall) leaves stage 0's losses on 2+ ranks;
  5. a checkpoint written under one variant resumes under another (and another N, stage and unit
     granularity) and continues stage 0's losses;
  6. every run's collective ledger, measured, equals its theory (the run says so at its end);
  7. bad variant flags end every rank with one error line.
Prints a table; exit status 0 when everything holds.
"""
import argparse, csv, os, re, shutil, subprocess, sys, tempfile

MODEL, T, ROWS, STEPS = "d2c48h2t32", 32, 12, 4
COMMON = ["-e", MODEL, "-t", str(T), "-x", str(STEPS), "-v", "0", "-l", "1e-3", "-c", "0.1", "-u", "1", "-q", "0.5"]


def run(binary, n, extra, outdir, env_extra=None, expect_ok=True):
    cmd = [binary] + COMMON + ["-b", str(ROWS // n), "-o", outdir] + extra
    env = dict(os.environ, OMP_NUM_THREADS="1", **(env_extra or {}))
    if n > 1:
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n)] + \
              [a for k in (env_extra or {}) for a in ("-x", k)] + cmd
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if expect_ok and p.returncode != 0:
        sys.exit(f"run failed ({' '.join(cmd)}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    rows = []
    if os.path.exists(os.path.join(outdir, "log.csv")):
        with open(os.path.join(outdir, "log.csv")) as f:
            rows = list(csv.DictReader(f))
    m = re.search(r"theory bytes: state (\d+) comm (\d+) inter (\d+)", p.stdout)
    theory = tuple(float(x) for x in m.groups()) if m else None
    return rows, theory, p


def rel(a, b):
    return abs(a - b) / abs(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="./train_gpt2_zero3")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="variants_")
    failures, count = [], [0]

    def go(n, extra, **kw):
        count[0] += 1
        return run(args.binary, n, extra, os.path.join(tmp, f"r{count[0]}"), **kw)

    try:
        base, _, _ = go(1, ["-z", "0"])
        ref = [(float(r["train_loss"]), float(r["grad_norm"])) for r in base]
        cases = []
        for n in (1, 2, 3, 4):
            cases += [(n, ["-z", "3"]), (n, ["-z", "3", "-ra", "0"]), (n, ["-z", "3", "-rc", "1"]),
                      (n, ["-z", "3", "-rc", "2"]), (n, ["-z", "3", "-pt", "3000"])]
        cases += [(2, ["-z", "3", "-wrap", "half"]), (2, ["-z", "3", "-wrap", "2"]), (3, ["-z", "3", "-wrap", "half", "-rc", "1"]),
                  (2, ["-z", "3", "-wrap", "2", "-rc", "2"]),
                  (2, ["-z", "3", "-hs", "1"]), (4, ["-z", "3", "-hs", "2"]), (4, ["-z", "3", "-hs", "2", "-rc", "1"]),
                  (4, ["-z", "2", "-hs", "2"]), (3, ["-z", "3", "-ra", "0", "-pt", "3000"]),
                  (4, ["-z", "3", "-hs", "2", "-pt", "3000", "-rc", "2"]), (2, ["-z", "3", "-d", str(ROWS * T), "-b", "3"])]
        print(f"model {MODEL}, {STEPS} steps of {ROWS * T} tokens; each run against stage 0 on 1 rank")
        print(f"  {'N':>2} {'variant':<34} {'losses':>8} {'norms':>8} {'sent/step':>12} {'theory':>12} {'across':>10} {'state':>10} {'formula':>10}")
        sent = {}
        for n, extra in cases:
            if "-b" in extra:   # accumulation: A = 2 micro-steps of 3 rows on 2 ranks
                rows, theory, _ = run(args.binary, n, extra, os.path.join(tmp, f"acc{n}"))
            else:
                rows, theory, _ = go(n, extra)
            name = " ".join(extra)
            dl = max(rel(float(r["train_loss"]), a) for r, (a, _) in zip(rows, ref))
            dn = max(rel(float(r["grad_norm"]), b) for r, (_, b) in zip(rows, ref))
            measured = float(rows[-1]["comm_bytes"])
            state, comm, inter = theory
            held = float(rows[-1]["mem_states_bytes"])
            print(f"  {n:>2} {name:<34} {dl:8.1e} {dn:8.1e} {measured:12.0f} {comm:12.0f} {inter:10.0f} {held:10.0f} {state:10.0f}")
            sent[(n, name)] = measured
            if "ledger: measured = theory" not in _.stdout:
                failures.append(f"N={n} {name}: the collective ledger measured differs from its theory")
            if len(rows) != STEPS or dl > 1e-5 or dn > 1e-5:
                failures.append(f"N={n} {name}: losses/norms differ from stage 0 by {dl:.2e}/{dn:.2e}")
            if abs(measured - comm) > 1e-9 * comm + 0.5:
                failures.append(f"N={n} {name}: sent {measured:.0f} bytes per step, theory {comm:.0f}")
            # padding: each of the L+2 units pads every tensor to 64 elements and its tail to N*64;
            # at most 16 bytes per padded element
            pad_bound = 4 * (12 * 64 + n * 64) * 16
            if not (state <= held <= state + pad_bound):
                failures.append(f"N={n} {name}: holds {held:.0f} bytes of model state, formula {state:.0f}")
        # 3. the shape of the numbers
        for n in (2, 3, 4):
            z3, ra0 = sent[(n, "-z 3")], sent[(n, "-z 3 -ra 0")]
            if not (abs(ra0 / z3 - 2 / 3) < 0.01):
                failures.append(f"N={n}: -ra 0 should send 2/3 of -z 3's bytes (1.0x DDP), sends {ra0 / z3:.3f}")
            if not sent[(n, "-z 3 -rc 2")] > sent[(n, "-z 3 -rc 1")] == z3:
                failures.append(f"N={n}: -rc 1 must send what -z 3 sends and -rc 2 more")
        print("  -ra 0 sends 2/3 of ZeRO-3's bytes (= DDP's); -rc 1 sends ZeRO-3's; -rc 2 sends more (one more gather per block)")

        # 4. the clipping pitfall: each rank its own norm
        rows, _, p = go(2, ["-z", "3", "-clip", "local"])
        dl = max(rel(float(r["train_loss"]), a) for r, (a, _) in zip(rows, ref))
        print(f"  -clip local on 2 ranks: losses leave stage 0's by {dl:.1e}")
        if dl < 1e-6 or "warning: -clip local" not in p.stderr:
            failures.append(f"-clip local on 2 ranks should differ from stage 0 (and warn): {dl:.2e}")

        # 5. checkpoints across variants: HSDP + recompute on 4 ranks, stopped by a NaN at step 2 (after
        # the step-2 checkpoint); resumed with -ra 0 -pt on 3 ranks, stopped at step 3; resumed at
        # stage 1 on 1 rank to the end. Every row of the log must continue stage 0's losses.
        d = os.path.join(tmp, "chain")
        _, _, p = run(args.binary, 4, ["-z", "3", "-hs", "2", "-rc", "1", "-wrap", "half", "-n", "1"], d,
                      env_extra={"ZERO3_INJECT_NAN_STEP": "2"}, expect_ok=False)
        _, _, p2 = run(args.binary, 3, ["-z", "3", "-ra", "0", "-pt", "3000", "-wrap", "2", "-n", "1", "-y", "1"], d,
                       env_extra={"ZERO3_INJECT_NAN_STEP": "3"}, expect_ok=False)
        if p.returncode == 0 or p2.returncode == 0:
            failures.append("the NaN injections did not stop the runs")
        rows, _, _ = run(args.binary, 1, ["-z", "1", "-y", "1"], d)
        dl = max(rel(float(r["train_loss"]), a) for r, (a, _) in zip(rows, ref))
        print(f"  checkpoint: -hs 2 -rc 1 -wrap half on 4 ranks -> -ra 0 -pt 3000 -wrap 2 on 3 -> -z 1 on 1: {len(rows)} steps, "
              f"losses against stage 0 {dl:.1e}")
        if len(rows) != STEPS or dl > 1e-5:
            failures.append(f"resume across variants: {len(rows)} rows, losses differ by {dl:.2e}")

        # 7. bad variant flags, on 2 ranks: non-zero exit, one error line, no output folder left behind
        bad = [(["-z", "3", "-hs", "3"], "-hs"), (["-z", "3", "-hs", "0"], "-hs"), (["-z", "3", "-pt", "-1"], "-pt"),
               (["-z", "3", "-wrap", "3"], "-wrap"), (["-z", "1", "-ra", "0"], "-ra"), (["-z", "0", "-hs", "2"], "-hs"),
               (["-z", "3", "-clip", "shard"], "-clip"), (["-z", "3", "-wrap", "half", "-rc", "2"], "-rc 2")]
        for extra, flag in bad:
            _, _, p = go(2, extra, expect_ok=False)
            errors = [l for l in p.stderr.splitlines() if l.startswith("error")]
            ok = p.returncode != 0 and len(errors) == 1 and flag in errors[0]
            print(f"  bad input {' '.join(extra):<28} -> {errors[0] if errors else p.stderr.strip()[:80]}")
            if not ok:
                failures.append(f"bad input {' '.join(extra)}: exit {p.returncode}, {len(errors)} error lines")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL:", f)
    print("variants:", "ok" if not failures else f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
