#!/usr/bin/env bash
# -p bf16 (mixed precision: bf16 params and gradients, fp32 master, m, v) against PyTorch's CPU bf16
# (tests/reference/gpt2_reference.py --dtype bfloat16: bf16 weights rounded from an fp32 master kept by hand, a
# linear layer's input and output gradient rounded to bf16, every sum fp32, gradients rounded to bf16
# once a step, AdamW on the master), on the same model and data, step by step (~1 minute):
#   - the bound at step s, first order in the differences (u = 2^-24 and u_b = 2^-8 are fp32's and
#     bf16's unit roundoffs; S_s, G_s the reference's sums of g^2 ulp(w) and of g^2 over the weights
#     w at step s, and lr_s its learning rate, which tests/reference/gpt2_reference.py prints):
#       * the step's own fp32 sums: both runs multiply the same bf16 operands at step 1, so their
#         losses differ there only by the order of fp32 sums, the longest K = 1024 terms (the
#         vocabulary's softmax; every matmul's K <= 4C = 288 is shorter). Rounding errors of
#         random sign grow as sqrt(K): within 6 sqrt(K) u |loss| but with chance
#         2K exp(-18) = 3e-5 (Higham and Mary's probabilistic bound, SIAM J. Sci. Comput. 2019);
#       * a gradient element is rounded to bf16 in up to R = 6 places the two runs do not share
#         (the reference once a step; here the tied wte once per use, once per collective, twice
#         under HSDP, once per micro-step's add): relative differences of spread at most
#         sigma_g = sqrt(R / 3) u_b (a rounding's relative error lies within +-u_b);
#       * Adam's step lr m^/(sqrt(v^) + e) does not change when every gradient so far is scaled by
#         one factor, so the first step (lr sign(g)) is the same in both runs, and a later one moves
#         by at most 2 sigma_g lr_t A_t, A_t = sqrt(sum_k a_k^2 / b_k) (Cauchy-Schwarz, a_k, b_k
#         the bias-corrected weights of gradient k in m^ and v^): after s - 1 steps the fp32 masters
#         differ by d_s = sum_{2 <= t < s} 2 sigma_g lr_t A_t (d_1 = d_2 = 0);
#       * each working weight is its master rounded to bf16: masters d apart round to the same
#         value unless a rounding boundary lies between (chance <= d / ulp(w)), else to values one
#         ulp(w) apart, so the working weights differ by e_w with E[e_w^2] <= 3 d ulp(w) + d^2;
#       * the loss moves by sum g e_w: independent roundings of mean zero, spread
#         sigma_s = sqrt(3 d_s S_s + d_s^2 G_s), within 5 sigma_s but with chance 6e-7;
#     so |loss_s - reference_s| <= 6 sqrt(K) u |reference_s| + 5 sigma_s at every step. (That
#     leaves out the gradients' own change with the weights, second order while the weights move
#     by rounding.) A run that trained in fp32, or rounded where the reference does not, also
#     lands nearer the fp32 reference: the loss must be nearer the bf16 one at all steps but one;
#   on 1, 2 and 4 ranks, stages 0-3 on 2, with accumulation and HSDP;
#   - the ZeRO++ flags (-qw 8 and -qg 8 on 2 ranks; -qw 8 -hp 2 -qg 8 on 4, where hpZ's secondary
#     shards feed the backward), whose int8 blocks (256 elements of a unit's flat buffer, step
#     s = amax / 127, every value within s / 2) are held to the same bound with d per element:
#     tests/reference/gpt2_reference.py --zeropp-bound keeps the rms d of the two masters' difference and
#     prints the step's sigma_s^2 (a tighter form of the above: its own Adam moments, not A_t);
#       * -qw 8: the reference quantizes its working weights itself (--qw: its own implementation
#         of docs/zeropp.md's layout, tensors at multiples of 64 in their unit, blocks from the
#         unit's start), so both runs compute with the same quantized model until their masters
#         differ: steps 1 and 2 are held to the sums term alone. After, a working weight is its
#         master rounded to bf16, to its block's grid of step s and to bf16 again, a monotone map
#         within s / 2 + ulp <= 1.5 s of the identity: masters d apart give working weights that
#         differ by d on average and at most d + 3 s, so E[e_w^2] <= 3 d s + d^2 (s in place of
#         ulp(w)). Where a block's amax itself may round differently (chance P, the sum of
#         d / ulp(x) over the elements that may be the max; damax apart), the whole block is
#         rescaled by rel = damax / amax, one correlated move (P (rel sum_block g w)^2) and
#         re-rounded where it moved (rel |x| in place of d): sigma_s is the three spreads' sum;
#       * -qg 8: the reference reduces its gradients as qgZ does (--qg N:G:A, its own code of the
#         documented hops: each rank's micro-batch gradient, its rows of the batch in the data
#         order, quantized on the same blocks, the bundles added into the bf16 gradient in rank
#         order, or summed in fp32 per node group, requantized and added in node order), so what
#         is left is where a rank's partial sum, which moves against its block's grid by d =
#         2 sigma_g of itself in the two runs (its roundings and its block amax's), rounds to
#         another code: that adds min(3 d s, s^2 / 6) to the difference it brings in (the argument
#         above less its d^2, or two independent roundings), and the block scale's own spread
#         (sigma_g of the value); per rank in hop 1, per node sum in hop 2 (hop 1's spread added to
#         the node sum's difference and to its d); plus each bf16 add into the shard (u_b^2 / 3
#         of the partial sum squared) and the clip coefficient's change (the norm's relative spread). That variance joins sigma_g's in Adam's step: at
#         step 1 (lr sign(g)) it moves by 2 lr where g's sign may flip, chance <= var / (var + g^2)
#         (Cantelli), and by lr from g = 0 where a code may differ (chance d / s); later by
#         (M + |u| V) / (sqrt(v^) - V), M = sqrt(sum a_k^2 var_k) and V = sqrt(sum b_k var_k) the
#         spreads of m^ and sqrt(v^), u the reference's step; where V >= sqrt(v^) / 2, by at most
#         |u| + A_t times the square root of the chance that one of the element's codes has
#         differed so far (plus 2 sigma_g of it);
#     so again |loss_s - reference_s| <= 6 sqrt(K) u |reference_s| + 5 sigma_s, the reference with
#     the run's flags; and at step 1, where both runs have the same weights, the gradient norms
#     differ by the gradients' differences alone: |N' - N| <= 5 sqrt(sum g^2 var) / N + sum var / N
#     (first order in them, and the rest), var = (sigma_g g)^2 and qgZ's above;
#   - the portable path and the AVX512_BF16 path (ZERO3_BF16_PATH) agree within the step-1 bound;
#   - the state per rank from log.csv's mem_states_bytes: 2/2/12 bytes a (padded) parameter as each
#     stage divides them, against fp32's 4/4/8 of the same run shape;
#   - -plan's mixed-precision table equals a bf16 run's measured state (d4, stages 1 and 3);
#   - the collective ledger equals its theory, and its bytes are half of fp32's;
#   - a bf16 checkpoint resumed as fp32: one line says so; -p with an unknown value: one error line.
# Planted by hand (a copy of the trainer, ZERO3_TRAINER=...), each fails at r1's step 2, 2-3x past the
# bound: the layernorm bias gradient dropped (cpu/gpt2_cpu.c), and the working copy truncated from
# the master after AdamW instead of rounded (cpu/backend_cpu.c, bf16_from_f32_span). The
# quantization step twice what it is (zero3_quant_scale returning 2 amax / 127), which 1e-2 passed:
# qw fails at step 1's norm (1.5e-2 apart, bound 3.6e-3) and step 2's loss (2.8e-4, bound 7.9e-5),
# zpp at step 1's norm (1.8e-2 apart, bound 6.9e-3); its qgZ half alone is not caught (qg's norm
# 1.7e-3 apart, bound 5.8e-3; its losses at most 0.55 of their bound).
. "$(dirname "$0")/lib.sh"
make -s train_gpt2_zero3 >/dev/null || fail "build"
make -s dumps >/dev/null || fail "make dumps"
MODEL=tests/reference/dumps/small_model.bin    # L=3 C=72 NH=3 V=1024 maxT=64
TOKENS=tests/reference/dumps/small_tokens.bin
STEPS=6
REFARGS=(--load $MODEL --tokens $TOKENS --B 8 --T 32 --steps $STEPS)
# the bf16 reference; the same with the ZeRO++ flags' quantization applied by the reference itself
# (qwZ alone; qgZ on 2 ranks; all three on 4, node groups of 2), each with its bound; and fp32: one
# process runs the five (most of a run is torch's start)
$PY - "$work" "${REFARGS[@]}" <<'PY' || { tail -n 3 "$work"/ref_*.txt; fail "a reference run failed"; }
import contextlib, sys
sys.path.insert(0, "tests/reference")
import gpt2_reference
work, common, zpp = sys.argv[1], sys.argv[2:], ["--dtype", "bfloat16", "--zeropp-bound"]
runs = {"bf16": ["--dtype", "bfloat16"], "f32": ["--dtype", "float32"], "qw": zpp + ["--qw"],
        "qg": zpp + ["--qg", "2:2:1"], "zpp": zpp + ["--qw", "--qg", "4:2:1"]}
