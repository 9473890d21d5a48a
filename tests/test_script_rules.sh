#!/usr/bin/env bash
# The scripts' rules that decide what happens to a user's run, tested where no root, namespaces or
# Slurm exist (tests/test_cluster.sh runs them for real where they do):
#  1. the resume rule of scripts/slurm/train.sbatch (scripts/args.sh's checkpoint_of and
#     resume_in_place) on folders the trainer wrote: its --out holding an unfinished run (latest at
#     the step-3 checkpoint of a 4-step run) is resumed in place (the trainer gets "-y 1 -x 4"); a
#     finished one (latest at step 4 of 4) is refused with one line and the trainer never starts; an
#     absent folder starts a new run; -f 1 among the flags is the user's and passed on as given. The
#     batch script runs outside Slurm (SLURM_JOB_ID set) with a stand-in trainer that records its flags;
#  2. train.sbatch's signals, with stand-ins for Slurm's scontrol and srun on PATH (scontrol answers
#     KillWait 10 s and Requeue=1, and records a requeue) and a trainer that records every signal it
#     gets and exits 128 + it: SIGUSR1 to the script (the time limit's signal) reaches the trainer
#     once, through mpirun, and the script then requeues its job (scontrol requeue 1) and exits 138;
#     with ZERO3_REQUEUE=0 it does not requeue; under --srun, SIGTERM to the script and the trainer
#     together (Slurm's own stop of every process) leaves the trainer with that one SIGTERM and srun
#     with no signal from the script, and no requeue; SIGUSR1 reaches srun and the trainer once; without
#     the PMIx plugin (srun --mpi=list names none) --srun is refused in one line before anything starts;
#     after the trainer's collective-timeout line a mpirun still running 10 s later gets SIGINT,
#     twice, and the script ends (scripts/reap.sh, shared with cluster.sh mpirun);
#     the default -ct is under Open MPI's daemon keepalive (ompi_info's), so the trainer's line comes first;
#  2b. scripts/cluster.sh's defaults (its functions sourced): `up K` without --ranks-per-node or --gbit
#     is 1 slot a node and unshaped links (G = 0: no tc on any node); given, they are kept;
#  3. the portable build (make ARCH=x86-64-v3, in a copy of the tree): its trainer holds no AVX-512
#     instruction (no %zmm register) outside the bf16 kernel that is chosen at run time by the CPU's
#     features (bk_tile_avx512), where this machine's -march=native build has thousands, and trains
#     2 steps to the native build's losses within 1e-4.
# About 10 s, and 40 s more for the portable build (skipped off x86-64: ZERO3_SKIP_PORTABLE_BUILD=1 too).
. "$(dirname "$0")/lib.sh"
make -s train_gpt2_zero3 >/dev/null || fail "build"
M=(-e d2c48h2t32 -b 2 -t 16 -v 0)

# folders the trainer wrote: a finished 4-step run with a checkpoint after each step (it keeps the
# last two); the same run as a preemption after step 3 leaves it (latest at its step-3 checkpoint)
$BIN "${M[@]}" -x 4 -n 1 -o "$work/fin" >"$work/fin.out" 2>&1 || { cat "$work/fin.out"; fail "the 4-step run failed"; }
cp -r "$work/fin" "$work/unf"
first=$(cd "$work/unf" && ls -d ckpt_00000003_* | head -1)
[ -n "$first" ] || fail "the 3-step run wrote no step-3 checkpoint: $(ls "$work/unf")"
echo "$first" >"$work/unf/latest"

stub=$work/trainer
cat >"$stub" <<EOF
#!/usr/bin/env bash
echo "\$*" >"$work/flags"
EOF
chmod +x "$stub"
sbatch_rule() {   # sbatch_rule DIR FLAGS...: train.sbatch --out DIR -- FLAGS, its stderr in $work/err
  rm -f "$work/flags"
  env SLURM_JOB_ID=1 ZERO3_TRAINER="$stub" ZERO3_MPIRUN_ARGS="-np 1" bash scripts/slurm/train.sbatch --out "$1" -- "${@:2}" \
    >"$work/out" 2>"$work/err"
}

