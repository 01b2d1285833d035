#!/usr/bin/env bash
# Let go of the test cluster; the last test run holding it stops exactly the PIDs up.sh recorded:
# jobs first (so no slurmstepd outlives slurmd), then sshd, slurmd, slurmctld, slurmdbd, munged, MariaDB.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=common.sh
. "$here/common.sh"
HOLDER="${GRIDLANE_SLURM_HOLDER:-$PPID}"
[ -d "$RUNDIR" ] || exit 0
exec 9>"$RUNDIR/lock"
flock 9
rm -f "$HOLDERS/$HOLDER"
if [ -n "$(live_holders)" ]; then
  log "another test run still holds the cluster; leaving it up"
  exit 0
fi
if pid_is "$(recorded_pid slurmctld)" /usr/sbin/slurmctld; then
  scancel --quiet --user="$SUBMIT_USER" 2>/dev/null || true
  scancel --quiet --user=root 2>/dev/null || true
  for person in $PEOPLE; do scancel --quiet --user="${person%%:*}" 2>/dev/null || true; done
  for _ in $(seq 50); do [ -z "$(squeue -h -t running,completing -o %i 2>/dev/null)" ] && break; sleep 0.1; done
fi
for name in sshd slurmd2 slurmd slurmctld slurmdbd munged mariadbd; do stop_recorded "$name"; done
rm -f "$RUNDIR/signature" "$RUNDIR/ssh_port"
log "down"
