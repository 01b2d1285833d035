"""What the script fabrics (Slurm, PBS) share when they write a job script. Pure.

A queue target's template has a `#!` line, a leading block of comments (IT's own `#SBATCH` or
`#PBS` directives) and the script. The fabric puts its own directives before IT's (which then
win), the workload's environment after them as quoted exports, then the script with every
placeholder shell-quoted.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Mapping

from fabrics import templating
from fabrics.base import JobSpec, TemplateError
from fabrics.ssh.notebook import FUNCTION, MASKED, SECRET_ENV

TEMPLATE_NAMES = frozenset(
    {
        "workload_id",
        "name",
        "owner",
        "group",
        "queue",
        "command",
        "image",  # as the user gave it: nvcr.io/nvidia/pytorch:24.01-py3
        "image_docker",  # for Apptainer/Singularity: docker://nvcr.io/nvidia/pytorch:24.01-py3
        "image_enroot",  # for Pyxis/enroot: nvcr.io#nvidia/pytorch:24.01-py3
        "nodes",
        "gpus",
        "cpus",
        "memory_mib",
        "runtime_limit_s",
    }
)
IMAGE_NAMES = frozenset({"image", "image_docker", "image_enroot"})
WORD = re.compile(r"^[A-Za-z0-9_.+-]+$")  # what a directive value of IT's may be
PATH = re.compile(r"^[A-Za-z0-9_.+/-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def whole(milli: int) -> int:
    """Milli-units as whole units, rounded up: a quarter GPU on a batch cluster takes one GPU."""
    return math.ceil(milli / 1000)


def minutes(seconds: int) -> int:
    return max(1, math.ceil(seconds / 60))


def split_template(template: str) -> tuple[str, list[str], str]:
    """The `#!` line, the leading block of comments and blank lines (IT's directives), and the rest."""
    lines = template.splitlines(keepends=True)
    shebang = "#!/bin/bash\n"
    if lines and lines[0].startswith("#!"):
        shebang = lines.pop(0)
        shebang += "" if shebang.endswith("\n") else "\n"
    head: list[str] = []
    while lines and (not lines[0].strip() or lines[0].lstrip().startswith("#")):
        head.append(lines.pop(0))
    return shebang, head, "".join(lines)


def environment(job: JobSpec) -> dict[str, str]:
    """The job's environment, GRIDLANE_WORKLOAD_ID first; TemplateError for a name that is no shell name."""
    env = {"GRIDLANE_WORKLOAD_ID": str(job.workload_id), **job.env}
    for key in env:
        if not _ENV_NAME.match(key):
            raise TemplateError(f"{key!r} cannot be an environment variable name")
    return env


def assignment(key: str, value: str, *, reveal: bool = False) -> str:
    """`NAME='value'`, the value quoted; a secret (the notebook callback's) masked unless `reveal`."""
    return f"{key}={shlex.quote(value if reveal or key not in SECRET_ENV else MASKED)}"


def exports(job: JobSpec, *, reveal: bool = False) -> list[str]:
    """The workload's environment as `export NAME='value'` lines; TemplateError for a bad name.

    Secrets (the notebook callback's) are masked unless `reveal`: the script sent to the cluster
    carries them, the copy kept on the workload for the record does not.
    """
    return [f"export {assignment(key, value, reveal=reveal)}" for key, value in environment(job).items()]


def notebook_lines(job: JobSpec) -> list[str]:
    """For a notebook, the `gridlane_notebook` launcher its template calls (fabrics.ssh.notebook); else nothing."""
    return [FUNCTION] if job.kind == "notebook" else []


def check_image(placeholders: set[str], job: JobSpec) -> None:
    if placeholders & IMAGE_NAMES and not job.image.strip():
        raise TemplateError("this queue runs a container image, and the workload names none")


def template_values(job: JobSpec) -> Mapping[str, object]:
    """A batch script's values: whole GPUs and CPUs (a batch system counts no fractions), and the image as
    Apptainer and Enroot name it."""
    return templating.job_values(job) | {
        "image_docker": docker_uri(job.image),
        "image_enroot": enroot_uri(job.image),
        "gpus": whole(job.per_node.gpus_milli),
        "cpus": whole(job.per_node.cpus_milli),
    }


def docker_uri(image: str) -> str:
    """An OCI reference as Apptainer takes it: docker://...; URIs and .sif paths pass unchanged."""
    if not image or "://" in image or image.endswith(".sif"):
        return image
    return f"docker://{image}"


def enroot_uri(image: str) -> str:
    """An OCI reference as Pyxis/enroot takes it: the registry, if any, ends with '#' instead of '/'."""
    if not image or "://" in image or image.endswith((".sqsh", ".sif")):
        return image
    first, slash, rest = image.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return f"{first}#{rest}"
    return image