sbatch_rule "$work/unf" -e d2c48h2t32 || { cat "$work/out" "$work/err"; fail "train.sbatch on an unfinished run: exit $?"; }
[ "$(cat "$work/flags")" = "-o $work/unf -y 1 -x 4 -e d2c48h2t32" ] || fail "an unfinished run: the trainer got '$(cat "$work/flags")', want -o DIR -y 1 -x 4 and the flags"
grep -q "resuming the unfinished run in $work/unf: its checkpoint is at step 3 of the 4" "$work/err" || { cat "$work/err"; fail "an unfinished run: no line saying it resumes"; }
echo "ok   --out holding step 3 of 4: resumed in place (-y 1 -x 4)"

sbatch_rule "$work/fin" -x 4; rc=$?
[ $rc -ne 0 ] || fail "a finished run: train.sbatch exit 0, want a refusal"
[ ! -e "$work/flags" ] || fail "a finished run: the trainer started with '$(cat "$work/flags")'"
[ "$(grep -c '^error' "$work/err")" -eq 1 ] && grep -q "^error: train.sbatch: $work/fin holds a finished run (4 of 4 steps)" "$work/err" \
  || { cat "$work/err"; fail "a finished run: want one error line saying it holds a finished run (4 of 4 steps)"; }
[ "$(cat "$work/fin/latest")" = "$(cd "$work/fin" && ls -d ckpt_00000004_*)" ] || fail "a finished run: latest changed"
echo "ok   --out holding a finished run (4 of 4): refused in one line, the trainer never started"

sbatch_rule "$work/new" -x 3 || { cat "$work/err"; fail "train.sbatch on a new folder: exit $?"; }
[ "$(cat "$work/flags")" = "-o $work/new -x 3" ] || fail "a new folder: the trainer got '$(cat "$work/flags")', want -o DIR -x 3"
sbatch_rule "$work/fin" -f 1 -x 3 || { cat "$work/err"; fail "train.sbatch -f 1 on a finished run: exit $?"; }
[ "$(cat "$work/flags")" = "-o $work/fin -f 1 -x 3" ] || fail "-f 1: the trainer got '$(cat "$work/flags")', want the flags as given"
echo "ok   a new folder starts a new run; -f 1 is passed on as given"

# train.sbatch's signals: Slurm's clients and the trainer as stand-ins that record what they get
fake=$work/fakebin; mkdir -p "$fake"
cat >"$fake/scontrol" <<STUB
#!/usr/bin/env bash
case "\$1 \${2:-}" in
  "show config") echo "KillWait                = 10 sec" ;;
  "show job") echo "JobId=\$3 JobName=zero3"; echo "   Requeue=1 Restarts=0 BatchFlag=1" ;;
  "requeue "*) echo "requeue \$2" >>"$work/scontrol.log" ;;
