# scripts/reap.sh: ends an mpirun that outlives its ranks, sourced by scripts/cluster.sh (its mpirun)
# and scripts/slurm/train.sbatch (its mpirun launch).
#
# After a rank's collective timeout every rank ends by itself within seconds, but mpirun waits for
# each daemon to report its ranks gone, and a daemon behind a dead link cannot (Open MPI gives it up
# after its keepalive: 480 s). So mpirun's stderr passes through reap_after_timeout: LINGER_S after
# the trainer's timeout line, a mpirun still running gets SIGINT, once a second up to 3 times (the
# second is Open MPI's "hit ctrl-c again to forcibly terminate"). The trainer's line stays the
# last word from a rank, followed by one line of WHO's.
#
#   exec 3>&2; exec mpirun ... 2> >(reap_after_timeout $$ WHO)   # $$ is mpirun's PID after the exec
LINGER_S=${LINGER_S:-10}
reap_after_timeout() {   # reap_after_timeout PID WHO: stdin (PID's stderr) to fd 3, watching for the line
  local line pid=$1 who=$2 fired=0
  while IFS= read -r line; do
    printf '%s\n' "$line" >&3
    [ $fired = 0 ] && [[ $line == *"collective timeout: "*"ending every rank" ]] || continue
    fired=1
    ( sleep "$LINGER_S"
      kill -0 "$pid" 2>/dev/null || exit 0
      echo "$who: mpirun still runs $LINGER_S s after a rank's collective timeout (a daemon behind a dead link): ending it" >&3
      for _ in 1 2 3; do kill -INT "$pid" 2>/dev/null || exit 0; sleep 1; done ) &
  done
}
