#!/usr/bin/env bash
# No process-wide mutable state: every writable variable with static storage in the CPU trainer's
# objects (the engine, the observer, proc/, host/, cpu/: file-scope and function-level statics
# alike, found in their .data and .bss sections) is one of the few that no context can hold, each
# named below with the reason. Anything else -- a step counter, a scratch buffer kept in a static,
# a cache -- belongs to the context that owns it (the backend, the compute, the trainer) and fails
# this test. Tables that are only read (const, in .rodata or .data.rel.ro) are not state.
# The scan is checked first on a scratch object with one planted static of each kind.
. "$(dirname "$0")/lib.sh"
make -s train_gpt2_zero3 >/dev/null || fail "build"

# writable_statics OBJECT...: "object symbol" for every variable in a writable data section
writable_statics() {
  local o
  for o in "$@"; do
    objdump -t "$o" | awk -v f="$o" '$4 ~ /^\.(bss|data|tbss|tdata)(\.|$)/ && $4 !~ /rel\.ro/ && $NF !~ /^\./ { print f, $NF }'
  done
}

# the scan sees a file-scope static and a function-level one
cat >"$work/planted.c" <<'EOF'
static int file_counter;
int bump(void) { static int calls; return ++calls + ++file_counter; }
EOF
gcc -c -O2 -o "$work/planted.o" "$work/planted.c" || fail "cannot compile the planted object"
planted=$(writable_statics "$work/planted.o" | awk '{ print $2 }' | sort | tr '\n' ' ')
[[ "$planted" == *file_counter* && "$planted" == *calls* ]] || fail "the scan misses a planted static (found: $planted)"

# object:symbol (a function-level static's compiler suffix .N dropped): why no context holds it
allowed() {
  case "$1" in
    proc/proc.o:g_exits) ;;               # the error path's handed exits: fatal() is called with no context (proc.h)
    proc/proc.o:g_alloc) ;;               # the error path's allocation phase: xmalloc takes no context
    host/stop.o:g_stop_signal) ;;         # a signal handler's: it gets no argument
    host/stop.o:g_stop_quiet) ;;          # ... and whether its line is this rank's to print
    host/fileio.o:g_exit_files) ;;        # the temp files the exit and a second signal remove (fileio.h)
    host/fileio.o:at_exit_registered) ;;  # ... whose exit handler is registered once
    *) return 1 ;;
  esac
}

objs=$(find build/obj -name '*.o' | sort)
[ -n "$objs" ] || fail "no objects under build/obj"
bad=0; n=0
while read -r obj sym; do
  [ -n "$obj" ] || continue
  n=$((n + 1))
  key="${obj#build/obj/}:${sym%.[0-9]*}"
  key="${key/backend_cpu_mpi.o/backend_cpu.o}"
  allowed "$key" || { echo "FAIL: $key is writable static state (give it to the context that owns it)"; bad=1; }
done < <(writable_statics $objs)
[ $bad -eq 0 ] || exit 1
echo "test_globals: $n writable statics in $(echo "$objs" | wc -l) objects, each one no context can hold (the planted two found)"
