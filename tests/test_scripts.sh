#!/usr/bin/env bash
# Every script a user runs holds the trainer's standard (docs/operations.md, "What a run guarantees"):
#  1. each script under scripts/ (but cluster.sh, tested by test_cluster) and under scripts/figures/ is fed at least one bad argument and one damaged input
#     (a truncated or empty log, a truncated or damaged trace, a truncated model file, a garbage
#     table, a non-executable command, a picture git does not hold; where a script reads no file,
#     an output path that cannot be one): one line starting 'error' naming the argument or file, a
#     non-zero exit, no traceback; a script left without both kinds of case fails this test;
#  2. nothing already on disk changes: a prepared folder (a finished run, its trace, the damaged
#     files) has the same names and checksums after every case;
#  3. scripts/train.sh decides from the folder the trainer gets: the user's -o holding an unfinished
#     run is resumed (its logged losses kept), never started over; a folder whose checkpoint cannot be
#     read gets the new run beside it (DIR.1) and is itself untouched;
#  4. a picture that exists is kept: the new one goes to a numbered sibling;
#  5. bench_variants.sh on one rank leaves out the variants the trainer refuses there (HSDP, -wrap 2
#     on 3 blocks), saying why, instead of failing in the middle;
#  6. pitfalls.sh with a bad rank count prints no figure.
. "$(dirname "$0")/lib.sh"
make -s train_gpt2_zero3 >/dev/null || fail "build"
M=(-e d2c48h2t32 -b 2 -t 32)

# ---------------------------------------------------------------- the prepared folder
keep=$work/keep; mkdir -p "$keep"
mpirun -np 2 $BIN "${M[@]}" -x 2 -v 1 -m 1 -n 1 -o "$keep/run" -tr "$keep/trace.json" >"$work/prep.out" 2>&1 ||
  { cat "$work/prep.out"; fail "the prepared run"; }
log=$keep/run/log.csv
head -c 200 "$log" >"$keep/truncated.csv"              # the header and half a row
: >"$keep/empty.csv"
head -1 "$log" >"$keep/header_only.csv"
head -c 2000 /dev/urandom >"$keep/garbage.csv"
head -c 3000 "$keep/trace.json" >"$keep/truncated.json"
echo '{"traceEvents": [{"ph": "X", "pid": 0, "cat": "step"}]}' >"$keep/damaged.json"
head -c 1000 "$keep/run/model.bin" >"$keep/truncated.bin"
printf -- '-z 0    12.5 MiB   7   1 MiB   2 XB\n' >"$keep/variants.txt"
printf '# a figure without its block\n\n<!-- figure: echo hi -->\n' >"$keep/broken.md"
printf 'echo never run\n' >"$keep/not_executable.sh"
mkdir -p "$keep/zp/exact"; cp "$keep/truncated.csv" "$keep/zp/exact/log.csv"
echo picture >"$keep/kept.png"
snapshot() { (cd "$keep" && find . | sort && find . -type f -exec sha256sum {} + | sort); }
snapshot >"$work/before"

