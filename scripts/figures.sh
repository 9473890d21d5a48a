#!/usr/bin/env bash
# Regenerates every figure of README.md and docs/ from the program: the text figures in marked blocks
# (scripts/doc_figures.py --write: bytes, memory, plans, ledgers) and the pictures.
# The generators it runs live in scripts/figures/ (plot_figures.py draws the pictures of docs/, the
# *_curves.sh and *_table.sh scripts make the runs of docs' measured tables and curves).
#   scripts/figures.sh [PART ...]      (default: every part, in this order; the whole set takes about an hour on 2 cores)
#     text      the marked text figures in README.md and docs/*.md, the slow ones too
#               (scripts/doc_figures.py --write --slow; ~15 min, 11 of them docs/zeropp.md's table)
#     memory    docs/memory_vs_ranks.png: model state per rank against N, stages 0-3 (-plan)
#     stages    docs/stages_variants.png: state, peak and bytes of stages 0-3 and the variants (d4, 4 ranks)
#     trace     docs/trace_step.png: one ZeRO-3 step of d4 on 2 ranks, unit names on the bars
#     losses    docs/losses_stages.png: DDP and stages 1-3, 4 ranks, 60 steps: one curve (they are equal)
#     pitfall1  docs/pitfall1_loss.png: scripts/figures/pitfall1_table.sh's runs, -clip global against -clip local, 120 steps
#     links     docs/time_*.png: scripts/lessons_links.sh ex6 and pitfall2 (emulated links)
#     compare   docs/compare_ddp_zero3.png: scripts/compare_ddp_zero3.sh, the DDP build against ZeRO-3
#     time      docs/trace_d12_zero3.png and docs/time.md's table: scripts/bench_time.sh, GPT-2 124M, 2 ranks
#     zeropp    docs/zeropp_loss.png: scripts/figures/zeropp_curves.sh, 300 steps (the longest; its table is text's)
# Pictures with timings differ from run to run (and with the machine's load); tests/test_docs.sh
# checks the text figures only (the slow ones under SLOW=1).
# It redraws committed pictures in place (git holds the earlier ones): every part is checked before
# the first runs, and a picture with changes git does not hold is refused. Each picture is drawn in a
# fresh work folder (build/figures, build/figures.1, ...) and renamed into place when whole.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/args.sh
ALL=(text memory stages trace losses pitfall1 links compare time zeropp)
PARTS=("$@"); [ ${#PARTS[@]} -gt 0 ] || PARTS=("${ALL[@]}")
pictures_of() {   # the pictures a part redraws
  case $1 in
  memory) echo docs/memory_vs_ranks.png ;; stages) echo docs/stages_variants.png ;; trace) echo docs/trace_step.png ;;
  losses) echo docs/losses_stages.png ;; pitfall1) echo docs/pitfall1_loss.png ;;
  links) echo docs/time_ex6_z2.png docs/time_ex6_z3.png docs/time_ex6_z3pd4.png docs/time_p2_wrap2.png docs/time_p2_half.png ;;
  compare) echo docs/compare_ddp_zero3.png ;; time) echo docs/trace_d12_zero3.png ;; zeropp) echo docs/zeropp_loss.png ;;
  esac
}
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || die "figures.sh redraws committed pictures: run it in a git checkout"
for part in "${PARTS[@]}"; do
  case " ${ALL[*]} " in *" $part "*) ;; *) die "$part: not a part (${ALL[*]})" ;; esac
  for f in $(pictures_of "$part"); do
    [ ! -e "$f" ] || { git ls-files --error-unmatch -- "$f" >/dev/null 2>&1 && git diff --quiet HEAD -- "$f"; } ||
      die "$f: has changes git does not hold (uncommitted or untracked): commit it or move it away before redrawing it"
  done
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
make -s train_gpt2_zero3 >/dev/null
[ -f data/tinyshakespeare/tiny_shakespeare_train.bin ] || make -s data
mkdir -p build; W=$(free_name build/figures folder)
train() { local dir=$1; shift; mpirun -np 4 ./train_gpt2_zero3 -v 0 -o "$dir" "$@" >"$dir.out" 2>&1 || { grep -m1 '^error' "$dir.out" >&2 || cat "$dir.out" >&2; exit 1; }; }
into_place() { mv -f "$1" "$2"; echo "$2"; }   # a whole picture from the work folder: one rename

