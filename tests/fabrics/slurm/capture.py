"""Capture real command output from the test cluster into fixtures/ (run by hand; not a test).

    GRIDLANE_TEST_STATE=var/test-services .venv/bin/python -m tests.fabrics.slurm.capture

Brings jobs into the states the parsers must read (pending for each common reason, running,
completed, failed, cancelled, killed by a signal, timed out), then saves what the fabric's own
commands print for them: squeue -O, sacct -P, sinfo -O and the Torque wrapper's qstat -f. The
timeout takes Slurm about 90 s to notice, so the run takes about two minutes.
"""

from __future__ import annotations

import json
import os
import shlex
import time
from pathlib import Path

from fabrics.base import FabricConfig, Resources
from fabrics.slurm import parse
from fabrics.slurm.fabric import SlurmFabric

HERE = Path(__file__).parent / "fixtures"


def main() -> None:
    state = Path(os.environ.get("GRIDLANE_TEST_STATE", "var/test-services"))
    conn = json.loads((state / "slurm" / "connection.json").read_text())
    settings = {k: conn[k] for k in ("host", "port", "user", "known_hosts", "key_file")}
    fabric = SlurmFabric(FabricConfig("capture", "slurm", Resources(), settings))
    ssh = fabric.ssh
    ssh.run(["scancel", "--me"])
    time.sleep(2)

    def sbatch(*args: str, script: str = "sleep 300") -> str:
        result = ssh.run(["sbatch", "--parsable", "-o", "/dev/null", *args, "--wrap", script])
        assert result.ok, result.stderr
        return result.stdout.strip()

    # Short jobs first, so that they run before the GPU jobs below make the node wait for a reservation.
    ids = {
        "succeeded": sbatch("-J", "succeeded", "-t", "1", script="true"),
        "failed": sbatch("-J", "failed", "-t", "1", script="exit 3"),
        "killed": sbatch("-J", "killed", "-t", "1", script="kill -9 $$"),
        "cancelled": sbatch("-J", "cancelled", "-t", "1"),
        "timeout": sbatch("-J", "timeout", "-t", "1"),
    }
    time.sleep(3)
    ids |= {
        "qos_runs": sbatch("-J", "qos-runs", "-p", "gpu", "--qos=gl-gpu2", "--gres=gpu:2", "-t", "10"),
        "qos_waits": sbatch("-J", "qos-waits", "-p", "gpu", "--qos=gl-gpu2", "--gres=gpu:1", "-t", "10"),
        "blocker": sbatch("-J", "blocker", "-p", "gpu", "--gres=gpu:6", "-t", "10"),
        "resources": sbatch("-J", "resources", "-p", "gpu", "--gres=gpu:4", "-t", "10"),
        "priority": sbatch("-J", "priority", "-p", "gpu", "--gres=gpu:4", "-t", "10"),
        "held": sbatch("-J", "held", "--hold", "--comment=gridlane:00000000-0000-4000-8000-000000000001"),
        "not_avail": sbatch("-J", "not-avail", "-t", "60"),
    }
    ids["dependency"] = sbatch("-J", "dependency", f"--dependency=afterok:{ids['qos_runs']}")
    ssh.run(["scancel", ids["cancelled"]])
    time.sleep(8)  # one backfill pass gives the pending jobs their estimated start
    squeue = [*fabric._squeue(), "--noheader"]
    save("squeue_states.txt", ssh.run(squeue).stdout)
    print(json.dumps(ids))
    save("sinfo_busy.txt", ssh.run(["env", "TZ=UTC", "sinfo", "-h", "-N", "-O", parse.sinfo_format()]).stdout)
    torque_ids = [ids["held"], ids["failed"], ids["blocker"]]
    save("../../pbs/fixtures/qstat_f_slurm_wrapper.txt", ssh.run(["env", "TZ=UTC", "qstat", "-f", *torque_ids]).stdout)
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        jobs = {j.job_id: j for j in parse.squeue(ssh.run(fabric._squeue()).stdout)}
        if jobs[ids["timeout"]].state == "TIMEOUT":
            break
        time.sleep(5)
    save("squeue_finished.txt", ssh.run(fabric._squeue()).stdout)
    done = ",".join(ids[k] for k in ("succeeded", "failed", "killed", "cancelled", "timeout", "held"))
    save("sacct_finished.txt", ssh.run(fabric._sacct(f"--jobs={done}")).stdout)
    ssh.run(["scancel", "--me"])
    print("sacct command:", shlex.join(fabric._sacct(f"--jobs={done}")))


def save(name: str, text: str) -> None:
    path = HERE / name
    path.write_text(text)
    print(f"wrote {path} ({len(text)} characters)")


if __name__ == "__main__":
    main()
