#!/usr/bin/env bash
# scripts/train.sh: trains GPT-2 on tinyshakespeare from a fresh clone, every step included and each
# safe to repeat: installs the Debian packages (scripts/install_deps.sh), makes the data (local
# copies from $ZERO3_DATA_CACHE or ~/.cache/gpt2-zero3 when present, else downloads), builds, trains.
#
#   scripts/train.sh                   GPU trainer when a GPU and nvcc are here, else CPU ranks
#   scripts/train.sh --cpu | --gpu     choose
#   scripts/train.sh --pretrained      start from OpenAI's GPT-2 124M (llm.c's gpt2_124M.bin, downloaded
#                                      once into data/, or found in the cache folder): Shakespeare in minutes
#   scripts/train.sh --out DIR         the output folder (default out/cpu, out/gpu, out/*_pretrained)
#   scripts/train.sh -- FLAGS...       extra trainer flags, appended (e.g. -- -x 1000 -s 200)
#
# CPU: min(4, cores) ranks of a small model (-e d4c128h4t64) for 300 steps, a few minutes on a laptop,
# with samples every 100 steps. GPU: GPT-2 124M (-e d12) on every GPU of this machine. Output in
# out/cpu or out/gpu (log.csv, checkpoints, model.bin) and the loss plot out/*/loss.png. Run again
# after an interruption (Ctrl-C, SIGTERM): it resumes any unfinished run, judged by what its last
# checkpoint says the run was started to do (its step and its -x), and continues to that -x unless
# the extra flags give another; after a finished run it starts over. It says which it does.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=auto; pretrained=0; extra=(); out=
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu) mode=cpu; shift ;;
    --gpu) mode=gpu; shift ;;
    --pretrained) pretrained=1; shift ;;
    --out) [ $# -ge 2 ] || { echo "train.sh: --out needs a folder" >&2; exit 2; }; out=$2; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "train.sh: unknown option $1 (-h for help)" >&2; exit 2 ;;
  esac
done

bash scripts/install_deps.sh
make -s data
if [ "$mode" = auto ]; then
  mode=cpu
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 &&
     { command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; }; then mode=gpu; fi
fi
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
      echo "train.sh: error: cannot download $url; put gpt2_124M.bin (from llm.c) in data/ or in \$ZERO3_DATA_CACHE, or train from scratch without --pretrained" >&2
      exit 1
    fi
    mv "$model.tmp" "$model"
  fi
  init=(-e "$model")
fi

# a folder this script owns: resume an unfinished run, start over after a finished one
if [ -z "$out" ]; then out=out/$mode; [ "$pretrained" -eq 0 ] || out=${out}_pretrained; fi

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
  steps=300
  flags=(-e d4c128h4t64 -b 8 -t 64 -x "$steps" -l 2e-3 -u 20 -q 0.1 -c 0.1 -v 50 -m 4 -s 100 -g 64 -n 50)
  # GPT-2 124M on CPU ranks: a few dozen steps take minutes
  [ "$pretrained" -eq 0 ] || { steps=40; flags=(-b 4 -t 64 -x "$steps" -l 1e-4 -v 10 -m 2 -s 20 -g 64 -n 10); }
  bin=./train_gpt2_zero3
fi
# shellcheck disable=SC2046
cmd=("${launch[@]}" "$bin" "${init[@]}" "${flags[@]}" -o "$out" $(scripts/resume_flags.sh "$out" train.sh) "${extra[@]}")
echo "train.sh: ${cmd[*]}"
OMP_NUM_THREADS=1 "${cmd[@]}"
/usr/bin/python3 scripts/plot_loss.py "$out/log.csv" "$out/loss.png"
echo "train.sh: done: $out/model.bin (llm.c format), $out/log.csv, $out/loss.png"