esac
STUB
cat >"$fake/srun" <<STUB
#!/usr/bin/env bash
[ "\$1" = --mpi=list ] && { [ -n "\${FAKE_NO_PMIX:-}" ] && echo "MPI plugin types are... none" || printf 'MPI plugin types are...\n\tpmix\n\tnone\n'; exit 0; }
while [[ \$1 = -* ]]; do shift; done
"\$@" & child=\$!
trap 'echo "srun USR1" >>"$work/sigs"; kill -USR1 \$child' USR1
trap 'echo "srun TERM" >>"$work/sigs"; kill -TERM \$child' TERM
while :; do wait \$child; rc=\$?; kill -0 \$child 2>/dev/null || exit \$rc; done
STUB
cat >"$work/sigtrainer" <<STUB
#!/usr/bin/env bash
trap 'echo "trainer USR1" >>"$work/sigs"; sleep 0.5; exit 138' USR1
trap 'echo "trainer TERM" >>"$work/sigs"; sleep 0.5; exit 143' TERM
echo \$\$ >"$work/trainer.pid"
for ((i = 0; i < 300; i++)); do sleep 0.1; done
exit 1
STUB
chmod +x "$fake/scontrol" "$fake/srun" "$work/sigtrainer"
signal_case() {   # signal_case SIGNAL WHO LAUNCH_FLAG [ENV...]: train.sbatch started, then SIGNAL to WHO
  local sig=$1 who=$2 flag=$3 t sb; shift 3
  rm -f "$work/sigs" "$work/scontrol.log" "$work/trainer.pid"
  # shellcheck disable=SC2086
  env "$@" PATH="$fake:$PATH" SLURM_JOB_ID=1 ZERO3_TRAINER="$work/sigtrainer" ZERO3_MPIRUN_ARGS="-np 1" \
    bash scripts/slurm/train.sbatch $flag --out "$work/sig" -- -x 3 >"$work/sig.out" 2>&1 & sb=$!
  for ((t = 0; t < 100; t++)); do [ -s "$work/trainer.pid" ] && break; sleep 0.1; done
  [ -s "$work/trainer.pid" ] || { kill $sb; cat "$work/sig.out"; fail "train.sbatch $flag: the trainer did not start"; }
  sleep 0.3
  # script: the batch script alone (B:USR1, scancel --batch); both: it and the trainer (Slurm's own stop)
  case $who in script) kill -"$sig" $sb ;; both) kill -"$sig" $sb "$(cat "$work/trainer.pid")" ;; esac
  wait $sb; sig_rc=$?
  sig_got=$(tr '\n' ',' <"$work/sigs" 2>/dev/null); sig_rq=$(cat "$work/scontrol.log" 2>/dev/null)
}
signal_case USR1 script ""
[ "$sig_got" = "trainer USR1," ] || { cat "$work/sig.out"; fail "SIGUSR1 to train.sbatch (mpirun): the trainer got '$sig_got', want one SIGUSR1"; }
[ $sig_rc = 138 ] && [ "$sig_rq" = "requeue 1" ] || { cat "$work/sig.out"; fail "SIGUSR1 to train.sbatch: exit $sig_rc, scontrol got '$sig_rq'; want 138 and 'requeue 1'"; }
signal_case USR1 script "" ZERO3_REQUEUE=0
[ "$sig_got" = "trainer USR1," ] && [ $sig_rc = 138 ] && [ -z "$sig_rq" ] || { cat "$work/sig.out"; fail "SIGUSR1 with ZERO3_REQUEUE=0: got '$sig_got', exit $sig_rc, scontrol '$sig_rq'; want one SIGUSR1, 138, no requeue"; }
echo "ok   SIGUSR1 to train.sbatch: one SIGUSR1 to the trainer, then scontrol requeue 1 (exit 138); ZERO3_REQUEUE=0: no requeue"
signal_case TERM both --srun
[ "$sig_got" = "trainer TERM," ] && [ -z "$sig_rq" ] || { cat "$work/sig.out"; fail "Slurm's SIGTERM under --srun: the trainer and srun got '$sig_got', scontrol '$sig_rq'; want only the trainer's own SIGTERM, no requeue"; }
signal_case USR1 script --srun
[ "$sig_got" = "srun USR1,trainer USR1," ] && [ "$sig_rq" = "requeue 1" ] || { cat "$work/sig.out"; fail "SIGUSR1 to train.sbatch --srun: got '$sig_got', scontrol '$sig_rq'; want srun and the trainer one SIGUSR1, a requeue"; }
env FAKE_NO_PMIX=1 PATH="$fake:$PATH" SLURM_JOB_ID=1 ZERO3_TRAINER="$work/sigtrainer" bash scripts/slurm/train.sbatch --srun --out "$work/sig" -- -x 3 >"$work/sig.out" 2>"$work/sig.err"
check_failed "--srun without PMIx" $? "$work/sig.out" "$work/sig.err" "needs Slurm's PMIx plugin" 30
echo "ok   --srun: Slurm's SIGTERM leaves the trainer its one signal (the script passes none on); SIGUSR1 reaches it once and requeues; no PMIx plugin: one error line"

