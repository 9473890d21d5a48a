"""The planner's tables (-plan N), every row, against figures worked out by hand, at the edges of
every flag it takes: N = 1, 2, ranks per node minus one, equal to it, one past it and twice it;
-rpn 1 and -rpn R; HSDP groups of 1, 2 and N/2 (a group of N is refused); each with and without the
ZeRO++ flags (-qw 8, -hp, -qg 8: the planner shows their table whatever is given).

The model is a bare parameter count P = 1e9 (one unit: no padding), so every figure has a closed form.
With D the ranks that shard the state (the HSDP group, else N), R = N / D replicas, f = (D-1)/D:

  memory, bytes per rank   fp32: stage 0 16P, 1 8P + 8P/D, 2 4P + 12P/D, 3 16P/D
                           mixed (bf16 params and grads, fp32 master, m, v):
                                 stage 0 16P, 1 4P + 12P/D, 2 2P + 14P/D, 3 16P/D
  comm, GB each rank sends (bf16, ring model; A = 1):
    stage 0   all_reduce 2f * 2P
    stage 1-2 reduce_scatter f * 2P, step_gather f * 2P
    stage 3   fwd_gather, bwd_gather, reduce_scatter f * 2P each
    across groups (R > 1): the replicas' all-reduce of what each rank's optimizer holds,
              2(R-1)/R * 2P (stage 0) or 2(R-1)/R * 2P/D (stages 1-3); total = the row plus it;
              x DDP = total / stage 0's total; total fp32 = 2 x total
  ZeRO++ (stage 3, mixed, over all N ranks; rpn = -rpn if it is below N, else N; node group
  G = rpn where it divides N, else N; X = N / G; S = P / N; q = 1 + 4/256 bytes a quantized element;
  g = (N-1)/N):
    fwd gather  g*P*q with -qw, else g * 2P
    bwd gather  (G-1)/G * 2P from the node group with -hp, else as the forward's
    gradients   -qg: hop 1 (Gq-1) * Xq * S * q inside the node group, hop 2 (Xq-1) * S * q across,
                with Gq = G under -hp, else N (Xq = N / Gq); else g * 2P
    across      the world-wide collectives when N > rpn, hpZ's gather and hop 1 when their group
                is larger than a node, hop 2 always
    memory      16P/N, plus hpZ's secondary shard 2P/G (N > 1)
  offload (-oo, -op; the table in the run's precision -p, bare count: the model state, no slots):
    optimizer part  O = 12P (mixed: fp32 master + m + v) or 8P (fp32: m + v; the params are the master),
                    /D at stages 1-3
    param shard     W = 2P/D (mixed) or 4P/D (fp32), -op at stage 3 only
    -oo host        out O, host O                -oo disk   out O, disk O, read O, write O
    -op disk        out W, disk W, read W x 2A gathers (forward and backward, A micro-steps)
                    + W more with fp32 (AdamW reads the master), write W
    state after = memory - out; I/O s/step = (read + write) / (-disk GB/s x 1e9)
The figures are computed here from these formulas, never from the planner's code.

  /usr/bin/python3 tests/planner_oracle.py --binary ./train_gpt2_zero3
"""
import argparse
from concurrent.futures import ThreadPoolExecutor
import re
import subprocess
import sys

P = 1e9
Q = 1 + 4 / 256


def memory(stage, D, mixed):
    if mixed:
        return [16 * P, 4 * P + 12 * P / D, 2 * P + 14 * P / D, 16 * P / D][stage]
    return [16 * P, 8 * P + 8 * P / D, 4 * P + 12 * P / D, 16 * P / D][stage]


def comm_rows(N, D):
    R, f = N // D, (D - 1) / D
    rows = {}
    for stage in range(4):
        cols = dict(fwd=0.0, bwd=0.0, rs=0.0, ar=0.0, sg=0.0)
        if stage == 0:
            cols["ar"] = 2 * f * 2 * P
        elif stage < 3:
            cols["rs"] = cols["sg"] = f * 2 * P
        else:
            cols["fwd"] = cols["bwd"] = cols["rs"] = f * 2 * P
        across = 2 * (R - 1) / R * 2 * P / (1 if stage == 0 else D) if R > 1 else 0.0
        rows[stage] = (cols, sum(cols.values()) + across, across)
    return rows


