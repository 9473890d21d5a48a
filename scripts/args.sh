# scripts/args.sh: the argument checks the shell scripts share, sourced (`. scripts/args.sh`) after the
# script has moved to the repository root. Every check runs before any work (a build, a run), and a
# bad argument ends the script with one line on stderr, `error: ARGUMENT: what is wrong`, exit 2:
#   die MESSAGE                   the line and the exit
#   need_int FLAG NAME LO HI      the variable NAME holds an integer in [LO, HI], read in decimal
#                                 whatever its leading zeros (08 is eight, never octal), and is
#                                 rewritten without them (010 becomes 10): the one number parser
#   need_writable_folder FLAG DIR DIR is a folder this user can write into
#   need_new_folder FLAG DIR      DIR does not exist or is empty, and its parent folder can be written
#   need_file FLAG PATH           PATH is a regular file that can be read
#   free_name PATH [folder]       the first of PATH, PATH.1, PATH.2 ... that does not exist (a file's
#                                 number goes before its extension: t.png, t.1.png), the rule of -tr,
#                                 created empty as it is picked (O_EXCL; mkdir for a folder), so that
#                                 two scripts started together never pick the same name
#   trainer_accepts N FLAGS...    a run on N ranks would accept FLAGS: the trainer's planner (-plan N
#                                 validates every flag as a run on N ranks does), and the one check only
#                                 a run makes (-e names a model to train: a descriptor or a file, never a
#                                 parameter count); otherwise the trainer's error line, exit 2. Needs the build.
#   holds_run DIR                 DIR holds an earlier run (a checkpoint, log.csv or model.bin)
#   checkpoint_of DIR             "STEP TOTAL" of the run in DIR from its last checkpoint, or nothing
#   resume_in_place DIR NAME      the trainer flags that continue DIR's unfinished run in place
# The scripts that time real TCP (cluster_lessons.sh, validate_planner.sh --tcp) on a cluster of their own:
#   need_gbit FLAG G              G is a link speed in [0.01, 100] Gbit/s
#   need_no_cluster FLAG          no cluster is up (scripts/cluster.sh status): one up is the user's, never
#                                 used or taken down by a script
#   own_cluster G TMP [CMD]       brings up 2 nodes of 2 slots each, links shaped to G Gbit/s (G empty: unshaped); when the
#                                 script exits, also when interrupted, runs CMD, takes them down and removes TMP
#   on_cluster R ARGS...          mpirun ARGS across those nodes, R ranks a node (1 or 2)
#   step_ms WHICH OUT             the step in ms of a run's last "time: WHICH" line (measured, planner)
# A script's results never replace earlier ones: they go to a free name, or it refuses and says how
# to proceed.

die() { echo "error: $*" >&2; exit 2; }