# train.sbatch's mpirun after a collective timeout: a stand-in mpirun prints the trainer's timeout
# line, then waits as one whose daemon is behind a dead link would, until its second SIGINT
reap=$work/reapbin; mkdir -p "$reap"
# (Python, not bash: a background job's SIGINT is ignored at its start, and a shell cannot trap a
# signal ignored at its start; a program, like mpirun, sets its own handler)
cat >"$reap/mpirun" <<STUB
#!/usr/bin/python3
import signal, sys, time
n = 0
def on_int(sig, frame):
    global n
    n += 1
    open("$work/sigs", "a").write(f"mpirun INT {n}\\n")
    if n >= 2: sys.exit(139)
signal.signal(signal.SIGINT, on_int)
print("error (rank 0 on node1): collective timeout: the all-gather of unit block0 in step 3 has not completed 10 s after it started (-ct 10); its peers: node2 rank 1; a peer or its link is down: ending every rank", file=sys.stderr, flush=True)
time.sleep(60)
sys.exit(1)
STUB
chmod +x "$reap/mpirun"
rm -f "$work/sigs"; t0=$(date +%s.%N)
env PATH="$reap:$fake:$PATH" SLURM_JOB_ID=1 ZERO3_TRAINER="$work/sigtrainer" timeout 50 bash scripts/slurm/train.sbatch --out "$work/reap" -- -x 3 >"$work/reap.out" 2>"$work/reap.err"; rc=$?
secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
[ $rc != 124 ] || { cat "$work/reap.err"; fail "train.sbatch: a mpirun left waiting after a collective timeout held the job 50 s"; }
[ "$(tr '\n' ',' <"$work/sigs" 2>/dev/null)" = "mpirun INT 1,mpirun INT 2," ] || { cat "$work/reap.err"; fail "train.sbatch after a collective timeout: mpirun got '$(cat "$work/sigs" 2>/dev/null)', want two SIGINTs"; }
awk -v s="$secs" 'BEGIN { exit !(s >= 10 && s < 20) }' || fail "train.sbatch after a collective timeout: ended after $secs s, want 10 s (the linger) and the SIGINTs' seconds"
[ "$(tail -1 "$work/reap.err")" = "train.sbatch: mpirun still runs 10 s after a rank's collective timeout (a daemon behind a dead link): ending it" ] &&
  [ "$(grep -c 'collective timeout: .*ending every rank' "$work/reap.err")" = 1 ] || { cat "$work/reap.err"; fail "train.sbatch after a collective timeout: want the trainer's line, then train.sbatch's one line"; }
echo "ok   train.sbatch: a mpirun still waiting 10 s after the trainer's collective timeout gets SIGINT twice and ends (the job after $secs s, exit $rc)"

# the default -ct against the launcher's own patience: Open MPI's daemons give each other up after
# their TCP keepalive (idle time + probes x interval, read from ompi_info); a collective timeout at or
# past it would never be heard from on a link down for good (the job would end with ORTE's line)
ct=$($BIN -h 2>&1 | sed -n 's/.*default \([0-9.]*\), range \[1, 604800\].*/\1/p' | head -1)
ka() { ompi_info --param oob tcp --level 9 2>/dev/null | sed -n "s/.*\"oob_tcp_keepalive_$1\" (current value: \"\([0-9]*\)\".*/\1/p"; }
ka_s=$(( $(ka time) + $(ka probes) * $(ka intvl) ))
[ -n "$ct" ] && [ "$ka_s" -gt 0 ] || fail "the default -ct ('$ct') or Open MPI's keepalive ('$ka_s' s) could not be read"
awk -v c="$ct" -v k="$ka_s" 'BEGIN { exit !(c + 30 <= k) }' || fail "the default -ct $ct s is not under Open MPI's daemon keepalive ($ka_s s) by 30 s: a lost link would end the job with ORTE's line, not the trainer's"
echo "ok   the default -ct ($ct s) is under Open MPI's daemon keepalive ($(ka time) + $(ka probes) x $(ka intvl) = $ka_s s): on a link down for good the trainer's line comes first"

