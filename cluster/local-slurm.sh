#!/usr/bin/env bash
# A one-node Slurm on this machine, from Debian's packages, without systemd.
#
#   cluster/local-slurm.sh install   apt-get slurm-wlm + munge (no service starts)
#   cluster/local-slurm.sh start     munge key, slurm.conf, slurmctld + slurmd; waits until the node is idle
#   cluster/local-slurm.sh status    the daemons' pids and `sinfo`; exit 0 only when the node is up
#   cluster/local-slurm.sh stop      cancel this cluster's jobs, stop the daemons it started (by pid)
#
# Everything lives in $HEADWATCH_SLURM_DIR (default /tmp/headwatch-slurm): the
# configuration (etc/slurm.conf, gres.conf, cgroup.conf), spool, state, logs and
# pid files. The cluster runs "configless": slurmd fetches the configuration from
# slurmctld and caches it where every Slurm client on the machine looks
# (/run/slurm/conf), so sbatch, squeue, sinfo, and the srun inside each job,
# find the cluster with no SLURM_CONF; /etc/slurm is not written (and must not
# hold a slurm.conf of its own, which clients would read first).
# The node declares one `gpu` GRES on /dev/null, so that jobs asking for a GPU
# can be scheduled on a machine without one (they see CUDA_VISIBLE_DEVICES=0,
# torch finds no device and the workflow's device "auto" falls back to CPU).
# There is no accounting database (accounting_storage/none): job status comes
# from squeue, and finished jobs stay visible there for MinJobAge seconds.
#
# Must run as root (slurmd and the munge key need it). Tested with Debian 12's
# slurm-wlm 22.05 and munge 0.5.15.
set -euo pipefail

DIR=${HEADWATCH_SLURM_DIR:-/tmp/headwatch-slurm}
CONF=$DIR/etc/slurm.conf
PARTITION=${HEADWATCH_SLURM_LOCAL_PARTITION:-debug}
CTLD_PORT=${HEADWATCH_SLURM_PORT:-6817}
SLURMD_PORT=$((CTLD_PORT + 1))
WAIT_S=${HEADWATCH_SLURM_WAIT_S:-60}
export PATH=$PATH:/usr/sbin:/sbin   # slurmctld, slurmd, munged, mungekey
export SLURM_CONF=$CONF   # this script's own client calls, before slurmd has cached it

say() { echo "local-slurm: $*" >&2; }
die() { say "$*"; exit 1; }

