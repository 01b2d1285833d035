#!/usr/bin/env bash
# A real single-host Slurm 22.05 cluster for the tests, from Debian's packages: munged, slurmdbd (on the
# MariaDB server these machines run), slurmctld, slurmd with 8 fake GPUs (4 a100, 4 h100) in partitions
# cpu and gpu, a second slurmd as node NODE2 (2 a100) that shares the partition multi with the first, the Torque wrappers (qsub/qstat/qdel), a key-only sshd on 127.0.0.1 for the submit user, and
# Debian's Jupyter server (the node's own, as a cluster has one: notebook jobs run it as the submit user).
#
# Idempotent: a cluster already up with the same configuration is reused (another test run may hold it).
# Writes what the tests need to $GRIDLANE_TEST_STATE/slurm/: connection.json, the client key, known_hosts.
# The PIDs it starts are recorded in /run/gridlane-slurm-test/pids; down.sh stops exactly those, once no
# test run holds the cluster any more.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=common.sh
. "$here/common.sh"
STATE="${GRIDLANE_TEST_STATE:?set by tests/services/run.sh}/slurm"
HOLDER="${GRIDLANE_SLURM_HOLDER:-$PPID}"  # the test run (run.sh) that holds the cluster while it lives

# 1. Packages, when missing (a machine with systemd starts munge and sshd itself; that is fine).
need=()
for pair in slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client munged:munge sshd:openssh-server \
            qsub:slurm-wlm-torque slurmdbd:slurmdbd mariadb-admin:mariadb-client \
            jupyter-server:jupyter-server; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || [ -x "/usr/sbin/${pair%%:*}" ] || need+=("${pair#*:}")
