#!/usr/bin/env bash
# A single-node Slurm cluster on this machine, for the Slurm profile's test (and for contributors).
#
#   tests/slurm/cluster.sh up      install (Debian packages) if needed, write the config, start
#                                  munged, slurmctld and slurmd; idempotent; prints the state dir
#   tests/slurm/cluster.sh down    stop the daemons by their pid files
#   tests/slurm/cluster.sh status  sinfo
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

write_conf() {
  local cpus mem
  cpus=$(nproc)
  mem=$(( $(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo) * 9 / 10 ))
  mkdir -p /etc/slurm "$STATE"/{ctld,d,log}
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
    mv "$CONF.new" "$CONF"
    stop  # these keys need a restart, not scontrol reconfigure
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
  running /run/munge/munged.pid || su -s /bin/sh munge -c "/usr/sbin/munged --pid-file=/run/munge/munged.pid"
  running "$STATE/slurmctld.pid" || slurmctld
  running "$STATE/slurmd.pid" || slurmd -N "$NODE"
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

stop() {
  for pidfile in "$STATE/slurmd.pid" "$STATE/slurmctld.pid"; do
    if running "$pidfile"; then
      kill "$(cat "$pidfile")"
      for _ in $(seq 30); do running "$pidfile" || break; sleep 0.2; done
    fi
  done
}

case "${1:-up}" in
  up) install; write_conf; start ;;
  down) stop ;;
  status) sinfo ;;
  *) echo "usage: $0 up|down|status" >&2; exit 2 ;;
esac