# ---------------------------------------------------------------- 1. bad arguments, damaged inputs
declare -A arg_cases=() input_cases=()
# bad SCRIPT KIND PATTERN COMMAND...: the command fails as a bad input does, without a traceback
bad() {
  local script=$1 kind=$2 pattern=$3 rc; shift 3
  timeout 120 "$@" >"$work/o" 2>"$work/e" </dev/null; rc=$?
  check_failed "$script ($*)" "$rc" "$work/o" "$work/e" "$pattern" 120
  ! grep -q Traceback "$work/o" "$work/e" || { cat "$work/e"; fail "$script ($*): a traceback"; }
  if [ "$kind" = arg ]; then arg_cases[$script]=1; else input_cases[$script]=1; fi
  echo "ok   $script, $kind: $(grep '^error' "$work/e")"
}
P=$PY
bad scripts/plot_loss.py arg "required: png" $P scripts/plot_loss.py "$log"
bad scripts/plot_loss.py arg "folder $work/nowhere does not exist" $P scripts/plot_loss.py "$log" "$work/nowhere/l.png"
bad scripts/plot_loss.py input "truncated.csv: line 2: .* fields" $P scripts/plot_loss.py "$keep/truncated.csv" "$work/l.png"
bad scripts/plot_loss.py input "empty.csv: empty" $P scripts/plot_loss.py "$keep/empty.csv" "$work/l.png"
bad scripts/plot_loss.py input "header_only.csv: a header and no rows" $P scripts/plot_loss.py "$keep/header_only.csv" "$work/l.png"
bad scripts/plot_loss.py input "garbage.csv: not" $P scripts/plot_loss.py "$keep/garbage.csv" "$work/l.png"
bad scripts/plot_trace.py arg "--step 7: .*trace.json holds steps 0..1" $P scripts/plot_trace.py "$keep/trace.json" "$work/t.png" --step 7
bad scripts/plot_trace.py arg "argument --step: invalid" $P scripts/plot_trace.py "$keep/trace.json" "$work/t.png" --step x
bad scripts/plot_trace.py arg "folder $work/nowhere does not exist" $P scripts/plot_trace.py "$keep/trace.json" "$work/nowhere/t.png"
bad scripts/plot_trace.py input "truncated.json: not a trace: not JSON" $P scripts/plot_trace.py "$keep/truncated.json" "$work/t.png"
bad scripts/plot_trace.py input "damaged.json: a damaged event" $P scripts/plot_trace.py "$keep/damaged.json" "$work/t.png"
bad scripts/plot_trace.py input "empty.csv: not a trace" $P scripts/plot_trace.py "$keep/empty.csv" "$work/t.png"
bad scripts/plot_compare.py arg "required: --zero3" $P scripts/plot_compare.py --ddp "$log" --out "$work/c.png"
bad scripts/plot_compare.py input "truncated.csv: line 2" $P scripts/plot_compare.py --ddp "$log" --zero3 "$keep/truncated.csv" --out "$work/c.png"
bad scripts/plot_compare.py arg "^error: give --out PNG .a picture. or --table N .the table., one of them" $P scripts/plot_compare.py --ddp "$log" --zero3 "$log" --out "$work/c.png" --table 4
bad scripts/plot_compare.py arg "^error: --table: the runs' ranks, at least 1, got 0" $P scripts/plot_compare.py --ddp "$log" --zero3 "$log" --table 0
bad scripts/figures/plot_figures.py arg "usage: plot_figures.py" $P scripts/figures/plot_figures.py bogus "$work/f.png"
bad scripts/figures/plot_figures.py input "variants.txt: line 1: a damaged row" $P scripts/figures/plot_figures.py stages "$keep/variants.txt" "$work/f.png" T
bad scripts/figures/plot_figures.py input "header_only.csv: a header and no rows" $P scripts/figures/plot_figures.py losses "$work/f.png" T "a=$keep/header_only.csv"
bad scripts/figures/plot_zeropp.py arg "nowhere: no such folder" $P scripts/figures/plot_zeropp.py "$work/nowhere"
bad scripts/figures/plot_zeropp.py input "zp/exact/log.csv: line 2" $P scripts/figures/plot_zeropp.py "$keep/zp"
bad scripts/doc_figures.py arg "usage: doc_figures.py" $P scripts/doc_figures.py --bogus
bad scripts/doc_figures.py input "broken.md: a '<!-- figure: CMD -->' marker without" $P scripts/doc_figures.py --check "$keep/broken.md"
# a write that fails (a file size limit: EFBIG, as a full disk gives ENOSPC): the document as it was,
# no temporary file beside it, one line
mkdir "$work/df"; printf '<!-- figure: %s -->\n```\nold\n```\n<!-- end -->\n' "$P -c \"print('x' * 200000)\"" >"$work/df/big.md"
cp "$work/df/big.md" "$work/big.orig"
bad scripts/doc_figures.py input "big.md: cannot rewrite its figures \(File too large\); the document is left as it was" \
  bash -c 'ulimit -f 64; exec "$@"' - $P scripts/doc_figures.py --write "$work/df/big.md"
