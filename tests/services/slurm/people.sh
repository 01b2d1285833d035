#!/usr/bin/env bash
# People Gridlane runs jobs as (sudo -u, see fabrics/ssh/runas.py), added to a running cluster: a POSIX user
# per person with a private home, a Slurm account per team with the person's association, a system account
# (uid below 1000) that a mapping must never reach, and the sudoers rule that lets the submit user run
# exactly the job commands as a person, never as root. Idempotent; up.sh runs it, and so do the tests that
# need it (slurmdbd's associations go with a cluster that another test run restarts).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=common.sh
. "$here/common.sh"

command -v sudo >/dev/null 2>&1 || {
  log "installing sudo"
  apt-get -o DPkg::Lock::Timeout=120 update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=120 install -y -q --no-install-recommends sudo >/dev/null
}
exec 8>"$RUNDIR/people.lock"
flock 8
for person in $PEOPLE; do
  user=${person%%:*} account=${person#*:}
  getent passwd "$user" >/dev/null || useradd -m -s /bin/bash "$user"
  chmod 0700 "$(getent passwd "$user" | cut -d: -f6)"
  sacctmgr -n -P show account "$account" format=Account | grep -qx "$account" ||
    sacctmgr -i add account "$account" Cluster=gridlanetest Description="$account" Organization=gridlane >/dev/null
  sacctmgr -n -P show assoc user="$user" account="$account" format=User | grep -qx "$user" ||
    sacctmgr -i add user "$user" Account="$account" >/dev/null
done
# The submit account in the teams' accounts too: PBS jobs of a fabric without a POSIX policy run as it, charged with qsub -A.
for person in $PEOPLE; do
  account=${person#*:}
  sacctmgr -n -P show assoc user="$SUBMIT_USER" account="$account" format=User | grep -qx "$SUBMIT_USER" ||
    sacctmgr -i add user "$SUBMIT_USER" Account="$account" >/dev/null
done
getent passwd "$SYSTEM_USER" >/dev/null || useradd -r -m -s /bin/bash "$SYSTEM_USER"
rule="# Gridlane's submit account runs exactly the job commands as a person (never root), in their home.
Defaults:$SUBMIT_USER !requiretty, runcwd=*
$SUBMIT_USER ALL=(ALL,!root) NOPASSWD: $(command -v sbatch), $(command -v scancel), $(command -v qsub), \\
  $(command -v qdel), $(command -v mkdir) -p -m 0700 -- .gridlane, $(command -v tail) -c [0-9]* -- .gridlane/[0-9]*"
if [ "$(cat "$SUDOERS" 2>/dev/null)" != "$rule" ]; then
  printf '%s\n' "$rule" >"$SUDOERS.new"  # sudo skips files with a dot in their name: this one is not read yet
  visudo -cqf "$SUDOERS.new"
  chmod 0440 "$SUDOERS.new"
  mv "$SUDOERS.new" "$SUDOERS"
fi