# cluster.sh up's defaults, from its own parser
got=$(bash -c '. scripts/cluster.sh && parse_up 2 && echo "$K $R $G"') || fail "cluster.sh: parse_up 2 failed"
[ "$got" = "2 1 0" ] || fail "cluster.sh up 2: K R G = '$got', want '2 1 0' (1 slot a node, unshaped)"
got=$(bash -c '. scripts/cluster.sh && parse_up 3 --gbit 2.5 --ranks-per-node 4 && echo "$K $R $G"') || fail "cluster.sh: parse_up with flags failed"
[ "$got" = "3 4 2.5" ] || fail "cluster.sh up 3 --gbit 2.5 --ranks-per-node 4: K R G = '$got', want '3 4 2.5'"
echo "ok   cluster.sh up 2: 1 slot a node, links unshaped (G = 0); --gbit 2.5 --ranks-per-node 4 kept"

# the portable build: no AVX-512 in the binary, the native build's losses
if [ "$(uname -m)" = x86_64 ] && [ -z "${ZERO3_SKIP_PORTABLE_BUILD:-}" ]; then
  # the sources: git's files in a checkout; in a copy without .git (tests/mutation_check.sh's) all but
  # the build and the data, and make -B so that no object copied from the native build is kept
  if git rev-parse --git-dir >/dev/null 2>&1; then git ls-files -z; else find . \( -path ./build -o -path ./data \) -prune -o -type f -print0; fi |
    { mkdir -p "$work/v3" && tar --null -T - -cf - | tar -xf - -C "$work/v3"; } || fail "copying the tree"
  make -B -s -C "$work/v3" ARCH=x86-64-v3 train_gpt2_zero3 >"$work/v3.out" 2>&1 || { tail "$work/v3.out"; fail "make ARCH=x86-64-v3 failed"; }
  # the %zmm instructions of each function (objdump -d: a function starts with "<name>:")
  zmm_outside() { objdump -d "$1" | awk '/^[0-9a-f]+ <.*>:$/ { f = $2 } /%zmm/ && f !~ /^<bk_tile_avx512/ { n++ } END { print n + 0 }'; }
  zmm=$(zmm_outside "$work/v3/train_gpt2_zero3")
  [ "$zmm" -eq 0 ] || fail "the ARCH=x86-64-v3 build uses AVX-512 outside its run-time-chosen kernel ($zmm instructions on %zmm): it would not run on an AVX2-only node"
  "$work/v3/train_gpt2_zero3" "${M[@]}" -x 2 >"$work/v3run.out" 2>&1 || { tail "$work/v3run.out"; fail "the ARCH=x86-64-v3 trainer failed"; }
  $BIN "${M[@]}" -x 2 >"$work/natrun.out" 2>&1 || { tail "$work/natrun.out"; fail "the native trainer failed"; }
  loss() { grep -oE '^step +[0-9]+/[0-9]+ *[|:]? *(train )?loss[ =:]*[0-9.]+' "$1" | grep -oE '[0-9.]+$'; }
  paste <(loss "$work/natrun.out") <(loss "$work/v3run.out") | awk 'NF == 2 { n++; d = $1 - $2; if (d < 0) d = -d; if (d > 1e-4) bad = 1 }
    END { exit !(n == 2 && !bad) }' || { paste <(loss "$work/natrun.out") <(loss "$work/v3run.out"); fail "the ARCH=x86-64-v3 build's 2 losses are not the native build's within 1e-4"; }
  echo "ok   make ARCH=x86-64-v3: no AVX-512 instruction outside the run-time-chosen kernel (native: $(zmm_outside "$BIN") there), the native build's losses within 1e-4"
fi
echo "test_script_rules: all passed"