cmp -s "$work/df/big.md" "$work/big.orig" && [ "$(ls "$work/df")" = big.md ] || { ls -l "$work/df"; fail "doc_figures.py --write: a failed write changed the document or left a file"; }
bad scripts/bench_cpu.sh arg "^error: -b: 3 is split over 1 and 2 ranks" scripts/bench_cpu.sh -b 3
bad scripts/bench_cpu.sh input "truncated.bin: too short" scripts/bench_cpu.sh -e "$keep/truncated.bin" -x 2
bad scripts/bench_time.sh arg "^error: -n: 0 is out of range" scripts/bench_time.sh -n 0
bad scripts/bench_time.sh input "truncated.bin: too short" scripts/bench_time.sh -e "$keep/truncated.bin"
bad scripts/bench_offload.sh arg "^error: -g: expected the dd test's size in GB" scripts/bench_offload.sh -g 0 -d "$work/bo_arg"
bad scripts/bench_offload.sh input "truncated.bin: too short" scripts/bench_offload.sh -e "$keep/truncated.bin" -d "$work/bo_input"
bad scripts/bench_offload.sh arg "^error: flag -os: 9 slots for a model of 4 units" scripts/bench_offload.sh -e d2c48h2t32 -t 32 -s 9 -d "$work/bo_slots"
[ ! -e "$work/bo_arg" ] && [ ! -e "$work/bo_input" ] && [ ! -e "$work/bo_slots" ] || fail "bench_offload.sh: a refused run left its folder behind"
bad scripts/wire_bytes.sh arg "^error: -x: 1 is out of range" scripts/wire_bytes.sh -x 1
bad scripts/wire_bytes.sh input "truncated.bin: too short" scripts/wire_bytes.sh -e "$keep/truncated.bin"
bad scripts/bench_variants.sh arg "^error: -n: expected an integer" scripts/bench_variants.sh -n x
bad scripts/sweep_quickstart.sh arg "^error: -c: 9 is out of range \[1, 6\]" scripts/sweep_quickstart.sh -c 9
bad scripts/sweep_quickstart.sh arg "^error: -c: expected candidate numbers separated by commas" scripts/sweep_quickstart.sh -c 1,,2
bad scripts/sweep_quickstart.sh arg "^error: -j: 0 is out of range" scripts/sweep_quickstart.sh -j 0
bad scripts/sweep_quickstart.sh arg "^error: --budget: missing its value" scripts/sweep_quickstart.sh --budget
bad scripts/sweep_quickstart.sh input "^error: --budget: expected an integer" scripts/sweep_quickstart.sh --budget "$log"
bad scripts/sweep_quickstart.sh input "^error: --dir: .*log.csv exists and is not a folder" scripts/sweep_quickstart.sh --dir "$log"
bad scripts/prefetch_trade.sh arg "^error: -n: 1 is out of range \[2, 64\]" scripts/prefetch_trade.sh -n 1
bad scripts/prefetch_trade.sh arg "^error: -pd: expected an integer in \[0, 64\], got 'x'" scripts/prefetch_trade.sh -pd "1 x"
bad scripts/prefetch_trade.sh arg "^error: -pd: expected depths" scripts/prefetch_trade.sh -pd ""
bad scripts/prefetch_trade.sh input "truncated.bin: too short" scripts/prefetch_trade.sh --plan-only -e "$keep/truncated.bin"
# a parameter count passes the planner but no run: refused before the table's header, which never prints
for b in bench_cpu bench_time; do
  bad scripts/$b.sh arg "^error: -e 1M: a run trains a model descriptor" scripts/$b.sh -e 1M
  [ ! -s "$work/o" ] || { cat "$work/o"; fail "$b.sh -e 1M printed before refusing"; }
