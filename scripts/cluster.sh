#!/usr/bin/env bash
# scripts/cluster.sh: a K-node cluster on one machine. Each node is a network namespace with its own
# hostname (a UTS namespace), joined by a veth pair to a bridge in the root namespace, on a private
# subnet that only the namespaces made here use; each node's outgoing traffic can be shaped by the
# kernel's token bucket (tbf). Open MPI and a real Slurm run on it as on a cluster of machines.
#
#   what              where                                   made by
#   node i            netns z3node$i, hostname node$i, own /tmp  up: ip netns add + a holder process
#   its address       $NET.$i on its eth0                      up: a veth pair, the other end on the bridge
#   the switch        bridge z3br0, address $NET.254           up
#   the link          tbf on each node's eth0: G Gbit/s out    up --gbit G
#   a login to node i $RUN/agent node$i CMD (enters i's namespaces: Open MPI's plm_rsh_agent, for ssh)
#   Slurm             munged, slurmctld (root namespace), one slurmd per node, all state in $RUN/slurm
#
#   scripts/cluster.sh up K [--ranks-per-node R] [--gbit G]   K in 1..16 nodes, R in 1..64 slots each
#   scripts/cluster.sh status
#   scripts/cluster.sh mpirun ARGS...     mpirun -H node1:R,...,nodeK:R over TCP on the subnet, ARGS appended
#   scripts/cluster.sh exec NODE CMD...   runs CMD on node NODE (node1 ... nodeK)
#   scripts/cluster.sh slurm up|down      then: export SLURM_CONF=$RUN/slurm/slurm.conf; sinfo, sbatch, srun ...
#   scripts/cluster.sh down               removes everything up and slurm up made (also after a failed up)
#   scripts/cluster.sh check              exit 0 when this machine can make the cluster, else one line why
#
# Everything lives in the run folder $RUN (ZERO3_CLUSTER_RUN, default /run/zero3-cluster); the subnet
# is ZERO3_CLUSTER_NET (the first three numbers of a /24, default 10.213.0), refused when any address
# or route of the machine overlaps it. Needs root (CAP_SYS_ADMIN for namespaces, CAP_NET_ADMIN for
# links). Every refusal is one line starting "error:" and leaves the machine as it was.
set -uo pipefail
RUN=${ZERO3_CLUSTER_RUN:-/run/zero3-cluster}
NET=${ZERO3_CLUSTER_NET:-10.213.0}
BRIDGE=z3br0
NS_PREFIX=z3node
HOST_PREFIX=node
MAX_NODES=16
MAX_RANKS_PER_NODE=64
SLURM_DIR=$RUN/slurm
REPO=$(cd "$(dirname "$0")/.." && pwd)   # the repository this script belongs to (the nodes must see it)
export SLURM_CONF=$SLURM_DIR/slurm.conf

die() { echo "error: cluster.sh: $*" >&2; exit 1; }
say() { echo "cluster.sh: $*"; }

# ---------------------------------------------------------------------------------------------
# Preconditions

# The effective capability bits of this shell, as a number.
cap_effective() { printf '%d' "0x$(awk '/^CapEff/ {print $2}' /proc/self/status)"; }

require_privileges() {
  local caps; caps=$(cap_effective)
  (( (caps >> 12) & 1 )) && (( (caps >> 21) & 1 )) ||
    die "needs root (CAP_NET_ADMIN for links and CAP_SYS_ADMIN for namespaces): run it as root or with sudo"
}

require_tools() {
  local t
  for t in ip tc unshare nsenter "$@"; do
    command -v "$t" >/dev/null 2>&1 || die "'$t' is not installed (scripts/install_deps.sh installs it)"
  done
}

# Can namespaces and a bridge be made here? Tried for real, in throwaway namespaces.
require_namespaces() {
  unshare --net --uts sh -c 'hostname probe && ip link add z3probe type bridge && ip link del z3probe' \
    >/dev/null 2>&1 || die "this machine cannot make network namespaces with a bridge (unshare --net --uts failed)"
}

