#!/usr/bin/env bash
# scripts/figures/bf16_curves.sh: fp32 beside -p bf16 over one training (docs/performance.md's loss table). The
# trainer runs twice on one rank with the flags given, in fp32 and with -p bf16, side by side (one
# OpenMP thread each: the two take the machine's two cores for the time of one), then prints one
# table of both: the train loss at step 1, at every step that ran a validation and at the last step,
# and the validation loss after each of those steps.
#   scripts/figures/bf16_curves.sh TRAINER_FLAGS...        e.g. -e d2c128h2t64 -b 8 -t 64 -x 300 -v 50 -m 4
# The flags are checked by the trainer's planner before either run starts. The precision and the
# output are the script's own (-p, -o, -y, -f, -tr and -plan are refused): the runs write only into a
# temporary folder, removed at the end.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/args.sh
[ $# -gt 0 ] || die "expected the trainer's flags (usage: scripts/figures/bf16_curves.sh TRAINER_FLAGS..., e.g. -e d2c128h2t64 -x 300 -v 50)"
for ((i = 1; i <= $#; i += 2)); do
  case ${!i} in
  -p | -o | -y | -f | -tr | -plan) die "${!i}: scripts/figures/bf16_curves.sh sets the precision and the output itself (leave ${!i} out)" ;;
  -*) ;;
  *) die "${!i}: expected a trainer flag (-x 300, ...), got a word without its flag" ;;
  esac
done
make -s train_gpt2_zero3 >/dev/null
[ -f data/tinyshakespeare/tiny_shakespeare_train.bin ] || make -s data >/dev/null
trainer_accepts 1 "$@"
declare -A pid=() rc=()
tmp=$(mktemp -d)
trap '[ ${#pid[@]} -eq 0 ] || kill "${pid[@]}" 2>/dev/null; rm -rf "$tmp"' EXIT   # interrupted: the runs stop too

# both precisions at once; a run that fails is named by its first error line (fp32's, if both fail)
for p in fp32 bf16; do
  OMP_NUM_THREADS=1 ./train_gpt2_zero3 "$@" -p $p -o "$tmp/$p" >"$tmp/$p.out" 2>&1 &
  pid[$p]=$!
done
for p in fp32 bf16; do rc[$p]=0; wait "${pid[$p]}" || rc[$p]=$?; unset "pid[$p]"; done
for p in fp32 bf16; do
  [ "${rc[$p]}" -eq 0 ] && continue
  grep -m1 '^error' "$tmp/$p.out" >&2 || echo "error: the $p run ($*) exited ${rc[$p]}: $(tail -1 "$tmp/$p.out")" >&2
  exit 1
done

# the table: log.csv's step is 0-based (row s is step s+1); a validation runs after its step
awk -F, '
  FNR == 1 { run = (++file == 1) ? "fp32" : "bf16"; next }   # the header; fp32 first
  { train[run, $1] = $2; if ($3 != "") { val[run, $1] = $3; is_val[$1] = 1 } last = $1 }
  END {
    n = 0; for (s = 0; s <= last; s++) if (s == 0 || s == last || s in is_val) col[++n] = s
    printf "%-11s", "step"; for (i = 1; i <= n; i++) printf " %8d", col[i] + 1; print ""
    split("train fp32,train bf16,val fp32,val bf16", rows, ",")
    for (r = 1; r <= 4; r++) {
      split(rows[r], w, " "); printf "%-11s", rows[r]
      for (i = 1; i <= n; i++) {
        if (w[1] == "train") printf " %8.4f", train[w[2], col[i]]
        else if ((w[2], col[i]) in val) printf " %8.4f", val[w[2], col[i]]
        else printf " %8s", ""
      }
      print ""
    }
  }' "$tmp/fp32/log.csv" "$tmp/bf16/log.csv" | sed 's/ *$//'
