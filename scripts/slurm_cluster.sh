#!/usr/bin/env bash
# A single-node SLURM cluster with accounting, for the cluster tests (tests/flows/test_ab_slurm.py; issue 31):
#
#   scripts/slurm_cluster.sh up      # install what is missing (Debian packages), start it, wait until usable
#   scripts/slurm_cluster.sh down    # stop what `up` started, remove its configuration and state
#   scripts/slurm_cluster.sh status  # one line: up or down
#
# Root, no systemd (a container or a CI machine). One node at 127.0.0.1 with this machine's cores and memory
# (`slurmd -C`), partition `debug`; munge for authentication; slurmdbd on a private MariaDB for accounting
# (sacct, which submitit reads job states from). Daemons' state, spool, logs and database live in
# $DORMOUSE_SLURM_DIR (default /tmp/dormouse-slurm); the configuration in /etc/slurm (where every SLURM
# command looks, so jobs and tests need no SLURM_CONF), marked as this script's so `down` removes only its own.
#
# Settings the tests depend on, and why:
#   ProctrackType=proctrack/linuxproc, TaskPlugin=task/none  no cgroups (none writable in a container)
#   AuthInfo=cred_expire=10     a requeued job is held cred_expire+1 s before it may start again (default 121 s)
#   SchedulerParameters=sched_interval=2,bf_interval=2       the scheduler looks every 2 s (default 60 s)
#   KillWait=5                  SIGTERM -> SIGKILL grace of a cancelled or requeued job (default 30 s)
#   ReturnToService=2           the node comes back by itself after a restart of slurmd
# Idempotent: `up` on a running cluster checks it and says so; `down` on a stopped one does nothing.
set -euo pipefail

STATE=${DORMOUSE_SLURM_DIR:-/tmp/dormouse-slurm}
CONF=/etc/slurm/slurm.conf
DBDCONF=/etc/slurm/slurmdbd.conf
MARK="# written by dormouse scripts/slurm_cluster.sh"
DBPORT=${DORMOUSE_SLURM_DB_PORT:-13306}
PACKAGES=(slurmctld slurmd slurmdbd slurm-client munge mariadb-server)
WAIT_S=60

say() { echo "slurm_cluster: $*"; }
die() { echo "slurm_cluster: $*" >&2; exit 1; }

