#!/usr/bin/env bash
# The planner's tables (-plan N) at the edges of every flag it takes, every row against closed forms
# worked out by hand for a bare parameter count (tests/planner_oracle.py: N = 1, 2, 7, 8, 9, 16;
# -rpn none, 1, 8; -hs none, 1, 2, N/2; the ZeRO++ flags; the offload table's -oo, -op, -disk).
# Then the offload flags' refusals, and the startup check of a run's plan against the machine's
# memory with a planted MemAvailable (ZERO3_MEMINFO): GPT-2 XL in bf16 refused on 24 GiB, before it
# allocates; its -oo disk plan within it, by the closed form. About 20 s.
. "$(dirname "$0")/lib.sh"
make -s train_gpt2_zero3 >/dev/null || fail "build"
$PY tests/planner_oracle.py --binary ./train_gpt2_zero3 || fail "the planner's rows against the figures by hand"

# the offload flags: each bad value one line naming the flag, exit 1, for a run and for -plan
touch "$work/file"
mkdir -p "$work/ro" && chmod 500 "$work/ro"
refuse() {   # refuse FLAG-NAME WORDS ARGS...: a run with ARGS exits 1 with one line naming FLAG-NAME and WORDS
  local name=$1 words=$2; shift 2
  local err; err=$(./train_gpt2_zero3 -e d2c64h2t64 -b 1 -t 16 -x 1 "$@" 2>&1 >/dev/null) && fail "$* was accepted"
  [ "$(printf '%s\n' "$err" | grep -c .)" = 1 ] || fail "$*: not one line: $err"
  case "$err" in "error: flag $name"*"$words"*) ;; *) fail "$*: the line does not name $name ($words): $err";; esac
  echo "  refused: $* -> $err"
}
refuse -oo "expected none, host, disk or disk:DIR" -oo nvme
refuse -op "expected none, disk or disk:DIR" -op host
refuse -op "only ZeRO-3" -op disk:"$work" -z 2
refuse -disk "out of range" -plan 1 -disk 0
refuse -disk "expected a number" -plan 1 -disk fast
refuse -oo "names no folder" -oo disk:
refuse -oo "is not a folder" -oo disk:"$work/file"
refuse -op "No such file" -op disk:"$work/none"
refuse -oo "give -o DIR" -oo disk
if [ "$(id -u)" != 0 ]; then refuse -oo "not writable" -oo disk:"$work/ro"; fi   # root writes anywhere
./train_gpt2_zero3 -plan 4 -e d2c64h2t64 -op disk -oo disk:"$work/none" >/dev/null || fail "-plan refused a folder it never writes"
echo "offload flags: every bad value one line naming its flag"

# the startup check: a planted machine of 24 GiB (MemAvailable), and one without MemAvailable
printf 'MemTotal:       25165824 kB\nMemFree:        25165824 kB\nMemAvailable:   25165824 kB\n' > "$work/meminfo24"
xl="-e d48 -p bf16 -b 1 -t 256 -x 1"
start=$(date +%s.%N)
if out=$(ZERO3_MEMINFO="$work/meminfo24" ./train_gpt2_zero3 $xl 2>&1); then fail "GPT-2 XL without offload started on 24 GiB"; fi
secs=$(echo "$(date +%s.%N) - $start" | bc)
echo "$out" | grep -q "^init:" && fail "the refused run allocated its model first: $out"
[ "$(echo "$out" | grep -c .)" = 1 ] || fail "the refusal is not one line: $out"
echo "$out" | grep -q "^error: memory: .*MemAvailable of 24.00 GiB ($work/meminfo24)" || fail "the refusal does not name MemAvailable: $out"
# by hand: 16 bytes a parameter of model state alone is 23.21 GiB; the activations of B=1, T=256 (4 bytes
# a float, per token L (18C + 4 + NH T) + 2C + 3 + 2Vp + NH T + 14C + 2 NH T + Vp + 1) take it past 24
$PY - "$out" <<'PY' || fail "the refusal's figure is not the closed form"
import re, sys
L, C, NH, T, Vp, V, maxT = 48, 1600, 25, 256, 50304, 50257, 1024
psi = Vp * C + maxT * C + 2 * C + L * (12 * C * C + 13 * C)  # the parameters the trainer holds: the padded vocabulary
act = 4 * T * (L * (18 * C + 4 + NH * T) + 2 * C + 3 + 2 * Vp + NH * T + 14 * C + 2 * NH * T + Vp + 1)
need = float(re.search(r"needs ([0-9.]+) GiB", sys.argv[1]).group(1))
want = (16 * psi + act) / 2**30
assert abs(need - want) < 0.01, (need, want)
print(f"  XL without offload: the refusal's {need} GiB = 16 x {psi:,} + activations {act / 2**30:.2f} GiB = {want:.2f} GiB by hand")
PY
echo "startup check: GPT-2 XL (-p bf16) without offload refused on a planted 24 GiB in ${secs%???????} s, before it allocates"
# -oo disk: the plan moves 12 bytes a parameter out (fp32 master, m, v) and holds 3 slots, slot i
# as large as the largest of the units i mod 3 (the embedding, 48 blocks, the final layernorm: 50
# units, so slot 0 takes the embedding, slots 1 and 2 a block each), 12 bytes a parameter; that fits in 24 GiB
plan=$(./train_gpt2_zero3 -plan 1 $xl -oo disk) || fail "-plan with -oo disk"
$PY - "$plan" <<'PY' || fail "the -oo disk plan is not the closed form, or does not fit in 24 GiB"
import re, sys
L, C, Vp, maxT = 48, 1600, 50304, 1024
psi = Vp * C + maxT * C + 2 * C + L * (12 * C * C + 13 * C)
emb, block = Vp * C + maxT * C, 12 * C * C + 13 * C
row = re.search(r"^offload \(-oo disk -op none\).*\n.*\n(?:.*\n){3}  3 +([0-9.]+) \( *([0-9.]+)\)", sys.argv[1], re.M)
after, before = float(row.group(1)), float(row.group(2))
want = before - (12 * psi - 12 * (emb + 2 * block)) / 2**30
assert abs(after - want) < 0.002, (after, want)
assert after < 24, after
print(f"  XL -oo disk: peak {after} GiB = {before} - (12 x {psi:,} - 12 x ({emb:,} + 2 x {block:,})) / 2^30, under 24 GiB")
PY
# a tiny run: refused under a planted limit of 1 MiB (MemTotal only), started with ZERO3_MEM_CHECK=0
printf 'MemTotal:       1024 kB\n' > "$work/meminfo1"
tiny="-e d2c64h2t64 -b 1 -t 16 -x 1 -v 0"
out=$(ZERO3_MEMINFO="$work/meminfo1" ./train_gpt2_zero3 $tiny 2>&1) && fail "a run started on a planted 1 MiB"
echo "$out" | grep -q "^error: memory: .*MemTotal (this kernel has no MemAvailable)" || fail "no MemTotal fallback: $out"
ZERO3_MEM_CHECK=0 ZERO3_MEMINFO="$work/meminfo1" ./train_gpt2_zero3 $tiny >/dev/null 2>&1 || fail "ZERO3_MEM_CHECK=0 did not start the run"
ZERO3_MEMINFO="$work/meminfo24" ./train_gpt2_zero3 $tiny >/dev/null 2>&1 || fail "a tiny run refused on 24 GiB"
echo "startup check: a planted 1 MiB refuses a tiny run (MemTotal), ZERO3_MEM_CHECK=0 starts it, 24 GiB fits it"
echo "planner table: ok"
