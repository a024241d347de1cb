#!/usr/bin/env bash
# local-cluster.sh - a real single-node Slurm cluster on this machine, for
# trying job scripts on a workstation and for the project's tests.
#
# Usage:   slurm/local-cluster.sh start|stop|status
#
#   start   install Slurm + MUNGE if missing (Debian/Ubuntu, as root), write
#           slurm.conf, start munged, slurmctld and slurmd, and wait until the
#           node is idle. Idempotent: if the cluster is up it says so, exit 0.
#   stop    cancel all jobs, stop the daemons started by `start` (TERM, then
#           KILL), remove their pid files. Idempotent.
#   status  show whether each daemon runs, plus `sinfo`; exit 0 if up, 3 if not.
#
# Environment:
#   DBA3C_SLURM_DIR   state directory (default /tmp/dba3c-slurm): slurm.conf,
#                     controller state, slurmd spool, logs and pid files.
#   DBA3C_SLURM_CPUS  CPUs the node declares (default 8; may exceed the real
#                     core count, thanks to SlurmdParameters=config_overrides).
#   DBA3C_SLURM_MEM   RealMemory of the node in MB (default 8000).
#
# How clients find the cluster: slurm.conf is written to $DBA3C_SLURM_DIR and
# /etc/slurm/slurm.conf (Debian's default config path) is made a symlink to it
# (an existing regular file there is kept as slurm.conf.dba3c-backup). So plain
# `sbatch`, `squeue`, `scontrol` and submitit work without SLURM_CONF;
# `export SLURM_CONF=$DBA3C_SLURM_DIR/slurm.conf` does the same explicitly.
#
# Runs without systemd or cgroups (proctrack/linuxproc, task/none). The daemons
# run as root, munged as the `munge` user (it refuses to run as root). There is
# no slurmdbd, so `sacct` reports an error; use `scontrol show job` / `squeue`.
# Exit codes: 0 ok, 1 failure, 2 cannot run here (not root, no packages),
# 3 (status) cluster down.
set -euo pipefail

STATE_DIR=${DBA3C_SLURM_DIR:-/tmp/dba3c-slurm}
CPUS=${DBA3C_SLURM_CPUS:-8}
MEM=${DBA3C_SLURM_MEM:-8000}
CONF=$STATE_DIR/slurm.conf
ETC_CONF=/etc/slurm/slurm.conf
NODE=$(hostname -s)
export SLURM_CONF=$CONF

log() { echo "local-cluster: $*"; }
die() { echo "error: $*" >&2; exit "${2:-1}"; }

# --- pid files ---------------------------------------------------------------
pidfile() { echo "$STATE_DIR/$1.pid"; }

running() {  # running NAME: the recorded pid of daemon NAME is alive
    local f pid
    f=$(pidfile "$1")
    [[ -s $f ]] || return 1
    pid=$(<"$f")
    [[ $pid =~ ^[0-9]+$ ]] && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$1" ]]
}

wait_for() {  # wait_for SECONDS CMD...: poll CMD every 0.5 s until it succeeds
    local deadline=$((SECONDS + $1)); shift
    until "$@"; do
        ((SECONDS < deadline)) || return 1
        sleep 0.5
    done
}

controller_up() { scontrol ping 2>/dev/null | grep -q 'is UP'; }
node_state() { sinfo -h -n "$NODE" -o %t 2>/dev/null | head -n1; }
node_idle() {
    local st; st=$(node_state)
    # a responding node that is down/drained is resumed (ReturnToService covers
    # most cases; a drain left over from an earlier run does not clear itself)
    if [[ $st =~ ^(down|drain|drng)$ ]]; then
        scontrol update nodename="$NODE" state=resume >/dev/null 2>&1 || true
    fi
    [[ $st == idle || $st == mix || $st == alloc ]]
}
slurmd_registered_since() {  # slurmd_registered_since EPOCH
    local t
    t=$(scontrol show node "$NODE" 2>/dev/null | grep -o 'SlurmdStartTime=[^ ]*' | cut -d= -f2)
    [[ -n $t && $t != None ]] && (($(date -d "$t" +%s) >= $1))
}
node_ready() { node_idle && slurmd_registered_since "$1"; }

