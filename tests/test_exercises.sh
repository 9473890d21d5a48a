#!/usr/bin/env bash
# scripts/exercises.sh -q -m 2048 all: every section's figures against references outside the script:
#  1  the 7B GiB lines and DDP's per-rank figure by hand (7e9 x 2, 2, 4, 8 bytes / 2^30); the bf16 run's
#     split is 16 bytes a parameter, its params 2 bytes each of the model's count (within the padding);
#  2  the 7.5B rows against the closed form (Z0 16 psi, Z1 4 psi + 12 psi/N, Z2 2 psi + 14 psi/N,
#     Z3 16 psi/N); the measured fp32 states against DDP's (Z1 8 + 8/N, Z2 4 + 12/N, Z3 16/N of 16);
#  3  the two ledgers against runs on another world size (2 ranks: the ring sends (N-1)/N of a buffer,
#     the counts do not move), ZeRO-3 1.5x ZeRO-2, the gathers' shares from the rows;
#  4  the activations by hand (peak.py's per-token floats), the pool's busiest moment by hand (the
#     embedding unit gathered whole and its gradient buffer), held + fragmentation = reserve, the
#     process peak at least the state and the activations it holds;
#  5  every stage's losses equal DDP's and a one-rank run's; bytes 1x, 1x, 1x, 1.5x; the verdict the
#     rule gives on the table (the lowest stage whose peak fits), with -m 2048 and with a budget
#     between the stages' peaks;
#  6  bytes 1.5x, collectives by hand from the unit count, ZeRO-3's compute waiting longer on
#     gathers than ZeRO-2's (a slow emulated link: the wait is the link's), the waits' sum;
#  loop  every step's loss equal across -z 0..3 and equal to a one-rank run of the same global batch;
#  capacity  DDP's state flat in N, ZeRO-3's x N constant; the planner's deepest fitting model: N=1
#     by hand (tests/peak.py's closed form), DDP flat beyond, ZeRO-3 growing with N;
#  paper  ZeRO-3's state 1/N of DDP's, ZeRO-2's reduce-scatter (N-1)/N of the gradients, the
#     collectives by hand from the unit count, 7.5B's stage per budget by the closed form;
#  deepspeed  docs/examples/deepspeed's three configs' commands by hand, their bf16 states (2 + 2 + 12 bytes a
#     parameter, sharded as each stage says), one final loss for all three, ZeRO-3 1.5x the bytes.
# The careless user: an unknown section, bad -m, an -o folder holding files (refused, its files kept),
# a SIGTERM during a run (exit 143, the runs stopped, nothing left), a build that fails (one line).
# About 2 minutes on 2 loaded cores.
. "$(dirname "$0")/lib.sh"
make -s train_gpt2_zero3 >/dev/null || fail "build"

# --- careless users first: each refused in one line, exit 2, nothing printed on stdout
bad() {   # bad WHAT PATTERN ARGS...
  local what=$1 pat=$2 rc; shift 2
  timeout 60 bash scripts/exercises.sh "$@" >"$work/bad.out" 2>"$work/bad.err"; rc=$?
  check_failed "$what" $rc "$work/bad.out" "$work/bad.err" "$pat" 60
  [ ! -s "$work/bad.out" ] || { cat "$work/bad.out"; fail "$what: printed figures"; }
  echo "ok   $what: $(cat "$work/bad.err")"
}
bad "an unknown section" "^error: 7: not a section" -q 7
bad "-m 0" "^error: -m: 0 is out of range" -q -m 0 1
bad "-m abc" "^error: -m: expected an integer" -q -m abc 1
bad "-m without its value" "^error: -m: missing its value" -q -m
mkdir -p "$work/full" && echo keep >"$work/full/notes.txt"
bad "-o holding files" "^error: -o: .*holds earlier results" -q -o "$work/full" 1
[ "$(cat "$work/full/notes.txt")" = keep ] && [ "$(ls "$work/full")" = notes.txt ] || fail "-o holding files: its files changed"
mkdir -p "$work/stub" && printf '#!/bin/sh\necho "cc: not found" >&2\nexit 2\n' >"$work/stub/make" && chmod +x "$work/stub/make"
PATH="$work/stub:$PATH" bad "a build that fails" "^error: ./train_gpt2_zero3 could not be built \\(make train_gpt2_zero3: cc: not found\)" -q 1

