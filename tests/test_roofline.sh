#!/usr/bin/env bash
# The step's floor (tools/bench/bench_floor.c) and the phase clock it is compared with (cpu/gpt2_cpu.c,
# ZERO3_CPU_PHASES):
# - the per-phase FLOPs and bytes of a tiny shape against a count by hand, written out below term by term;
# - the phase clock's step against the trainer's own ms/step (log.csv), and its four compute phases against
#   the -tr trace's compute spans (the engine's stamps): within 3%, so no kernel is lost or counted twice;
# - off by default (no phase line), and a bad ZERO3_CPU_PHASES or bench_floor flag is one error line.
. "$(dirname "$0")/lib.sh"
make -s train_gpt2_zero3 build/bench_floor >/dev/null || fail "build"

# -- the counts, by hand: L=1 C=4 NH=2 (hs 2) V=10 Vp=16 B=1 T=2 (BT 2) P=100
counts() { ./build/bench_floor -L 1 -C 4 -NH 2 -V 10 -Vp 16 -B 1 -T 2 -P 100 -p "$1" --counts; }
field() { awk -v p="$2" -v f="$3" '$1 == p { for (i = 2; i < NF; i++) if ($i == f) print $(i + 1) }' <<<"$1"; }
fp32=$(counts fp32) || fail "bench_floor --counts"
bf16=$(counts bf16) || fail "bench_floor --counts -p bf16"
# a linear layer (in -> out): 3 products of 2*BT*in*out flops (forward, dinp, dW), and BT*out for db
#   qkv 4->12: 3*2*2*4*12 + 2*12 = 600; attproj 4->4: 192 + 8 = 200; fc 4->16: 768 + 32 = 800;
#   fcproj 16->4: 768 + 8 = 776; the LM head 4->16, no bias: 768. Sum 3144.
want_matmul=$((600 + 200 + 800 + 776 + 768))
# attention: causal pairs B*NH*T(T+1)/2 = 6; forward q.k and att@v 2*2*hs = 8 a pair, softmax 14 a pair;
#   backward 4 products of 2*hs = 16 a pair, softmax backward 5 a pair: 6 * (8 + 14 + 16 + 5) = 258
want_attention=$((6 * (8 + 14 + 16 + 5)))
# elementwise: 3 layernorms of BT*C = 8 elements, 7 forward + 15 backward flops each: 528; 2 residual
#   adds of 8: 16; GELU on BT*4C = 32 elements, 21 forward + 29 backward: 1600; embedding 8 * (1 + 2): 24
want_elementwise=$((3 * 8 * 22 + 16 + 32 * 50 + 24))
# logits: softmax over V 14 a logit for BT*V = 20 logits, the log 10 a row, dlogits 2 a logit
want_logits=$((20 * 14 + 2 * 10 + 20 * 2))
# the gradient norm 2 a parameter, AdamW 14 a parameter
want_optimizer=$((100 * (2 + 14)))
for ph in matmul:$want_matmul attention:$want_attention elementwise:$want_elementwise logits+loss:$want_logits \
          norm+adamw:$want_optimizer; do
  got=$(field "$fp32" "${ph%%:*}" flops)
  [ "$got" = "${ph#*:}" ] || fail "${ph%%:*}: $got flops, by hand ${ph#*:}"
  [ "$(field "$bf16" "${ph%%:*}" flops)" = "$got" ] || fail "${ph%%:*}: bf16 counts other flops than fp32"
done
# bytes: the logits read once and dlogits written once, BT*Vp*4 each: 256 in both precisions;
# the optimizer: fp32 reads the gradient for the norm (4) and p, g, m, v (16) and writes p, m, v (12): 32 a
# parameter; bf16 reads the gradient (2) for the norm, then the gradient (2), master, m, v (12), writes them
# (12) and the bf16 parameter (2): 30
[ "$(field "$fp32" logits+loss bytes)" = 256 ] || fail "logits bytes: $(field "$fp32" logits+loss bytes), by hand 256"
[ "$(field "$fp32" norm+adamw bytes)" = 3200 ] || fail "fp32 optimizer bytes: $(field "$fp32" norm+adamw bytes), by hand 3200"
[ "$(field "$bf16" norm+adamw bytes)" = 3000 ] || fail "bf16 optimizer bytes: $(field "$bf16" norm+adamw bytes), by hand 3000"
# the attention's bytes: forward read qkv 2*12*4 = 96, write att B*NH*T*T*4 = 32, write y 32; backward read
# dy 32, qkv 96, att 32, write dqkv 96: 416
[ "$(field "$fp32" attention bytes)" = 416 ] || fail "attention bytes: $(field "$fp32" attention bytes), by hand 416"
echo "ok: the per-phase FLOPs and bytes match the count by hand"