for name, flags in runs.items():
    with open(f"{work}/ref_{name}.txt", "w") as out, contextlib.redirect_stdout(out):
        gpt2_reference.main(common + flags)
PY
losses_ref() { sed -n 's/^step *[0-9]*\/[0-9]*: loss \([0-9.]*\) .*/\1/p' "$1"; }
# the reference's per-step lr and bf16 sensitivities (S_s, G_s of the header), one line a step
sens_ref() { paste -d' ' <(sed -n 's/^step .* lr \([0-9.e+-]*\)$/\1/p' "$1") <(sed -n 's/^bf16 sensitivity .*sum_g2_ulp \([0-9.e+-]*\) sum_g2 \([0-9.e+-]*\)$/\1 \2/p' "$1"); }
losses_ref "$work/ref_bf16.txt" > "$work/ref_bf16.l"
losses_ref "$work/ref_f32.txt" > "$work/ref_f32.l"
sens_ref "$work/ref_bf16.txt" > "$work/ref_bf16.s"
[ "$(wc -l < "$work/ref_bf16.s")" = $STEPS ] || fail "the bf16 reference printed no sensitivities"
# the ZeRO++ bounds' loss variance per step (the header's sigma_s^2 from per-element differences)
for v in qw qg zpp; do
  losses_ref "$work/ref_$v.txt" > "$work/ref_$v.l"
  sed -n 's/^zeropp bound step *[0-9]*: var \([0-9.e+-]*\) norm \([0-9.e+-]*\) dnorm \([0-9.e+-]*\)$/\1 \2 \3/p' \
    "$work/ref_$v.txt" > "$work/var_$v.v"
  [ "$(wc -l < "$work/var_$v.v")" = $STEPS ] || fail "the reference printed no ZeRO++ bound for $v"
