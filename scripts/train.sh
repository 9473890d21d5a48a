#!/usr/bin/env bash
# scripts/train.sh: trains GPT-2 on tinyshakespeare from a fresh clone, every step included and each
# safe to repeat: installs the Debian packages (scripts/install_deps.sh), makes the data (local
# copies from $ZERO3_DATA_CACHE or ~/.cache/gpt2-zero3 when present, else downloads), builds, trains.
#
#   scripts/train.sh                   GPU trainer when a GPU and nvcc are here, else CPU ranks
#   scripts/train.sh --cpu | --gpu     choose
#   scripts/train.sh --pretrained      start from OpenAI's GPT-2 124M (llm.c's gpt2_124M.bin, downloaded
#                                      once into data/, or found in the cache folder): Shakespeare in minutes
#   scripts/train.sh --out DIR         the output folder (default out/cpu, out/gpu, out/*_pretrained);
#                                      a -o among the extra flags is the same as --out
#   scripts/train.sh -- FLAGS...       extra trainer flags, appended (e.g. -- -x 1000 -s 200)
#
# CPU: min(4, cores) ranks of a small model (-e d4c128h4t64) in mixed precision (-p bf16) for 781
# steps at -l 2e-3, with samples every 100 steps: the lowest val loss among the candidates of
# scripts/sweep_quickstart.sh for 3 minutes of a step's compute on 2 cores (docs/performance.md; the
# waits for communication come on top). GPU: GPT-2 124M (-e d12) on every GPU of this machine. Output in
# out/cpu or out/gpu (log.csv, checkpoints, model.bin) and the loss plot out/*/loss.png. Run again
# after an interruption (Ctrl-C, SIGTERM): it resumes any unfinished run, judged by what its last
# checkpoint says the run was started to do (its step and its -x), and continues to that -x unless
# the extra flags give another. It never replaces a run: when the folder holds a finished run (or one
# it cannot read), the new run goes beside it, into the first free DIR.1, DIR.2, ...; -- -f 1 starts
# over in DIR itself and -- -y 1 resumes there, as the trainer does. It says which it does, and
# decides from the folder the trainer will write (the last -o), before any install or build.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/args.sh

mode=auto; pretrained=0; extra=(); out=; user_out=; user_resume=()
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu) mode=cpu; shift ;;
    --gpu) mode=gpu; shift ;;
    --pretrained) pretrained=1; shift ;;
    --out) [ $# -ge 2 ] && [ -n "$2" ] || die "--out: needs a folder"; out=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    -*) die "$1: unknown option (-h for help; trainer flags go after --, as in scripts/train.sh -- -x 1000)" ;;
    *) die "$1: unexpected argument (-h for help)" ;;
  esac
done

# the extra flags, as the trainer reads them: pairs, the last of each flag winning. -o, -y and -f are
# taken out here and given back after the decision below, so that it is made from what the trainer gets.
rest=()
for ((i = 0; i < ${#extra[@]}; i += 2)); do
  f=${extra[$i]}
  case "$f" in -?*) ;; *) die "$f: expected a trainer flag (-x, -o, ...) after --" ;; esac
  [ $((i + 1)) -lt ${#extra[@]} ] || die "$f: missing its value (after --)"
  v=${extra[$((i + 1))]}
  case "$f" in
    -o) [ -n "$v" ] || die "-o: needs a folder"; user_out=$v ;;
    -y|-f) need_int "$f" v 0 1; [ "$v" = 0 ] || user_resume=("$f" 1) ;;
    *) rest+=("$f" "$v") ;;
  esac
done
[ -z "$out" ] || [ -z "$user_out" ] || [ "$out" = "$user_out" ] ||
  die "--out $out and -- -o $user_out name two output folders: give one"
out=${user_out:-$out}
if [ "$mode" = auto ]; then
  mode=cpu
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 &&
     { command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; }; then mode=gpu; fi
fi
if [ "$mode" = gpu ]; then   # asked for (--gpu): refused in one line on a machine without one
  command -v nvidia-smi >/dev/null 2>&1 || die "--gpu: no NVIDIA driver here (no nvidia-smi): train on CPU ranks with --cpu"
  nvidia-smi -L 2>/dev/null | grep -q '^GPU' || die "--gpu: nvidia-smi lists no GPU on this machine: train on CPU ranks with --cpu"
fi
if [ -z "$out" ]; then out=out/$mode; [ "$pretrained" -eq 0 ] || out=${out}_pretrained; fi
[ ! -e "$out" ] || [ -d "$out" ] || die "--out: $out exists and is not a folder"
parent=$(dirname "$out")
[ -d "$parent" ] || [ "$parent" = out ] || die "--out: the folder $parent (where $out would go) does not exist"

