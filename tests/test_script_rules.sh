#!/usr/bin/env bash
# The scripts' rules that decide what happens to a user's run, tested where no root, namespaces or
# Slurm exist (tests/test_cluster.sh runs them for real where they do):
#  1. the resume rule of scripts/slurm/train.sbatch (scripts/args.sh's checkpoint_of and
#     resume_in_place) on folders the trainer wrote: its --out holding an unfinished run (latest at
#     the step-3 checkpoint of a 4-step run) is resumed in place (the trainer gets "-y 1 -x 4"); a
#     finished one (latest at step 4 of 4) is refused with one line and the trainer never starts; an
#     absent folder starts a new run; -f 1 among the flags is the user's and passed on as given. The
#     batch script runs outside Slurm (SLURM_JOB_ID set) with a stand-in trainer that records its flags;
#  2. scripts/cluster.sh's defaults (its functions sourced): `up K` without --ranks-per-node or --gbit
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

# cluster.sh up's defaults, from its own parser
got=$(bash -c '. scripts/cluster.sh && parse_up 2 && echo "$K $R $G"') || fail "cluster.sh: parse_up 2 failed"
[ "$got" = "2 1 0" ] || fail "cluster.sh up 2: K R G = '$got', want '2 1 0' (1 slot a node, unshaped)"
got=$(bash -c '. scripts/cluster.sh && parse_up 3 --gbit 2.5 --ranks-per-node 4 && echo "$K $R $G"') || fail "cluster.sh: parse_up with flags failed"
[ "$got" = "3 4 2.5" ] || fail "cluster.sh up 3 --gbit 2.5 --ranks-per-node 4: K R G = '$got', want '3 4 2.5'"
echo "ok   cluster.sh up 2: 1 slot a node, links unshaped (G = 0); --gbit 2.5 --ranks-per-node 4 kept"

# the portable build: no AVX-512 in the binary, the native build's losses
if [ "$(uname -m)" = x86_64 ] && [ -z "${ZERO3_SKIP_PORTABLE_BUILD:-}" ]; then
  mkdir -p "$work/v3" && git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$work/v3" || fail "copying the tree"
  make -s -C "$work/v3" ARCH=x86-64-v3 train_gpt2_zero3 >"$work/v3.out" 2>&1 || { tail "$work/v3.out"; fail "make ARCH=x86-64-v3 failed"; }
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