done
TRAIN=(-e $MODEL -i $TOKENS -t 32 -x $STEPS -l 1e-3 -u 2 -q 0.1 -c 0.1 -gc 1 -v 0 -s 0 -d 256)

# run NAME NRANKS ARGS...: the trainer, its step losses into NAME.l, its log.csv kept
run() {
  local name=$1 n=$2; shift 2
  timeout -k 10 300 mpirun -np "$n" $BIN "${TRAIN[@]}" -o "$work/$name" "$@" > "$work/$name.log" 2>&1 ||
    { tail -20 "$work/$name.log"; fail "$name: exit $?"; }
  sed -n 's/^step [0-9]*\/[0-9]* | loss \([0-9.]*\) .*/\1/p' "$work/$name.log" > "$work/$name.l"
  grep -q "^ledger: measured = theory" "$work/$name.log" || fail "$name: the ledger differs from its theory"
}
# compare NAME [ZPP]: the checks of the header against the two references; a ZeRO++ run against the
# bf16 reference with the same flags (ref_ZPP) and its loss variance bound per step (var_ZPP)
compare() {
  local ref=ref_${2:-bf16} var=${2:+$work/var_$2.v}
  $PY - "$work/$1.l" "$work/$ref.l" "$work/ref_f32.l" "$work/ref_bf16.s" "${var:-}" "$1" "$work/$1/log.csv" <<'PY' || exit 1
import csv, math, sys
got, ref, f32 = ([float(x) for x in open(p)] for p in sys.argv[1:4])
sens = [[float(x) for x in line.split()] for line in open(sys.argv[4])]   # lr, S, G per step
zpp = [[float(x) for x in line.split()] for line in open(sys.argv[5])] if sys.argv[5] else None
zpp_var = [row[0] for row in zpp] if zpp else None   # per step; and step 1's norm and its bound
name = sys.argv[6]
if zpp:   # step 1's gradient norm: the same weights in both runs, so only the gradients' differences
    norm = float(next(csv.DictReader(open(sys.argv[7])))["grad_norm"])
    _, ref_norm, dnorm = zpp[0]
    if abs(norm - ref_norm) > dnorm:
        sys.exit(f"FAIL: {name}: step 1 gradient norm {norm:.7f}, bf16 reference {ref_norm:.7f}: "
                 f"{abs(norm - ref_norm):.2e} apart, bound {dnorm:.2e}")
    print(f"     {name} step 1 norm: {abs(norm - ref_norm):.1e} apart, bound {dnorm:.1e}")
K, u, u_b, R, beta1, beta2 = 1024, 2.0 ** -24, 2.0 ** -8, 6, 0.9, 0.95
sums = 6 * math.sqrt(K) * u          # the step's own fp32 sums, relative to the loss
sigma_g = math.sqrt(R / 3) * u_b     # the spread of the two runs' relative gradient differences
def adam_ratio(t):   # A_t: the largest |m^/sqrt(v^)| after t gradients
    a = [(1 - beta1) * beta1 ** (t - k) / (1 - beta1 ** t) for k in range(1, t + 1)]
    b = [(1 - beta2) * beta2 ** (t - k) / (1 - beta2 ** t) for k in range(1, t + 1)]
    return math.sqrt(sum(x * x / y for x, y in zip(a, b)))
if len(got) != len(ref): sys.exit(f"FAIL: {name}: {len(got)} steps, want {len(ref)}")
worst, closer, d = 0.0, 0, 0.0
for s, (g, r, f) in enumerate(zip(got, ref, f32)):
    lr, S, G = sens[s]
    spread = math.sqrt(zpp_var[s]) if zpp_var else math.sqrt(3 * d * S + d * d * G)
    bound = sums * abs(r) + 5 * spread
    dist = abs(g - r)
    closer += dist < abs(g - f)
    worst = max(worst, dist / bound)
    if dist > bound:
        sys.exit(f"FAIL: {name}: step {s + 1} loss {g:.6f}, bf16 reference {r:.6f}: {dist:.2e} apart, bound "
                 f"{bound:.2e} (fp32 reference {f:.6f})")
    if zpp_var: print(f"     {name} step {s + 1}: {dist:.1e} apart, bound {bound:.1e}")
    if s > 0: d += 2 * sigma_g * lr * adam_ratio(s + 1)   # the masters after this step's update
if closer < len(got) - 1:
    sys.exit(f"FAIL: {name}: nearer the fp32 reference than the bf16 one at {len(got) - closer} steps")
print(f"ok   {name}: {len(got)} steps, |loss - bf16 reference| at most {worst:.2f} of the bound; "
      f"nearer it than fp32 at {closer} of {len(got)} steps")
PY
}

