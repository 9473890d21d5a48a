#!/usr/bin/env bash
# The pitfalls on purpose (docs/primer.md section 7), against references outside the probe:
#  1. -clip local's probe: the norm it says global clipping would use equals the norm a -clip global
#     run prints at the same step (the same weights at step 1); each rank's coefficient is G over its
#     own shard's norm, so with every rank clipping sum_r (G/c_r)^2 = norm^2; rank 0's coefficient is
#     G over the norm its step line prints; with clipping off (-gc 0) and on one rank the update is
#     off by exactly 0; with 4 ranks clipping differently it is off by more than 0;
#  2. -wrap half and -wrap 2 move the bytes of -wrap 1 (to the padding) in 31 and 13 collectives;
#  3. -rc 2 adds one gather per block to -rc 1, which adds none.
. "$(dirname "$0")/lib.sh"
make -s train_gpt2_zero3 >/dev/null || fail "build"
M="-e d4c64h2t64 -b 2 -t 32 -v 0"

out=$(mpirun -np 4 $BIN $M -x 2 -gc 0.01 -clip local 2>&1) || fail "-clip local: $out"
glob=$(mpirun -np 4 $BIN $M -x 1 -gc 0.01 2>&1) || fail "-clip global: $glob"
[ "$(echo "$out" | grep -c '^  clip local | coefficient by rank')" = 2 ] || fail "no probe line per step:
$out"
$PY - "$out" "$glob" <<'PY' || fail "the probe against the references"
import re, sys
out, glob = sys.argv[1], sys.argv[2]
probe = re.findall(r"coefficient by rank ([\d. e+-]+) \| global clipping: norm ([\d.]+), coefficient ([\d.e+-]+) \| update off by ([\d.e+-]+)%", out)
steps = re.findall(r"^step +\d+/\d+ \| loss [\d.]+ \| lr \S+ \| norm ([\d.]+)", out, re.M)
gnorm = float(re.search(r"^step +1/1 \| loss [\d.]+ \| lr \S+ \| norm ([\d.]+)", glob, re.M).group(1))
coefs, norm, gcoef, off = probe[0]
coefs = [float(c) for c in coefs.split()]
norm, gcoef, off = float(norm), float(gcoef), float(off)
assert len(coefs) == 4, coefs
assert abs(norm - gnorm) <= 1e-4 * gnorm, f"probe's global norm {norm} against -clip global's {gnorm}"
assert all(c < 1 for c in coefs), f"-gc 0.01: every rank clips, got {coefs}"
total = sum((0.01 / c) ** 2 for c in coefs) ** 0.5
assert abs(total - norm) <= 2e-3 * norm, f"sqrt(sum (G/c_r)^2) = {total} against the norm {norm}"
assert abs(0.01 / coefs[0] - float(steps[0])) <= 2e-3 * float(steps[0]), f"rank 0: G/c_0 = {0.01/coefs[0]} against its norm {steps[0]}"
assert abs(gcoef - 0.01 / norm) <= 1e-3 * gcoef, f"global coefficient {gcoef} against G/norm {0.01/norm}"
assert off > 0.1, f"four ranks clipping differently: the update is off by {off}%"
print(f"probe: norm {norm} = -clip global's {gnorm}; sqrt(sum (G/c_r)^2) = {total:.4f}; coefficients {coefs}; off by {off}%")
PY
for case in "1 -gc 1" "4 -gc 0"; do
  set -- $case
  o=$(mpirun -np "$1" $BIN $M -x 2 -clip local "${@:2}" 2>&1) || fail "-np $1 ${*:2}: $o"
  n=$(echo "$o" | grep -c '^  clip local .*update off by 0% (cosine 1.000000)$')
  [ "$n" = 2 ] || fail "-np $1 ${*:2}: the update should be off by exactly 0 at both steps:
$(echo "$o" | grep '^  clip local')"
  echo "-np $1 ${*:2}: every rank's coefficient is global clipping's, the update is off by 0%"
done

p=$(scripts/pitfalls.sh 2 3) || fail "scripts/pitfalls.sh: $p"
echo "$p"
$PY - "$p" <<'PY' || fail "pitfalls 2 and 3"
import re, sys
rows = {m[0]: (int(m[1]), int(m[2])) for m in re.findall(r"^  (-\w+ \w+)\s+(\d+) collectives\s+(\d+) bytes", sys.argv[1], re.M)}
c1, b1 = rows["-wrap 1"]
assert rows["-wrap half"][0] == 31 and rows["-wrap 2"][0] == 13 and c1 == 19, rows
for w in ("-wrap half", "-wrap 2"):   # the same bytes, but for the padding of the units (64-element alignment)
    assert abs(rows[w][1] - b1) <= 4 * 64 * 4 * 8, (w, rows[w], b1)
assert rows["-rc 0"] == rows["-rc 1"], rows
assert rows["-rc 2"][0] == rows["-rc 1"][0] + 4, rows   # one gather per block, 4 blocks
print("pitfall 2: 13 / 19 / 31 collectives for the same bytes; pitfall 3: -rc 2 adds 4 gathers, -rc 1 none")
PY