# SIGTERM while a run of section 6 is under way (its trace is named after the folder, so its ranks can be found)
bash scripts/exercises.sh -q -o "$work/sig" 6 >"$work/sig.out" 2>"$work/sig.err" &
pid=$!
for _ in $(seq 600); do [ -e "$work/sig/ex6_z2.cmd" ] && break; sleep 0.1; done
[ -e "$work/sig/ex6_z2.cmd" ] || { kill -TERM $pid; fail "SIGTERM case: section 6's first run never started"; }
sleep 1
kill -TERM $pid; wait $pid; rc=$?
[ $rc = 143 ] || { cat "$work/sig.err"; fail "SIGTERM: exit $rc, want 143"; }
sleep 2
[ ! -e "$work/sig" ] || fail "SIGTERM: the -o folder it made is still there: $(ls "$work/sig")"
if pgrep -f "$work/sig" >/dev/null; then fail "SIGTERM: the runs still run: $(pgrep -af "$work/sig")"; fi
grep -q '^exercises.sh: terminated; the runs stopped, their files removed$' "$work/sig.err" || { cat "$work/sig.err"; fail "SIGTERM: no line saying so"; }
echo "ok   SIGTERM during a run: exit 143, its runs stopped, its folder removed"

# --- the whole thing, quick
t0=$(date +%s)
bash scripts/exercises.sh -q -m 2048 -o "$work/o" all >"$work/all.out" 2>"$work/all.err" || { cat "$work/all.out" "$work/all.err"; fail "exercises.sh -q -m 2048 all"; }
echo "exercises.sh -q -m 2048 all: $(( $(date +%s) - t0 )) s"
cat "$work/all.out"

# the references: one rank with the same global batch; the ledgers on 2 ranks
M="-e d2c64h2t64 -t 64 -v 0 -S 1337"
$BIN $M -b 8 -x 3 -z 0 >"$work/one.out" 2>&1 || { cat "$work/one.out"; fail "the one-rank reference"; }
for z in 2 3; do mpirun -np 2 $BIN $M -b 2 -x 1 -z $z >"$work/n2_z$z.out" 2>&1 || { cat "$work/n2_z$z.out"; fail "the 2-rank -z $z reference"; }; done

$PY - "$work/all.out" "$work/one.out" "$work/n2_z2.out" "$work/n2_z3.out" <<'PY' || fail "the figures against their references"
import math, re, sys
out = open(sys.argv[1]).read()
one, n2 = open(sys.argv[2]).read(), {2: open(sys.argv[3]).read(), 3: open(sys.argv[4]).read()}
sec = {m.group(1): m.group(2) for m in re.finditer(r"^== (exercise \d|the closed loop|capacity|the paper's note|the DeepSpeed way)[^\n]*\n(.*?)(?=^== |\Z)", out, re.M | re.S)}
assert len(sec) == 10, f"sections found: {sorted(sec)}"
GiB, MiB = 2 ** 30, 2 ** 20
def close(a, b, rel, what):
    assert abs(a - b) <= rel * abs(b) + 1e-12, f"{what}: {a} against {b}"
