#!/usr/bin/env bash
# -ua 1 (each unit's AdamW inside the backward, once its last micro-step's reduction completes: the
# textbook's stage-3 pseudocode run literally) against -ua 0 (AdamW after the whole backward), -gc 0:
#   - bitwise: log.csv's train_loss and grad_norm columns, every checkpoint shard (master, m, v) and
#     model.bin, over 1, 2 and 4 ranks, fp32 and bf16, stages 0-3, gradient accumulation (-d: 2
#     micro-steps), -pd 2, -ra 0, -rc 1, -pt, ZeRO++ (-qw 8 -qg 8) and -wrap half;
#   - the order, from the trace (-tr): with -ua 1 every unit has one AdamW span a step, after its own
#     backward span, and all but the units whose reductions are the last to finish have it before the
#     backward's last span (inside the backward); with -ua 0 one AdamW span a step, after every backward span;
#   - the report's AdamW line says where AdamW ran;
#   - refused, one error line naming the flags, no output folder: -gc > 0 (the default 1.0 too),
#     -clip local, -oo host, -oo disk, -op disk, -hs (HSDP).
# About 30 s on 2 cores.
. "$(dirname "$0")/lib.sh"
make -s train_gpt2_zero3 || fail "make train_gpt2_zero3"
COMMON="-e d2c64h2t64 -b 2 -t 32 -x 2 -v 0 -gc 0 -c 0.1 -n 2"

# pair NAME RANKS DEPTH FLAGS...: the run with -ua 0 and with -ua 1, compared byte for byte; DEPTH:
# the reductions the engine may leave in flight behind the backward (0 on one rank, where a shard is
# the unit; 1 where gradients are sharded, stages 2-3; ZERO3_MAX_INFLIGHT = 8 where they are whole)
pair() {
  local name=$1 n=$2 depth=$3; shift 3
  local a="$work/${name}_ua0" b="$work/${name}_ua1" f
  timeout 120 mpirun -np "$n" $BIN $COMMON "$@" -ua 0 -o "$a" -tr "$a.json" >"$a.log" 2>&1 || { tail -5 "$a.log"; fail "$name -ua 0: exit"; }
  timeout 120 mpirun -np "$n" $BIN $COMMON "$@" -ua 1 -o "$b" -tr "$b.json" >"$b.log" 2>&1 || { tail -5 "$b.log"; fail "$name -ua 1: exit"; }
  [ "$(cut -d, -f2,5 "$a/log.csv")" = "$(cut -d, -f2,5 "$b/log.csv")" ] ||
    { paste -d' ' <(cut -d, -f2,5 "$a/log.csv") <(cut -d, -f2,5 "$b/log.csv"); fail "$name: log.csv's train_loss, grad_norm differ"; }
  local shards=$(cd "$a" && ls ckpt_*/shard_*.bin | wc -l)
  [ "$shards" = "$n" ] || fail "$name: $shards checkpoint shards, want $n"
  for f in model.bin $(cd "$a" && ls ckpt_*/shard_*.bin); do
    cmp -s "$a/$f" "$b/$f" || fail "$name: $f differs between -ua 0 and -ua 1"
  done
  grep -q '^| optim .*; after the backward, on every unit at once (-ua 0)$' "$a.log" || fail "$name -ua 0: the AdamW line does not say where it ran"
  grep -q "^| optim .*; inside the backward, each unit's once its gradients are final (-ua 1)$" "$b.log" ||
    fail "$name -ua 1: the AdamW line does not say where it ran"
  # the order, rank 0's trace, every step
  local order
  order=$($PY - "$a.json" "$b.json" "$depth" <<'EOF'
import json, sys
def spans(path):
    doc = json.load(open(path))
    ev = [e for e in (doc["traceEvents"] if isinstance(doc, dict) else doc)
          if e.get("pid") == 0 and e.get("cat") == "compute"]
    ev.sort(key=lambda e: e["ts"])
    steps = {}
    for e in ev: steps.setdefault(e["args"]["step"], []).append((e["name"].split()[0], e["args"]["unit"]))
    return steps
for step, s in spans(sys.argv[1]).items():   # -ua 0: one AdamW of every unit, after the backward
    adamw = [i for i, (k, u) in enumerate(s) if k == "adamw"]
    bwd = [i for i, (k, u) in enumerate(s) if k == "bwd"]
    if len(adamw) != 1 or s[adamw[0]][1] != "all" or adamw[0] < max(bwd):
        sys.exit(f"-ua 0, step {step}: want one AdamW over all units after the backward: {s}")
inside, depth = 0, int(sys.argv[3])
for step, s in spans(sys.argv[2]).items():
    units = {u for k, u in s if k == "fwd"}
    adamw = {u: i for i, (k, u) in enumerate(s) if k == "adamw"}
    if sorted(adamw) != sorted(units) or len(adamw) != sum(k == "adamw" for k, u in s):
        sys.exit(f"-ua 1, step {step}: want one AdamW span per unit: {s}")
    last_bwd = max(i for i, (k, u) in enumerate(s) if k == "bwd")
    for u, i in adamw.items():
        own = [j for j, (k, v) in enumerate(s) if k == "bwd" and v == u]
        if not own or i < max(own): sys.exit(f"-ua 1, step {step}: unit {u}'s AdamW before its backward: {s}")
    # inside: before the backward's last span begins; all but the last unit's, and those of the
    # reductions still in flight then, which finish after it
    n_in = sum(i < last_bwd for i in adamw.values())
    if n_in < len(units) - 2 - depth: sys.exit(f"-ua 1, step {step}: only {n_in} of {len(units)} AdamW spans inside the backward: {s}")
    inside = n_in
print(f"{inside} of {len(units)} units")
EOF
) || { echo "$order"; fail "$name: the trace's order"; }
  echo "ok   $name ($n ranks $*): -ua 1 bitwise -ua 0 (losses, grad norms, $shards shards, model.bin); each unit's AdamW after its backward, $order inside it"
}

