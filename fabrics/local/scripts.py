"""A user's own sbatch script, run as written on the local fabric (the portal's host). Pure.

A local queue target IT lets run scripts (`QueueTarget.runs_scripts`) reads `#SBATCH` lines with Slurm's
reader and honours what one host can: the resources asked (counted by the scheduler, as for any local work),
--time (the supervisor's deadline), --job-name (the workload's name), --output and --error (the files get the
output as sbatch would write them, and the portal's log keeps it too), --open-mode and --array (Gridlane's own
elements, each with SLURM_ARRAY_TASK_ID). What it cannot honour (--exclusive, --nice, --signal, and every
directive IT might let a Slurm target's scripts carry) is refused at submit, naming the line.

The job's folder holds the script byte for byte (`script`); job.sh runs it through its own `#!` line with
Slurm's variables set, from the job's work/ folder as sbatch runs it from where it was submitted.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from fabrics.base import JobSpec
from fabrics.slurm import directives as slurm_directives
from fabrics.slurm.directives import Directive, DirectiveError

SCRIPT_FILE = "script"  # in the job's folder, beside job.sh
HONOURED = frozenset(
    {
        "nodes", "ntasks", "ntasks-per-node", "cpus-per-task", "cpus-per-gpu", "gpus", "gpus-per-node",
        "gpus-per-task", "gres", "mem", "mem-per-cpu", "mem-per-gpu", "time", "job-name", "output", "error",
        "open-mode", "array",
    }
)  # fmt: skip
WHY_NOT = {
    "exclusive": "the local fabric shares its one host",
    "nice": "the local fabric has no queue of its own to lower a job in",
    "signal": "the local fabric sends no warning signal before a job's time ends",
}
# sbatch's filename patterns the local fabric fills in; any other %-pattern stays as written.
_PATTERN = re.compile(r"%(%|[jxuAa])")


def check(found: Sequence[Directive]) -> None:
    """DirectiveError (naming the line) for a directive the local fabric cannot honour."""
    for d in found:
        if d.option not in HONOURED:
            why = WHY_NOT.get(d.option, "it runs scripts on the portal's host, not on a Slurm cluster")
            raise DirectiveError(d.line, f"--{d.option}: the local fabric cannot honour it ({why}); remove the line")


def filename(pattern: str, job: JobSpec, name: str) -> str:
    """sbatch's --output/--error pattern with %j (the job: its workload id), %x (its name), %u (its owner),
    %A and %a (its array and index) and %% filled in."""
    values = {
        "%": "%",
        "j": str(job.workload_id),
        "x": name,
        "u": job.owner,
        "A": job.array_id or str(job.workload_id),
        "a": job.array or "0",
    }
    return _PATTERN.sub(lambda m: values[m.group(1)], pattern)


def wrapper(job: JobSpec) -> str:
    """job.sh for a script: Slurm's variables, then the script itself, its output also written where its
    --output and --error say (in the job's log either way). The script's exit status is the job's."""
    read = slurm_directives.read(job.script)
    name = read.job_name or job.name
    env = {
        "SLURM_JOB_ID": str(job.workload_id),
        "SLURM_JOB_NAME": name,
        "SLURM_JOB_NUM_NODES": "1",
        "SLURM_NNODES": "1",
        "SLURM_CPUS_PER_TASK": str(read.cpus_per_task),
        "SLURM_NTASKS": str(read.tasks_per_node),
    }
    if job.array:
        env |= {"SLURM_ARRAY_TASK_ID": job.array, "SLURM_ARRAY_JOB_ID": job.array_id}
    lines = ["#!/bin/bash", "# Gridlane local job: a script as written", f": workload {job.workload_id}"]
    lines += [f"export {key}={shlex.quote(value)}" for key, value in env.items()]
    lines += ['export SLURM_SUBMIT_DIR="$PWD"', f'script="$GRIDLANE_JOB_DIR/{SCRIPT_FILE}"']
    out = filename(read.output, job, name) if read.output else ""
    err = filename(read.error, job, name) if read.error else ""
    append = (d := read.given("open-mode")) is not None and (d.value or "").startswith("a")
    for path in dict.fromkeys(p for p in (out, err) if p):
        quoted = shlex.quote(path)  # sbatch opens (or truncates) each file before the job starts
        lines.append(f'mkdir -p -- "$(dirname -- {quoted})" && : {">>" if append else ">"} {quoted} || exit 1')
    if not out and not err:
        lines.append('exec "$script"')
        return "\n".join(lines) + "\n"
    # Copies (tee) of stdout and stderr, waited for: nothing of a job outlives its script (the supervisor ends
    # its group), so the files are whole when the job has ended. --output alone takes stderr too, as sbatch's.
    lines.append("exec 3>&1 4>&2")
    if out:
        lines.append(f"exec 1> >(tee -a -- {shlex.quote(out)} >&3); copies=$!")
    if out and err in ("", out):  # one file: one stream, kept in the order it was written, as sbatch keeps it
        lines.append("exec 2>&1")
    else:
        lines.append(f'exec 2> >(tee -a -- {shlex.quote(err or out)} >&4); copies="${{copies:-}} $!"')
    lines += ['"$script" 3>&- 4>&-; status=$?', "exec 1>&3 2>&4 3>&- 4>&-", "wait $copies", 'exit "$status"']
    return "\n".join(lines) + "\n"
