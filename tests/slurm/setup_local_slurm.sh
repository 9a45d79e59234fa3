#!/usr/bin/env bash
# A local SLURM cluster on this one host, for running launch/slurm/*.sbatch for real (tests/test_slurm.py, CI).
#
#   sudo tests/slurm/setup_local_slurm.sh        # then: sinfo, sbatch --wait ..., squeue
#   sudo tests/slurm/setup_local_slurm.sh stop   # stop the daemons it started
#
# Installs Debian's slurm-wlm and munge if they are missing, writes /etc/slurm/slurm.conf for NODES "nodes"
# on this host (megarl-n0, megarl-n1, ...: one slurmd each, on its own port, all with NodeAddr=127.0.0.1 and
# CPUS_PER_NODE CPUs), and starts munged, slurmctld and one slurmd per node as root, without systemd and without
# cgroups (proctrack/linuxproc, task/none, no accounting). Running it again with the daemons up changes nothing.
# It refuses to replace a slurm.conf it did not write. Debian's slurmd is built without --enable-multiple-slurmd,
# so the nodes have distinct NodeHostname strings; slurm reaches every one of them at 127.0.0.1 (NodeAddr).
#
# Environment (defaults in brackets): NODES [2], CPUS_PER_NODE [1], SLURM_STATE [/var/lib/megarl-slurm:
# spool directories and logs].
set -euo pipefail

nodes=${NODES:-2}
cpus=${CPUS_PER_NODE:-1}
state=${SLURM_STATE:-/var/lib/megarl-slurm}
conf=/etc/slurm/slurm.conf
marker="# Written by megarl's tests/slurm/setup_local_slurm.sh"
names=()
for ((i = 0; i < nodes; i++)); do names+=("megarl-n$i"); done

if [[ $(id -u) != 0 ]]; then
    echo "setup_local_slurm.sh: run it as root (it installs packages and starts root daemons)" >&2
    exit 1
fi

stop() {
    local pidfile pid
    for pidfile in "$state"/slurmd-*.pid "$state/slurmctld.pid"; do
        if [[ -f $pidfile ]]; then
            pid=$(cat "$pidfile")
            kill "$pid" 2>/dev/null || true
            for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
            rm -f "$pidfile"
        fi
    done
}

if [[ ${1:-} == stop ]]; then
    stop
    exit 0
fi

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v sbatch >/dev/null \
    || ! command -v munged >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
fi

# munge: every SLURM message is signed with its key.
if [[ ! -s /etc/munge/munge.key ]]; then
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
    chown munge:munge /etc/munge/munge.key
    chmod 400 /etc/munge/munge.key
fi
if ! munge -n </dev/null >/dev/null 2>&1; then
    install -d -o munge -g munge -m 0755 /run/munge
    runuser -u munge -- munged
    for _ in $(seq 50); do munge -n </dev/null >/dev/null 2>&1 && break; sleep 0.2; done
    munge -n </dev/null | unmunge >/dev/null
fi

host=$(hostname -s)
node_lines=""
for ((i = 0; i < nodes; i++)); do
    node_lines+="NodeName=${names[i]} NodeHostname=${names[i]} NodeAddr=127.0.0.1 Port=$((17001 + i)) CPUs=$cpus State=UNKNOWN"$'\n'
done
new_conf="$marker
ClusterName=megarl-local
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=16817
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/slurmd-%n
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd-%n.pid
SlurmctldLogFile=$state/slurmctld.log
SlurmdLogFile=$state/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
MinJobAge=600
${node_lines}PartitionName=local Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"

install -d /etc/slurm "$state" "$state/ctld"
if [[ -f $conf ]] && ! grep -qxF "$marker" "$conf"; then
    echo "setup_local_slurm.sh: $conf exists and was not written by this script; not replacing it" >&2
    exit 1
fi
if [[ ! -f $conf ]] || [[ $(cat "$conf") != "$new_conf" ]]; then
    stop  # daemons started with another configuration
    printf '%s\n' "$new_conf" >"$conf"
fi

running() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

if ! running "$state/slurmctld.pid"; then
    slurmctld -i  # -i: ignore state from a previous configuration's run
fi
for name in "${names[@]}"; do
    if ! running "$state/slurmd-$name.pid"; then
        install -d "$state/slurmd-$name"
        slurmd -N "$name"
    fi
done

# Ready when every node responds (idle, or running a job when the cluster was already up). A node that was down
# comes back by itself when its slurmd registers (ReturnToService=2).
for _ in $(seq 120); do
    up=$(sinfo --noheader --Node --format='%N %T' 2>/dev/null \
        | awk '$2 ~ /^(idle|allocated|mixed|completing)$/ {n++} END {print n + 0}')
    if ((up == nodes)); then
        sinfo
        exit 0
    fi
    sleep 0.5
done
echo "setup_local_slurm.sh: not every node came up; sinfo says:" >&2
sinfo -N -l >&2 || true
tail -n 20 "$state"/*.log >&2 || true
exit 1