side_by_side pair z3_fp32_1r 1 0 -z 3
side_by_side pair z3_bf16_2r_accum 2 1 -z 3 -p bf16 -d 256
side_by_side pair z3_fp32_4r_pd2 4 1 -z 3 -pd 2 -bp post
side_by_side pair z2_bf16_4r 4 1 -z 2 -p bf16
side_by_side pair z1_fp32_2r_accum 2 8 -z 1 -d 256
side_by_side pair z0_bf16_2r_d10 2 8 -z 0 -p bf16 -e d10c32h2t32   # 12 units: more than the 8 in flight
side_by_side pair z3_ra0_rc1_pt_2r 2 1 -z 3 -ra 0 -rc 1 -pt 200
side_by_side pair z3_zeropp_half_2r 2 1 -z 3 -qw 8 -qg 8 -wrap half
finish_cases

echo "refused, one error line naming the flags:"
check_case() {
  local what=$1 pattern=$2; shift 2
  local f="$work/case.$BASHPID" d="$work/out.$BASHPID"
  timeout 120 mpirun -np 2 $BIN -e d2c64h2t64 -b 2 -t 32 -x 1 -v 0 -o "$d" "$@" >"$f.out" 2>"$f.err"
  check_failed "$what" $? "$f.out" "$f.err" "$pattern" 120
  [ ! -e "$d" ] || fail "$what: made its output folder"
  echo "  ok  $what: $(grep -m1 '^error' "$f.err")"
}
expect_error "-ua 1 with the default -gc" "flag -ua 1 with -gc 1: global clipping scales every unit's update .*give -gc 0" -ua 1
expect_error "-ua 1 -gc 0.5" "flag -ua 1 with -gc 0.5: global clipping" -ua 1 -gc 0.5
expect_error "-ua 1 -clip local" "flag -ua 1 with -clip local: the local norm needs" -ua 1 -gc 0 -clip local
expect_error "-ua 1 -oo host" "flag -ua 1 with -oo host: the host's AdamW" -ua 1 -gc 0 -oo host
expect_error "-ua 1 -oo disk" "flag -ua 1 with -oo disk: the state on disk streams" -ua 1 -gc 0 -oo disk
expect_error "-ua 1 -op disk" "flag -ua 1 with -op disk: the state on disk streams" -ua 1 -gc 0 -op disk
expect_error "-ua 1 -hs 1" "flag -ua 1 with -hs 1: under HSDP a unit's gradients are final only after" -ua 1 -gc 0 -hs 1
expect_error "-ua 2" "flag -ua" -ua 2
finish_cases
