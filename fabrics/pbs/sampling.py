"""The GPU sampler beside a running native PBS job, started from the login node, where the cluster allows it. Pure.

PBS itself cannot add a process to a running job from outside it: `pbsdsh` reaches a job's nodes only from
inside that job (it speaks the job's own task manager), and qsub has no step to add. So:

1. Where this PBS is Slurm's Torque wrappers (its qsub is Slurm's, and srun is on the login node's path), a PBS
   job id is a Slurm job id, and the sampler joins the job as on Slurm (fabrics.slurm.sampling: a step
   `srun --jobid --overlap`, as the job's owner, the secret on stdin).
2. Anywhere else the sampler does not start, and the reason names what is missing: Gridlane's agent on the
   cluster's nodes, which samples the jobs there itself (`gridlane agent --pbs-jobs`: fabrics.agent.pbs_jobs,
   portal.agents.native; its first readings mark the job's sampler started).

PROBE decides on the login node in the same round trip as the start: `bash -c PROBE gridlane-pbs-sampler QSUB
SRUN COMMAND...` runs COMMAND (the launcher, with the secret still on stdin) only in case 1, else exits 5 with
the reason on stderr.
"""

from __future__ import annotations

NOT_SLURM = (
    "this PBS cannot join a running job from outside it (pbsdsh works only inside the job, and its qsub is "
    "not Slurm's, so there is no srun --overlap); run Gridlane's agent with --pbs-jobs on its nodes to sample its jobs"
)
NO_SRUN = "this PBS is Slurm's Torque wrappers but srun is not on the login node's path; GPU use stays unknown"

PROBE = f"""\
qsub=$(command -v "$1") || {{ echo "gridlane-sampler: no qsub on the login node's path" >&2; exit 5; }}
srun=$2; shift 2
if ! grep -qi slurm -- "$qsub" 2>/dev/null; then
  echo "gridlane-sampler: {NOT_SLURM}" >&2; exit 5
fi
command -v "$srun" >/dev/null 2>&1 || {{ echo "gridlane-sampler: {NO_SRUN}" >&2; exit 5; }}
exec "$@"
"""


def probe_argv(qsub: str, srun: str, command: list[str]) -> list[str]:
    """`command` (fabrics.slurm.sampling.launch_argv of the owner's srun step), run only where this PBS is Slurm's
    Torque wrappers with srun at hand; else exit 5 with the reason."""
    return ["bash", "-c", PROBE, "gridlane-pbs-sampler", qsub, srun, *command]
