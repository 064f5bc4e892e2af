#!/usr/bin/env bash
# A single-node Slurm cluster on this machine, for the Slurm profile's test (and for contributors).
#
#   tests/slurm/cluster.sh up       install (Debian packages) if needed, write the config, start
#                                   munged, slurmctld and slurmd; idempotent; prints the state dir
#   tests/slurm/cluster.sh down     stop the daemons `up` started (by their pid files) and put back
#                                   the Slurm config that was there before (or remove the one it wrote)
#   tests/slurm/cluster.sh running  exit 0 if slurmctld and slurmd are running, 1 if not
#   tests/slurm/cluster.sh status   sinfo
#
# `up` records what it started in $STATE/started, so `down` stops only that: a munged that was
# already running stays. A Slurm config left pointing at a controller that no longer runs makes
# every later `snakemake` command wait ~9 s on the Slurm plugin's `scontrol` call, so `down` never
# leaves one behind.
#
# Needs root and apt (Debian 12: Slurm 22.05). Partitions: cpu (default) and gpu, both on this
# node; there are no GPUs, so the gpu partition only proves routing. No systemd, no cgroups.
#
# Job state: the Snakemake Slurm plugin asks sacct by default, and sacct needs slurmdbd (plus a
# MariaDB). Without it sacct fails and Snakemake waits forever. We use the plugin's squeue status
# command instead (profile override in tests), which only works while finished jobs are still in
# squeue: MinJobAge=600 keeps them there for 10 minutes, well over 3 x the plugin's
# init-seconds-before-status-checks. Which partition each job ran in is read from the job
# completion log (JobCompType=jobcomp/filetxt), one line per job, no database needed.
set -euo pipefail

STATE=${SLURM_TEST_STATE:-/var/tmp/sharflow-slurm}
CONF=/etc/slurm/slurm.conf
NODE=$(hostname -s)

install() {
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
     && command -v munged >/dev/null; then
    return
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq slurmctld slurmd slurm-client munge >/dev/null
}

note_started() {  # note_started <what>: `down` undoes it
  grep -qx "$1" "$STATE/started" 2>/dev/null || echo "$1" >> "$STATE/started"
}

write_conf() {
  local cpus mem
  cpus=$(nproc)
  mem=$(( $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) * 9 / 10 ))
  mkdir -p "$STATE"/{ctld,d,log}
  if [[ ! -d /etc/slurm ]]; then
    mkdir -p /etc/slurm && note_started etcdir
  fi
  cat > "$CONF.new" <<CONF
ClusterName=sharflow
SlurmctldHost=${NODE}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/d
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$STATE/log/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1000
MinJobAge=600
ReturnToService=2
SchedulerType=sched/backfill
MpiDefault=none
NodeName=${NODE} NodeAddr=127.0.0.1 CPUs=${cpus} RealMemory=${mem} State=UNKNOWN
PartitionName=cpu Nodes=${NODE} Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=${NODE} Default=NO MaxTime=INFINITE State=UP
CONF
  if ! cmp -s "$CONF.new" "$CONF"; then
    if [[ -f $CONF ]] && ! grep -qx conf "$STATE/started" 2>/dev/null; then
      cp -p "$CONF" "$STATE/slurm.conf.before"  # someone else's config: `down` puts it back
    fi
    note_started conf
    mv "$CONF.new" "$CONF"
    stop_daemons  # these keys need a restart, not scontrol reconfigure
  else
    rm -f "$CONF.new"
  fi
}

running() {  # running <pidfile>
  [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

start() {
  mkdir -p /run/munge /var/log/munge /var/lib/munge /etc/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge
  [[ -f /etc/munge/munge.key ]] || { dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null; }
  chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
  if ! running /run/munge/munged.pid; then
    su -s /bin/sh munge -c "/usr/sbin/munged --pid-file=/run/munge/munged.pid" && note_started munged
  fi
  running "$STATE/slurmctld.pid" || { slurmctld && note_started slurmctld; }
  running "$STATE/slurmd.pid" || { slurmd -N "$NODE" && note_started slurmd; }
  for _ in $(seq 60); do
    if sinfo -h -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
      echo "$STATE"
      return
    fi
    scontrol update nodename="$NODE" state=resume >/dev/null 2>&1 || true
    sleep 1
  done
  echo "slurm did not come up; logs in $STATE/log" >&2
  tail -n 20 "$STATE"/log/*.log >&2 || true
  exit 1
}

stop_pid() {  # stop_pid <pidfile>
  if running "$1"; then
    kill "$(cat "$1")"
    for _ in $(seq 50); do running "$1" || break; sleep 0.2; done
  fi
}

stop_daemons() {
  stop_pid "$STATE/slurmd.pid"
  stop_pid "$STATE/slurmctld.pid"
}

down() {
  if running "$STATE/slurmctld.pid"; then  # its jobs' processes would outlive slurmd
    squeue -h -o %A 2>/dev/null | xargs -r scancel --full --signal=KILL 2>/dev/null || true
    for _ in $(seq 50); do [[ -z $(squeue -h -o %A 2>/dev/null) ]] && break; sleep 0.2; done
  fi
  stop_daemons
  if grep -qx munged "$STATE/started" 2>/dev/null; then
    stop_pid /run/munge/munged.pid
  fi
  if [[ -f $STATE/slurm.conf.before ]]; then
    mv "$STATE/slurm.conf.before" "$CONF"
  elif grep -qx conf "$STATE/started" 2>/dev/null; then
    rm -f "$CONF"
  fi
  if grep -qx etcdir "$STATE/started" 2>/dev/null; then
    rmdir /etc/slurm 2>/dev/null || true  # only if nothing else is in it
  fi
  rm -f "$STATE/started"
}

case "${1:-up}" in
  up) install; write_conf; start ;;
  down) down ;;
  running) running "$STATE/slurmctld.pid" && running "$STATE/slurmd.pid" ;;
  status) sinfo ;;
  *) echo "usage: $0 up|down|running|status" >&2; exit 2 ;;
esac
