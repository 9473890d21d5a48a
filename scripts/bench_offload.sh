#!/usr/bin/env bash
# The optimizer shard on disk (-oo disk), measured: GPT-2 XL trained with its fp32 master and AdamW's
# m and v (12 bytes a parameter) streamed from a file each step, against the disk's own bandwidth.
#   scripts/bench_offload.sh [-e MODEL] [-b B] [-t T] [-x STEPS] [-s SLOTS] [-g GB] [-d DIR]
# Defaults: -e d48 (GPT-2 XL, about 1.56B parameters) -b 1 -t 256 -x 10, -s 3 (the run's -os: its
# staging slots), -g 2 (the dd test's size), -d: a new folder under the current one (the state file
# and dd's file go there: about 19 GB for XL).
# It prints, in order:
#  1. the same command without offload, which the trainer must refuse up front (the plan's memory
#     against the machine's); a run that is not refused is stopped and said so;
#  2. the disk's bandwidth, measured here with dd (oflag=direct, then iflag=direct, in 64 MiB requests:
#     the run's records are of that order and larger) on -g GB in DIR;
#  3. the run with -p bf16 -oo disk:DIR: its peak resident memory (VmHWM), its step time (the mean of
#     the steps after the first), the state file's size, and the floor: the bytes a step moves (the
#     file read once and written once) over the disk's bandwidth; the step's ratio to it; and the
#     same bytes at the rate the run's own I/O thread measured (its offload I/O line), the I/O alone.
# A smoke check on a small model: scripts/bench_offload.sh -e d2c48h2t32 -t 32 -x 3 -g 0.1
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/args.sh
MODEL=d48; B=1; T=256; STEPS=10; SLOTS=3; GB=2; DIR=
USAGE="usage: $0 [-e MODEL] [-b B] [-t T] [-x STEPS] [-s SLOTS] [-g GB] [-d DIR]"
while getopts ":e:b:t:x:s:g:d:" o; do case $o in e) MODEL=$OPTARG;; b) B=$OPTARG;; t) T=$OPTARG;; x) STEPS=$OPTARG;;
  s) SLOTS=$OPTARG;; g) GB=$OPTARG;; d) DIR=$OPTARG;;
  :) die "-$OPTARG: missing its value ($USAGE)" ;;
  *) die "-$OPTARG: unknown option ($USAGE)" ;; esac; done
