"""An sbatch script from the queue target's template and the workload. Pure.

The script is, in order: the template's `#!` line (or bash); Gridlane's `#SBATCH` directives for
the request (job name and comment carry the workload id, the tag `find` looks for); the template's
own leading `#SBATCH` lines, which come later and so win (IT pins an account, a QOS, a partition);
the workload's environment as quoted `export`s; the code and packages that travel with it (fabrics.travel:
made ready in ~/.gridlane/work/<run id>, where the rest runs); for a notebook, the `gridlane_notebook` launcher
(fabrics.ssh.notebook); then the rest of the template, with every placeholder shell-quoted.
Directive values are numbers or IT's checked words, never a user's text: sbatch reads `#SBATCH`
lines itself, and a user's newline there would start a new line.

An array's elements share one script (`array_script`), which Slurm runs once per index: the job is
named for the array (`gl-<array id>`), output goes to `<workdir>/%A_%a.out` (one file per element,
`<job id>_<index>.out`), and each element's own environment (its workload id, its index, its
sampler's address and secret) is set by a `case` on SLURM_ARRAY_TASK_ID. The tag and the indexes go
on sbatch's command line (fabrics.slurm.fabric), so elements whose scripts differ only in their own
environment (`array_key`) can share one sbatch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fabrics import sampler, templating, travel
from fabrics.base import JobSpec, TemplateError
from fabrics.sampler import SAMPLES_URL_ENV
from fabrics.ssh.scripts import (
    assignment,
    check_image,
    environment,
    minutes,
    notebook_lines,
    split_template,
    template_values,
    whole,
)

DEFAULT_TEMPLATE = """\
#!/bin/bash
# Gridlane's default: the workload's command, run by bash on the job's first node.
exec /bin/bash -c $command
"""
# Notebooks: `gridlane_notebook` (fabrics.ssh.notebook) starts the server and reports it to Gridlane.
# A queue's own template names the Jupyter its nodes have, e.g. `module load jupyter` first.
NOTEBOOK_TEMPLATE = """\
#!/bin/bash
# Gridlane's default notebook: JupyterLab on the job's node, its address reported back to Gridlane.
gridlane_notebook jupyter lab
"""

# Containers go through the template, with the same image reference a Kubernetes queue would run.
PYXIS_TEMPLATE = """\
#!/bin/bash
# The workload's image through Pyxis/enroot; srun starts it on every node of the job.
srun --container-image=$image_enroot --container-workdir=/tmp /bin/bash -c $command
"""
APPTAINER_TEMPLATE = """\
#!/bin/bash
# The workload's image through Apptainer, with the node's GPUs (--nv).
exec apptainer exec --nv $image_docker /bin/bash -c $command
"""

GPU_REQUESTS = ("gres", "gpus-per-node")
TAG_PREFIX = "gridlane:"  # the comment: gridlane:<workload id>
NAME_PREFIX = "gl-"  # the job name: gl-<workload id>, exact, so squeue and sacct can filter on it


@dataclass(frozen=True)
class Options:
    """The fabric's settings that shape a script (checked by SlurmFabric.check_settings)."""

    partition: str = ""  # empty: the cluster's default partition
    gpu_partition: str = ""  # for jobs with GPUs; empty: `partition`
    gpu_request: str = "gres"  # gres: --gres=gpu[:type]:N; gpus-per-node: --gpus-per-node=[type:]N
    gpu_type: str = ""  # a GRES type such as a100; empty: any
    workdir: str = ".gridlane"  # job output lands here (relative to the account's home)


def job_name(job: JobSpec) -> str:
    return f"{NAME_PREFIX}{job.workload_id}"


def tag(job: JobSpec) -> str:
    return f"{TAG_PREFIX}{job.workload_id}"


def directives(job: JobSpec, options: Options) -> list[str]:
    """A plain job's directives: its tag (name and comment), its request and its output files."""
    lines = [f"--job-name={job_name(job)}", f"--comment={tag(job)}", *_request(job, options)]
    lines += [f"--output={options.workdir}/%j.out", f"--error={options.workdir}/%j.err"]
    return [f"#SBATCH {line}" for line in lines]


def array_directives(job: JobSpec, options: Options) -> list[str]:
    """An array element's: named for its array, its request, one output file per index (the tag and the indexes
    go on sbatch's command line)."""
    lines = [f"--job-name={NAME_PREFIX}{job.array_id}", *_request(job, options)]
    lines += [f"--output={options.workdir}/%A_%a.out", f"--error={options.workdir}/%A_%a.err"]
    return [f"#SBATCH {line}" for line in lines]