# -- the phase clock against the trainer's own timing
run="$work/run"
ZERO3_CPU_PHASES=1 "$BIN" -e d2c128h2t64 -b 4 -t 64 -x 5 -v 0 -s 0 -o "$run" -tr "$work/trace.json" >"$work/out" 2>"$work/err" ||
  { cat "$work/err"; fail "the run with ZERO3_CPU_PHASES=1"; }
line=$(grep '^cpu phases' "$work/out") || fail "no phase line in the closing report"
get() { sed -n "s/.*| $1 \\([-0-9.]*\\).*/\\1/p" <<<"$line"; }
step=$(sed -n 's/.*: step \([0-9.]*\) |.*/\1/p' <<<"$line")
log_ms=$(awk -F, 'NR > 2 { ms += $6; n++ } END { printf "%.3f", ms / n }' "$run/log.csv")   # steps 2.., as the clock
# the trace's spans of the same steps (the first left out), mean ms a step: "fwd"/"bwd" (the engine's
# stamps around each unit's compute), "adamw", and "wait" (exposed communication)
spans() { grep -o "\"name\":\"$1[^}]*\"step\":[0-9]*" "$work/trace.json" |
          awk -F'"dur":' -v n=4 '{ split($2, d, ","); s = $0; sub(/.*"step":/, "", s); if (s + 0 >= 1) t += d[1] }
                                 END { printf "%.3f", t / n / 1000 }'; }
compute=$(awk -v f="$(spans fwd)" -v b="$(spans bwd)" 'BEGIN { printf "%.3f", f + b }')
phases=$(awk -v a="$(get matmul)" -v b="$(get attention)" -v c="$(get elementwise)" -v d="$(get logits)" \
         'BEGIN { printf "%.3f", a + b + c + d }')
echo "phase clock: $line"
echo "trainer ms/step (log.csv, steps 2-5) $log_ms; trace: compute $compute, adamw $(spans adamw), waits $(spans wait) ms;" \
     "the clock's four phases $phases ms; load $(cut -d' ' -f1 /proc/loadavg)"
within() { awk -v a="$1" -v b="$2" -v tol="$3" 'BEGIN { exit !(b > 0 && (a - b) / b <= tol && (b - a) / b <= tol) }'; }
within "$step" "$log_ms" 0.03 || fail "the phase clock's step $step ms is not within 3% of the trainer's $log_ms ms"
within "$phases" "$compute" 0.03 || fail "the four phases add to $phases ms, not within 3% of the trace's compute $compute ms"
echo "ok: the phases add up to the step"

# -- off by default; bad inputs
"$BIN" -e d2c128h2t64 -b 4 -t 64 -x 2 -v 0 -s 0 -o "$work/off" >"$work/out" 2>&1 || fail "the run without the clock"
! grep -q '^cpu phases' "$work/out" || fail "a phase line without ZERO3_CPU_PHASES"
set +e
ZERO3_CPU_PHASES=yes timeout 60 "$BIN" -e d2c128h2t64 -b 4 -t 64 -x 2 -v 0 -o "$work/bad" >"$work/out" 2>"$work/err"
check_failed "ZERO3_CPU_PHASES=yes" $? "$work/out" "$work/err" "ZERO3_CPU_PHASES=yes" 60
timeout 10 ./build/bench_floor -L 1 -C 4 -NH 2 -V 10 -Vp 16 -B 1 -T 2 --counts >"$work/out" 2>"$work/err"
check_failed "bench_floor without -P" $? "$work/out" "$work/err" "-P: missing" 10
timeout 10 ./build/bench_floor -L 1 -C x4 -NH 2 -V 10 -Vp 16 -B 1 -T 2 -P 5 --counts >"$work/out" 2>"$work/err"
check_failed "bench_floor -C x4" $? "$work/out" "$work/err" "-C: expected a number" 10
timeout 10 ./build/bench_floor -L 1 -C 4 -NH 2 -V 10 -Vp 16 -B 1 -T 2 -P 5 -ms 1,2 >"$work/out" 2>"$work/err"
check_failed "bench_floor -ms 1,2" $? "$work/out" "$work/err" "-ms: expected 6" 10
set -e
echo "ok: off by default, bad inputs refused"

# -- the offload I/O benchmark (tools/bench/bench_io.c): a tiny pass of each way, its file gone after,
#    and its bad inputs; the figures themselves belong to docs/performance.md, not to a test
make -s build/bench_io >/dev/null || fail "build bench_io"
mkdir "$work/io"
./build/bench_io "$work/io" -g 0.02 -r 2 -reps 1 >"$work/io.out" 2>&1 || { cat "$work/io.out"; fail "bench_io on a tiny file"; }
[ "$(grep -c ' GB/s (median of 1' "$work/io.out")" -ge 2 ] || { cat "$work/io.out"; fail "bench_io printed no rate for the pread ways"; }
[ -z "$(ls -A "$work/io")" ] || fail "bench_io left a file in its folder"
set +e
timeout 10 ./build/bench_io "$work/nowhere" >"$work/out" 2>"$work/err"
check_failed "bench_io on a missing folder" $? "$work/out" "$work/err" "nowhere: not a folder" 10
timeout 10 ./build/bench_io "$work/io" -r 0 >"$work/out" 2>"$work/err"
check_failed "bench_io -r 0" $? "$work/out" "$work/err" "-r: expected a number" 10
timeout 10 ./build/bench_io "$work/io" -g 0.01 -r 64 >"$work/out" 2>"$work/err"
check_failed "bench_io -g too small for two records" $? "$work/out" "$work/err" "at least two records" 10
set -e
[ -z "$(ls -A "$work/io")" ] || fail "a refused bench_io left a file"
echo "ok: bench_io: $(grep -c ' GB/s' "$work/io.out") ways on a tiny file, bad inputs refused, no file left"

# -- bench_cpu.sh's table: each row's "x floor" is its ms/step over the floor line's, the ratio lines are
# the 2-rank row over the 1-rank row, the copy's ms is 2 ranks x (read + write) of the row's comm/step
# at the floor line's memory bandwidth, and the half alone (-b 2 over 2 ranks: B=1 each) splits the
# rows' difference in two parts that add up to it, all worked out again here from the printed figures
scripts/bench_cpu.sh -e d2c64h2t64 -b 2 -t 32 -x 2 -z 3 -p fp32 >"$work/bench.out" 2>"$work/bench.err" ||
  { cat "$work/bench.err"; fail "bench_cpu.sh's table"; }
cat "$work/bench.out"
awk '
  $1 == "floor" { floor = $4; for (i = 1; i <= NF; i++) if ($i == "memory") gbs = $(i + 1) }
  $1 ~ /^[12]$/ && $2 == "3" { ms[$1] = $3; xf[$1] = $NF; comm[$1] = $5 }
  /^stage 3, -p fp32: 2 ranks \/ 1 rank/ { ratio = $11; sub(/x;$/, "", ratio); copy = $(NF - 2) }
  /^stage 3, -p fp32: one rank.s half alone \(B=1, / { half = $14; added = $23; batch = $(NF - 1) }
  END {
    if (!floor || !gbs || !ms[1] || !ms[2] || ratio == "" || !half) { print "missing figures"; exit 1 }
    # the 2 ranks less the half, the half less 1 rank: the rows and the half (each printed to 0.1 ms)
    if (added - (ms[2] - half) > 0.11 || (ms[2] - half) - added > 0.11) { print "2 ranks less the half " added ", by hand " ms[2] - half; exit 1 }
    if (batch - (half - ms[1]) > 0.11 || (half - ms[1]) - batch > 0.11) { print "the half less 1 rank " batch ", by hand " half - ms[1]; exit 1 }
    for (n = 1; n <= 2; n++) if (xf[n] - ms[n] / floor > 0.011 || ms[n] / floor - xf[n] > 0.011) { print "row " n ": x floor " xf[n] ", by hand " ms[n] / floor; exit 1 }
    if (ratio - ms[2] / ms[1] > 0.011 || ms[2] / ms[1] - ratio > 0.011) { print "2/1 ratio " ratio ", by hand " ms[2] / ms[1]; exit 1 }
    want = 4 * comm[2] * 1048576 / (gbs * 1e9) * 1000
    if (copy - want > 0.05 + 0.01 * want || want - copy > 0.05 + 0.01 * want) { print "copy ms " copy ", by hand " want; exit 1 }
  }' "$work/bench.out" || fail "bench_cpu.sh's ratios do not follow from its rows"
echo "ok: bench_cpu.sh's x floor, 2-rank ratio and copy cost follow from its own rows"

# -- bench_collectives: MPI's three rows and the engine's four a size, and a bad size refused on every rank
make -s build/bench_collectives >/dev/null || fail "build bench_collectives"
mpirun -np 2 ./build/bench_collectives -n 4096,100000 -reps 1 >"$work/coll.out" 2>&1 || { cat "$work/coll.out"; fail "bench_collectives"; }
[ "$(grep -cE '^ +(4096|100000) fp32 +(all-gather|reduce-scatter|by moves) ' "$work/coll.out")" = 6 ] &&
  [ "$(grep -cE '^ +(4096|100000) (fp32|bf16) +engine (gather|sum) ' "$work/coll.out")" = 8 ] ||
  { cat "$work/coll.out"; fail "bench_collectives printed other than 3 MPI rows and 4 engine rows for each of 2 sizes"; }
set +e
timeout 30 mpirun -np 2 ./build/bench_collectives -n 1x >"$work/out" 2>"$work/err"
check_failed "bench_collectives -n 1x" $? "$work/out" "$work/err" "-n: expected up to" 30
set -e
echo "ok: bench_collectives: 7 rows a size, a bad -n refused"