pitfall1() {   # scripts/figures/pitfall1_table.sh's four runs (its table is docs/primer.md's figure), drawn as curves
  local runs=() gc c
  scripts/figures/pitfall1_table.sh "$W/pitfall1"
  for gc in 1.0 1e-4; do for c in global local; do runs+=("-gc $gc $c=$W/pitfall1/${gc}_$c/log.csv"); done; done
  $PY scripts/figures/plot_figures.py losses docs/pitfall1_loss.png --replace \
    "d2c48h2t32, 4 ranks, -l 1e-3: clipping by the global norm against each rank's own" "${runs[@]}"
}

for part in "${PARTS[@]}"; do
  echo "== $part"
  case $part in
  text) $PY scripts/doc_figures.py --write --slow ;;
  memory) $PY scripts/figures/plot_figures.py memory docs/memory_vs_ranks.png --replace ;;
  stages)
    scripts/bench_variants.sh -n 4 -e d4 -x 2 --bytes | tee "$W/variants_d4_n4.txt"
    $PY scripts/figures/plot_figures.py stages "$W/variants_d4_n4.txt" docs/stages_variants.png --replace \
      "GPT-2 d4 on 4 ranks, B=2 T=64, one step each: scripts/bench_variants.sh -n 4 -e d4 (grey: stages 0-2)" ;;
  trace)
    mpirun -np 2 ./train_gpt2_zero3 -e d4 -b 2 -t 64 -x 3 -v 0 -z 3 -tr "$W/trace.json" >"$W/trace.out" 2>&1 ||
      { grep -m1 '^error' "$W/trace.out" >&2 || cat "$W/trace.out" >&2; exit 1; }
    $PY scripts/plot_trace.py "$W/trace.json" docs/trace_step.png --step 2 --replace \
      --title "one ZeRO-3 step: GPT-2 d4, 2 ranks, -pd 1 (mpirun -np 2 ./train_gpt2_zero3 -e d4 -b 2 -t 64 -x 3 -v 0 -tr T)" ;;
  losses)
    runs=()
    for z in 0 1 2 3; do
      train "$W/loss_z$z" -e d2c64h2t64 -b 4 -t 64 -x 60 -z $z
      runs+=("$([ $z = 0 ] && echo DDP || echo "stage $z")=$W/loss_z$z/log.csv")
    done
    for z in 1 2 3; do cmp -s <(cut -d, -f2 "$W/loss_z0/log.csv") <(cut -d, -f2 "$W/loss_z$z/log.csv") \
      && echo "stage $z: the same losses as DDP, every step" || echo "stage $z: losses differ from DDP's"; done
    $PY scripts/figures/plot_figures.py losses docs/losses_stages.png --replace "d2c64h2t64, 4 ranks: DDP and ZeRO stages 1-3 (one curve: they are equal)" "${runs[@]}" ;;
  pitfall1) pitfall1 ;;
  links)
    mkdir "$W/links"; scripts/lessons_links.sh ex6 "$W/links"; scripts/lessons_links.sh pitfall2 "$W/links"
    for f in $(pictures_of links); do into_place "$W/links/$(basename "$f")" "$f"; done ;;
  compare)
    scripts/compare_ddp_zero3.sh -n 4 -x 120 -o "$W/compare"
    into_place "$W/compare/compare_ddp_zero3.png" docs/compare_ddp_zero3.png ;;
  time)
    scripts/bench_time.sh -e d12 -n 2 -b 4 -t 64 -x 6 -p "$W/trace_d12_zero3.png"
    into_place "$W/trace_d12_zero3.png" docs/trace_d12_zero3.png ;;
  zeropp) B=2 scripts/figures/zeropp_curves.sh "$W/zeropp" && into_place "$W/zeropp/zeropp_loss.png" docs/zeropp_loss.png ;;
  esac
done