done
if ((${#need[@]})); then
  log "installing ${need[*]}"
  apt-get -o DPkg::Lock::Timeout=120 update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 install -y -q --no-install-recommends \
    slurm-wlm slurmctld slurmd slurm-client munge openssh-server slurm-wlm-torque slurmdbd mariadb-client \
    jupyter-server >/dev/null
fi

install -d -m 0755 "$RUNDIR" "$HOLDERS"
exec 9>"$RUNDIR/lock"
flock 9  # every daemon started below gets `9>&-`: one that inherited the lock would hold it forever
# A test of another run may have stopped the controller on purpose (tests/fabrics/slurm/conftest.py holds this
# lock exclusively for that): wait for it to start it again rather than "repair" the cluster under it.
# Held (shared) to the end; the daemons started below get `8>&-` as they get `9>&-`.
exec 8>"$RUNDIR/cluster.lock"
flock -s 8
touch "$HOLDERS/$HOLDER"

NODE=$(node_name)
getent passwd "$SUBMIT_USER" >/dev/null || useradd -m -s /bin/bash "$SUBMIT_USER"
HOME_DIR=$(getent passwd "$SUBMIT_USER" | cut -d: -f6)

# 2. The configuration this script wants; a running cluster with another one is restarted.
render() {
  sed -e "s|@NODE@|$NODE|g" -e "s|@NODE2@|$NODE2|g" -e "s|@NODE2_ADDR@|$NODE2_ADDR|g" -e "s|@FAKEGPU@|$FAKEGPU|g" -e "s|@DBUSER@|$DBUSER|g" -e "s|@DBPASS@|$DBPASS|g" \
      -e "s|@DBNAME@|$DBNAME|g" -e "s|@RUNDIR@|$RUNDIR|g" -e "s|@USER@|$SUBMIT_USER|g" -e "s|@PORT@|${2:-}|g" "$here/$1"
}
signature=$( (render slurm.conf.in; render gres.conf.in; render slurmdbd.conf.in; cat "$here/up.sh") | sha256sum | cut -c1-16)

cluster_answers() {
  local name
  munge_answers || return 1
  for name in slurmdbd slurmctld slurmd slurmd2; do
    pid_is "$(recorded_pid "$name")" "$(program_of "$name")" || return 1
  done
  [ "$(cat "$RUNDIR/signature" 2>/dev/null)" = "$signature" ] || return 1
  scontrol ping 2>/dev/null | grep -q 'is UP' || return 1
  [[ "$(node_state)" =~ ^(idle|mixed|allocated)$ ]] && [[ "$(node_state "$NODE2")" =~ ^(idle|mixed|allocated)$ ]]
}

munge_answers() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }
node_state() { sinfo -h -N -n "${1:-$NODE}" -o %T 2>/dev/null | sort -u | paste -sd,; }  # a line per partition
node_idle() { [ "$(node_state)" = idle ] && [ "$(node_state "$NODE2")" = idle ]; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
mariadb_root() { mariadb -h 127.0.0.1 -P 3306 -u root "$@"; }

start_cluster() {
  log "starting a fresh cluster on node $NODE"
  # Daemons of an earlier bring-up with another configuration (or left without records) go first.
  for name in sshd slurmd2 slurmd slurmctld slurmdbd; do stop_recorded "$name"; done
  for pair in /run/slurmd.pid:/usr/sbin/slurmd "/run/slurmd-$NODE.pid:/usr/sbin/slurmd" \
              "/run/slurmd-$NODE2.pid:/usr/sbin/slurmd -N $NODE2" /run/slurmctld.pid:/usr/sbin/slurmctld /run/slurmdbd.pid:/usr/sbin/slurmdbd; do
    if pid=$(pid_from_file "${pair%%:*}" "${pair#*:}"); then
      log "stopping a leftover ${pair#*:} ($pid)"
      kill -TERM "$pid"
      wait_for 15 "${pair#*:} to exit" bash -c "! kill -0 $pid" || kill -KILL "$pid" || true
    fi
  done

  # -c below discards the saved jobs anyway; removing them first spares slurmctld purging thousands one by one.
  rm -rf /var/spool/slurmctld
  install -d -m 0755 -o slurm -g slurm /var/spool/slurmctld /var/log/slurm
  install -d -m 0755 "/var/spool/slurmd/$NODE" "/var/spool/slurmd/$NODE2" /etc/slurm/plugstack.conf.d "$FAKEGPU"
  for i in 0 1 2 3 4 5 6 7 8 9; do ln -sfn /dev/null "$FAKEGPU/gpu$i"; done
  # The second node's name resolves, as a cluster's node names do (a job's MASTER_ADDR is its head node).
  grep -qE "^$NODE2_ADDR[[:space:]]+$NODE2\$" /etc/hosts || printf '%s %s\n' "$NODE2_ADDR" "$NODE2" >>/etc/hosts
  render slurm.conf.in >/etc/slurm/slurm.conf
  render gres.conf.in >/etc/slurm/gres.conf
  chmod 0644 /etc/slurm/slurm.conf /etc/slurm/gres.conf
  render slurmdbd.conf.in >/etc/slurm/slurmdbd.conf
  chown slurm:slurm /etc/slurm/slurmdbd.conf
  chmod 0600 /etc/slurm/slurmdbd.conf
  # PBS_JOBID, PBS_O_WORKDIR and friends for jobs submitted through qsub.
  echo "optional /usr/lib/x86_64-linux-gnu/slurm-wlm/spank_pbs.so" >/etc/slurm/plugstack.conf.d/pbs.conf

  # munge: reuse one that answers (systemd may run it), else start ours.
  if ! munge_answers; then
    [ -s /etc/munge/munge.key ] || { mungekey --create; chown munge:munge /etc/munge/munge.key; chmod 0400 /etc/munge/munge.key; }
    install -d -m 0755 -o munge -g munge /run/munge
    runuser -u munge -- /usr/sbin/munged 8>&- 9>&-
    wait_for 10 munged munge_answers
    record_pid munged "$(pid_from_file /run/munge/munged.pid /usr/sbin/munged)"
  fi

  # MariaDB runs on these machines; start it if it does not answer.
  if ! mariadb-admin -h 127.0.0.1 -P 3306 -u root ping >/dev/null 2>&1; then
    log "starting MariaDB"
    start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd 8>&- 9>&-
    wait_for 30 MariaDB mariadb-admin -h 127.0.0.1 -P 3306 -u root ping
    record_pid mariadbd "$(pgrep -x -o mariadbd)"
  fi
  # A fresh accounting database per bring-up: slurmctld -c starts job ids from 1 again.
  mariadb_root -e "DROP DATABASE IF EXISTS $DBNAME; CREATE DATABASE $DBNAME;
    CREATE USER IF NOT EXISTS '$DBUSER'@'127.0.0.1' IDENTIFIED BY '$DBPASS';
    CREATE USER IF NOT EXISTS '$DBUSER'@'localhost' IDENTIFIED BY '$DBPASS';
    GRANT ALL ON $DBNAME.* TO '$DBUSER'@'127.0.0.1'; GRANT ALL ON $DBNAME.* TO '$DBUSER'@'localhost'; FLUSH PRIVILEGES;"

  /usr/sbin/slurmdbd 8>&- 9>&-
  wait_for 30 slurmdbd port_open 6819
  record_pid slurmdbd "$(pid_from_file /run/slurmdbd.pid /usr/sbin/slurmdbd)"
  # Associations before slurmctld starts, so it loads them at once.
  sacctmgr -i add cluster gridlanetest >/dev/null
  sacctmgr -i add account gridlane Cluster=gridlanetest Description=gridlane Organization=gridlane >/dev/null
  sacctmgr -i add user root Account=gridlane >/dev/null
  # An operator may lengthen a running job's time limit (the fabric setting extend_time_limit).
  sacctmgr -i add user "$SUBMIT_USER" Account=gridlane AdminLevel=Operator >/dev/null

  /usr/sbin/slurmctld -c 8>&- 9>&-  # -c: no jobs or node state from an earlier run
  wait_for 60 slurmctld bash -c "scontrol ping | grep -q 'is UP'"  # slurmd registers only once it is UP
  record_pid slurmctld "$(pid_from_file /run/slurmctld.pid /usr/sbin/slurmctld)"
  # gl-gpu2 caps a user at 2 GPUs; the gres/gpu TRES exists only once slurmctld has registered it.
  sacctmgr -i add qos gl-gpu2 MaxTRESPerUser=gres/gpu=2 >/dev/null
  sacctmgr -i modify user "$SUBMIT_USER" set QOS=normal,gl-gpu2 DefaultQOS=normal >/dev/null
  /usr/sbin/slurmd 8>&- 9>&-
  unshare --uts --fork sh -c "hostname $NODE2 && exec /usr/sbin/slurmd -N $NODE2" 8>&- 9>&-
  # slurmctld may drop a registration that comes while it still sets up (with slurmdbd it says UP
  # early); the node then stays "unknown" until its next ping, minutes later. Ask again instead.
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    wait_for 3 "node $NODE idle" node_idle 2>/dev/null && break
    log "node is $(node_state); asking slurmd to register again"
    scontrol reconfigure >/dev/null 2>&1 || true
  done
  wait_for 1 "nodes $NODE and $NODE2 idle" node_idle
  record_pid slurmd "$(pid_from_file "/run/slurmd-$NODE.pid" /usr/sbin/slurmd)"
  record_pid slurmd2 "$(pid_from_file "/run/slurmd-$NODE2.pid" "/usr/sbin/slurmd -N $NODE2")"

  # Job output of an earlier cluster would carry the same job ids.
  rm -rf "$HOME_DIR/.gridlane"
  # A canary: slurmctld's first scheduling pass comes seconds after it says idle.
  canary=$(cd "$HOME_DIR" && runuser -u "$SUBMIT_USER" -- sbatch --parsable -o /dev/null --wrap true)
  wait_for 60 "the canary job" bash -c "scontrol show job $canary | grep -q 'JobState=COMPLETED'"
  echo "$signature" >"$RUNDIR/signature"
}

if cluster_answers; then
  log "reusing the running cluster"
else
  start_cluster
fi

# People Gridlane runs jobs as, their Slurm accounts and the sudoers rule (people.sh; added to a running
# cluster too, and again by the tests that need them, since a restart by another test run drops the accounts).
bash "$here/people.sh"

# 3. The key-only sshd on loopback (port 2222, or the next free one).
# Restarted when its configuration changed since it started (a newer checkout's sshd_config.in).
sshd_pid=$(recorded_pid sshd)
ssh_port=$(cat "$RUNDIR/ssh_port" 2>/dev/null || echo 0)
if ! pid_is "$sshd_pid" "$(program_of sshd)" || ! port_open "$ssh_port" \
  || ! cmp -s <(render sshd_config.in "$ssh_port") "$RUNDIR/sshd_config"; then
  stop_recorded sshd
  [ -s /etc/ssh/ssh_host_ed25519_key ] || ssh-keygen -q -A
  port=2222
  while port_open "$port"; do port=$((port + 1)); done
  render sshd_config.in "$port" >"$RUNDIR/sshd_config"
  install -d -m 0755 /run/sshd
  /usr/sbin/sshd -t -f "$RUNDIR/sshd_config"
  /usr/sbin/sshd -f "$RUNDIR/sshd_config" 8>&- 9>&-
  wait_for 10 sshd pid_from_file "$RUNDIR/sshd.pid" "$(program_of sshd)"
  wait_for 10 sshd port_open "$port"
  record_pid sshd "$(pid_from_file "$RUNDIR/sshd.pid" "$(program_of sshd)")"
  echo "$port" >"$RUNDIR/ssh_port"
fi
port=$(cat "$RUNDIR/ssh_port")

# 4. This checkout's client key, trusted by the submit user, and the host key it must see.
install -d -m 0700 "$STATE"
[ -s "$STATE/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C gridlane-tests -f "$STATE/id_ed25519"
install -d -m 0700 -o "$SUBMIT_USER" -g "$SUBMIT_USER" "$HOME_DIR/.ssh"
touch "$HOME_DIR/.ssh/authorized_keys"
grep -qxF "$(cat "$STATE/id_ed25519.pub")" "$HOME_DIR/.ssh/authorized_keys" || cat "$STATE/id_ed25519.pub" >>"$HOME_DIR/.ssh/authorized_keys"
chown "$SUBMIT_USER:$SUBMIT_USER" "$HOME_DIR/.ssh/authorized_keys"
chmod 0600 "$HOME_DIR/.ssh/authorized_keys"
known_hosts="[127.0.0.1]:$port $(cut -d' ' -f1,2 /etc/ssh/ssh_host_ed25519_key.pub)"
echo "$known_hosts" >"$STATE/known_hosts"
cat >"$STATE/connection.json" <<EOF
{
  "host": "127.0.0.1",
  "port": $port,
  "user": "$SUBMIT_USER",
  "key_file": "$STATE/id_ed25519",
  "known_hosts": "$known_hosts",
  "node": "$NODE",
  "home": "$HOME_DIR",
  "ctl": "$here/ctl.sh"
}
EOF
log "up: ssh $SUBMIT_USER@127.0.0.1 -p $port; details in $STATE/connection.json"