pid_alive() { [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

munge_works() { command -v munge >/dev/null && munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

node_state() { sinfo -h -N -o '%T' 2>/dev/null | head -n1; }

# The daemons' own error lines: what to read when the cluster did not come up.
show_logs() {
    local f
    for f in "$DIR/log/slurmctld.log" "$DIR/log/slurmd.log" "$DIR/log/slurmctld.out" \
             "$DIR/log/slurmd.out" /var/log/munge/munged.log; do
        [[ -s $f ]] || continue
        echo "---- $f (errors and last lines)" >&2
        { grep -iE 'error|fatal|fail' "$f" | tail -n 15; tail -n 5 "$f"; } >&2 || true
    done
}

cmd_install() {
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null \
        && command -v sbatch >/dev/null; then
        say "slurm-wlm and munge already installed ($(slurmctld -V))"
        return 0
    fi
    [[ $(id -u) -eq 0 ]] || die "install needs root (apt-get)"
    command -v apt-get >/dev/null || die "install needs apt-get (Debian/Ubuntu)"
    # policy-rc.d exiting 101 keeps the packages' maintainer scripts from starting
    # services during the install; an existing policy file is put back after.
    local policy=/usr/sbin/policy-rc.d backup=""
    if [[ -e $policy ]]; then backup=$(mktemp); cp -p "$policy" "$backup"; fi
    printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod +x "$policy"
    # Without recommends: slurm-wlm-basic-plugins holds every plugin the config below names
    # (auth/cred munge, select/cons_tres, gres/gpu, sched/backfill, proctrack/linuxproc, task/none,
    # cgroup); its recommended slurm-wlm-plugins pulls in HDF5, InfluxDB, IPMI, MySQL, ROCm and
    # more (43 packages installed instead of 9 on Debian 12).
    local rc=0
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        slurm-wlm munge; } || rc=$?
    if [[ -n $backup ]]; then mv "$backup" "$policy"; else rm -f "$policy"; fi
    [[ $rc -eq 0 ]] || die "apt-get install slurm-wlm munge failed (exit $rc)"
    say "installed $(slurmctld -V)"
}

write_conf() {
    local cpus mem_mb
    cpus=$(nproc)
    mem_mb=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.8}' /proc/meminfo)
    mkdir -p "$DIR/etc" "$DIR/log" "$DIR/run"
    cat > "$CONF" <<EOF
# Written by cluster/local-slurm.sh: a one-node cluster for tests and trials.
ClusterName=headwatch-local
SlurmctldHost=localhost
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
# Finished jobs stay in squeue/scontrol for 5 minutes: the status source
# without an accounting database, and what the tests read.
MinJobAge=300
KillWait=5
InactiveLimit=0
SlurmdTimeout=60
# Configless: slurmd fetches this file (and gres.conf, cgroup.conf) from
# slurmctld and caches it under /run/slurm/conf, where every client on the
# node finds it, including the srun that runs inside each job (which does not
# inherit SLURM_CONF).
SlurmctldParameters=enable_configless
GresTypes=gpu
StateSaveLocation=$DIR/spool/slurmctld
SlurmdSpoolDir=$DIR/spool/slurmd
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb Gres=gpu:1 State=UNKNOWN
PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
    # Without a gres.conf the node goes INVAL ("gres/gpu count reported lower
    # than configured"); /dev/null stands in for the device.
    echo "NodeName=localhost Name=gpu Count=1 File=/dev/null" > "$DIR/etc/gres.conf"
    # No cgroup confinement: proctrack/linuxproc and task/none need no delegated
    # cgroup hierarchy (there is no systemd here). `autodetect` picks v1 on this
    # machine's hybrid /sys/fs/cgroup and v2 where that is all there is; slurmd
    # was also seen to start here with cgroup/v1 and with no cgroup.conf at all.
    echo "CgroupPlugin=autodetect" > "$DIR/etc/cgroup.conf"
}

start_munge() {
    if munge_works; then
        say "munged already answering; using it"
        return 0
    fi
    [[ -f /etc/munge/munge.key ]] || mungekey --create >/dev/null
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown -R munge: /etc/munge /run/munge /var/log/munge /var/lib/munge
    chmod 700 /etc/munge; chmod 400 /etc/munge/munge.key; chmod 755 /run/munge
    runuser -u munge -- munged --pid-file=/run/munge/munged.pid \
        || { show_logs; die "munged did not start"; }
    cp /run/munge/munged.pid "$DIR/run/munged.pid"   # ours to stop
    local i
    for i in $(seq 50); do munge_works && return 0; sleep 0.1; done
    show_logs; die "munged started but does not answer"
}

cmd_start() {
    [[ $(id -u) -eq 0 ]] || die "start needs root"
    command -v slurmctld >/dev/null || die "slurmctld not installed: run '$0 install' first"
    if pid_alive "$DIR/run/slurmctld.pid" && pid_alive "$DIR/run/slurmd.pid"; then
        say "already running ($DIR)"
        cmd_wait
        return
    fi
    [[ ! -e /etc/slurm/slurm.conf ]] || die "/etc/slurm/slurm.conf exists: Slurm clients would read it instead of this cluster's configuration; move it away first"
    rm -rf "$DIR/spool" "$DIR/log"
    mkdir -p "$DIR/spool/slurmctld" "$DIR/spool/slurmd" "$DIR/log" "$DIR/run"
    write_conf
    start_munge
    # -c: start with no jobs from an earlier run. Foreground output goes to *.out
    # so that errors before the log file is opened are kept too.
    slurmctld -c -f "$CONF" > "$DIR/log/slurmctld.out" 2>&1 || { show_logs; die "slurmctld exited"; }
    slurmd -N localhost --conf-server "localhost:$CTLD_PORT" > "$DIR/log/slurmd.out" 2>&1 || { show_logs; die "slurmd exited"; }
    cmd_wait
}

cmd_wait() {
    local i state=""
    for i in $(seq $((WAIT_S * 2))); do
        state=$(node_state || true)
        if [[ $state == idle* || $state == mixed* || $state == allocated* ]]; then
            say "node localhost is $state (partition $PARTITION, config $CONF)"
            return 0
        fi
        if ! pid_alive "$DIR/run/slurmctld.pid" && [[ $i -gt 10 ]]; then break; fi
        sleep 0.5
    done
    say "the node did not become idle within ${WAIT_S}s (last state: '${state:-none}')"
    sinfo -N -l >&2 2>&1 || true
    scontrol show node localhost 2>&1 | grep -E 'State|Reason' >&2 || true
    show_logs
    return 1
}

cmd_status() {
    local name
    for name in slurmctld slurmd munged; do
        if pid_alive "$DIR/run/$name.pid"; then echo "$name: running (pid $(cat "$DIR/run/$name.pid"))"
        else echo "$name: not started by this script"; fi
    done
    munge_works && echo "munge: answering" || echo "munge: not answering"
    echo "config: $CONF (clients read it from /run/slurm/conf)"
    sinfo -N -o '%N %P %T %c %m %G' 2>&1 || true
    [[ $(node_state || true) == @(idle|mixed|allocated)* ]]
}

# TERM the daemons named by these pid files (ours only), then wait for all of them.
stop_pids() {
    local file pid pids=() i
    for file in "$@"; do
        [[ -s $file ]] || continue
        pid=$(cat "$file"); rm -f "$file"
        kill "$pid" 2>/dev/null && pids+=("$pid")
    done
    local alive
    for i in $(seq 100); do
        alive=0
        for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
        [[ $alive -eq 1 ]] || return 0
        sleep 0.1
    done
    for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
}

cmd_stop() {
    if pid_alive "$DIR/run/slurmctld.pid"; then
        local jobs
        jobs=$(squeue -h -o '%i' 2>/dev/null || true)
        [[ -z $jobs ]] || scancel $jobs 2>/dev/null || true
    fi
    # munged.pid exists only if this script started munged
    stop_pids "$DIR/run/slurmd.pid" "$DIR/run/slurmctld.pid" "$DIR/run/munged.pid"
    # the clients' pointer to this cluster's cached configuration
    if [[ $(readlink /run/slurm/conf 2>/dev/null) == "$DIR"/* ]]; then rm -f /run/slurm/conf; fi
    say "stopped"
}

case ${1:-} in
    install) cmd_install ;;
    start) cmd_start ;;
    status) cmd_status ;;
    stop) cmd_stop ;;
    *) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
