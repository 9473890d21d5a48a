#!/usr/bin/env python3
"""Engine tests through the real trainer: one model, one data stream, many ways to shard it.

Runs ./train_gpt2_zero3 (and, with --ddp-binary, the DDP build) on N = 1..4 ranks at every ZeRO stage,
all with the same tokens per step, and checks from each run's log.csv that
  1. every stage on every N gives the same losses and the same gradient norms, step by step, as
     stage 0 on one rank (rel 1e-5): the norm is checked on its own because, while clipping is on,
     AdamW hides a constant gradient scale, so a norm N times too large leaves the losses alone;
  2. gradient accumulation A=2 on N ranks equals A=1 on 2N ranks (rel 1e-5);
  3. the accounted communication per step at N=4 is 1.5x DDP's for stage 3, 1.0x for stages 1 and 2;
  4. the resident model state per rank at stage 3 is 16 bytes/param / N, up to the padding;
  5. the DDP binary (make DDP=1) matches stage 0 of the ZeRO binary.
Prints a table of the figures. Exit status 0 when everything holds.
"""
import argparse, csv, os, re, shutil, subprocess, sys, tempfile

MODEL = "d2c48h2t32"       # 2 layers, 48 channels, 2 heads, maxT 32: small enough for CI
T, ROWS_PER_STEP, STEPS = 32, 12, 5


def run(binary, n, stage, B, extra, outdir):
    cmd = [binary, "-e", MODEL, "-b", str(B), "-t", str(T), "-x", str(STEPS), "-z", str(stage),
           "-v", "0", "-l", "1e-3", "-c", "0.1", "-o", outdir] + extra
    env = dict(os.environ, OMP_NUM_THREADS="1" if n > 1 else os.environ.get("OMP_NUM_THREADS", "2"))
    if n > 1:
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n)] + cmd
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"run failed ({' '.join(cmd)}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    m = re.search(r", (\d+) parameters", p.stdout)
    with open(os.path.join(outdir, "log.csv")) as f:
        rows = list(csv.DictReader(f))
    return rows, int(m.group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="./train_gpt2_zero3")
    ap.add_argument("--ddp-binary", default=None)
    ap.add_argument("--max-ranks", type=int, default=4)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="engine_consistency_")
    failures = []
    runs = {}
    try:
        def go(key, binary, n, stage, B, extra=()):
            d = os.path.join(tmp, "_".join(map(str, key)))
            runs[key] = run(binary, n, stage, B, list(extra), d)
            return runs[key]

        for n in range(1, args.max_ranks + 1):
            for stage in range(4):
                go(("zero", n, stage, 1), args.binary, n, stage, ROWS_PER_STEP // n)
        base, nparams = runs[("zero", 1, 0, 1)]
        base_loss = [float(r["train_loss"]) for r in base]
        base_norm = [float(r["grad_norm"]) for r in base]

        def close(a, b, tol=1e-5):
            return abs(a - b) <= tol * abs(b)

        print(f"model {MODEL}: {nparams} parameters; {STEPS} steps of {ROWS_PER_STEP * T} tokens")
        for column, base_values in (("train_loss", base_loss), ("grad_norm", base_norm)):
            print(f"{column} against stage 0 on 1 rank (max relative difference over the steps):")
            for n in range(1, args.max_ranks + 1):
                line = f"  N={n}:"
                for stage in range(4):
                    rows = runs[("zero", n, stage, 1)][0]
                    diff = max(abs(float(r[column]) - b) / abs(b) for r, b in zip(rows, base_values))
                    line += f"  stage {stage} {diff:.1e}"
                    if diff > 1e-5:
                        failures.append(f"N={n} stage {stage}: {column} differs by {diff:.2e}")
                print(line)

        # gradient accumulation: A=2 on N ranks == A=1 on 2N ranks
        for n in (1, 2):
            if 2 * n > args.max_ranks:
                continue
            B = ROWS_PER_STEP // (2 * n)
            for stage in (0, 3):
                rows = go(("accum", n, stage, 2), args.binary, n, stage, B, ["-d", str(ROWS_PER_STEP * T)])[0]
                ref = runs[("zero", 2 * n, stage, 1)][0]
                diff = max(abs(float(a[c]) - float(b[c])) / abs(float(b[c]))
                           for a, b in zip(rows, ref) for c in ("train_loss", "grad_norm"))
                print(f"  A=2 on N={n} vs A=1 on N={2 * n}, stage {stage}: losses and norms, max rel diff {diff:.1e}")
                if diff > 1e-5:
                    failures.append(f"accumulation N={n} stage {stage}: {diff:.2e}")

        # communication ratios at the largest N
        n = args.max_ranks
        comm = {s: float(runs[("zero", n, s, 1)][0][-1]["comm_bytes"]) for s in range(4)}
        print(f"communication per step at N={n} (bytes sent per rank, ring model):")
        for s in range(4):
            ratio = comm[s] / comm[0]
            expect = {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.5}[s]
            print(f"  stage {s}: {comm[s]:14.0f}  = {ratio:.6f} x DDP (expected {expect})")
            if abs(ratio - expect) > 1e-4:
                failures.append(f"comm ratio stage {s}: {ratio:.6f} != {expect}")

        # resident model state per rank
        print("resident model-state bytes per rank at stage 3 (16 bytes/param / N, padding aside):")
        for n in range(1, args.max_ranks + 1):
            held = int(runs[("zero", n, 3, 1)][0][-1]["mem_states_bytes"])
            theory = 16.0 * nparams / n
            # padding: per unit at most (tensors * align + N * align) elements, 16 bytes each / N
            units, align = 2 + 2, 64
            pad_max = 16.0 * units * (12 * align + n * align) / n
            ok = theory <= held <= theory + pad_max
            print(f"  N={n}: {held} bytes, theory {theory:.0f}, padding {held - theory:.0f} "
                  f"({100 * (held - theory) / theory:.2f}%) {'ok' if ok else 'WRONG'}")
            if not ok:
                failures.append(f"stage 3 resident bytes N={n}: {held} vs {theory:.0f}")

        if args.ddp_binary:
            for n in (1, 2):
                rows = go(("ddp", n, 0, 1), args.ddp_binary, n, 0, ROWS_PER_STEP // n)[0]
                ref = runs[("zero", n, 0, 1)][0]
                same = all(a["train_loss"] == b["train_loss"] for a, b in zip(rows, ref))
                print(f"  DDP build on N={n}: {'identical to' if same else 'DIFFERENT from'} -z 0 of the ZeRO build")
                if not same:
                    failures.append(f"DDP build differs at N={n}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print("FAIL:", f)
    print("engine consistency:", "FAIL" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
