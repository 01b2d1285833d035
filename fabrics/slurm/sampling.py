"""The GPU sampler inside a running native job's allocation, started from the login node. Pure.

A user's own script reaches Slurm byte for byte (fabrics.slurm.native), so nothing of Gridlane runs in it.
Once its job runs, Gridlane adds one step to it, as the job's owner (only the owner, or root, may):

    srun --jobid=<id> --overlap --nodes=<n> --ntasks-per-node=1 --input=all python3 -c <fabrics.sampler.SAMPLER>

one sampler on every node of the job, sharing the job's resources (--overlap: it takes nothing the job's own
steps need), seeing the job's GPUs only (SLURM_STEP_GPUS; fabrics.sampler.job_gpus), ending when the job ends
(Slurm ends every step of a finished job). The samples URL, interval and batch size go in --export (nothing
secret); the workload's secret goes on srun's stdin, which --input=all hands to every task, so it appears on no
command line of the login node. The step's output goes nowhere: the job's own output and exit status are what
they would be without it (its steps never count in the batch script's exit status).

`launch` is the login node's side: it starts the step detached (setsid), waits up to WATCH_S seconds, and fails
(exit 3, srun's own words on stderr) when the step ended in that time, so that a sampler that could not start
(no python3 or nvidia-smi on the nodes, a job already ended, a sudoers rule that does not name srun) is said,
and the workload's use stays "unknown" with that reason.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from fabrics.sampler import SAMPLER, TOOLS_ENV

WATCH_S = 2  # seconds the launcher waits to see the step live
ENDED_AT_ONCE = 3  # the launcher's exit status when the step ended within WATCH_S
STARTED = "gridlane-sampler: started"
JOB_ID = re.compile(r"^[0-9]{1,12}$")  # a whole job (an array element's 42_5 is not attached to)
_ENV_VALUE = re.compile(r"^[A-Za-z0-9_.:/%?=&+~-]{1,2000}$")  # --export splits on commas: none here

# bash -c LAUNCH gridlane-sampler WATCH_S COMMAND...: the secret is the first line of stdin.
LAUNCH = """\
IFS= read -r secret || { echo "gridlane-sampler: no secret on stdin" >&2; exit 2; }
watch=$1; shift
err=$(mktemp) || exit 2
printf '%s\\n' "$secret" | setsid "$@" >/dev/null 2>"$err" &
pid=$!
unset secret
i=0
while [ "$i" -lt $((watch * 10)) ]; do
  if [ -z "$(jobs -rp)" ]; then
    wait "$pid"; rc=$?
    cat "$err" >&2; rm -f "$err"
    echo "gridlane-sampler: the step ended at once (status $rc)" >&2
    exit 3
  fi
  sleep 0.1; i=$((i + 1))
done
rm -f "$err"
echo "gridlane-sampler: started"
"""


TOOLS_PATH = re.compile(r"^/[A-Za-z0-9_.+/-]{0,200}(:/[A-Za-z0-9_.+/-]{0,200}){0,7}$")


def check_tools_path(value: object) -> None:
    """ValueError unless `value` is "" or absolute folders joined by ':' (at most 8, no '..')."""
    if value == "":
        return
    if not isinstance(value, str) or not TOOLS_PATH.match(value) or ".." in value.replace(":", "/").split("/"):
        raise ValueError("settings.gpu_tools_path: absolute folders joined by ':', e.g. /usr/local/nvidia/bin")


def with_tools(env: Mapping[str, str], tools: str) -> dict[str, str]:
    """The step's environment, with `tools` searched for nvidia-smi before PATH (where given)."""
    return {**env, TOOLS_ENV: tools} if tools else dict(env)


def srun_argv(srun: str, job_id: str, nodes: int, env: Mapping[str, str], python: str = "python3") -> list[str]:
    """The step's argv (run as the job's owner). ValueError for a job id that is no whole job, or a value
    --export cannot carry."""
    if not JOB_ID.match(job_id):
        raise ValueError(f"{job_id!r}: a sampler joins a whole job, by its numeric id")
    for key, value in env.items():
        if not re.fullmatch(r"[A-Z_][A-Z0-9_]*", key) or not _ENV_VALUE.match(value):
            raise ValueError(f"{key}: not a value srun's --export can carry")
    export = ",".join(["ALL", *(f"{k}={v}" for k, v in sorted(env.items()))])
    return [
        srun, f"--jobid={job_id}", "--overlap", f"--nodes={max(1, int(nodes))}", "--ntasks-per-node=1",
        "--input=all", "--job-name=gridlane-sampler", "--quiet", f"--export={export}", python, "-c", SAMPLER,
    ]  # fmt: skip


def launch_argv(command: list[str]) -> list[str]:
    """`command` (srun_argv, behind the run-as guard where the owner is another account) started detached."""
    return ["bash", "-c", LAUNCH, "gridlane-sampler", str(WATCH_S), *command]


def reason(stderr: str, status: int) -> str:
    """Why a sampler did not start, in the words srun and the sampler gave (at most 300 characters)."""
    said = " ".join(line.strip() for line in stderr.splitlines() if line.strip())
    return (said or f"the sampler step failed (exit status {status})")[:300]
