#!/usr/bin/env bash
# scripts/launch.sh: runs N copies of a command as the ranks of one job, without MPI (the GPU
# trainer built with USE_MPI=0; Slurm without PMI). Each rank gets
#   RANK=r  WORLD_SIZE=N  LOCAL_RANK=r  ZERO3_RENDEZVOUS=<a fresh file>
# and rank 0 hands NCCL's unique id to the others through that file (written atomically, read with
# a timeout: ZERO3_RENDEZVOUS_TIMEOUT seconds, default 120). If any rank fails, the others are
# stopped and launch.sh exits with the failing rank's status.
#
#   scripts/launch.sh -n 2 ./train_gpt2_zero3cu -e d12 -z 3
#   scripts/launch.sh -n 2 --hostid-per-rank ./test_gpt2cu     # N ranks on ONE GPU (see below)
#
# --hostid-per-rank gives each rank its own NCCL_HOSTID: NCCL refuses two ranks on one GPU
# ("Duplicate GPU detected") unless it believes they are on different hosts, in which case it
# connects them over sockets on loopback. That is how a one-GPU machine tests N > 1.
set -uo pipefail

usage() {
  echo "usage: $0 -n N [--hostid-per-rank] [--] COMMAND [ARGS...]" >&2
  exit 2
}

n=""
hostid=0
while [ $# -gt 0 ]; do
  case "$1" in
    -n) [ $# -ge 2 ] || { echo "launch.sh: -n needs a value" >&2; usage; }; n="$2"; shift 2 ;;
    --hostid-per-rank) hostid=1; shift ;;
    --) shift; break ;;
    -h|--help) usage ;;
    -*) echo "launch.sh: unknown option $1" >&2; usage ;;
    *) break ;;
  esac
done
if ! [[ "$n" =~ ^[0-9]+$ ]] || [ "$n" -lt 1 ] || [ "$n" -gt 1024 ]; then
  echo "launch.sh: -n expects a number of ranks in 1..1024, got '${n}'" >&2
  exit 2
fi
[ $# -ge 1 ] || { echo "launch.sh: no command given" >&2; usage; }

dir="$(mktemp -d "${TMPDIR:-/tmp}/zero3_launch.XXXXXX")" || { echo "launch.sh: cannot create a temporary directory" >&2; exit 1; }
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'echo "launch.sh: interrupted, stopping the ranks" >&2; exit 130' INT TERM

export WORLD_SIZE="$n"
export ZERO3_RENDEZVOUS="$dir/nccl_id"   # fresh per launch: a stale id from another job cannot be read
for ((r = 0; r < n; r++)); do
  (
    export RANK="$r" LOCAL_RANK="$r"
    [ "$hostid" -eq 1 ] && export NCCL_HOSTID="zero3-launch-rank$r"
    exec "$@"
  ) &
  pids+=($!)
done

# Wait for all ranks; the first one to fail takes the others down (they would otherwise block in a
# collective forever).
status=0
failed_rank=-1
running=$n
declare -A done_=()
while [ "$running" -gt 0 ]; do
  for ((r = 0; r < n; r++)); do
    p=${pids[$r]}
    [ -n "${done_[$r]:-}" ] && continue
    if ! kill -0 "$p" 2>/dev/null; then
      wait "$p"
      rc=$?
      done_[$r]=1
      running=$((running - 1))
      if [ "$rc" -ne 0 ] && [ "$failed_rank" -lt 0 ]; then
        failed_rank=$r
        status=$rc
        echo "launch.sh: rank $r exited with status $rc; stopping the other ranks" >&2
        for q in "${pids[@]}"; do kill -TERM "$q" 2>/dev/null; done
      fi
    fi
  done
  [ "$running" -gt 0 ] && sleep 0.1
done
pids=()
exit "$status"
