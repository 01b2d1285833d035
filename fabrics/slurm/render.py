"""An sbatch script from the queue target's template and the workload. Pure.

The script is, in order: the template's `#!` line (or bash); Gridlane's `#SBATCH` directives for
the request (job name and comment carry the workload id, the tag `find` looks for); the template's
own leading `#SBATCH` lines, which come later and so win (IT pins an account, a QOS, a partition);
the workload's environment as quoted `export`s; the code and packages that travel with it (fabrics.travel:
made ready in ~/.gridlane/work/<run id>, where the rest runs); for a notebook, the `gridlane_notebook` launcher
(fabrics.ssh.notebook); then the rest of the template, with every placeholder shell-quoted.
Directive values are numbers or IT's checked words, never a user's text: sbatch reads `#SBATCH`
lines itself, and a user's newline there would start a new line.
"""

from __future__ import annotations

from dataclasses import dataclass

from fabrics import sampler, templating, travel
from fabrics.base import JobSpec
from fabrics.sampler import SAMPLES_URL_ENV
from fabrics.ssh.scripts import (
    check_image,
    exports,
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
    gpus = whole(job.per_node.gpus_milli)
    cpus = whole(job.per_node.cpus_milli)
    partition = (options.gpu_partition or options.partition) if gpus else options.partition
    lines = [f"--job-name={job_name(job)}", f"--comment={tag(job)}"]
    if partition:
        lines.append(f"--partition={partition}")
    lines += [f"--nodes={job.nodes}", "--ntasks-per-node=1"]
    if cpus:
        lines.append(f"--cpus-per-task={cpus}")
    if job.per_node.memory_mib:
        lines.append(f"--mem={job.per_node.memory_mib}M")
    if gpus:
        typed = f"{options.gpu_type}:" if options.gpu_type else ""
        lines.append(f"--gres=gpu:{typed}{gpus}" if options.gpu_request == "gres" else f"--gpus-per-node={typed}{gpus}")
    if job.array.isdigit():  # one element of a Gridlane array: SLURM_ARRAY_TASK_ID set, as Slurm's own arrays do
        lines.append(f"--array={job.array}")
    lines += [
        f"--time={minutes(job.runtime_limit_s)}",
        f"--output={options.workdir}/%j.out",
        f"--error={options.workdir}/%j.err",
    ]
    return [f"#SBATCH {line}" for line in lines]


def default_template(job: JobSpec) -> str:
    return NOTEBOOK_TEMPLATE if job.kind == "notebook" else DEFAULT_TEMPLATE


def render(template: str, job: JobSpec, options: Options, *, reveal: bool = False) -> str:
    """The sbatch script for the job; TemplateError when the template cannot hold this job.

    reveal: the script as sent, with its secrets; without, the copy for the record (secrets masked).
    """
    shebang, head, body = split_template(template or default_template(job))
    check_image(templating.placeholders(body), job)
    parts = [
        shebang,
        *(line + "\n" for line in directives(job, options)),
        *head,
        "# The workload's environment (values quoted, never run):\n",
        *(line + "\n" for line in exports(job, reveal=reveal)),
        *sampler.preamble(SAMPLES_URL_ENV in job.env),
        *travel.preamble(job.env, travel.BATCH_WORKDIR),
        *notebook_lines(job),
        templating.render(body, template_values(job)),
    ]
    return "".join(parts)
