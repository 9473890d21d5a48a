#!/usr/bin/env bash
# Runs the given tests/cuda check programs one after the other, then prints every KERNEL line as a
# summary. A program that is missing (it did not build) is reported and the others still run.
# Exit status 1 if any program failed (missing, non-zero exit, or a FAIL line, or no KERNEL line).
# Full output: bin/run.log.
cd "$(dirname "$0")" || exit 1
mkdir -p bin
log=bin/run.log
: > "$log"
failed=()
for b in "$@"; do
  if [ ! -x "$b" ]; then echo "=== $b did not build" | tee -a "$log"; failed+=("$b"); continue; fi
  echo "=== $b" | tee -a "$log"
  start=$(date +%s.%N)
  if ! "./$b" 2>&1 | tee -a "$log" | sed 's/^/  /'; then :; fi
  rc=${PIPESTATUS[0]}
  printf '=== %s exit %d (%.1fs)\n' "$b" "$rc" "$(echo "$(date +%s.%N) - $start" | bc)" | tee -a "$log"
  if [ "$rc" -ne 0 ]; then failed+=("$b"); fi
done
echo
echo "---------------- tests/cuda summary"
grep '^KERNEL ' "$log"
nfail=$(grep -c '^KERNEL .* FAIL ' "$log")
npass=$(grep -c '^KERNEL .* PASS ' "$log")
echo "kernels: $npass PASS, $nfail FAIL; programs failed: ${#failed[@]} ${failed[*]}"
[ "${#failed[@]}" -eq 0 ] && [ "$nfail" -eq 0 ] && [ "$npass" -gt 0 ]
