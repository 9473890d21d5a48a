#!/usr/bin/env python3
"""ZeRO++ (-qw 8, -hp G, -qg 8) through the real CPU trainer on 1-4 ranks (docs/zeropp.md):
  1. every run's collective ledger, measured, equals its theory (the run says so at its end);
  2. -hp alone gives exactly ZeRO-3's losses and norms (bitwise, log.csv's %.9g), on 2 and 4 ranks,
     with -ra 0 too: it changes where the backward's bytes come from, not what arrives;
  3. -qg on one rank is exact (nothing travels, nothing is quantized);
  4. -qw quantizes the same model on every N: step 1's loss on 1, 2 and 4 ranks agrees to 1e-5 (as
     exact ZeRO-3's does across N), and differs from exact's (the compute sees the int8 copy);
  5. the accuracy bound: over the short run every quantized run's losses stay within LOSS_BOUND
     (relative) of exact ZeRO-3's on the same N, and -qg's gradient norms within NORM_BOUND;
  6. figures worked out by hand: qwZ's gather bytes and qgZ's first hop are (1 + 4/256) / 4 of fp32's
     (within the padding, 1%); hpZ's model state is exact's + params * 4 / G bytes;
  7. checkpoints: a quantized run stopped and resumed continues bitwise; its checkpoint resumes on
     another N without the flags (and with -hp alone, bitwise the same as without).
Exit status 0 when everything holds.
"""
import csv, os, re, shutil, subprocess, sys, tempfile

MODEL, T, ROWS, STEPS = "d2c48h2t32", 32, 12, 4
COMMON = ["-e", MODEL, "-t", str(T), "-v", "0", "-l", "1e-3"]
LOSS_BOUND, NORM_BOUND = 5e-3, 2e-2
BIN = sys.argv[1] if len(sys.argv) > 1 else "./train_gpt2_zero3"
failures = []