# The folder of this run (run_dir) and the trainer's flags that go with it (run_flags): the user's
# -y 1 / -f 1 in $out as given; else the newest folder of the series out, out.1, out.2 ... resumed
# when its run is unfinished, or a new folder beside it.
choose_folder() {
  run_dir=$out; run_flags=("${user_resume[@]}")
  if [ ${#user_resume[@]} -gt 0 ]; then echo "train.sh: ${user_resume[*]} in $out, as given" >&2; return; fi
  local newest= next=$out k=1 ck
  while [ -e "$next" ]; do newest=$next; next=$out.$k; k=$((k + 1)); done
  if [ -z "$newest" ] || ! holds_run "$newest"; then run_dir=${newest:-$out}; return; fi
  ck=$(checkpoint_of "$newest")
  if [ -n "$ck" ] && [ "${ck% *}" -lt "${ck#* }" ]; then
    run_dir=$newest; run_flags=(-y 1 -x "${ck#* }")
    echo "train.sh: resuming the unfinished run in $newest: its checkpoint is at step ${ck% *} of the ${ck#* } it was started to do" >&2
  elif [ -n "$ck" ]; then
    run_dir=$next
    echo "train.sh: the run in $newest finished (${ck% *} of ${ck#* } steps): this run goes beside it, into $next (-- -f 1 would start over in $out)" >&2
  else
    run_dir=$next
    echo "train.sh: $newest holds no readable checkpoint: this run goes beside it, into $next (-- -f 1 would start over in $out)" >&2
  fi
}
choose_folder

bash scripts/install_deps.sh
make -s data
[ "$(id -u)" -ne 0 ] || export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# --pretrained: llm.c's GPT-2 124M model file (fp32, 548 MB)
init=()
if [ "$pretrained" -eq 1 ]; then
  model=data/gpt2_124M.bin
  url=https://huggingface.co/datasets/karpathy/llmc-starter-pack/resolve/main/gpt2_124M.bin
  for c in "${ZERO3_DATA_CACHE:-}" "${XDG_CACHE_HOME:-$HOME/.cache}/gpt2-zero3"; do
    if [ ! -f "$model" ] && [ -n "$c" ] && [ -f "$c/gpt2_124M.bin" ]; then
      echo "train.sh: using the local copy $c/gpt2_124M.bin"
      cp "$c/gpt2_124M.bin" "$model.tmp" && mv "$model.tmp" "$model"
    fi
  done
  if [ ! -f "$model" ]; then
    echo "train.sh: downloading $url"
    if ! /usr/bin/python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$url" "$model.tmp"; then
      rm -f "$model.tmp"
      echo "error: --pretrained: cannot download $url; put gpt2_124M.bin (from llm.c) in data/ or in \$ZERO3_DATA_CACHE, or train from scratch without --pretrained" >&2
      exit 1
    fi
    mv "$model.tmp" "$model"
  fi
  init=(-e "$model")
fi

if [ "$mode" = gpu ]; then
  ngpu=$(nvidia-smi -L | wc -l)
  if command -v mpirun >/dev/null 2>&1; then
    make -s train_gpt2_zero3cu
    launch=(mpirun -np "$ngpu")
  else   # no MPI on this machine: the USE_MPI=0 build and scripts/launch.sh
    make -s train_gpt2_zero3cu USE_MPI=0
    launch=(scripts/launch.sh -n "$ngpu")
  fi
  steps=200
  flags=(-e d12 -b 16 -t 1024 -x "$steps" -l 6e-4 -u 20 -q 0.1 -c 0.1 -v 25 -s 50 -g 128 -n 50)
  [ "$pretrained" -eq 0 ] || flags=(-b 16 -t 1024 -x "$steps" -l 1e-4 -c 0.1 -v 25 -s 50 -g 128 -n 50)
  bin=./train_gpt2_zero3cu
else
  make -s train_gpt2_zero3
  n=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc); [ "$n" -le 4 ] || n=4
  launch=(mpirun --oversubscribe -np "$n" -x OMP_NUM_THREADS=1)
  steps=781   # scripts/sweep_quickstart.sh's candidate 2: its steps, warmup (1/15 of them) and schedule
  flags=(-e d4c128h4t64 -p bf16 -b 8 -t 64 -x "$steps" -l 2e-3 -u 52 -q 0.1 -c 0.1 -v 50 -m 4 -s 100 -g 64 -n 50)
  # GPT-2 124M on CPU ranks: a few dozen steps take minutes
  [ "$pretrained" -eq 0 ] || { steps=40; flags=(-b 4 -t 64 -x "$steps" -l 1e-4 -v 10 -m 2 -s 20 -g 64 -n 10); }
  bin=./train_gpt2_zero3
fi
cmd=("${launch[@]}" "$bin" "${init[@]}" "${flags[@]}" -o "$run_dir" "${run_flags[@]}" "${rest[@]}")
echo "train.sh: ${cmd[*]}"
OMP_NUM_THREADS=1 "${cmd[@]}"
# the picture of this folder's own log (resumed, the log goes on): redrawn in place
/usr/bin/python3 scripts/plot_loss.py "$run_dir/log.csv" "$run_dir/loss.png" --replace
echo "train.sh: done: $run_dir/model.bin (llm.c format), $run_dir/log.csv, $run_dir/loss.png"
