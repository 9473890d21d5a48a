#!/usr/bin/env python3
"""The time checks through the real trainer: the time story's instruments.

  1. the collective ledger: at every stage, A = 1 and 2, on N = 2 (and stage 3 on N = 3) the bytes
     and counts the engine measured equal its theory ("ledger: measured = theory", row by row);
  2. the trace (-tr): valid JSON; on every rank a compute lane (tid 0) and a communication lane
     (tid 1); per step the comm events' bytes by kind equal the ledger's;
  3. log.csv's compute_ms + exposed_comm_ms = ms, exposed >= 0;
  4. the communication thread changes no result: losses with ZERO3_COMM_THREAD=0 are identical;
  5. stage 3 on one rank holds no more than DDP (the engine's buffers: mem_engine_peak_bytes), and issues no data collective.
"""
import csv, json, os, re, subprocess, sys, tempfile, shutil

BIN = os.environ.get("ZERO3_TRAINER", "./train_gpt2_zero3")
MODEL, T = "d2c48h2t32", 32
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what)


def run(n, stage, B, extra, outdir, env_extra=None):
    cmd = [BIN, "-e", MODEL, "-b", str(B), "-t", str(T), "-x", "3", "-z", str(stage), "-v", "0", "-l", "1e-3",
           "-o", outdir] + extra
    env = dict(os.environ, OMP_NUM_THREADS="1", **(env_extra or {}))
    if n > 1:
        cmd = ["mpirun", "--oversubscribe", "-np", str(n)] + sum((["-x", k] for k in (env_extra or {})), []) + cmd
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"run failed ({' '.join(cmd)}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    with open(os.path.join(outdir, "log.csv")) as f:
        rows = list(csv.DictReader(f))
    return p.stdout, rows


def ledger_rows(stdout):
    """{kind: (count, bytes)} of the measured and the theory columns of the end-of-run ledger."""
    measured, theory = {}, {}
    row = r"(\d+) collectives?,\s+([\d,]+) bytes in all"
    for m in re.finditer(r"^  (\w+)\s+" + row + r" \|\s+" + row, stdout, re.M):
        measured[m.group(1)] = (int(m.group(2)), int(m.group(3).replace(",", "")))
        theory[m.group(1)] = (int(m.group(4)), int(m.group(5).replace(",", "")))
    return measured, theory


def main():
    tmp = tempfile.mkdtemp(prefix="time_consistency_")
    try:
        # 1 + 2: ledger and trace, every stage, A = 1 and 2
        cases = [(2, s, A) for s in range(4) for A in (1, 2)] + [(3, 3, 2)]
        print("ledger (bytes each rank sends per step, measured = theory) and trace:")
        for n, stage, A in cases:
            d = os.path.join(tmp, f"l{n}{stage}{A}")
            trace = os.path.join(tmp, f"t{n}{stage}{A}.json")
            B = 4
            out, rows = run(n, stage, B, ["-d", str(n * B * T * A), "-tr", trace], d)
            measured, theory = ledger_rows(out)
            check("ledger: measured = theory" in out and measured and measured == theory,
                  f"N={n} stage {stage} A={A}: ledger measured {measured} != theory {theory}")
            with open(trace) as f:
                events = json.load(f)["traceEvents"]   # valid JSON, or this raises
            spans = [e for e in events if e.get("ph") == "X"]
            last = max(e["args"]["step"] for e in spans)
            per_rank = {}
            for r in range(n):
                mine = [e for e in spans if e["pid"] == r]
                lanes = {e["tid"] for e in mine}
                check(lanes == {0, 1}, f"N={n} stage {stage} A={A}: rank {r} has lanes {lanes}, not compute and comm")
                check(any(e["cat"] == "compute" for e in mine), f"rank {r}: no compute events")
                got = {}
                for e in mine:
                    if e["tid"] == 1 and e["args"]["step"] == last:
                        k = e["args"]["kind"]
                        c, b = got.get(k, (0, 0))
                        got[k] = (c + 1, b + int(e["args"]["bytes"]))
                check(got == theory, f"N={n} stage {stage} A={A}: rank {r}'s trace collectives {got} != ledger {theory}")
                per_rank[r] = got
            total = sum(b for c, b in theory.values())
            print(f"  N={n} stage {stage} A={A}: {total:10d} bytes in "
                  + ", ".join(f"{k} {c}" for k, (c, b) in sorted(theory.items())) + f"; trace: {len(spans)} spans on {n} ranks ok")
            # 3: the log's time columns
            for row in rows:
                ms, comp, exp = float(row["ms"]), float(row["compute_ms"]), float(row["exposed_comm_ms"])
                check(exp >= 0 and abs(comp + exp - ms) < 0.01, f"log.csv: compute {comp} + exposed {exp} != ms {ms}")

        # 4: the communication thread changes no result (N = 3: sums of three, order matters)
        print("communication thread on/off (N=3, losses over 3 steps):")
        for stage, A in ((0, 1), (3, 2)):
            a = run(3, stage, 4, ["-d", str(3 * 4 * T * A)], os.path.join(tmp, f"c1{stage}"))
            b = run(3, stage, 4, ["-d", str(3 * 4 * T * A)], os.path.join(tmp, f"c0{stage}"), {"ZERO3_COMM_THREAD": "0"})
            check("communication thread" in a[0] and "ZERO3_COMM_THREAD=0" in b[0], "the report does not say how collectives ran")
            la, lb = [r["train_loss"] for r in a[1]], [r["train_loss"] for r in b[1]]
            check(la == lb, f"stage {stage} A={A}: losses with the thread {la} != without {lb}")
            print(f"  stage {stage} A={A}: {' '.join(la)} {'identical' if la == lb else 'DIFFERENT'}")

        # 5: stage 3 on one rank holds what DDP holds
        peaks = {}
        for stage in (0, 3):
            out, rows = run(1, stage, 8, ["-d", str(8 * T * 2)], os.path.join(tmp, f"s{stage}"))
            peaks[stage] = int(rows[-1]["mem_engine_peak_bytes"])
            measured, _ = ledger_rows(out)
            check(set(measured) == {"norm"}, f"one rank, stage {stage}: collectives {measured} (only the norm expected)")
        check(peaks[3] <= peaks[0], f"one rank: stage 3 peak {peaks[3]} > DDP's {peaks[0]}")
        print(f"one rank, A=2: peak stage 0 {peaks[0]} bytes, stage 3 {peaks[3]} bytes")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("time consistency:", "FAIL" if failures else "ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