pidfile_alive() { [[ -f "$1" ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

wait_for() {  # wait_for WHAT COMMAND...: retry COMMAND for up to WAIT_S seconds
  local what=$1; shift
  local t0=$SECONDS
  until "$@" >/dev/null 2>&1; do
    (( SECONDS - t0 < WAIT_S )) || die "$what not ready after ${WAIT_S} s (logs in $STATE/log)"
    sleep 0.2
  done
}

node_idle() { sinfo -h -N -o '%T' | grep -qx idle; }

install_missing() {
  local missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  (( ${#missing[@]} == 0 )) && return
  command -v apt-get >/dev/null || die "missing ${missing[*]} and no apt-get to install them"
  say "installing ${missing[*]}"
  apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
}

write_config() {
  local host node
  host=$(hostname -s)
  # The node as slurmd sees this machine (CPUs, cores, memory), reachable at 127.0.0.1.
  node=$(slurmd -C | head -1 | sed "s/^NodeName=[^ ]*/NodeName=$host NodeAddr=127.0.0.1/")
  mkdir -p /etc/slurm
  cat > "$CONF" <<EOF
$MARK (state in $STATE)
ClusterName=dormouse
SlurmctldHost=$host(127.0.0.1)
AuthType=auth/munge
AuthInfo=cred_expire=10
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
ReturnToService=2
KillWait=5
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
$node State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  cat > "$DBDCONF" <<EOF
$MARK (state in $STATE)
AuthType=auth/munge
DbdAddr=127.0.0.1
DbdHost=$host
SlurmUser=root
PidFile=$STATE/slurmdbd.pid
LogFile=$STATE/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DBPORT
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
EOF
  chmod 600 "$DBDCONF"
}

ours() { [[ ! -e "$1" ]] || head -1 "$1" | grep -qF "$MARK"; }

up() {
  local t0=$SECONDS
  [[ $(id -u) == 0 ]] || die "must run as root (it starts munged, MariaDB and the SLURM daemons)"
  if pidfile_alive "$STATE/slurmctld.pid" && pidfile_alive "$STATE/slurmd.pid" && node_idle_or_busy \
      && sacctmgr -n list cluster >/dev/null 2>&1; then
    say "already up ($STATE); node $(sinfo -h -N -o '%N %T')"
    return
  fi
  ours "$CONF" && ours "$DBDCONF" || die "$CONF or $DBDCONF exists and is not this script's; not touching it"
  install_missing
  mkdir -p "$STATE"/{ctld,spool,log,db,dbrun,munge} /run/munge /var/log/munge /var/lib/munge
  chmod 755 "$STATE"
  write_config

  # munge: the key the package made (or a new one), its daemon as its own user.
  [[ -s /etc/munge/munge.key ]] || mungekey -c -f
  chown munge:munge "$STATE/munge" /run/munge /var/log/munge /var/lib/munge /etc/munge/munge.key
  if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    runuser -u munge -- munged --pid-file="$STATE/munge/munged.pid" --log-file="$STATE/munge/munged.log"
    wait_for "munged" sh -c 'munge -n | unmunge'
  fi

  # MariaDB in the state folder, TCP on 127.0.0.1:$DBPORT only; a database user for slurmdbd.
  chown mysql:mysql "$STATE/db" "$STATE/dbrun"
  if ! pidfile_alive "$STATE/dbrun/mariadb.pid"; then
    [[ -d "$STATE/db/mysql" ]] || mariadb-install-db --user=mysql --datadir="$STATE/db" \
      --auth-root-authentication-method=socket > "$STATE/log/mariadb-install.log" 2>&1
    mariadbd --user=mysql --datadir="$STATE/db" --socket="$STATE/dbrun/mariadb.sock" --port="$DBPORT" \
      --bind-address=127.0.0.1 --pid-file="$STATE/dbrun/mariadb.pid" --log-error="$STATE/dbrun/mariadb.log" \
      >/dev/null 2>&1 &
    wait_for "MariaDB" mariadb-admin --socket="$STATE/dbrun/mariadb.sock" ping
  fi
  mariadb --socket="$STATE/dbrun/mariadb.sock" -e "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';
    CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurm';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';"

  # slurmdbd first (slurmctld registers the cluster with it), then the controller and the node.
  pidfile_alive "$STATE/slurmdbd.pid" || slurmdbd
  wait_for "slurmdbd" sacctmgr -n list cluster
  pidfile_alive "$STATE/slurmctld.pid" || slurmctld
  pidfile_alive "$STATE/slurmd.pid" || slurmd
  wait_for "the node (sinfo idle)" node_idle
  sacctmgr -n -i add cluster dormouse >/dev/null 2>&1 || true  # slurmctld usually registered it already
  wait_for "the cluster's accounting (sacctmgr)" sh -c 'sacctmgr -n -P list cluster format=cluster | grep -qx dormouse'
  say "up in $((SECONDS - t0)) s: node $(sinfo -h -N -o '%N %T %c CPUs') partition debug, accounting on ($STATE)"
}

stop_pid() {  # stop_pid NAME PIDFILE: TERM the process the pid file names, wait, KILL if it lingers
  local name=$1 file=$2 pid
  [[ -f "$file" ]] || return 0
  pid=$(cat "$file")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && { say "$name did not stop on TERM; KILL"; kill -9 "$pid" 2>/dev/null || true; }
  fi
  rm -f "$file"
}

down() {
  ours "$CONF" && ours "$DBDCONF" || die "$CONF or $DBDCONF is not this script's; not touching it"
  if [[ -f "$STATE/slurmctld.pid" ]] && pidfile_alive "$STATE/slurmctld.pid"; then
    scancel --full --user=root --quiet 2>/dev/null || true  # the tests' jobs, if any are left
  fi
  stop_pid slurmd "$STATE/slurmd.pid"
  stop_pid slurmctld "$STATE/slurmctld.pid"
  stop_pid slurmdbd "$STATE/slurmdbd.pid"
  stop_pid mariadb "$STATE/dbrun/mariadb.pid"
  stop_pid munged "$STATE/munge/munged.pid"
  rm -f "$CONF" "$DBDCONF"
  rm -rf "$STATE"
  say "down"
}

status() {
  if pidfile_alive "$STATE/slurmctld.pid" && node_idle_or_busy; then
    say "up ($STATE): node $(sinfo -h -N -o '%N %T')"
  else
    say "down"
    return 1
  fi
}

node_idle_or_busy() { sinfo -h -N -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated)$'; }

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  *) die "usage: $0 up|down|status" ;;
esac