def zeropp_rows(N, rpn_flag):
    rpn = rpn_flag if rpn_flag and rpn_flag < N else N
    G = rpn if N % rpn == 0 else N
    S, g = P / N, (N - 1) / N
    rows = []
    for qw, hp, qg in ((0, 0, 0), (1, 0, 0), (0, 1, 0), (0, 0, 1), (0, 1, 1), (1, 1, 1)):
        fwd = g * P * (Q if qw else 2)
        bwd = (G - 1) / G * 2 * P if hp else fwd
        world = fwd + (0 if hp else bwd)
        group, cross = (bwd if hp else 0.0), 0.0
        if qg:
            Gq = G if hp else N
            Xq = N // Gq
            hop1, cross = (Gq - 1) * Xq * S * Q, (Xq - 1) * S * Q
            group_q = hop1
        else:
            world += g * 2 * P
            group_q = 0.0
        total = world + group + group_q + cross
        node_group = G if hp else N
        across = (world if N > rpn else 0.0) + ((group + group_q) if node_group > rpn else 0.0) + cross
        mem = 16 * P / N + (2 * P / G if hp and N > 1 else 0.0)
        rows.append((total, across, mem))
    return rows


def offload_row(stage, D, mixed, oo, op, A):
    """(after, before, out, host, disk, read, write) bytes per rank, by the formulas above."""
    before = memory(stage, D, mixed)
    O = (12 if mixed else 8) * P / (D if stage >= 1 else 1)
    W = (2 if mixed else 4) * P / D
    out = host = disk = read = write = 0.0
    if oo == "host":
        out, host = O, O
    if oo == "disk":
        out, disk, read, write = O, O, O, O
    if op == "disk" and stage == 3:
        out, disk = out + W, disk + W
        read += W * 2 * A + (0 if mixed else W)
        write += W
    return before - out, before, out, host, disk, read, write


def check_offload(binary, N, oo, op, mixed, A, gbps):
    args = ["-plan", str(N), "-e", "1e9", "-oo", oo, "-op", op, "-disk", str(gbps)] + (["-p", "bf16"] if mixed else [])
    args += ["-b", "1", "-t", "64", "-d", str(A * N * 64)]
    out = subprocess.run([binary] + args, capture_output=True, text=True, timeout=60)
    name = " ".join(args)
    if out.returncode != 0:
        return [f"{name}: exit {out.returncode}: {out.stderr.strip()}"]
    m = re.search(r"^offload \(.*\n.*\n((?:  [0-3].*\n){4})", out.stdout, re.M)
    if not m:
        return [f"{name}: no offload table"]
    bad, gib = [], 2.0 ** 30
    for stage, line in enumerate(m.group(1).splitlines()):
        v = [num(x.strip("()")) for x in line.split()[2 if stage == 0 else 1:] if x.strip("()")]
        after, before, o, host, disk, read, write = offload_row(stage, N, mixed, oo, op, A)
        want = [after / gib, before / gib, o / gib, host / gib, 0.0, disk / 1e9, read / 1e9, write / 1e9]
        want.append((read + write) / (gbps * 1e9))
        tol = [0.0006] * 8 + [0.006]
        if len(v) != len(want) or any(abs(a - b) > t for a, b, t in zip(v, want, tol)):
            bad.append(f"{name}: offload stage {stage}: {line.strip()} ; by hand " + " ".join(f"{b:.3f}" for b in want))
    return bad


def num(s):
    return float(s.replace(",", ""))