# The /24 as a number range, and whether any address or route of the machine overlaps it.
ip_to_int() { local IFS=.; read -r a b c d <<<"$1"; echo $(( (a << 24) | (b << 16) | (c << 8) | d )); }
subnet_in_use() {
  local lo hi cidr addr len first last
  lo=$(ip_to_int "$NET.0"); hi=$(( lo + 255 ))
  for cidr in $(ip -4 -o addr show | awk '{print $4}') $(ip -4 route show table all | awk '$1 ~ /^[0-9]/ {print $1}'); do
    addr=${cidr%/*}; len=${cidr#*/}; [ "$len" != "$cidr" ] || len=32
    [[ $addr =~ ^[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+$ ]] || continue
    first=$(( $(ip_to_int "$addr") & ~((1 << (32 - len)) - 1) & 0xffffffff )); last=$(( first + (1 << (32 - len)) - 1 ))
    [ "$len" -eq 0 ] && continue   # the default route covers everything, not a use of the subnet
    (( first <= hi && last >= lo )) && { echo "$cidr"; return 0; }
  done
  return 1
}

# ---------------------------------------------------------------------------------------------
# The cluster's state: $RUN/cluster.env holds K, R, G; $RUN/node$i.pid the holder of node i.

is_up() { [ -f "$RUN/cluster.env" ] || ip link show "$BRIDGE" >/dev/null 2>&1 || ip netns list | grep -q "^$NS_PREFIX"; }
load_state() { is_up && [ -f "$RUN/cluster.env" ] || die "no cluster is up (scripts/cluster.sh up K)"; . "$RUN/cluster.env"; }
holder_pid() { cat "$RUN/$1.pid" 2>/dev/null; }
node_exec() {   # node_exec NODE CMD...: CMD inside NODE's network and UTS namespaces
  local pid; pid=$(holder_pid "$1"); [ -n "$pid" ] || die "no node '$1' (nodes: $(node_names ' '))"
  shift; nsenter -t "$pid" --net --uts --mount -- "$@"
}
node_names() { local i s=""; for ((i = 1; i <= K; i++)); do s+="${s:+$1}$HOST_PREFIX$i"; done; echo "$s"; }

# ---------------------------------------------------------------------------------------------
# up

# A holder process keeps node i's UTS namespace (its hostname) and mount namespace alive; it sits
# in the node's netns. The mount namespace gives the node its own /tmp ($RUN/node$i.tmp), as every
# machine of a cluster has: what is to be shared (the repository, checkpoints) must be elsewhere.
start_holder() {
  local i=$1 name=$HOST_PREFIX$1 pid t
  mkdir -p "$RUN/$name.tmp" "$RUN/$name.host_tmp" && chmod 1777 "$RUN/$name.tmp"
  # a repository that itself sits under /tmp (a clone made there) stays visible on the node, as a
  # shared file system would make it: the machine's /tmp is kept aside, and the repository bound back
  local share=:
  case "$REPO/" in /tmp/?*) share="mkdir -p '$REPO' && mount --bind '$RUN/$name.host_tmp/${REPO#/tmp/}' '$REPO'" ;; esac
  setsid nsenter --net="/run/netns/$NS_PREFIX$i" unshare --uts --mount --propagation private -- \
    sh -c "hostname $name && mount --bind /tmp $RUN/$name.host_tmp && mount --bind $RUN/$name.tmp /tmp && $share && exec sleep infinity" </dev/null >/dev/null 2>&1 &
  pid=$!
  echo "$pid" >"$RUN/$name.pid"
  for ((t = 0; t < 100; t++)); do
    [ "$(nsenter -t "$pid" --uts hostname 2>/dev/null)" = "$name" ] && return 0
    sleep 0.05
  done
  return 1
}

# tbf on the node's eth0: the burst is 10 ms at the rate (at least 64 KiB), packets wait 50 ms at most.
shape_node() {
  local i=$1 burst
  burst=$(awk -v g="$G" 'BEGIN { b = g * 1e9 / 8 * 0.01; if (b < 65536) b = 65536; printf "%d", b }')
  ip netns exec "$NS_PREFIX$i" tc qdisc add dev eth0 root tbf rate "${G}gbit" burst "$burst" latency 50ms
}

make_node() {
  local i=$1 ns=$NS_PREFIX$1
  ip netns add "$ns" &&
  ip link add "z3veth$i" type veth peer name eth0 netns "$ns" &&
  ip link set "z3veth$i" master "$BRIDGE" up &&
  ip netns exec "$ns" ip link set lo up &&
  ip netns exec "$ns" ip addr add "$NET.$i/24" dev eth0 &&
  ip netns exec "$ns" ip link set eth0 up &&
  { [ "$G" = 0 ] || shape_node "$i"; } &&
  start_holder "$i"
}