run r1 1 -b 8 -p bf16;                     compare r1
for z in 0 1 2 3; do run z$z 2 -b 4 -z $z -p bf16; compare z$z; done
run acc 2 -b 2 -p bf16;                    compare acc          # A = 2 micro-steps
run r4 4 -b 2 -p bf16;                     compare r4
run hsdp 4 -b 2 -hs 2 -p bf16;             compare hsdp
run qw 2 -b 4 -qw 8 -p bf16;               compare qw qw
run qg 2 -b 4 -qg 8 -p bf16;               compare qg qg
run zpp 4 -b 2 -qw 8 -hp 2 -qg 8 -p bf16;  compare zpp zpp
ZERO3_BF16_PATH=portable run portable 1 -b 8 -p bf16
$PY - "$work/portable.l" "$work/r1.l" <<'PY' || exit 1
import sys
a, b = ([float(x) for x in open(p)] for p in sys.argv[1:3])
bound = 6 * 1024 ** 0.5 * 2.0 ** -24   # the step-1 bound of the header
if abs(a[0] - b[0]) > bound * abs(b[0]): sys.exit(f"FAIL: portable {a[0]} vs avx512 {b[0]} at step 1")
print(f"ok   portable and best path: step 1 {abs(a[0] - b[0]):.2e} apart (bound {bound * abs(b[0]):.2e})")
PY