done
bad scripts/bench_variants.sh input "truncated.bin: too short" scripts/bench_variants.sh -e "$keep/truncated.bin"
bad scripts/compare_ddp_zero3.sh arg "^error: -o: .*keep holds earlier results" scripts/compare_ddp_zero3.sh -o "$keep"
bad scripts/compare_ddp_zero3.sh input "truncated.bin: too short" scripts/compare_ddp_zero3.sh -n 1 -e "$keep/truncated.bin" -o "$work/cmp"
[ ! -e "$work/cmp" ] || fail "compare_ddp_zero3.sh made its folder before refusing the model"
bad scripts/compare_ddp_zero3.sh arg "^error: -T: the table's runs go into a temporary folder" scripts/compare_ddp_zero3.sh -T -o "$work/cmp"
bad scripts/pitfalls.sh arg "^error: -n: 0 is out of range" scripts/pitfalls.sh -n 0 2
bad scripts/pitfalls.sh arg "^error: 4: not a pitfall" scripts/pitfalls.sh 4
bad scripts/pitfalls.sh input "^error: -n: expected an integer" scripts/pitfalls.sh -n "$keep/run/log.csv"
[ ! -s "$work/o" ] || { cat "$work/o"; fail "pitfalls.sh printed figures for a bad rank count"; }
bad scripts/exercises.sh arg "^error: 7: not a section" scripts/exercises.sh -q 7
bad scripts/exercises.sh arg "^error: -m: 0 is out of range" scripts/exercises.sh -q -m 0 5
bad scripts/exercises.sh input "^error: -o: .*keep/run holds earlier results" scripts/exercises.sh -q -o "$keep/run" 1
bad scripts/exercises.sh input "^error: -o: .*log.csv exists and is not a folder" scripts/exercises.sh -q -o "$keep/run/log.csv" 1
[ ! -s "$work/o" ] || { cat "$work/o"; fail "exercises.sh printed figures before refusing its folder"; }
bad scripts/lessons.sh arg "^error: ex7: not a lesson" scripts/lessons.sh ex7
bad scripts/lessons.sh arg "^error: -r: 1 is out of range" scripts/lessons.sh ex6 -r 1
bad scripts/lessons.sh arg "^error: --slow: not an option" scripts/lessons.sh all --slow
bad scripts/lessons.sh input "^error: -r: expected an integer" scripts/lessons.sh ex6 -r "$log"
bad scripts/lessons_links.sh arg "^error: ex7: not a lesson" scripts/lessons_links.sh ex7 "$work"
bad scripts/lessons_links.sh input "^error: PNG_DIR: .*log.csv is not a folder" scripts/lessons_links.sh ex6 "$log"
bad scripts/lessons_bp.sh arg "^error: REPEATS: 1 is out of range \[2, 20\]" scripts/lessons_bp.sh 1
bad scripts/lessons_bp.sh input "^error: REPEATS: expected an integer" scripts/lessons_bp.sh "$log"
bad scripts/lessons_bp.sh arg "^error: REPEATS: expected an integer in \[2, 20\], got ''" scripts/lessons_bp.sh ''
bad scripts/translate_config.py arg "^error: --model: missing" $P scripts/translate_config.py docs/examples/deepspeed/ds_zero3.json
bad scripts/translate_config.py input "^error: .*truncated.csv: not JSON" $P scripts/translate_config.py --model d12 "$keep/truncated.csv"
bad scripts/persistence.py arg "^error: --ranks: 1 is not a number of ranks" $P scripts/persistence.py --ranks 1
bad scripts/persistence.py arg "^error: --model: 'x12' is not a descriptor" $P scripts/persistence.py --model x12
bad scripts/persistence.py input "^error: .*truncated.csv: line 2: .* fields" $P scripts/persistence.py --log "$keep/truncated.csv"
bad scripts/persistence.py input "^error: .*log.csv: .* comm bytes a step, where this model .* \(another model" $P scripts/persistence.py --model d12 --ranks 2 --log "$log"
bad scripts/validate_planner.sh arg "^error: --bogus: unknown argument" scripts/validate_planner.sh --bogus
bad scripts/validate_planner.sh arg "^error: --tcp: 0 is not a link speed" scripts/validate_planner.sh --tcp 0
bad scripts/validate_planner.sh input "^error: -o: .*run is a folder" scripts/validate_planner.sh -o "$keep/run"
bad scripts/figures.sh arg "^error: bogus: not a part" scripts/figures.sh text bogus
bad scripts/launch.sh arg "^error: -n: 0 is out of range \[1, 1024\]" scripts/launch.sh -n 0 true
bad scripts/launch.sh input "not_executable.sh: not an executable file" scripts/launch.sh -n 2 "$keep/not_executable.sh"
bad scripts/launch.sh input "^error: RANK: expected an integer in \[0, 1\], got 'x'" env -u SLURM_PROCID RANK=x WORLD_SIZE=2 scripts/launch.sh true
# a RANK past bash's 64 bits: the one line, no complaint of bash's beside it
bad scripts/launch.sh input "^error: RANK: 99999999999999999999 is out of range" env -u SLURM_PROCID RANK=99999999999999999999 WORLD_SIZE=2 scripts/launch.sh true
[ "$(wc -l <"$work/e")" -eq 1 ] || { cat "$work/e"; fail "launch.sh: a huge RANK printed more than its error line"; }
bad scripts/test.sh arg "^error: x: test.sh takes no arguments" scripts/test.sh x
bad scripts/test.sh input "^error: TESTS: bogus is not a test" env TESTS=bogus scripts/test.sh
bad scripts/install_deps.sh arg "^error: x: install_deps.sh takes no arguments" scripts/install_deps.sh x
bad scripts/install_deps.sh input "^error: dpkg-query: not found" env PATH=/nonexistent /bin/bash scripts/install_deps.sh
bad scripts/figures/zeropp_curves.sh arg "^error: RUNS: bogus is not a run" env RUNS=bogus scripts/figures/zeropp_curves.sh "$work/zq"
bad scripts/figures/zeropp_curves.sh input "^error: OUT/exact: .*holds earlier results" scripts/figures/zeropp_curves.sh "$keep/zp"
bad scripts/figures/zeropp_curves.sh arg "^error: .*/zq: --table writes into a temporary folder of its own" scripts/figures/zeropp_curves.sh --table "$work/zq"
bad scripts/figures/pitfall1_table.sh arg "^error: extra: unexpected argument" scripts/figures/pitfall1_table.sh "$work/p1" extra
bad scripts/figures/pitfall1_table.sh input "^error: DIR: .*keep holds earlier results" scripts/figures/pitfall1_table.sh "$keep"
[ ! -e "$work/p1" ] || fail "pitfall1_table.sh made its folder before refusing its arguments"
bad scripts/figures/bf16_curves.sh arg "^error: -o: scripts/figures/bf16_curves.sh sets the precision and the output" scripts/figures/bf16_curves.sh "${M[@]}" -x 2 -o "$work/bq"
bad scripts/figures/bf16_curves.sh input "^error: flag -i: .*truncated.bin: .*shorter than the 1024-byte header" scripts/figures/bf16_curves.sh "${M[@]}" -x 2 -i "$keep/truncated.bin"
bad scripts/train.sh arg "^error: -x: unknown option .*after --" scripts/train.sh -x 3
bad scripts/train.sh arg "^error: --out .* and -- -o .* name two output folders" scripts/train.sh --out "$work/a" -- -o "$work/b"
command -v nvidia-smi >/dev/null 2>&1 ||
  bad scripts/train.sh arg "^error: --gpu: no NVIDIA driver here" scripts/train.sh --gpu
