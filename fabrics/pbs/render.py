"""A qsub script from the queue target's template and the workload. Pure.

As for Slurm: the `#!` line, Gridlane's `#PBS` directives, IT's own leading `#PBS` lines (later,
so they win), the environment as quoted exports, then the template with quoted placeholders.
Two dialects ask for resources differently:

    PBS Pro / OpenPBS:  #PBS -l select=2:ncpus=8:ngpus=1:mem=16384mb   (per chunk = per node)
                        #PBS -l walltime=01:00:00
    Torque:             #PBS -l nodes=2:ppn=8:gpus=1,mem=32768mb,walltime=01:00:00

PBS keeps a job's output until it ends and many sites forget finished jobs at once (Torque's
keep_completed=0), so the script itself writes its output, and its exit status when it ends, to
files named by the PBS job id under the workdir: <workdir>/<job id>.out, .err and .exit.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from uuid import UUID

from fabrics import sampler, templating, travel
from fabrics.base import JobSpec
from fabrics.sampler import SAMPLES_URL_ENV
from fabrics.ssh.scripts import check_image, exports, notebook_lines, split_template, template_values, whole

# No `exec`: the shell must outlive the command to record its exit status.
DEFAULT_TEMPLATE = """\
#!/bin/bash
# Gridlane's default: the workload's command, run by bash on the job's first node.
/bin/bash -c $command
"""
# Notebooks: `gridlane_notebook` (fabrics.ssh.notebook) starts the server and reports it to Gridlane.
NOTEBOOK_TEMPLATE = """\
#!/bin/bash
# Gridlane's default notebook: JupyterLab on the job's first node, its address reported back to Gridlane.
gridlane_notebook jupyter lab
"""
FLAVORS = ("pro", "torque")
NAME_PREFIX = "g"  # g + 14 hex digits of the workload id: Torque keeps 15 characters of a name


@dataclass(frozen=True)
class Options:
    flavor: str = "pro"
    queue: str = ""  # empty: the server's default queue
    gpu_queue: str = ""  # for jobs with GPUs; empty: `queue`
    workdir: str = ".gridlane"  # relative to the account's home, or absolute


def job_name(workload_id: UUID) -> str:
    return f"{NAME_PREFIX}{workload_id.hex[:14]}"


def walltime(seconds: int) -> str:
    seconds = max(60, seconds)
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def directives(job: JobSpec, options: Options) -> list[str]:
    gpus = whole(job.per_node.gpus_milli)
    cpus = max(1, whole(job.per_node.cpus_milli))
    memory = job.per_node.memory_mib
    lines = [f"-N {job_name(job.workload_id)}"]
    queue = (options.gpu_queue or options.queue) if gpus else options.queue
    if queue:
        lines.append(f"-q {queue}")
    if options.flavor == "pro":
        chunk = f"select={job.nodes}:ncpus={cpus}" + (f":ngpus={gpus}" if gpus else "")
        chunk += f":mem={memory}mb" if memory else ""
        lines += [f"-l {chunk}", f"-l walltime={walltime(job.runtime_limit_s)}"]
    else:
        spec = [f"nodes={job.nodes}:ppn={cpus}" + (f":gpus={gpus}" if gpus else "")]
        spec += [f"mem={memory * job.nodes}mb"] if memory else []
        lines.append("-l " + ",".join([*spec, f"walltime={walltime(job.runtime_limit_s)}"]))
    return [f"#PBS {line}" for line in lines]


def records(options: Options) -> list[str]:
    """Lines that send the job's output, and its exit status at the end, to <workdir>/<job id>.*."""
    workdir = options.workdir
    where = shlex.quote(workdir) if workdir.startswith("/") else f'"$HOME"/{shlex.quote(workdir)}'
    # Fresh files: a job id comes round again (a server reinstalled, PBS Pro's ids wrapping), and an old job's
    # output or exit status must never be read as this one's.
    return [
        f"_gl_dir={where}",
        'rm -f "$_gl_dir/$PBS_JOBID.exit"',
        'exec >"$_gl_dir/$PBS_JOBID.out" 2>"$_gl_dir/$PBS_JOBID.err"',
        "trap 'echo $? >\"$_gl_dir/$PBS_JOBID.exit\"' EXIT",
    ]


def render(template: str, job: JobSpec, options: Options, *, reveal: bool = False) -> str:
    """The qsub script; reveal: as sent, with its secrets (else the copy for the record, secrets masked)."""
    shebang, head, body = split_template(
        template or (NOTEBOOK_TEMPLATE if job.kind == "notebook" else DEFAULT_TEMPLATE)
    )
    check_image(templating.placeholders(body), job)
    parts = [
        shebang,
        *(line + "\n" for line in directives(job, options)),
        *head,
        "# The workload's environment (values quoted, never run):\n",
        *(line + "\n" for line in exports(job, reveal=reveal)),
        *sampler.preamble(SAMPLES_URL_ENV in job.env),
        "# Output and exit status where Gridlane finds them, named by the PBS job id:\n",
        *(line + "\n" for line in records(options)),
        *travel.preamble(job.env, travel.BATCH_WORKDIR),  # after records: its output lands in the job's
        *notebook_lines(job),
        templating.render(body, template_values(job)),
    ]
    return "".join(parts)
