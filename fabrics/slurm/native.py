"""sbatch's command line for a user's own script, which reaches Slurm byte for byte. Pure.

Gridlane's additions never go inside the script: on sbatch's command line, which overrides the
script's directives, go the tag (`--comment=gridlane:<workload id>`), the job name where the script
gives none (`gl-<workload id>`, which `find` looks for), output and error files under the workdir
where the script names neither (so Gridlane can show the job's output), the runtime limit Gridlane
planned with where the script sets none, what the queue target forces (partition, account, QOS,
constraint, reservation) and the Gridlane environment (`--export=ALL,GRIDLANE_WORKLOAD_ID=...`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from fabrics.base import JobSpec, TemplateError
from fabrics.slurm.directives import FORCEABLE, Directives
from fabrics.slurm.render import NAME_PREFIX, TAG_PREFIX, Options
from fabrics.ssh.scripts import minutes

# What IT may force: Slurm names; a constraint may combine features (a100&ib, [rack1|rack2]).
FORCED_VALUE = {
    "constraint": re.compile(r"^[A-Za-z0-9_.+&|,:*\[\]()!-]{1,200}$"),
}
WORD = re.compile(r"^[A-Za-z0-9_.+-]{1,100}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ENV_VALUE = re.compile(r"^[^,\n\x00'\"]*$")  # --export splits on commas; quotes would be taken literally


def check_forced(forced: Mapping[str, str]) -> None:
    """TemplateError for an option IT may not force, or a value that is no Slurm name."""
    for option, value in forced.items():
        if option not in FORCEABLE:
            raise TemplateError(f"{option!r}: a queue may force {', '.join(FORCEABLE)}")
        if not isinstance(value, str) or not FORCED_VALUE.get(option, WORD).match(value):
            raise TemplateError(f"{option}={value!r} is not a Slurm name")


def job_name(job: JobSpec, read: Directives) -> str:
    """The name the job has in Slurm: the script's own, else Gridlane's `gl-<workload id>`."""
    return read.job_name or f"{NAME_PREFIX}{job.workload_id}"


def options(job: JobSpec, read: Directives, options: Options) -> list[str]:
    """sbatch's options, before the script it reads from stdin."""
    check_forced(job.forced)
    argv = [f"--comment={TAG_PREFIX}{job.workload_id}"]
    if not read.job_name:
        argv.append(f"--job-name={NAME_PREFIX}{job.workload_id}")
    if not read.output and not read.error:
        argv += [f"--output={options.workdir}/%j.out", f"--error={options.workdir}/%j.err"]
    if read.time_s is None:
        argv.append(f"--time={minutes(job.runtime_limit_s)}")
    if job.array:  # one element of a Gridlane array: a one-task Slurm array, over the script's own --array
        if not re.fullmatch(r"[0-9]{1,9}", job.array):
            raise TemplateError(f"{job.array!r} is no array index")
        argv.append(f"--array={job.array}")
    argv += [f"--{option}={value}" for option, value in sorted(job.forced.items())]
    env = {"GRIDLANE_WORKLOAD_ID": str(job.workload_id), **job.env}
    for key, value in env.items():
        if not _ENV_NAME.match(key) or not _ENV_VALUE.match(value):
            raise TemplateError(f"{key}: not an environment variable sbatch's --export can carry")
    argv.append("--export=" + ",".join(["ALL", *(f"{k}={v}" for k, v in env.items())]))
    return argv