shift $((OPTIND - 1)); [ $# -eq 0 ] || die "$1: unexpected argument"
need_int -b B 1 1048576; need_int -t T 1 1048576; need_int -x STEPS 2 100000; need_int -s SLOTS 3 4096
[[ "$GB" =~ ^[0-9]*\.?[0-9]+$ ]] && awk -v g="$GB" 'BEGIN { exit !(g >= 0.01 && g <= 1000) }' \
  || die "-g: expected the dd test's size in GB, a decimal in [0.01, 1000], got '$GB'"
[ -z "$DIR" ] || need_new_folder -d "$DIR"
make -s train_gpt2_zero3 >/dev/null
RUN=(-e "$MODEL" -b "$B" -t "$T" -x "$STEPS" -v 0 -n 0 -p bf16)
# the flags and the model file are checked before any folder is made (a refusal leaves nothing behind)
trainer_accepts 1 "${RUN[@]}" -oo "disk:${DIR:-bench_offload}" -os "$SLOTS"
if [ -n "$DIR" ]; then mkdir -p "$DIR"; else DIR=$(free_name bench_offload folder); fi
echo "offload benchmark: -e $MODEL -b $B -t $T, $STEPS steps, -p bf16, -os $SLOTS, in $DIR ($(date -u +%F), $(git rev-parse --short HEAD 2>/dev/null || echo '?'))"

# 1. without offload: refused before it allocates (the machine's memory caps it here, whatever happens)
mem_kb=$(awk '/^MemTotal:/ { print $2 }' /proc/meminfo)
set +e
( ulimit -v "$mem_kb"; exec timeout 120 ./train_gpt2_zero3 "${RUN[@]}" -o "$DIR/no_offload" ) >"$DIR/no_offload.out" 2>&1
rc=$?
set -e
if [ $rc -ne 0 ] && grep -q '^error' "$DIR/no_offload.out" && [ ! -e "$DIR/no_offload/log.csv" ]; then
  echo "without offload: refused up front: $(grep -m1 '^error' "$DIR/no_offload.out")"
else
  echo "without offload: NOT refused up front (exit $rc; $(grep -c '^step' "$DIR/no_offload.out") steps ran; the last line: $(tail -1 "$DIR/no_offload.out"))"
fi
rm -rf "$DIR/no_offload"

# 2. the disk, by dd: direct writes, then direct reads, of GB gigabytes (the page cache bypassed)
count=$(awk -v g="$GB" 'BEGIN { c = int(g * 1e9 / 67108864 + 0.5); printf "%d", c < 1 ? 1 : c }')
write_bps=$( { dd if=/dev/zero of="$DIR/dd.bin" bs=64M count="$count" oflag=direct 2>&1 >/dev/null || true; } | awk '/copied/ { gsub(",", "", $0); for (i = 1; i <= NF; i++) if ($i == "s") s = $(i - 1); print $1 / s }')
read_bps=$( { dd if="$DIR/dd.bin" of=/dev/null bs=64M count="$count" iflag=direct 2>&1 >/dev/null || true; } | awk '/copied/ { gsub(",", "", $0); for (i = 1; i <= NF; i++) if ($i == "s") s = $(i - 1); print $1 / s }')
rm -f "$DIR/dd.bin"
[ -n "$write_bps" ] && [ -n "$read_bps" ] || die "$DIR: dd with oflag=direct / iflag=direct gave no rate (a file system without direct I/O?)"
printf "disk (dd, %s GB in 64 MiB requests, direct): write %.3f GB/s, read %.3f GB/s\n" "$GB" "$(awk -v x="$write_bps" 'BEGIN { print x / 1e9 }')" \
  "$(awk -v x="$read_bps" 'BEGIN { print x / 1e9 }')"

# 3. the run on disk
./train_gpt2_zero3 "${RUN[@]}" -oo "disk:$DIR" -os "$SLOTS" -o "$DIR/run" >"$DIR/run.out" 2>&1 \
  || { tail -5 "$DIR/run.out"; die "the run with -oo disk:$DIR failed (its output: $DIR/run.out)"; }
state_gb=$(sed -n 's/^offload: the optimizer state in .* (\([0-9.]*\) GB a rank.*/\1/p' "$DIR/run.out")
peak=$(sed -n 's/^process memory .*peak resident \([^ ]* [^ ]*\) (VmHWM).*/\1/p' "$DIR/run.out")
io=$(grep '^offload I/O' "$DIR/run.out" || true)
step_ms=$(awk -F, 'NR > 2 { ms += $6; n++ } END { if (n) printf "%.1f", ms / n }' "$DIR/run/log.csv")
losses=$(awk -F, 'NR > 1 { printf "%s%s", sep, $2; sep = " " }' "$DIR/run/log.csv")
[ -n "$state_gb" ] && [ -n "$step_ms" ] || die "the run's output lacks the offload line or the step times ($DIR/run.out)"
floor_s=$(awk -v g="$state_gb" -v w="$write_bps" -v r="$read_bps" 'BEGIN { printf "%.3f", g * 1e9 / r + g * 1e9 / w }')
echo "with -oo disk -os $SLOTS: peak resident ${peak:-?} (VmHWM), state file $state_gb GB, step $step_ms ms (steps 2-$STEPS)"
echo "  losses: $losses"
echo "  ${io:-offload I/O: no line}"
awk -v ms="$step_ms" -v f="$floor_s" -v g="$state_gb" 'BEGIN {
  printf "  disk floor: %.3f GB read + %.3f GB written a step at dd'"'"'s rates = %.3f s; the step is %.2fx the floor\n", g, g, f, ms / 1000 / f }'
rate=$(sed -n 's/^offload I\/O .* = \([0-9.]*\) GB\/s$/\1/p' "$DIR/run.out")
[ -z "$rate" ] || awk -v ms="$step_ms" -v g="$state_gb" -v r="$rate" 'BEGIN {
  printf "  the I/O alone: %.3f GB a step at the run'"'"'s own %.3f GB/s = %.3f s; the step is %.2fx that\n", 2 * g, r, 2 * g / r, ms / 1000 / (2 * g / r) }'
rm -rf "$DIR/run/offload"