# the state per rank: mem_states_bytes of the bf16 runs against 2/2/12 of the padded parameter
# count P, which the fp32 stage-3 run gives (its 16 bytes a parameter over N)
run f32z3 2 -b 4 -z 3
col() { $PY -c "import csv,sys; r=list(csv.DictReader(open(sys.argv[1]))); print(r[-1][sys.argv[2]])" "$1/log.csv" "$2"; }
P2=$(col "$work/f32z3" mem_states_bytes)   # 16 P / 2
for z in 0 1 2 3; do
  got=$(col "$work/z$z" mem_states_bytes)
  want=$($PY -c "P=$P2*2/16; N=2; print(int({0:16*P, 1:4*P+12*P/N, 2:2*P+14*P/N, 3:16*P/N}[$z]))")
  [ "$got" = "$want" ] || fail "stage $z: state per rank $got bytes, want $want (2/2/12 of P=$((P2 / 8)))"
  echo "ok   stage $z, 2 ranks: state $got bytes per rank = 2/2/12 bytes a parameter as the stage divides them"
done
# -plan's mixed-precision table is the same accounting: GPT-2 d4 (its C a multiple of the 64-element
# alignment, so the planner's layout is the run's) on 2 ranks, the planner's bytes = the run's measured
plan=$($BIN -plan 2 -e d4 | awk '/^model-state memory per rank, mixed/ { on = 1 } on && /^  [0-3] / { gsub(",", "", $(NF-2)); print $(NF-2) }')
for z in 1 3; do
  timeout -k 10 300 mpirun -np 2 $BIN -e d4 -x 1 -v 0 -s 0 -z $z -p bf16 -o "$work/d4z$z" > "$work/d4z$z.log" 2>&1 || fail "d4 -z $z"
  got=$(col "$work/d4z$z" mem_states_bytes); want=$(echo "$plan" | sed -n "$((z + 1))p")
  [ "$got" = "$want" ] || fail "d4 -z $z on 2 ranks: the run holds $got bytes of model state, -plan 2's mixed table $want"
  echo "ok   d4 -z $z, 2 ranks: the run's model state $got bytes = -plan 2's mixed-precision row"
done
sent_b=$(col "$work/z3" comm_bytes); sent_f=$(col "$work/f32z3" comm_bytes)
$PY -c "import sys; b,f=$sent_b,$sent_f; sys.exit(0 if abs(b - f/2) <= 16 + f*1e-3 else 1)" ||
  fail "stage 3: bf16 sent $sent_b bytes, fp32 $sent_f: want half (the norm's few bytes aside)"
echo "ok   stage 3, 2 ranks: bf16 sends $sent_b bytes a step, fp32 $sent_f"

# a resume that changes -p: the checkpoint is the fp32 master, so it goes on, and says so in one line
$BIN "${TRAIN[@]}" -b 8 -x 2 -n 2 -o "$work/res" -p bf16 > "$work/res1.log" 2>&1 || fail "bf16 run with a checkpoint"
$BIN "${TRAIN[@]}" -b 8 -x 2 -o "$work/res" -y 1 > "$work/res2.log" 2>&1 || { cat "$work/res2.log"; fail "fp32 resume of a bf16 checkpoint"; }
[ "$(grep -c 'written with -p bf16, this run has -p fp32: the checkpoint holds the fp32 master' "$work/res2.log")" = 1 ] ||
  { cat "$work/res2.log"; fail "want one line saying the resume changes -p"; }
echo "ok   a bf16 checkpoint resumes as fp32, in one line"

timeout 30 $BIN -p fp16 > "$work/bad.out" 2> "$work/bad.err"; rc=$?
check_failed "-p fp16" $rc "$work/bad.out" "$work/bad.err" "flag -p: expected fp32 or bf16" 30
echo "ok   -p fp16: one error line"
echo "test_bf16: all passed"