def _request(job: JobSpec, options: Options) -> list[str]:
    gpus = whole(job.per_node.gpus_milli)
    cpus = whole(job.per_node.cpus_milli)
    partition = (options.gpu_partition or options.partition) if gpus else options.partition
    lines = []
    if partition:
        lines.append(f"--partition={partition}")
    lines += [f"--nodes={job.nodes}", "--ntasks-per-node=1"]
    if cpus:
        lines.append(f"--cpus-per-task={cpus}")
    if job.per_node.memory_mib:
        lines.append(f"--mem={job.per_node.memory_mib}M")
    if gpus:
        gpu_type = job.gpu_type or options.gpu_type  # the request's own type first, else the fabric's
        typed = f"{gpu_type}:" if gpu_type else ""
        lines.append(f"--gres=gpu:{typed}{gpus}" if options.gpu_request == "gres" else f"--gpus-per-node={typed}{gpus}")
    lines.append(f"--time={minutes(job.runtime_limit_s)}")
    return lines


def default_template(job: JobSpec) -> str:
    return NOTEBOOK_TEMPLATE if job.kind == "notebook" else DEFAULT_TEMPLATE


@dataclass(frozen=True)
class _Parts:
    top: str  # the #! line, Gridlane's directives, the template's own
    env: dict[str, str]
    rest: str  # the sampler's preamble, a notebook's launcher, the template's script


def _parts(template: str, job: JobSpec, options: Options, *, element: bool) -> _Parts:
    shebang, head, body = split_template(template or default_template(job))
    check_image(templating.placeholders(body), job)
    lines = array_directives(job, options) if element else directives(job, options)
    return _Parts(
        "".join([shebang, *(line + "\n" for line in lines), *head]),
        environment(job),
        "".join(
            [
                *sampler.preamble(SAMPLES_URL_ENV in job.env),
                *travel.preamble(job.env, travel.BATCH_WORKDIR),
                *notebook_lines(job),
                templating.render(body, template_values(job)),
            ]
        ),
    )


def render(template: str, job: JobSpec, options: Options, *, reveal: bool = False) -> str:
    """The sbatch script for the job; TemplateError when the template cannot hold this job. An array's element:
    the script of an array of it alone (`array_script`).

    reveal: the script as sent, with its secrets; without, the copy for the record (secrets masked).
    """
    if job.array:
        return array_script(template, [job], options, reveal=reveal)
    parts = _parts(template, job, options, element=False)
    env = [f"export {assignment(key, value, reveal=reveal)}\n" for key, value in parts.env.items()]
    return "".join([parts.top, "# The workload's environment (values quoted, never run):\n", *env, parts.rest])


def array_key(template: str, job: JobSpec, options: Options) -> tuple[str, ...]:
    """What elements of one array must share to go out as one sbatch: their script, less their own environment's
    values (set per index in `array_script`)."""
    parts = _parts(template, job, options, element=True)
    return (job.array_id, parts.top, *parts.env, parts.rest)


def array_script(template: str, jobs: Sequence[JobSpec], options: Options, *, reveal: bool = False) -> str:
    """One script for elements of one array with the same `array_key`: Slurm runs it once per index, and each
    element's own environment is set by its SLURM_ARRAY_TASK_ID. TemplateError for elements it cannot hold."""
    if not jobs or any(not job.array.isdigit() for job in jobs):
        raise TemplateError("an array's script is for its elements, each with its index")
    parts = [_parts(template, job, options, element=True) for job in jobs]
    first = parts[0]
    if any((p.top, list(p.env), p.rest) != (first.top, list(first.env), first.rest) for p in parts):
        raise TemplateError("these elements' scripts differ: they cannot share one sbatch")
    shared = {k: v for k, v in first.env.items() if all(p.env[k] == v for p in parts)}
    own = [k for k in first.env if k not in shared]
    lines = [first.top, "# The workload's environment (values quoted, never run):\n"]
    lines += [f"export {assignment(k, v, reveal=reveal)}\n" for k, v in shared.items()]
    lines.append("# Each element's own: Slurm runs this script once per index, with SLURM_ARRAY_TASK_ID set.\n")
    lines.append('case "${SLURM_ARRAY_TASK_ID-}" in\n')
    for job, p in zip(jobs, parts, strict=True):
        values = " ".join(assignment(k, p.env[k], reveal=reveal) for k in own)
        lines.append(f"{int(job.array)}) export {values} ;;\n" if own else f"{int(job.array)}) ;;\n")
    lines.append('*) echo "gridlane: this array has no element ${SLURM_ARRAY_TASK_ID-(none)}" >&2; exit 1 ;;\n')
    lines.append("esac\n")
    lines.append(first.rest)
    return "".join(lines)
