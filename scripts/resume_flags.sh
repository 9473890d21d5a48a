#!/usr/bin/env bash
# scripts/resume_flags.sh DIR [NAME]: the trainer flags that continue the run whose output folder is DIR,
# judged by what its last checkpoint says the run was started to do (its step and its -x):
#   -y 1 -x TOTAL   an unfinished run (resume it to the end it was started for)
#   -f 1            a finished run, or a folder with no readable checkpoint (start over)
#   nothing         DIR is empty or absent (a fresh run)
# It says which on stderr, as NAME (default resume_flags). scripts/train.sh and scripts/slurm/train.sbatch (a requeued job) use it.
set -uo pipefail
out=${1:?usage: resume_flags.sh DIR [NAME]}
name=${2:-resume_flags}
# word K of a checkpoint's meta.bin, a little-endian int64 (docs/CHECKPOINT_FORMAT.md: 3 the step, 21 -x)
meta_word() { od -An -t d8 -j $(( $2 * 8 )) -N 8 "$1" 2>/dev/null | tr -d ' '; }
[ -e "$out/latest" ] || [ -e "$out/log.csv" ] || exit 0
latest=; [ ! -f "$out/latest" ] || latest=$(head -c 64 "$out/latest" | head -1 || true)   # never a FIFO
meta=$out/$latest/meta.bin
case "$latest" in ckpt_*) ;; *) meta=/nonexistent ;; esac
step=$(meta_word "$meta" 3); total=$(meta_word "$meta" 21)
if [ -n "$step" ] && [ -n "$total" ] && [ "$step" -lt "$total" ]; then
  echo "$name: resuming the unfinished run in $out: its checkpoint is at step $step of the $total it was started to do" >&2
  echo "-y 1 -x $total"
elif [ -n "$step" ] && [ -n "$total" ]; then
  echo "$name: the run in $out finished ($step of $total steps): starting over (-f 1)" >&2
  echo "-f 1"
else
  echo "$name: $out holds no readable checkpoint: starting over (-f 1)" >&2
  echo "-f 1"
fi
