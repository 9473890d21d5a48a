# scripts/args.sh: the argument checks the shell scripts share, sourced (`. scripts/args.sh`) after the
# script has moved to the repository root. Every check runs before any work (a build, a run), and a
# bad argument ends the script with one line on stderr, `error: ARGUMENT: what is wrong`, exit 2:
#   die MESSAGE                   the line and the exit
#   need_int FLAG VALUE LO HI     VALUE is an integer in [LO, HI]
#   need_writable_folder FLAG DIR DIR is a folder this user can write into
#   need_new_folder FLAG DIR      DIR does not exist or is empty, and its parent folder can be written
#   need_file FLAG PATH           PATH is a regular file that can be read
#   free_name PATH                the first of PATH, PATH.1, PATH.2 ... that does not exist (a file's
#                                 number goes before its extension: t.png, t.1.png), the rule of -tr
#   trainer_accepts N FLAGS...    the trainer's planner (-plan N, which validates as a run on N ranks
#                                 does) accepts FLAGS (less -pt and -clip, which change no plan and which
#                                 it refuses to plan); otherwise its error line, exit 2. Needs the build.
# A script's results never replace earlier ones: they go to a free name, or it refuses and says how
# to proceed.

die() { echo "error: $*" >&2; exit 2; }

need_int() {
  local flag=$1 v=$2 lo=$3 hi=$4
  [[ "$v" =~ ^[0-9]+$ ]] && [ "${#v}" -le 9 ] || die "$flag: expected an integer in [$lo, $hi], got '$v'"
  [ "$v" -ge "$lo" ] && [ "$v" -le "$hi" ] || die "$flag: $v is out of range [$lo, $hi]"
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
  local path=$1 stem ext k=1
  if [ ! -e "$path" ] && [ ! -L "$path" ]; then echo "$path"; return; fi
  stem=$path; ext=
  case "$(basename "$path")" in ?*.*) stem=${path%.*}; ext=.${path##*.} ;; esac
  while [ -e "$stem.$k$ext" ] || [ -L "$stem.$k$ext" ]; do k=$((k + 1)); done
  echo "$stem.$k$ext"
}

trainer_accepts() {
  local n=$1 err planned=(); shift
  while [ $# -ge 2 ]; do case "$1" in -pt|-clip) ;; *) planned+=("$1" "$2") ;; esac; shift 2; done
  planned+=("$@")
  err=$(./train_gpt2_zero3 -plan "$n" "${planned[@]}" 2>&1 >/dev/null) && return 0
  echo "$err" | grep -m1 '^error' >&2 || echo "error: ./train_gpt2_zero3 -plan $n $*: refused ($err)" >&2
  exit 2
}
