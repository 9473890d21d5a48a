#!/usr/bin/env bash
# scripts/launch.sh: runs N copies of a command as the ranks of one job, without MPI (the GPU
# trainer built with USE_MPI=0; Slurm without PMI). Each rank gets
#   RANK=r  WORLD_SIZE=N  LOCAL_RANK=r  ZERO3_RENDEZVOUS=<a fresh file>
# and rank 0 hands NCCL's unique id to the others through that file (written atomically, read with
# a timeout: ZERO3_RENDEZVOUS_TIMEOUT seconds, default 120). If any rank fails, the others are
# stopped and launch.sh exits with the failing rank's status: each gets SIGTERM (the trainer's stop
# request), and a rank still running KILL_GRACE_S seconds later (blocked in a collective with the
# failed rank, or stopped) gets SIGKILL, so launch.sh always ends.
#
#   scripts/launch.sh -n 2 ./train_gpt2_zero3cu -e d12 -z 3
#   scripts/launch.sh -n 2 --hostid-per-rank ./test_gpt2cu     # N ranks on ONE GPU (see below)
#
# --hostid-per-rank gives each rank its own NCCL_HOSTID: NCCL refuses two ranks on one GPU
# ("Duplicate GPU detected") unless it believes they are on different hosts, in which case it
# connects them over sockets on loopback. That is how a one-GPU machine tests N > 1.
#
# Without -n, launch.sh is one rank of a job some other launcher started, on any number of nodes:
#   - under Slurm (srun), from SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID:
#       srun -N 2 --ntasks-per-node=8 --gpus-per-node=8 scripts/launch.sh ./train_gpt2_zero3cu -e d12 -o out
#   - under torchrun or any launcher that sets RANK, WORLD_SIZE (and LOCAL_RANK):
#       torchrun --nnodes 2 --nproc-per-node 8 --no-python scripts/launch.sh ./train_gpt2_zero3cu ...
# It sets RANK, WORLD_SIZE, LOCAL_RANK and, unless set, ZERO3_RENDEZVOUS to a file in the current
# folder named after the job (SLURM_JOB_ID.SLURM_STEP_ID, or TORCHELASTIC_RUN_ID / MASTER_PORT),
# which every node must see (a shared file system), then runs the command in its place.
set -uo pipefail

USAGE="usage: $0 -n N [--hostid-per-rank] [--] COMMAND [ARGS...], or without -n under srun or torchrun"
# the shared checks (die, need_int), found beside this script: launch.sh runs from any folder
. "$(dirname "${BASH_SOURCE[0]}")/args.sh" || { echo "error: launch.sh: cannot read args.sh beside it" >&2; exit 2; }
# the command every rank will run: found and executable, checked before any rank starts
need_command() {
  [ $# -ge 1 ] || die "no command given ($USAGE)"
  case "$1" in
    */*) [ -f "$1" ] && [ -x "$1" ] || die "$1: not an executable file" ;;
    *) command -v "$1" >/dev/null 2>&1 || die "$1: command not found" ;;
  esac
}

n=""
hostid=0
while [ $# -gt 0 ]; do
  case "$1" in
    -n) [ $# -ge 2 ] || die "-n: missing its value ($USAGE)"; n="$2"; shift 2 ;;
    --hostid-per-rank) hostid=1; shift ;;
    --) shift; break ;;
    -h|--help) echo "$USAGE"; exit 0 ;;
    -*) die "$1: unknown option ($USAGE)" ;;
    *) break ;;
  esac
done
# one rank of a job started by Slurm or torchrun: take the rank and world size from them, run in place
if [ -z "$n" ] && { [ -n "${SLURM_PROCID:-}" ] || [ -n "${RANK:-}" ]; }; then
  need_command "$@"
  if [ -n "${SLURM_PROCID:-}" ]; then
    export RANK="$SLURM_PROCID" WORLD_SIZE="${SLURM_NTASKS:-${SLURM_NPROCS:-}}" LOCAL_RANK="${SLURM_LOCALID:-0}"
    job="slurm${SLURM_JOB_ID:-0}.${SLURM_STEP_ID:-0}"
  else
    export LOCAL_RANK="${LOCAL_RANK:-$RANK}"
    job="torchrun${TORCHELASTIC_RUN_ID:-}.${MASTER_PORT:-0}"
  fi
  # from Slurm's or torchrun's variables, read in decimal (a leading zero is no octal) and exported so
  need_int WORLD_SIZE WORLD_SIZE 1 1048576
  need_int RANK RANK 0 $((WORLD_SIZE - 1))
  need_int LOCAL_RANK LOCAL_RANK 0 $((WORLD_SIZE - 1))
  export ZERO3_RENDEZVOUS="${ZERO3_RENDEZVOUS:-$PWD/.zero3_rendezvous.$job}"
  [ "$hostid" -eq 1 ] && export NCCL_HOSTID="zero3-launch-rank$RANK"
  exec "$@"
fi
need_int -n n 1 1024
need_command "$@"

KILL_GRACE_S=10   # after the SIGTERM, how long a rank may take to end before its SIGKILL
dir="$(mktemp -d "${TMPDIR:-/tmp}/zero3_launch.XXXXXX")" || die "cannot create a temporary folder in ${TMPDIR:-/tmp}"
pids=()
# stop_ranks: SIGTERM to every rank still running, then SIGKILL to those alive KILL_GRACE_S later
stop_ranks() {
  local p t
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for ((t = 0; t < KILL_GRACE_S * 10; t++)); do
    local alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" -eq 0 ] && return
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
}
cleanup() {
  stop_ranks
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
# collective forever). Bash's own "Killed" notes on the ranks stop_ranks killed go nowhere (stderr of
# the loop); launch.sh's lines go to its stderr (fd 3).
exec 3>&2
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
        echo "launch.sh: rank $r exited with status $rc; stopping the other ranks (SIGTERM, then SIGKILL after $KILL_GRACE_S s)" >&3
        stop_ranks
      fi
    fi
  done
  [ "$running" -gt 0 ] && sleep 0.1
done 2>/dev/null
pids=()
exit "$status"
