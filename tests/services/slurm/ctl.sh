#!/usr/bin/env bash
# For tests that take the controller away and bring it back: `ctl.sh stop-controller` stops the
# slurmctld up.sh started; `ctl.sh start-controller` starts it again with its saved state (no -c)
# and records the new PID for down.sh.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=common.sh
. "$here/common.sh"
exec 9>"$RUNDIR/lock"
flock 9
case "${1:-}" in
  stop-controller)
    pid_is "$(recorded_pid slurmctld)" /usr/sbin/slurmctld || { log "no slurmctld of ours runs"; exit 1; }
    stop_recorded slurmctld
    ;;
  start-controller)
    if ! pid_is "$(recorded_pid slurmctld)" /usr/sbin/slurmctld; then
      /usr/sbin/slurmctld 9>&-
      wait_for 30 slurmctld bash -c "scontrol ping | grep -q 'is UP'"
      record_pid slurmctld "$(pid_from_file /run/slurmctld.pid /usr/sbin/slurmctld)"
    fi
    ;;
  *)
    echo "usage: $0 stop-controller|start-controller" >&2
    exit 2
    ;;
esac