# --- start -------------------------------------------------------------------
install_packages() {
    local pkgs=(slurmctld slurmd slurm-client munge) missing=() p
    for p in "${pkgs[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
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

write_conf() {
    mkdir -p "$STATE_DIR"/{state,spool,log}
    cat >"$CONF" <<EOF
# Written by slurm/local-cluster.sh - single-node cluster, no systemd/cgroups.
ClusterName=dba3c
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=cred_expire=10
StateSaveLocation=$STATE_DIR/state
SlurmdSpoolDir=$STATE_DIR/spool
SlurmctldLogFile=$STATE_DIR/log/slurmctld.log
SlurmdLogFile=$STATE_DIR/log/slurmd.log
SlurmctldPidFile=$(pidfile slurmctld)
SlurmdPidFile=$(pidfile slurmd)
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
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
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
    # Let plain client commands (and submitit) find this config.
    mkdir -p "$(dirname "$ETC_CONF")"
    if [[ -e $ETC_CONF && ! -L $ETC_CONF ]]; then
        mv "$ETC_CONF" "$ETC_CONF.dba3c-backup"
        log "kept the existing $ETC_CONF as $ETC_CONF.dba3c-backup"
    fi
    ln -sfn "$CONF" "$ETC_CONF"
    # slurmd finds its NodeName from the short hostname, which must resolve.
    getent hosts "$NODE" >/dev/null || echo "127.0.0.1 $NODE" >>/etc/hosts
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

start() {
    ((EUID == 0)) || die "start must run as root (it starts munged and slurmd)" 2
    if running slurmctld && running slurmd && controller_up && node_idle; then
        log "already up ($CONF)"; sinfo; return 0
    fi
    install_packages
    local t0=$SECONDS
    write_conf
    start_munge
    if ! running slurmctld; then
        log "starting slurmctld"
        slurmctld -f "$CONF" || die "slurmctld failed (see $STATE_DIR/log/slurmctld.log)"
    fi
    wait_for 30 controller_up \
        || die "slurmctld not UP after 30 s (see $STATE_DIR/log/slurmctld.log)"
    local since=0  # when we start slurmd, wait for it to register (not stale state)
    if ! running slurmd; then
        log "starting slurmd"
        since=$(($(date +%s) - 1))
        slurmd -f "$CONF" || die "slurmd failed (see $STATE_DIR/log/slurmd.log)"
    fi
    wait_for 30 node_ready "$since" \
        || die "node $NODE is '$(node_state)', not idle, after 30 s (see $STATE_DIR/log/slurmd.log)"
    log "up in $((SECONDS - t0)) s: node $NODE, $CPUS CPUs, partition debug"
    sinfo
    echo "export SLURM_CONF=$CONF"
}

# --- stop / status -------------------------------------------------------------
stop_daemon() {
    local name=$1 pid f
    f=$(pidfile "$name")
    if running "$name"; then
        pid=$(<"$f")
        log "stopping $name (pid $pid)"
        kill -TERM "$pid" 2>/dev/null || true
        if ! wait_for 5 eval "! kill -0 $pid 2>/dev/null"; then
            kill -KILL "$pid" 2>/dev/null || true
        fi
    fi
    rm -f "$f"
}

no_active_jobs() { [[ -z $(squeue -h -t R,CG,S,CF -o %A 2>/dev/null) ]]; }

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
    stop_daemon slurmd
    stop_daemon slurmctld
    stop_daemon munged
    log "stopped"
}

status() {
    local name up=0
    for name in munged slurmctld slurmd; do
        if running "$name"; then
            echo "$name: running (pid $(<"$(pidfile "$name")"))"
        elif [[ $name == munged ]] && munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
            echo "munged: running (not started by this script)"
        else
            echo "$name: not running"; up=3
        fi
    done
    if controller_up; then sinfo; else echo "slurmctld: not answering"; up=3; fi
    return $up
}

case ${1:-} in
    start) start ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 1 ;;
esac