def check_case(binary, N, rpn, hs, zeropp_flags):
    args = ["-plan", str(N), "-e", "1e9"] + (["-rpn", str(rpn)] if rpn else []) + (["-hs", str(hs)] if hs else []) + zeropp_flags
    out = subprocess.run([binary] + args, capture_output=True, text=True, timeout=60)
    name = " ".join(args)
    if out.returncode != 0:
        return [f"{name}: exit {out.returncode}: {out.stderr.strip()}"]
    text, bad, D = out.stdout, [], hs or N
    tables = re.findall(r"model-state memory per rank, (fp32|mixed).*\n.*\n((?:  [0-3].*\n){4})", text)
    if len(tables) != 2:
        return [f"{name}: {len(tables)} memory tables, want 2"]
    for kind, body in tables:
        for stage, line in enumerate(body.splitlines()):
            got = num(line.split()[2 if stage == 0 else 1])
            want = memory(stage, D, kind == "mixed")
            if abs(got - want) > 1:
                bad.append(f"{name}: {kind} stage {stage}: {got:,.0f} bytes, by hand {want:,.0f}")
    comm = re.search(r"  GB, mixed precision.*\n((?:  [0-3].*\n){4})", text)
    for stage, line in enumerate(comm.group(1).splitlines()):
        cols, total, across = comm_rows(N, D)[stage]
        v = [num(x) for x in line.split()[2 if stage == 0 else 1:]]
        want = [cols["fwd"], cols["bwd"], cols["rs"], cols["ar"], cols["sg"], total]
        ddp_total = comm_rows(N, D)[0][1]
        want += [total / ddp_total if ddp_total else 0.0, 2 * total] + ([across] if N // D > 1 else [])
        scale = [1e9] * 6 + [1.0, 1e9, 1e9][:len(want) - 6]
        if len(v) != len(want) or any(abs(a - b / s) > 0.0006 for a, b, s in zip(v, want, scale)):
            bad.append(f"{name}: comm stage {stage}: {line.strip()} ; by hand "
                       + " ".join(f"{b / s:.3f}" for b, s in zip(want, scale)))
    zp = re.search(r"  flags +total +across nodes.*\n((?:  .*\n){6})", text)
    for (total, across, mem), line in zip(zeropp_rows(N, rpn), zp.group(1).splitlines()):
        v = [num(x) for x in line.split()[-4:]]
        want = [total / 1e9, across / 1e9, across / zeropp_rows(N, rpn)[0][1] if zeropp_rows(N, rpn)[0][1] else 0.0, mem / 1e9]
        if any(abs(a - b) > 0.0006 for a, b in zip(v, want)):
            bad.append(f"{name}: ZeRO++ {line.strip()} ; by hand " + " ".join(f"{b:.3f}" for b in want))
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default="./train_gpt2_zero3")
    binary = ap.parse_args().binary
    cases = []
    for N in (1, 2, 7, 8, 9, 16):
        for rpn in (None, 1, 8):
            groups = [None, 1] + [g for g in (2, N // 2) if 1 < g < N and N % g == 0]
            for hs in dict.fromkeys(groups):
                if hs == 1 and N == 1:
                    continue
                cases.append((N, rpn, hs, []))
    cases += [(8, 8, None, ["-qw", "8"]), (16, 8, None, ["-hp", "8"]), (16, 8, None, ["-qw", "8", "-hp", "8", "-qg", "8"]),
              (9, 8, None, ["-qg", "8"])]
    offload = [(N, oo, op, mixed, A, gbps) for N, A, gbps in ((1, 1, 0.8), (8, 3, 2.5))
               for oo, op in (("host", "none"), ("disk", "none"), ("none", "disk"), ("disk", "disk")) for mixed in (0, 1)]
    with ThreadPoolExecutor(2) as pool:   # two at a time: each run spends most of its time starting up
        failures = [b for bad in pool.map(lambda c: check_case(binary, *c), cases) for b in bad]
        failures += [b for bad in pool.map(lambda c: check_offload(binary, *c), offload) for b in bad]
    print(f"planner oracle: {len(cases)} cases (N = 1, 2, 7, 8, 9, 16; -rpn none, 1, 8; -hs none, 1, 2, N/2; ZeRO++ flags), "
          f"every row of the memory, communication and ZeRO++ tables against the hand formulas; {len(offload)} offload cases "
          f"(N = 1 at A = 1, -disk 0.8; N = 8 at A = 3, -disk 2.5; -oo host, disk; -op disk; fp32, bf16)")
    for b in failures:
        print("FAIL", b)
    if failures:
        sys.exit(f"planner oracle: {len(failures)} rows differ from the figures by hand")
    print("planner oracle: every row agrees")


if __name__ == "__main__":
    main()