def run(n, flags, out, steps=STEPS, extra=()):
    cmd = [BIN] + COMMON + ["-b", str(ROWS // n), "-x", str(steps), "-o", out] + flags + list(extra)
    if n > 1:
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n)] + cmd
    p = subprocess.run(cmd, env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"FAIL: run failed ({' '.join(cmd)}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    with open(os.path.join(out, "log.csv")) as f:
        rows = list(csv.DictReader(f))
    return rows, p.stdout


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def ledger_row(stdout, kind):
    m = re.search(rf"^  {kind} +(\d+) collectives?, +([\d,]+) bytes in all \|", stdout, re.M)
    return float(m.group(2).replace(",", "")) if m else None


def main():
    tmp = tempfile.mkdtemp(prefix="zeropp_")
    try:
        cases = [(1, ""), (1, "-qw 8"), (1, "-qg 8 -hp 1"), (2, ""), (2, "-hp 2"), (2, "-qw 8"), (2, "-qg 8"),
                 (2, "-qw 8 -hp 2 -qg 8"), (3, "-qw 8 -qg 8 -hp 1"), (4, ""), (4, "-hp 2"), (4, "-hp 4 -ra 0"),
                 (4, "-qw 8"), (4, "-qw 8 -hp 2 -qg 8 -pd 2 -wrap 2"), (4, "-qw 8 -qg 8 -hs 2")]
        res = {}
        print(f"model {MODEL}, {STEPS} steps of {ROWS * T} tokens")
        for i, (n, flags) in enumerate(cases):
            rows, out = run(n, flags.split(), os.path.join(tmp, f"r{i}"))
            res[(n, flags)] = (rows, out)
            losses = " ".join(r["train_loss"][:9] for r in rows)
            check("ledger: measured = theory" in out, f"N={n} {flags or 'exact':<34} ledger measured = theory; losses {losses}")
        col = lambda key, c: [r[c] for r in res[key][0]]
        # 2. hpZ is exact
        for n, flags in [(2, "-hp 2"), (4, "-hp 2"), (4, "-hp 4 -ra 0")]:
            same = col((n, flags), "train_loss") == col((n, ""), "train_loss") and col((n, flags), "grad_norm") == col((n, ""), "grad_norm")
            check(same, f"N={n} {flags}: losses and norms bitwise those of exact ZeRO-3")
        # 3. qgZ on one rank: nothing to quantize
        check(col((1, "-qg 8 -hp 1"), "train_loss") == col((1, ""), "train_loss"), "N=1 -qg 8: exact (nothing travels)")
        # 4. qwZ: the same quantized model for every N
        first = [float(col((n, "-qw 8"), "train_loss")[0]) for n in (1, 2, 4)]
        exact1 = float(col((1, ""), "train_loss")[0])
        spread = max(abs(a - first[0]) / first[0] for a in first)
        check(spread < 1e-5 and abs(first[0] - exact1) > 1e-6,
              f"-qw 8: step 1 loss on N=1,2,4 {first} agree (spread {spread:.1e}), and differ from exact's {exact1}")
        # 5. the accuracy bound
        for (n, flags), (rows, _) in res.items():
            if "-q" not in flags:
                continue
            ref = res[(n if (n, "") in res else 4, "")][0]
            dl = max(abs(float(a["train_loss"]) - float(b["train_loss"])) / float(b["train_loss"]) for a, b in zip(rows, ref))
            ok = dl < LOSS_BOUND
            what = f"N={n} {flags}: losses within {LOSS_BOUND:g} of exact (worst {dl:.1e})"
            if "-qw" not in flags:
                dn = max(abs(float(a["grad_norm"]) - float(b["grad_norm"])) / float(b["grad_norm"]) for a, b in zip(rows, ref))
                ok = ok and dn < NORM_BOUND
                what += f", norms within {NORM_BOUND:g} (worst {dn:.1e})"
            check(ok, what)
        # 6. by hand
        q = (1 + 4 / 256) / 4
        r_qw = ledger_row(res[(2, "-qw 8")][1], "fwd_gather") / ledger_row(res[(2, "")][1], "fwd_gather")
        r_qg = ledger_row(res[(2, "-qg 8")][1], "qg_intra") / ledger_row(res[(2, "")][1], "reduce_scatter")
        check(abs(r_qw / q - 1) < 0.01 and abs(r_qg / q - 1) < 0.01,
              f"qwZ gather bytes {r_qw:.4f}, qgZ first hop {r_qg:.4f} of fp32's; by hand (1 + 4/256) / 4 = {q:.4f}")
        state = lambda key: float(re.search(r"theory bytes: state (\d+)", res[key][1]).group(1))
        params = int(re.search(r"maxT=\d+, (\d+) parameters", res[(4, "")][1]).group(1))
        extra = state((4, "-hp 2")) - state((4, ""))
        check(extra == params * 4 / 2, f"-hp 2 on N=4: model state + {extra:.0f} bytes = params {params} x 4 / G=2")
        # 7. checkpoints
        allf = "-qw 8 -hp 2 -qg 8".split()
        a, b = os.path.join(tmp, "ckA"), os.path.join(tmp, "ckB")
        run(2, allf, a, steps=2)
        shutil.copytree(a, b)
        rows_a, _ = run(2, allf, a, extra=["-y", "1"])
        ref_all = col((2, "-qw 8 -hp 2 -qg 8"), "train_loss")
        check([r["train_loss"] for r in rows_a][-2:] == ref_all[2:],
              "-qw 8 -hp 2 -qg 8: stopped at step 2 and resumed, steps 3-4 bitwise those of the run without a stop")
        c = os.path.join(tmp, "ckC")
        shutil.copytree(b, c)
        rows_b, _ = run(4, [], b, extra=["-y", "1"])
        rows_c, _ = run(4, ["-hp", "2"], c, extra=["-y", "1"])
        lb = [float(r["train_loss"]) for r in rows_b][-2:]
        near = all(abs(x - float(y)) / float(y) < LOSS_BOUND for x, y in zip(lb, ref_all[2:]))
        check([r["train_loss"] for r in rows_b] == [r["train_loss"] for r in rows_c] and near,
              f"its checkpoint resumed on N=4 exact {lb} = with -hp 2, within {LOSS_BOUND:g} of the quantized run's")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{len(failures)} failures" if failures else "zeropp: all checks hold")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
