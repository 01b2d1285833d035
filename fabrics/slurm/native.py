"""sbatch's command line for a user's own script, which reaches Slurm byte for byte. Pure.

Gridlane's additions never go inside the script: on sbatch's command line, which overrides the
script's directives, go the tag (`--comment=gridlane:<workload id>`), the job name where the script
gives none (`gl-<workload id>`, which `find` looks for), output and error files under the workdir
where the script names neither (so Gridlane can show the job's output), the runtime limit Gridlane
planned with where the script sets none, what the queue target forces (partition, account, QOS,
constraint, reservation) and the Gridlane environment (`--export=ALL,GRIDLANE_WORKLOAD_ID=...`).

An array's elements share one sbatch where they can (`array_options`): the group's tag, the array's
name where the script gives none, one output file per index (`%A_%a`), and `--array=` with their
indexes, which overrides the script's own --array as any command-line option overrides a directive.
sbatch gives every task of one array the same --export, so elements share one sbatch only where they
need no environment of their own (`array_key`): a script that reads Gridlane's per-element variables
(it names GRIDLANE_) goes as an array of one element, with its GRIDLANE_ARRAY_INDEX and workload id;
any other script reads its index from SLURM_ARRAY_TASK_ID, the same number.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from fabrics.base import JobSpec, TemplateError
from fabrics.slurm.directives import FORCEABLE, Directives
from fabrics.slurm.render import NAME_PREFIX, TAG_PREFIX, Options
from fabrics.ssh.batch import TASKS
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
    """The name the job has in Slurm: the script's own, else Gridlane's `gl-<workload id>` (an array's element:
    `gl-<array id>`)."""
    return read.job_name or f"{NAME_PREFIX}{job.array_id if job.array else job.workload_id}"


def options(job: JobSpec, read: Directives, options: Options) -> list[str]:
    """sbatch's options, before the script it reads from stdin."""
    if job.array:
        return array_options([job], read, options, f"{TAG_PREFIX}{job.workload_id}")
    name = f"{NAME_PREFIX}{job.workload_id}"
    env = {"GRIDLANE_WORKLOAD_ID": str(job.workload_id), **job.env}
    return _options(job, read, options, f"{TAG_PREFIX}{job.workload_id}", name, "%j", [], env)


# What differs between an array's elements; sbatch's --export cannot give each task its own.
ELEMENT_ENV = ("GRIDLANE_WORKLOAD_ID", "GRIDLANE_ARRAY_INDEX")


def array_key(job: JobSpec) -> tuple[str, ...]:
    """What elements of one array must share to go out as one sbatch: the script, the planned time and what the
    queue forces, and the environment less each element's own. A script that names GRIDLANE_ reads its own
    variables, so it goes alone (its key holds its workload id)."""
    alone = str(job.workload_id) if "GRIDLANE_" in job.script else ""
    env = sorted((k, v) for k, v in job.env.items() if k not in ELEMENT_ENV)
    return (job.array_id, alone, job.script, str(job.runtime_limit_s), repr(sorted(job.forced.items())), repr(env))


def array_options(jobs: Sequence[JobSpec], read: Directives, options: Options, tag: str) -> list[str]:
    """sbatch's options for elements of one array with the same `array_key`, tagged `tag`; their indexes replace
    TASKS (fabrics.ssh.batch). One element keeps its whole environment; several, what they share."""
    if not jobs or any(not re.fullmatch(r"[0-9]{1,9}", job.array) for job in jobs):
        raise TemplateError(f"{jobs[0].array if jobs else ''!r} is no array index")
    first = jobs[0]
    env = {"GRIDLANE_WORKLOAD_ID": str(first.workload_id), **first.env}
    if len(jobs) > 1:
        env = {k: v for k, v in env.items() if k not in ELEMENT_ENV}
    return _options(first, read, options, tag, f"{NAME_PREFIX}{first.array_id}", "%A_%a", [TASKS], env)


def _options(
    job: JobSpec, read: Directives, options: Options, tag: str, name: str, out: str, array: list[str],
    env: Mapping[str, str],
) -> list[str]:  # fmt: skip
    check_forced(job.forced)
    argv = [f"--comment={tag}"]
    if not read.job_name:
        argv.append(f"--job-name={name}")
    if not read.output and not read.error:
        argv += [f"--output={options.workdir}/{out}.out", f"--error={options.workdir}/{out}.err"]
    if read.time_s is None:
        argv.append(f"--time={minutes(job.runtime_limit_s)}")
    argv += array  # over the script's own --array
    argv += [f"--{option}={value}" for option, value in sorted(job.forced.items())]
    for key, value in env.items():
        if not _ENV_NAME.match(key) or not _ENV_VALUE.match(value):
            raise TemplateError(f"{key}: not an environment variable sbatch's --export can carry")
    argv.append("--export=" + ",".join(["ALL", *(f"{k}={v}" for k, v in env.items())]))
    return argv
