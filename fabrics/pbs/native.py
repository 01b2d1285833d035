"""qsub's command line for a user's own script, which reaches PBS byte for byte. Pure.

The script is written to a file as it is and qsub run on it; what Gridlane adds goes on qsub's
command line, which overrides the script's directives: the walltime Gridlane planned with where the
script sets none, what the queue target forces (`-q`, `-A`, `-P`) and the Gridlane environment
(`-v GRIDLANE_WORKLOAD_ID=...`). The job keeps the script's own name and output files; Gridlane finds
it by the job id qsub recorded, and reads its exit status from qstat.
"""

from __future__ import annotations

import re

from fabrics.base import JobSpec, TemplateError
from fabrics.pbs.render import walltime
from fabrics.slurm.directives import Directives

FLAGS = {"queue": "-q", "account": "-A", "project": "-P"}
WORD = re.compile(r"^[A-Za-z0-9_.+@-]{1,100}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_ENV_VALUE = re.compile(r"^[^,\n\x00'\"]*$")  # -v splits on commas


def options(job: JobSpec, read: Directives) -> list[str]:
    argv: list[str] = []
    for option, value in sorted(job.forced.items()):
        if option not in FLAGS or not WORD.match(value):
            raise TemplateError(f"{option}={value!r}: a PBS queue target may force {', '.join(FLAGS)}, as names")
        argv += [FLAGS[option], value]
    if read.time_s is None:
        argv += ["-l", f"walltime={walltime(job.runtime_limit_s)}"]
    env = {"GRIDLANE_WORKLOAD_ID": str(job.workload_id), **job.env}
    for key, value in env.items():
        if not _ENV_NAME.match(key) or not _ENV_VALUE.match(value):
            raise TemplateError(f"{key}: not an environment variable qsub's -v can carry")
    return [*argv, "-v", ",".join(f"{k}={v}" for k, v in env.items())]