def mib(s):   # "12.68 MiB" / "588.00 KiB"
    v, u = s.split()
    return float(v) * {"B": 1 / MiB, "KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[u]

# 1
s = sec["exercise 1"]
for name, b in (("params \\(bf16\\)", 2), ("grads \\(bf16\\)", 2), ("fp32 master", 4), ("Adam m, v \\(fp32\\)", 8), ("total", 16)):
    got = float(re.search(rf"^    {name}\s+([\d.]+)$", s, re.M).group(1))
    close(got, round(7e9 * b / GiB, 2), 1e-9, f"7B {name}")
ddp = re.search(r"DDP holds all 16 on every rank: ([\d.]+) GiB \(([\d.]+) GB\)", s)
close(float(ddp.group(1)), 7e9 * 16 / GiB, 1e-5, "7B DDP GiB"); close(float(ddp.group(2)), 112.0, 1e-9, "7B DDP GB")
p, g, o = map(float, re.search(r"params ([\d.]+) MiB \+ grads ([\d.]+) MiB \+ optimizer ([\d.]+) MiB", s).groups())
assert re.search(r"16\.00 bytes a parameter", s), s
close(p, 3323648 * 2 / MiB, 5e-3, "bf16 params: 2 bytes a parameter of d2c64h2t64's 3,323,648")
close(o, 6 * p, 1e-3, "optimizer 12 bytes against the params' 2")
print("1: the 7B GiB lines and DDP's 112 GB by hand; the bf16 run 2 + 2 + 12 bytes a parameter")

# 2
s = sec["exercise 2"]
psi = 7.5e9
for n, row in re.findall(r"^    N=(\d+)\s+(DDP.*)$", s, re.M):
    n = int(n)
    got = [float(x) for x in re.findall(r"(?:DDP|Z\d)\s+([\d.]+)", row)]
    want = [16 * psi, 4 * psi + 12 * psi / n, 2 * psi + 14 * psi / n, 16 * psi / n]
    for z in range(4):
        assert abs(got[z] - want[z] / 1e9) <= 0.0011, f"7.5B N={n} Z{z}: {got[z]} GB against {want[z] / 1e9:.3f}"
st = {int(z): mib(v) for z, v in re.findall(r"Z(\d) ([\d.]+ [KMG]?i?B)", s.split("measured,")[1].split("\n")[0])}
N = 4
for z, frac in ((1, (8 + 8 / N) / 16), (2, (4 + 12 / N) / 16), (3, 1 / N)):
    close(st[z], st[0] * frac, 2e-3, f"measured Z{z} state against DDP's x {frac}")
print(f"2: the 7.5B rows by the closed form; measured states {st} = DDP's x 1, 0.625, 0.4375, 0.25")

# 3
s = sec["exercise 3"]
rows = {k: tuple(map(int, v)) for k, *v in re.findall(r"^    (\w+|in all)\s+(\d+) collectives\s+(\d+) B\s+(\d+) collectives\s+(\d+) B$", s, re.M)}
def ledger(text):
    part = text.split("collective ledger, last step")[1].split("\nledger:")[0]
    return {k: (int(c), int(b.replace(",", ""))) for k, c, b in re.findall(r"^  (\w+)\s+(\d+) collectives?,\s+([\d,]+) bytes", part, re.M)}
for z, col in ((2, 0), (3, 2)):
    ref = ledger(n2[z])
    for k in ("fwd_gather", "bwd_gather", "reduce_scatter", "step_gather"):
        c, b = rows[k][col], rows[k][col + 1]
        rc, rb = ref.get(k, (0, 0))
        assert c == rc, f"-z {z} {k}: {c} collectives on 4 ranks, {rc} on 2"
        close(b / (3 / 4), rb / (1 / 2), 5e-3, f"-z {z} {k}: bytes / ((N-1)/N) on 4 ranks against 2")
t2, t3 = rows["in all"][1], rows["in all"][3]
close(t3 / t2, 1.5, 0.01, "ZeRO-3 against ZeRO-2's bytes")
g2 = sum(rows[k][1] for k in ("fwd_gather", "bwd_gather", "step_gather")); g3 = sum(rows[k][3] for k in ("fwd_gather", "bwd_gather", "step_gather"))
m = re.search(r"gathers: (\d+)% of ZeRO-2's bytes, (\d+)% of ZeRO-3's; ZeRO-3 sends ([\d.]+)x", s)
assert int(m.group(1)) == round(100 * g2 / t2) and int(m.group(2)) == round(100 * g3 / t3) and abs(float(m.group(3)) - t3 / t2) < 0.006, m.group(0)
print(f"3: the ledgers scale by (N-1)/N from 2 ranks, counts equal; ZeRO-3 {t3 / t2:.3f}x ZeRO-2; gathers {m.group(1)}% / {m.group(2)}%")

# 4: d2c64h2t64 -b 2 -t 64 on 4 ranks
s = sec["exercise 4"]
C, NH, T, Vp, maxT, L, B = 64, 2, 64, 50304, 64, 2, 2
acts_layer = 18 * C + 4 + NH * T
acts_fixed = (2 * C + 3 + 2 * Vp + NH * T) + (14 * C + 2 * NH * T + Vp + 1)
acts = 4 * B * T * (L * acts_layer + acts_fixed) / MiB
got = mib(re.search(r"activations\s+([\d.]+ [KMG]?i?B) per rank", s).group(1))
close(got, acts, 1e-3, "activations by hand")
state = mib(re.search(r"model states\s+([\d.]+ [KMG]?i?B) per rank", s).group(1))
close(state, st[3], 1e-9, "ex4's state against ex2's")
held = mib(re.search(r"temporary buffers\s+([\d.]+ [KMG]?i?B) at most", s).group(1))
emb = 4 * (Vp * C + maxT * C) / MiB   # the embedding unit, fp32, gathered whole, and its full gradient buffer
close(held, 2 * emb, 2e-3, "the pool's busiest moment: the embedding's params and gradients")
frag, res = re.search(r"fragmentation\s+([\d.]+ [KMG]?i?B) \([\d.]+%\): what the pool's ([\d.]+ [KMG]?i?B) reserve", s).groups()
assert abs(held + mib(frag) - mib(res)) <= 0.011, f"held {held} + fragmentation {frag} against the reserve {res}"
proc = float(re.search(r"the process\s+([\d.]+) MiB peak", s).group(1))
assert proc >= state + got, f"the process peak {proc} MiB under the state and activations it holds ({state} + {got})"
print(f"4: activations {got} MiB by hand, the pool's {held} MiB the embedding twice, held + fragmentation = reserve, process {proc} MiB")

# loop and 5: the losses
one_losses = [float(x) for x in re.findall(r"^step +\d+/\d+ \| loss ([\d.]+)", one, re.M)]
s = sec["the closed loop"]
lt = [list(map(float, r)) for r in re.findall(r"^ +\d+ +(\d+\.\d+) +(\d+\.\d+) +(\d+\.\d+) +(\d+\.\d+) +\S+$", s, re.M)]
assert len(lt) == 3 == len(one_losses), (lt, one_losses)
for k, row in enumerate(lt):
    assert len(set(row)) == 1, f"step {k + 1}: the stages' losses differ: {row}"
    assert abs(row[0] - one_losses[k]) <= 1e-6, f"step {k + 1}: {row[0]} against one rank's {one_losses[k]}"
print(f"loop: every step's loss equal across -z 0..3 and to one rank's: {one_losses}")
s = sec["exercise 5"]
t5 = {int(z): r for z, *r in re.findall(r"^    -z (\d)\s+([\d.]+)\s+([\d.e+-]+)\s+([\d.]+ [KMG]?i?B)\s+([\d.]+) MiB\s+([\d.]+) MiB\s+(\d+)\s+(\S+)$", s, re.M)}
assert sorted(t5) == [0, 1, 2, 3], t5
for z, r in t5.items():
    assert float(r[0]) == one_losses[-1] and float(r[1]) == 0, f"-z {z}: final loss {r[0]}, difference {r[1]}"
    close(mib(r[2]), st[z], 1e-9, f"-z {z}'s state in 5 against 2")
sent = [float(t5[z][4]) for z in range(4)]
assert sent[0] == sent[1] == sent[2] and abs(sent[3] / sent[0] - 1.5) < 0.01, sent
assert re.search(r"^verdict ex5: budget 2048 MiB per rank: -z 0, the lowest stage whose process peak fits", s, re.M), s
print(f"5: losses = one rank's; sent {sent}; -m 2048: -z 0")

# 6: d2c64h2t64, L = 2 blocks, 4 units
s = sec["exercise 6"]
b3, b2 = map(int, re.search(r"more bytes \(the ledger\): (\d+) against (\d+) bytes", s).groups())
close(b3 / b2, 1.5, 0.01, "ex6 bytes")
c3, c2 = map(int, re.search(r"more collectives \(the ledger\): (\d+) against (\d+) a step", s).groups())
U = L + 2
assert (c3, c2) == ((U + 1) + (U - 1) + U + 1, 2 * U + 1), f"collectives {c3}, {c2}: by hand {(U + 1) + (U - 1) + U + 1}, {2 * U + 1}"
w = {}
for z in (2, 3):
    m = re.search(rf"ZeRO-{z}: ([\d.]+) ms in all, ([\d.]+) on gathers: (.*)$", s, re.M)
    kinds = dict((k, float(v)) for k, v in re.findall(r"(\w+) ([\d.]+)", m.group(3)))
    assert abs(sum(kinds.values()) - float(m.group(1))) <= 0.1 * len(kinds), (m.group(0), kinds)
    w[z] = float(m.group(2))
assert w[3] > w[2], f"ZeRO-3's gather waits {w[3]} ms against ZeRO-2's {w[2]}: the slow link should make them longer"
assert re.search(r"the ratio: ZeRO-3 [\d.]+ ms a step against ZeRO-2 [\d.]+ ms: [\d.]+x", s), s
print(f"6: bytes {b3 / b2:.3f}x, collectives {c3} / {c2} by hand, gather waits {w[3]} > {w[2]} ms")

# capacity
s = sec["capacity"]
cap = {int(n): [float(x) for x in r] for n, *r in re.findall(r"^    (\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", s, re.M)}
assert sorted(cap) == [1, 2, 4], cap
for n, (d, z, _, _) in cap.items():
    close(d, cap[1][0], 2e-3, f"DDP's state on {n} ranks against one rank's")
    close(z * n, cap[1][1], 2e-3, f"ZeRO-3's state x {n}")
fit = {int(n): (int(d), int(z)) for n, d, z in re.findall(r"^    N=(\d+)\s+DDP L=(\d+)\S*\s.*ZeRO-3 L=(\d+)", s, re.M)}
C, NH, T, Vp, maxT, B, M = 768, 12, 64, 50304, 1024, 1, 2.0   # tests/peak.py's one-rank closed form
fixed = 16 * (Vp * C + maxT * C + 2 * C) + 4 * B * T * ((2 * C + 3 + 2 * Vp + NH * T) + (14 * C + 2 * NH * T + Vp + 1))
per_block = 16 * (12 * C * C + 13 * C) + 4 * B * T * (18 * C + 4 + NH * T)
want = int((M * GiB - fixed) // per_block)
assert fit[1] == (want, want), f"one rank: {fit[1]}, by hand L={want}"
ns = sorted(fit)
assert all(fit[n][0] == fit[2][0] <= fit[1][0] for n in ns[1:]), f"DDP's deepest should stay flat: {fit}"
assert all(fit[a][1] < fit[b][1] for a, b in zip(ns, ns[1:])) and fit[64][1] > 8 * fit[64][0], f"ZeRO-3's should grow with N: {fit}"
print(f"capacity: states flat / 1/N; one rank L={want} by hand; deepest {fit}")

# paper: d2c64h2t64 (3,323,648 parameters, 4 units) on 4 ranks, fp32; 7.5B by the closed form
s = sec["the paper's note"]
P, N, U = 3323648, 4, 4
s0, s3, r = map(float, re.search(r"-z 0 holds ([\d.]+) MiB a rank.*?-z 3 holds ([\d.]+) MiB, ([\d.]+) of it", s, re.S).groups())
close(s0, st[0], 1e-9, "paper: DDP's state against exercise 2's"); close(r, 1 / N, 2e-3, "paper: ZeRO-3's share of DDP's state")
assert re.search(r"sends 1\.000x DDP's bytes", s) and re.search(r"1\.50x DDP's in all", s), s
rs = int(re.search(r"\((\d+) bytes a step, \d+% of what it sends; DDP", s).group(1))
close(rs, (N - 1) / N * 4 * P, 1e-3, "paper: ZeRO-2's reduce-scatter, (N-1)/N of the fp32 gradients")
c3, c0 = map(int, re.search(r"(\d+) collectives a step \(DDP: (\d+)\)", s).groups())
assert (c3, c0) == ((U + 1) + (U - 1) + U + 1, U + 1), f"paper: collectives {c3}, {c0}; by hand {(U + 1) + (U - 1) + U + 1}, {U + 1}"
psi = 7.5e9
z = [16 * psi, 4 * psi + 12 * psi / 64, 2 * psi + 14 * psi / 64, 16 * psi / 64]
for b, got in re.findall(r"^ +(\d+) GB a rank: (.*)$", s, re.M):
    pick = next((k for k in range(4) if z[k] / 1e9 <= int(b)), None)
    assert got == (f"-z {pick} ({z[pick] / 1e9:.3f} GB)" if pick is not None else "none fits: more ranks, or offload (-oo)"), f"paper: {b} GB: {got}, by hand -z {pick}"
assert len(re.findall(r"GB a rank: ", s)) == 4, s
print(f"paper: ZeRO-3 {r} of DDP's state, reduce-scatter {rs} B by hand, collectives {c3}/{c0}, 7.5B budgets by the closed form")

# deepspeed: the three configs by hand (docs/examples/deepspeed), bf16 states 2 + 2 + 12 bytes a parameter
s = sec["the DeepSpeed way"]
for k, extra in ((1, ""), (2, ""), (3, " -pd 1 -pt 640")):   # stage 3's "auto" persistence: 10 x the hidden size 64
    want = f"is  mpirun -np 4 ./train_gpt2_zero3 -e d2c64h2t64 -z {k} -p bf16 -b 4 -l 0.0001{extra}   "
    assert want in s, f"ds_zero{k}.json: want {want!r} in {s}"
ds = {int(k): r for k, *r in re.findall(r"^    ds_zero(\d)\s+([\d.]+ [KMG]?i?B)\s+([\d.]+) MiB\s+([\d.]+ [KMG]?i?B)\s+([\d.]+) MiB\s+([\d.]+)$", s, re.M)}
assert sorted(ds) == [1, 2, 3], ds
for k, per in ((1, 4 + 12 / N), (2, 2 + 14 / N), (3, 16 / N)):
    close(mib(ds[k][0]), P * per / MiB, 2e-3, f"ds_zero{k}: bf16 state {per} bytes a parameter")
assert ds[1][4] == ds[2][4] == ds[3][4], f"the three configs' final losses differ: {ds}"
assert float(ds[1][3]) == float(ds[2][3]) and abs(float(ds[3][3]) / float(ds[1][3]) - 1.5) < 0.01, ds
assert re.search(r"^    \| GPT-2 ZeRO trainer   CPU bf16", s, re.M) and re.search(r"^    \| ranks    N=4, ZeRO stage 3", s, re.M), s
print(f"deepspeed: the commands by hand, bf16 states 7, 5.5, 4 bytes a parameter, one final loss {ds[1][4]}")
PY

# 5 with a budget between the stages' process peaks: the verdict the rule gives on its own table
budget=$($PY -c "
import re, sys
p = sorted(float(x) for x in re.findall(r'^    -z \d .*? ([\d.]+) MiB +[\d.]+ MiB +\d+ +\S+$', open('$work/all.out').read(), re.M))
print(int((p[0] + p[-1]) / 2))")
bash scripts/exercises.sh -q -m "$budget" 5 >"$work/b.out" 2>&1 || { cat "$work/b.out"; fail "exercises.sh -q -m $budget 5"; }
$PY - "$work/b.out" "$budget" <<'PY' || { cat "$work/b.out"; fail "section 5's verdict against its table"; }
import re, sys
out, budget = open(sys.argv[1]).read(), int(sys.argv[2])
peaks = {int(z): float(p) for z, p in re.findall(r"^    -z (\d) .*? ([\d.]+) MiB +[\d.]+ MiB +\d+ +\S+$", out, re.M)}
fits = [z for z in sorted(peaks) if peaks[z] <= budget]
v = re.search(r"^verdict ex5: .*$", out, re.M).group(0)
want = f"verdict ex5: budget {budget} MiB per rank: -z {fits[0]}, the lowest" if fits else f"verdict ex5: budget {budget} MiB per rank: no stage fits"
assert v.startswith(want), f"{v!r}: the table {peaks} asks {want!r}"
print(f"5, -m {budget}: peaks {peaks}: {v}")
PY
echo "exercises: every section's figures agree with their references"