bad scripts/train.sh input "truncated.bin: too short" scripts/train.sh --cpu -- "${M[@]}" -e "$keep/truncated.bin" -x 1 -o "$work/ts_bad"

# figures.sh refuses to redraw a picture git does not hold: in a clone with this tree's scripts
git clone -q --shared . "$work/clone" 2>/dev/null || fail "git clone"
cp scripts/*.sh scripts/*.py "$work/clone/scripts/"
echo changed >>"$work/clone/docs/trace_step.png"
bad scripts/figures.sh input "^error: docs/trace_step.png: has changes git does not hold" bash "$work/clone/scripts/figures.sh" trace
[ "$(tail -c 8 "$work/clone/docs/trace_step.png")" = changed ] || fail "figures.sh touched the changed picture"

# the cluster lessons: arguments and the model checked before any cluster is brought up
bad scripts/cluster_lessons.sh arg "^error: -x: 1 is out of range" bash scripts/cluster_lessons.sh -x 1
bad scripts/cluster_lessons.sh arg "^error: --gbit: 0 is not a link speed" bash scripts/cluster_lessons.sh --gbit 0
bad scripts/cluster_lessons.sh arg "^error: -r: 1 is out of range" bash scripts/cluster_lessons.sh --quick -r 1
bad scripts/cluster_lessons.sh arg "^error: tcp_bogus: not a lesson" bash scripts/cluster_lessons.sh tcp_bogus
bad scripts/cluster_lessons.sh input "truncated.bin: too short" bash scripts/cluster_lessons.sh -e "$keep/truncated.bin" -x 3
ip netns list 2>/dev/null | grep -q z3node && fail "cluster_lessons.sh brought up a cluster for a refused input"

# the batch script: its arguments, and a run folder it cannot resume, refused before any launch
SB="env SLURM_JOB_ID=1 bash scripts/slurm/train.sbatch"
bad scripts/slurm/train.sbatch arg "^error: train.sbatch: not inside a Slurm job" env -u SLURM_JOB_ID bash scripts/slurm/train.sbatch
bad scripts/slurm/train.sbatch arg "^error: train.sbatch: -o among the trainer flags" $SB -- -o "$work/x"
mkdir -p "$work/sb" && echo ckpt_garbage >"$work/sb/latest" && echo "step" >"$work/sb/log.csv"
bad scripts/slurm/train.sbatch input "^error: train.sbatch: $work/sb holds an earlier run with no readable checkpoint" $SB --out "$work/sb" -- -x 2
[ "$(cat "$work/sb/latest")" = ckpt_garbage ] && [ "$(ls "$work/sb" | wc -l)" = 2 ] || fail "train.sbatch changed a folder it refused"

# the GPU check's scripts: every setting checked, and no GPU found, before anything is built or an
# earlier run's answers are touched (a GPU_CHECK_OUT that holds them is refused and left as it was)
mkdir -p "$work/earlier" && echo "an earlier run" >"$work/earlier/summary.txt"
bad scripts/gpu_first.sh arg "^error: --bogus: unknown argument" bash scripts/gpu_first.sh --bogus
bad scripts/gpu_first.sh arg "^error: GPU_CHECK_BUDGET=ten: must be a whole number" env GPU_CHECK_EMULATE=1 GPU_CHECK_BUDGET=ten bash scripts/gpu_first.sh
bad scripts/gpu_first.sh input "^error: GPU_CHECK_OUT=$work/earlier: holds an earlier run's summary.txt" env GPU_CHECK_EMULATE=1 GPU_CHECK_OUT="$work/earlier" bash scripts/gpu_first.sh
[ "$(cat "$work/earlier/summary.txt")" = "an earlier run" ] || fail "gpu_first.sh changed an earlier run's summary"
command -v nvidia-smi >/dev/null 2>&1 ||
  bad scripts/gpu_first.sh arg "^error: no GPU here" env -u GPU_CHECK_EMULATE bash scripts/gpu_first.sh
bad scripts/gpu_check.sh arg "^error: extra: gpu_check.sh takes no arguments" bash scripts/gpu_check.sh extra
bad scripts/gpu_check.sh input "^error: GPU_CHECK_EMULATE=yes: must be 0 or 1" env GPU_CHECK_EMULATE=yes bash scripts/gpu_check.sh
bad scripts/gpu_find_libs.sh arg "^error: --bogus: unknown argument" bash scripts/gpu_find_libs.sh --bogus
bad scripts/gpu_find_libs.sh input "^error: CUDA_HOME=$keep/truncated.csv: not a folder" env CUDA_HOME="$keep/truncated.csv" bash scripts/gpu_find_libs.sh --report

for s in $(find scripts -maxdepth 1 -type f -perm -u+x ! -name cluster.sh | sort) scripts/plot_compare.py \
         $(find scripts/figures -type f | sort); do
  [ -n "${arg_cases[$s]:-}" ] && [ -n "${input_cases[$s]:-}" ] || fail "$s: no bad-argument or no damaged-input case in this test"
done
echo "ok   every script: ${#arg_cases[@]} scripts with bad arguments, ${#input_cases[@]} with damaged inputs"

# ---------------------------------------------------------------- 4. a picture that exists is kept
mkdir "$work/pics"; echo picture >"$work/pics/loss.png"
out=$($PY scripts/plot_loss.py "$log" "$work/pics/loss.png") || fail "plot_loss.py: $out"
[ "$(cat "$work/pics/loss.png")" = picture ] && [ -s "$work/pics/loss.1.png" ] || fail "plot_loss.py replaced loss.png: $out"
echo "$out" | grep -q "^loss plot: $work/pics/loss.1.png" || fail "plot_loss.py did not name its sibling: $out"
ls -a "$work/pics" | grep -q tmp && fail "a temp file left beside the picture"
echo "ok   an existing loss.png is kept: $out"

# ---------------------------------------------------------------- 3. train.sh decides from the trainer's -o
T=(-e d2c48h2t32 -b 2 -t 32 -v 0 -s 0 -n 1)
u=$work/user_run
mpirun -np 2 $BIN "${T[@]}" -x 60 -o "$u" -link 0.02 >"$work/u.out" 2>&1 & pid=$!   # ~0.7 s a step
for _ in $(seq 100); do [ -f "$u/latest" ] && break; sleep 0.1; done
kill -TERM "$pid"; wait "$pid"
grep -q "^stopped by SIGTERM after step" "$work/u.out" || { tail -3 "$work/u.out"; fail "the unfinished run did not stop"; }
before=$(sed 1d "$u/log.csv" | cut -d, -f1,2)
scripts/train.sh --cpu -- "${T[@]}" -o "$u" >"$work/ts.out" 2>&1 || { tail "$work/ts.out"; fail "train.sh -- -o USER_RUN"; }
grep -q "^train.sh: resuming the unfinished run in $u: its checkpoint is at step [0-9]* of the 60" "$work/ts.out" ||
  { grep train.sh "$work/ts.out"; fail "train.sh did not resume the run in the -o it passed on"; }
[ "$(sed 1d "$u/log.csv" | cut -d, -f1,2 | head -"$(echo "$before" | wc -l)")" = "$before" ] || fail "the resumed run's earlier losses changed"
[ "$(sed 1d "$u/log.csv" | wc -l)" -eq 60 ] || fail "the resumed run does not log steps 0..59"
echo "ok   train.sh -- -o USER_RUN resumed the user's unfinished run to step 60, its logged losses kept"
d=$work/damaged_run; cp -r "$keep/run" "$d"; echo garbage >"$d/latest"
sum_d=$(cd "$d" && find . -type f -exec sha256sum {} + | sort)
scripts/train.sh --cpu --out "$d" -- "${T[@]}" -x 2 >"$work/ts2.out" 2>&1 || { tail "$work/ts2.out"; fail "train.sh into a damaged run"; }
grep -q "^train.sh: $d holds no readable checkpoint: this run goes beside it, into $d.1" "$work/ts2.out" || { grep train.sh "$work/ts2.out"; fail "train.sh: no run beside the damaged one"; }
[ "$(cd "$d" && find . -type f -exec sha256sum {} + | sort)" = "$sum_d" ] || fail "train.sh changed the damaged run's folder"
[ "$(sed 1d "$d.1/log.csv" | wc -l)" -eq 2 ] && [ -s "$d.1/loss.png" ] || fail "the new run beside it has no log or picture"
echo "ok   train.sh beside a folder with a garbage latest: $d.1, the folder itself unchanged"

# ---------------------------------------------------------------- numbers in decimal, names never shared
# launch.sh -n 08: eight ranks (never octal, never a loop); -n 010: ten, each told WORLD_SIZE=10
for n in 08 010; do
  timeout 60 scripts/launch.sh -n "$n" sh -c 'echo "$RANK $WORLD_SIZE"' >"$work/ln.out" 2>"$work/ln.err" || { cat "$work/ln.err"; fail "launch.sh -n $n"; }
  want=$((10#$n))
  [ "$(sort -n "$work/ln.out" | tr '\n' ' ')" = "$(for ((r = 0; r < want; r++)); do printf '%d %d ' $r $want; done)" ] && [ ! -s "$work/ln.err" ] ||
    { cat "$work/ln.out" "$work/ln.err"; fail "launch.sh -n $n: want ranks 0..$((want - 1)) of WORLD_SIZE=$want"; }
done
echo "ok   launch.sh -n 08 starts 8 ranks, -n 010 starts 10, each told its decimal WORLD_SIZE"
# free_name (validate_planner.sh -o, figures.sh, compare_ddp_zero3.sh) started 8 times at once: 8 names
mkdir "$work/fn"; echo kept >"$work/fn/T.md"
for i in 1 2 3 4 5 6 7 8; do bash -c '. scripts/args.sh; free_name "$1"' - "$work/fn/T.md" >"$work/fn.$i" & done; wait
[ "$(cat "$work"/fn.? | sort -u | wc -l)" -eq 8 ] && [ "$(ls "$work/fn" | wc -l)" -eq 9 ] && [ "$(cat "$work/fn/T.md")" = kept ] ||
  { cat "$work"/fn.?; ls "$work/fn"; fail "free_name started 8 times together: want 8 different names beside the kept T.md"; }
echo "ok   free_name started 8 times together picks 8 different names, the existing file kept"

# ---------------------------------------------------------------- the whole table checked before its header
# --stages -pt 1000: -pt means nothing at -z 0, so that row is left out, said why, before the header
out=$(scripts/bench_variants.sh -n 2 -e d2c48h2t32 -x 1 --stages -pt 1000 -b 1 -t 32 2>"$work/bv.err") || { cat "$work/bv.err"; fail "bench_variants.sh --stages -pt 1000"; }
grep -q "^bench_variants.sh: -z 0 left out on 2 ranks: flag -pt: at -z 0" "$work/bv.err" &&
  [ "$(echo "$out" | grep -c '^-z ')" -eq 3 ] || { echo "$out"; cat "$work/bv.err"; fail "bench_variants.sh --stages -pt 1000: want -z 0 left out, 3 rows"; }
echo "ok   bench_variants.sh --stages -pt 1000: -z 0 left out before the header, with the trainer's reason; 3 rows"

# ---------------------------------------------------------------- 5. bench_variants.sh leaves out what one rank refuses
out=$(scripts/bench_variants.sh -n 1 -e d3c48h2t32 -x 1 -b 1 -t 32 2>"$work/bv.err") || { cat "$work/bv.err"; fail "bench_variants.sh -n 1"; }
grep -q "^bench_variants.sh: -z 3 -hs 1 left out on 1 ranks: flag -hs" "$work/bv.err" &&
  grep -q "^bench_variants.sh: -z 3 -wrap 2 left out on 1 ranks: flag -wrap" "$work/bv.err" || { cat "$work/bv.err"; fail "bench_variants.sh: no line for the variants left out"; }
[ "$(echo "$out" | grep -c '^-z ')" -eq 9 ] || fail "bench_variants.sh -n 1: want 9 variant rows: $out"
echo "ok   bench_variants.sh -n 1: 9 variants run, -hs 1 and -wrap 2 left out with the trainer's reason"

# ---------------------------------------------------------------- 2. nothing on disk changed
snapshot >"$work/after"
diff "$work/before" "$work/after" >&2 || fail "the prepared folder changed"
echo "ok   the prepared folder: the same $(grep -c '^\./' "$work/before") names and checksums after every case"