need_int() {
  local flag=$1 name=$2 lo=$3 hi=$4 v=${!2-} digits
  [[ "$v" =~ ^0*([0-9]+)$ ]] || die "$flag: expected an integer in [$lo, $hi], got '$v'"
  digits=${BASH_REMATCH[1]}
  # at most 18 digits: bash's arithmetic is 64-bit, so a longer number is out of range, never wrapped
  [ "${#digits}" -le 18 ] && (( 10#$digits >= lo && 10#$digits <= hi )) || die "$flag: $v is out of range [$lo, $hi]"
  printf -v "$name" '%s' "$digits"
}

need_writable_folder() {
  [ -d "$2" ] || die "$1: $2 is not a folder"
  [ -w "$2" ] && [ -x "$2" ] || die "$1: the folder $2 cannot be written"
}

need_new_folder() {
  local flag=$1 dir=$2
  if [ -e "$dir" ] || [ -L "$dir" ]; then
    [ -d "$dir" ] || die "$flag: $dir exists and is not a folder"
    [ -z "$(ls -A "$dir")" ] || die "$flag: $dir holds earlier results: give a new folder (they are never replaced)"
  fi
  [ -d "$(dirname "$dir")" ] || die "$flag: the folder $(dirname "$dir") (where $dir would go) does not exist"
  need_writable_folder "$flag" "$(dirname "$dir")"
}

need_file() {
  [ -e "$2" ] || die "$1: $2: no such file"
  [ -f "$2" ] || die "$1: $2 is not a regular file"
  [ -r "$2" ] || die "$1: $2 cannot be read"
}

free_name() {
  local path=$1 kind=${2:-file} stem=$1 ext= k name
  [ "$kind" = folder ] || case "$(basename "$path")" in ?*.*) stem=${path%.*}; ext=.${path##*.} ;; esac
  for ((k = 0; k < 10000; k++)); do
    name=$stem.$k$ext; [ "$k" -gt 0 ] || name=$path
    [ ! -e "$name" ] && [ ! -L "$name" ] || continue   # (noclobber would open a FIFO found there)
    if [ "$kind" = folder ]; then mkdir -- "$name" 2>/dev/null && { echo "$name"; return; }
    else (set -o noclobber; : >"$name") 2>/dev/null && { echo "$name"; return; }; fi
    [ -e "$name" ] || [ -L "$name" ] || die "$path: cannot create $name"   # not taken by another run: unwritable
  done
  die "$path: no free name left among $path, $stem.1$ext ... $stem.9999$ext"
}

trainer_accepts() {
  local n=$1 err model=; shift
  local -a flags=("$@")
  for ((i = 0; i + 1 < ${#flags[@]}; i += 2)); do [ "${flags[$i]}" != -e ] || model=${flags[$((i + 1))]}; done
  if [ -n "$model" ] && [ ! -e "$model" ] && [[ "$model" != d* ]]; then
    die "-e $model: a run trains a model descriptor (d12, d2c64h2t64) or a model file, not a parameter count (only -plan N takes one)"
  fi
  err=$(./train_gpt2_zero3 -plan "$n" "$@" 2>&1 >/dev/null) && return 0
  err=$(echo "$err" | grep -m1 '^error' || echo "error: ./train_gpt2_zero3 -plan $n $*: refused ($err)")
  # the planner's last check refuses the flags a plan cannot show (-p, -pt, -clip: "leave it out"):
  # every check a run makes came before it and passed
  [[ "$err" =~ ^error:\ flag\ -(p|pt|clip):\ .*leave\ (it|-pt)\ out ]] && return 0
  echo "$err" >&2
  exit 2
}

# word K of a checkpoint's meta.bin, a little-endian int64 (docs/CHECKPOINT_FORMAT.md: 3 the step, 21 -x)
meta_word() { [ -f "$1" ] || return 0; od -An -t d8 -j $(( $2 * 8 )) -N 8 "$1" 2>/dev/null | tr -d ' '; }
holds_run() { [ -e "$1/latest" ] || [ -e "$1/log.csv" ] || [ -e "$1/model.bin" ] || compgen -G "$1/ckpt_*" >/dev/null; }
# "STEP TOTAL" of the run in folder $1, from its last checkpoint; empty when none can be read
checkpoint_of() {
  local latest= meta step total
  [ ! -f "$1/latest" ] || latest=$(head -c 64 "$1/latest" | head -1 || true)   # never a FIFO
  case "$latest" in ckpt_*) meta=$1/$latest/meta.bin ;; *) return 0 ;; esac
  step=$(meta_word "$meta" 3); total=$(meta_word "$meta" 21)
  [ -z "$step" ] || [ -z "$total" ] || echo "$step $total"
}
# The trainer flags that continue the run in folder $1 in place (a batch job requeued into its own
# folder), said on stderr as $2: "-y 1 -x TOTAL" for an unfinished run, nothing for an empty or absent
# folder; a finished run or an unreadable one is refused (it is never started over in place).
resume_in_place() {
  holds_run "$1" || return 0
  local ck; ck=$(checkpoint_of "$1")
  if [ -n "$ck" ] && [ "${ck% *}" -lt "${ck#* }" ]; then
    echo "$2: resuming the unfinished run in $1: its checkpoint is at step ${ck% *} of the ${ck#* } it was started to do" >&2
    echo "-y 1 -x ${ck#* }"
  elif [ -n "$ck" ]; then
    die "$2: $1 holds a finished run (${ck% *} of ${ck#* } steps): give another --out, or pass -f 1 to start over there"
  else
    die "$2: $1 holds an earlier run with no readable checkpoint: give another --out, or pass -f 1 to start over there"
  fi
}

need_gbit() {
  awk -v g="$2" 'BEGIN { exit !(g ~ /^[0-9]+(\.[0-9]+)?$/ && g >= 0.01 && g <= 100) }' ||
    die "$1: $2 is not a link speed in [0.01, 100] Gbit/s"
}
need_no_cluster() {
  ! bash scripts/cluster.sh status >/dev/null 2>&1 ||
    die "$1: a cluster is up (scripts/cluster.sh status): take it down first (scripts/cluster.sh down); this script makes its own"
}
# (one up for every run, 2 slots a node: a run of 1 rank a node is placed by --map-by, never by a
# second up)
own_cluster() {
  # shellcheck disable=SC2064
  trap "${3:-:}; bash scripts/cluster.sh down >/dev/null 2>&1; rm -rf '$2'" EXIT; trap 'exit 130' INT TERM
  bash scripts/cluster.sh up 2 --ranks-per-node 2 ${1:+--gbit "$1"} >/dev/null || die "the cluster (scripts/cluster.sh up 2 ${1:+--gbit $1}) did not come up"
}
on_cluster() {
  local r=$1; shift
  bash scripts/cluster.sh mpirun --map-by "ppr:$r:node" "$@"
}
step_ms() { sed -n "s/^time: $1 .* step *\([0-9.]*\) ms.*/\1/p" "$2" | tail -1; }
