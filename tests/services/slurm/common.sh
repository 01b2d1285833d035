# Shared by up.sh, down.sh and ctl.sh: where things live, and how daemons are started and stopped by PID.
# The daemons are machine-wide (one /etc/slurm), so their records live in RUNDIR, not in one checkout's
# state folder: every test run on this machine holds the one cluster, and the last one out stops it.

RUNDIR=/run/gridlane-slurm-test
PIDS="$RUNDIR/pids"          # "name pid" per daemon this script started
HOLDERS="$RUNDIR/holders"    # one file per test run using the cluster, named by its PID
SUBMIT_USER=gridlane         # the cluster account Gridlane submits as, over SSH
# People Gridlane runs jobs as (sudo -u, see fabrics/ssh/runas.py): POSIX user and Slurm account (their team).
PEOPLE="gl-alice:gl-vision gl-charlie:gl-fraud"
SYSTEM_USER=gl-sys           # a system account (uid below 1000): a mapping to it must be refused
SUDOERS=/etc/sudoers.d/gridlane-test
DBNAME=gridlane_slurm_acct
DBUSER=gridlane_slurm
DBPASS=gridlane-slurm-test
FAKEGPU=/var/lib/slurm/gridlane-fakegpu
# The second node: its own slurmd in its own UTS namespace (hostname NODE2), on its own loopback address
# and port, so that srun spans two nodes and a job's head node resolves (Debian's slurmd is not built for
# several daemons per host, but one per hostname is all Slurm asks).
NODE2=gl-node2
NODE2_ADDR=127.0.0.2

log() { printf 'slurm: %s\n' "$*" >&2; }

# wait_for SECONDS WHAT COMMAND...: poll every 0.1 s until COMMAND succeeds.
wait_for() {
  local seconds=$1 what=$2; shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      log "timed out after ${seconds}s waiting for $what"
      return 1
    fi
    sleep 0.1
  done
}

# pid_is PID PROGRAM: the process runs and its command line starts with PROGRAM (a reused PID does not).
pid_is() {
  local pid=$1 program=$2 cmd
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || return 1
  [[ "$cmd" == "$program"* ]] && ! grep -q '^State:.*Z' "/proc/$pid/status" 2>/dev/null
}

recorded_pid() { [ -f "$PIDS" ] && awk -v n="$1" '$1 == n { pid = $2 } END { print pid }' "$PIDS"; return 0; }

record_pid() {  # record_pid NAME PID
  touch "$PIDS"
  awk -v n="$1" '$1 != n' "$PIDS" >"$PIDS.tmp" && printf '%s %s\n' "$1" "$2" >>"$PIDS.tmp" && mv "$PIDS.tmp" "$PIDS"
}

forget_pid() { [ -f "$PIDS" ] && awk -v n="$1" '$1 != n' "$PIDS" >"$PIDS.tmp" && mv "$PIDS.tmp" "$PIDS"; return 0; }

# program_of NAME: the executable a recorded daemon runs, to check a PID before signalling it.
program_of() {
  case $1 in
    munged) echo /usr/sbin/munged ;;
    mariadbd) echo /usr/sbin/mariadbd ;;
    slurmdbd) echo /usr/sbin/slurmdbd ;;
    slurmctld) echo /usr/sbin/slurmctld ;;
    slurmd) echo /usr/sbin/slurmd ;;
    slurmd2) echo "/usr/sbin/slurmd -N $NODE2" ;;
    sshd) echo "sshd: /usr/sbin/sshd -f $RUNDIR/sshd_config" ;;  # sshd rewrites its command line
  esac
}

# stop_recorded NAME: SIGTERM the recorded PID (only if it still runs that program), wait, then SIGKILL.
stop_recorded() {
  local name=$1 pid program
  pid=$(recorded_pid "$name")
  program=$(program_of "$name")
  if [ -n "$pid" ] && pid_is "$pid" "$program"; then
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + 15))
    while pid_is "$pid" "$program" && ((SECONDS < deadline)); do sleep 0.1; done
    if pid_is "$pid" "$program"; then
      log "$name ($pid) ignored SIGTERM; killing it"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  forget_pid "$name"
}

# pid_from_file FILE PROGRAM: the PID a daemon wrote, once it runs that program.
pid_from_file() {
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  pid_is "$pid" "$2" && echo "$pid"
}

live_holders() {
  local h
  for h in "$HOLDERS"/*; do
    [ -e "$h" ] || continue
    if kill -0 "$(basename "$h")" 2>/dev/null; then echo "$(basename "$h")"; else rm -f "$h"; fi
  done
}

node_name() { hostname -s; }