# The agent Open MPI runs in place of ssh: `agent HOST CMD...` runs CMD (one shell line, as ssh
# would) inside HOST's namespaces.
write_agent() {
  cat >"$RUN/agent" <<EOF
#!/bin/sh
# plm_rsh_agent for the cluster in $RUN: enters the node's namespaces instead of logging in
host=\$1; shift
pid=\$(cat "$RUN/\$host.pid" 2>/dev/null) || { echo "error: agent: no node '\$host' in $RUN" >&2; exit 255; }
exec nsenter -t "\$pid" --net --uts --mount -- sh -c "\$*"
EOF
  chmod 755 "$RUN/agent"
}

parse_up() {
  K=${1:-}; shift || true
  R=1; G=0
  while [ $# -gt 0 ]; do
    case $1 in
      --ranks-per-node) R=${2:-}; shift 2 || die "--ranks-per-node needs a number" ;;
      --gbit) G=${2:-}; shift 2 || die "--gbit needs a number of Gbit/s" ;;
      *) die "up: unknown option '$1' (up K [--ranks-per-node R] [--gbit G])" ;;
    esac
  done
  # in decimal whatever the leading zeros (08 is eight: bash's arithmetic would read octal), at most 9 digits
  [[ $K =~ ^0*([0-9]{1,9})$ ]] && K=$((10#${BASH_REMATCH[1]})) && [ "$K" -ge 1 ] && [ "$K" -le $MAX_NODES ] ||
    die "up: K='$K' nodes is not in 1..$MAX_NODES"
  [[ $R =~ ^0*([0-9]{1,9})$ ]] && R=$((10#${BASH_REMATCH[1]})) && [ "$R" -ge 1 ] && [ "$R" -le $MAX_RANKS_PER_NODE ] ||
    die "up: --ranks-per-node '$R' is not in 1..$MAX_RANKS_PER_NODE"
  [[ $G =~ ^[0-9]*\.?[0-9]+$ ]] && awk -v g="$G" 'BEGIN { exit !(g >= 0 && g <= 1000) }' ||
    die "up: --gbit '$G' is not a rate in Gbit/s (0 < G <= 1000; 0 or absent: unshaped)"
}

cmd_up() {
  parse_up "$@"
  require_privileges; require_tools; require_namespaces
  [[ $NET =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "ZERO3_CLUSTER_NET='$NET' is not the first three numbers of a /24 (e.g. 10.213.0)"
  is_up && die "a cluster is up already (scripts/cluster.sh status; scripts/cluster.sh down)"
  local used; used=$(subnet_in_use) && die "the subnet $NET.0/24 is in use on this machine ($used): choose another with ZERO3_CLUSTER_NET"
  trap 'teardown >/dev/null 2>&1; echo "error: cluster.sh: up failed; nothing is left of it" >&2' EXIT
  trap 'exit 130' INT TERM HUP
  mkdir -p "$RUN" || exit 1
  ip link add "$BRIDGE" type bridge && ip addr add "$NET.254/24" dev "$BRIDGE" && ip link set "$BRIDGE" up || exit 1
  local i
  for ((i = 1; i <= K; i++)); do make_node "$i" || exit 1; done
  write_agent
  printf 'K=%s\nR=%s\nG=%s\nNET=%s\n' "$K" "$R" "$G" "$NET" >"$RUN/cluster.env"
  trap - EXIT INT TERM HUP
  say "up: $K nodes ($(node_names ' ')) on $NET.0/24, $R slots each, links $( [ "$G" = 0 ] && echo unshaped || echo "$G Gbit/s out of each node")"
}

# ---------------------------------------------------------------------------------------------
# down: every step runs whatever the earlier ones did; nothing it removes needs to exist.

kill_pids() {   # TERM, up to 3 s, then KILL, and up to 3 s more until every one is gone
  local t
  [ $# -gt 0 ] || return 0
  kill -TERM "$@" 2>/dev/null
  for ((t = 0; t < 30; t++)); do any_alive "$@" || return 0; sleep 0.1; done
  kill -KILL "$@" 2>/dev/null
  for ((t = 0; t < 30; t++)); do any_alive "$@" || return 0; sleep 0.1; done
  return 0
}
any_alive() { local p; for p in "$@"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }

slurm_teardown() {
  local f pids=()
  for f in "$SLURM_DIR"/*.pid "$RUN"/munge/munged.pid; do
    [ -f "$f" ] && pids+=("$(cat "$f")")
  done
  kill_pids "${pids[@]}"
  rm -rf "$SLURM_DIR" "$RUN/munge"
}

teardown() {
  local ns pids f
  slurm_teardown
  for ns in $(ip netns list | awk -v p="^$NS_PREFIX" '$1 ~ p {print $1}'); do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    # shellcheck disable=SC2086
    kill_pids $pids
    ip netns del "$ns" 2>/dev/null
  done
  for f in "$RUN"/"$HOST_PREFIX"*.pid; do [ -f "$f" ] && kill_pids "$(cat "$f")"; done
  for f in /sys/class/net/z3veth*; do [ -e "$f" ] && ip link del "$(basename "$f")" 2>/dev/null; done
  ip link del "$BRIDGE" 2>/dev/null
  rm -rf "$RUN"
  return 0
}

cmd_down() {
  require_privileges
  is_up || [ -d "$RUN" ] || die "down: no cluster is up"
  trap '' INT TERM HUP   # a down that is interrupted would leave half a cluster
  teardown
  is_up && die "down: something is left (ip netns list; ip link show $BRIDGE)"
  say "down: nothing left"
}

# ---------------------------------------------------------------------------------------------
# status, exec, mpirun

cmd_status() {
  load_state
  local i
  say "$K nodes on $NET.0/24 (bridge $BRIDGE $NET.254), $R slots each, links $( [ "$G" = 0 ] && echo unshaped || echo "$G Gbit/s")"
  for ((i = 1; i <= K; i++)); do
    printf '  %-8s %-14s hostname %-8s qdisc %s\n' "$HOST_PREFIX$i" "$NET.$i" \
      "$(node_exec "$HOST_PREFIX$i" hostname 2>/dev/null || echo '?')" \
      "$(ip netns exec "$NS_PREFIX$i" tc qdisc show dev eth0 2>/dev/null | head -1 | cut -d' ' -f2-6)"
  done
  if [ -f "$SLURM_DIR/slurm.conf" ]; then
    say "slurm: SLURM_CONF=$SLURM_CONF"; sinfo 2>&1 | sed 's/^/  /'
  else say "slurm: not up (scripts/cluster.sh slurm up)"; fi
}

cmd_exec() {
  load_state
  [ $# -ge 2 ] || die "exec: usage: exec NODE CMD..."
  node_exec "$@"
}

# The mpirun options that make a run use the cluster as a real one: its hosts, its login agent, and
# TCP on its subnet only (within a node, shared memory). On SIGTERM mpirun's daemons send their ranks
# SIGCONT, then SIGTERM odls_base_sigkill_timeout seconds later, then SIGKILL as long again; Open
# MPI's 1 s is shorter than a step and its checkpoint; STOP_GRACE_S lets the ranks stop with one
# (and a job whose rank died takes twice as long to be ended).
STOP_GRACE_S=10
mpirun_cluster_args() {
  local i hosts=""
  for ((i = 1; i <= K; i++)); do hosts+="${hosts:+,}$HOST_PREFIX$i:$R"; done
  echo "-H $hosts --mca plm rsh --mca plm_rsh_agent $RUN/agent --mca btl self,vader,tcp --mca btl_tcp_if_include $NET.0/24 --mca oob_tcp_if_include $NET.0/24 --mca odls_base_sigkill_timeout $STOP_GRACE_S"
}

# mpirun's stderr through scripts/reap.sh's reap_after_timeout: a mpirun that outlives its ranks
# after a collective timeout (a daemon behind a dead link) is ended 10 s after the trainer's line
. "$(dirname "${BASH_SOURCE[0]}")/reap.sh"

cmd_mpirun() {
  load_state
  exec 3>&2
  # shellcheck disable=SC2046
  exec mpirun $(mpirun_cluster_args) "$@" 2> >(reap_after_timeout $$ cluster.sh)
}

# ---------------------------------------------------------------------------------------------
# slurm up|down: munged and slurmctld in the root namespace, slurmd in each node

write_slurm_conf() {
  local i ctl; ctl=$(hostname -s)
  mkdir -p "$SLURM_DIR"/{state,log}
  for ((i = 1; i <= K; i++)); do mkdir -p "$SLURM_DIR/spool/$HOST_PREFIX$i"; done
  cat >"$SLURM_CONF" <<EOF
# the Slurm of the cluster in $RUN (scripts/cluster.sh slurm up)
ClusterName=zero3
SlurmctldHost=$ctl($NET.254)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# a requeued job may start again once its revoked credential has expired (cred_expire, default 120 s;
# one let start sooner, by scontrol update StartTime=now, can fail to launch on a node that still
# holds the credential): 30 s here, so that the box's requeues run again on their own, soon
AuthInfo=socket=$RUN/munge/munge.socket.2,cred_expire=30
StateSaveLocation=$SLURM_DIR/state
SlurmdSpoolDir=$SLURM_DIR/spool/%n
SlurmctldPidFile=$SLURM_DIR/slurmctld.pid
SlurmdPidFile=$SLURM_DIR/slurmd.%n.pid
SlurmctldLogFile=$SLURM_DIR/log/slurmctld.log
SlurmdLogFile=$SLURM_DIR/log/slurmd.%n.log
# no cgroups to manage here: processes are tracked by their parents, tasks are not bound
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=10
MinJobAge=60
# a node whose slurmd stops answering is DOWN after 10 s (default 300), and its jobs requeued or ended
SlurmdTimeout=10
EOF
  for ((i = 1; i <= K; i++)); do
    echo "NodeName=$HOST_PREFIX$i NodeAddr=$NET.$i CPUs=$R RealMemory=1024 State=UNKNOWN" >>"$SLURM_CONF"
  done
  echo "PartitionName=main Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >>"$SLURM_CONF"
  printf 'CgroupPlugin=cgroup/v1\nCgroupMountpoint=/sys/fs/cgroup\n' >"$SLURM_DIR/cgroup.conf"
}

start_munge() {
  mkdir -p "$RUN/munge" && chmod 700 "$RUN/munge"
  dd if=/dev/urandom of="$RUN/munge/munge.key" bs=1024 count=1 status=none && chmod 400 "$RUN/munge/munge.key"
  munged --force --socket="$RUN/munge/munge.socket.2" --key-file="$RUN/munge/munge.key" \
    --pid-file="$RUN/munge/munged.pid" --log-file="$RUN/munge/munged.log" --seed-file="$RUN/munge/munged.seed"
}

wait_idle_nodes() {   # up to 60 s for K idle nodes
  local t n
  for ((t = 0; t < 120; t++)); do
    n=$(sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)
    [ "$n" -eq "$K" ] && return 0
    sleep 0.5
  done
  return 1
}

cmd_slurm_up() {
  load_state
  require_tools munged slurmctld slurmd sinfo
  [ -f "$SLURM_CONF" ] && die "slurm up: Slurm is up already (scripts/cluster.sh slurm down)"
  ss -Hltn 2>/dev/null | awk '{print $4}' | grep -qE ':681[78]$' && die "slurm up: port 6817 or 6818 is in use (another Slurm on this machine?)"
  trap 'slurm_teardown >/dev/null 2>&1; echo "error: cluster.sh: slurm up failed (its logs are gone; rerun with ZERO3_CLUSTER_KEEP_LOGS=1 to keep them in /tmp)" >&2' EXIT
  trap 'exit 130' INT TERM HUP
  write_slurm_conf
  start_munge || exit 1
  slurmctld -f "$SLURM_CONF" || exit 1
  local i
  for ((i = 1; i <= K; i++)); do node_exec "$HOST_PREFIX$i" slurmd -f "$SLURM_CONF" -N "$HOST_PREFIX$i" || exit 1; done
  if ! wait_idle_nodes; then
    [ -z "${ZERO3_CLUSTER_KEEP_LOGS:-}" ] || cp -r "$SLURM_DIR/log" /tmp/zero3-cluster-slurm-logs
    exit 1
  fi
  trap - EXIT INT TERM HUP
  say "slurm up: $K idle nodes; to use it: export SLURM_CONF=$SLURM_CONF"
}

cmd_slurm_down() {
  require_privileges
  [ -f "$SLURM_CONF" ] || [ -d "$RUN/munge" ] || die "slurm down: Slurm is not up"
  trap '' INT TERM HUP
  slurm_teardown
  say "slurm down: its daemons stopped, its state removed"
}

# ---------------------------------------------------------------------------------------------
# sourced (a test of its rules: parse_up's defaults), the functions alone; run, the command
(return 0 2>/dev/null) && return 0
case ${1:-} in
  up) shift; cmd_up "$@" ;;
  down) cmd_down ;;
  status) cmd_status ;;
  exec) shift; cmd_exec "$@" ;;
  mpirun) shift; cmd_mpirun "$@" ;;
  agent-args) load_state; mpirun_cluster_args ;;
  check) require_privileges; require_tools; require_namespaces; echo "cluster.sh: this machine can make the cluster" ;;
  slurm)
    require_privileges
    case ${2:-} in up) cmd_slurm_up ;; down) cmd_slurm_down ;; *) die "slurm: usage: slurm up|down" ;; esac ;;
  -h|--help|"") sed -n '2,27p' "$0"; [ -n "${1:-}" ] ;;
  *) die "unknown command '$1' (up, down, status, exec, mpirun, slurm, check; -h for help)" ;;
esac
