#!/usr/bin/env bash
# Prints the table of every numeric flag's range as the trainer's -h says it (the ranges are
# ARGS_FLAGS' own, host/cli.c), in the markdown docs/formats.md holds between its "flag ranges"
# markers; tests/test_flags.sh checks that copy against this output. Regenerate after a change of
# ranges: scripts/figures/flag_ranges.sh, and paste it between the markers.
#   usage: scripts/figures/flag_ranges.sh [BINARY]   (default ./train_gpt2_zero3, built if missing)
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-./train_gpt2_zero3}
if [ ! -x "$bin" ]; then
  [ "$bin" = ./train_gpt2_zero3 ] || { echo "error: $bin: not an executable trainer" >&2; exit 2; }
  make -s train_gpt2_zero3 >/dev/null
fi
help=$("$bin" -h) || { echo "error: $bin -h failed" >&2; exit 1; }
echo "| flag | range |"
echo "|---|---|"
# a flag's first line starts "  -NAME"; its range ends its last line: "... range [1, 1048576]"
awk '
  /^  -[a-zA-Z]/ { name = $1 }
  match($0, / range [[(].*$/) { r = substr($0, RSTART + 7); gsub(/\|/, "\\|", r); printf "| `%s` | %s |\n", name, r }
' <<<"$help"
