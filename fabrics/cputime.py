"""The CPU time a job has used on this node, as its sampler reads it. Standard library only: the sampler
(fabrics.sampler) carries this module's source to the node, where Gridlane is not installed.

1. The job's cgroup, where the batch system keeps one (Slurm's task/cgroup: a `job_<id>` folder on the path of
   the sampler's own cgroup, /proc/self/cgroup): cgroup v2's cpu.stat `usage_usec`, else cgroup v1's
   cpuacct.usage (nanoseconds). Every process of the job on the node counts, ended ones included.
2. Else the job's processes, as Slurm's own jobacct_gather/linux reads a step: every process of this user whose
   environment says SLURM_JOB_ID=<id>, less the sampler's own step, its user and system time plus that of the
   children it has reaped (fields 14-17 of /proc/<pid>/stat, in clock ticks).

None where neither says (no job id, nothing readable).
"""

from __future__ import annotations

import os

CGROUP_ROOTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified")


def job_cpu_seconds(
    job_id: str, own_step: str = "", proc: str = "/proc", roots: tuple[str, ...] = CGROUP_ROOTS
) -> float | None:
    """Seconds of CPU the job has used on this node so far (see the module's docstring); None when unknown."""
    if not job_id or not job_id.isdigit():
        return None
    found = cgroup_cpu_seconds(job_id, proc, roots)
    return found if found is not None else processes_cpu_seconds(job_id, own_step, proc)


def cgroup_cpu_seconds(job_id: str, proc: str = "/proc", roots: tuple[str, ...] = CGROUP_ROOTS) -> float | None:
    """From the job's cgroup on the path of this process's own (v2 first, then v1's cpuacct); None without one."""
    try:
        with open(os.path.join(proc, "self", "cgroup")) as lines:
            entries = [line.rstrip("\n").split(":", 2) for line in lines]
    except OSError:
        return None
    marker = "/job_" + job_id
    for entry in sorted(entries, key=lambda e: e[0] != "0"):  # v2 ("0::/...") first
        if len(entry) != 3 or marker not in entry[2] + "/":
            continue
        path = entry[2][: entry[2].index(marker) + len(marker)]
        controllers = entry[1].split(",")
        for root in roots:
            if entry[0] == "0":
                value = _stat_value(os.path.join(root + path, "cpu.stat"), "usage_usec")
                if value is not None:
                    return value / 1e6
            elif "cpuacct" in controllers:
                for folder in ("cpuacct", "cpu,cpuacct"):
                    value = _number(os.path.join(root, folder + path, "cpuacct.usage"))
                    if value is not None:
                        return value / 1e9
    return None


def processes_cpu_seconds(job_id: str, own_step: str = "", proc: str = "/proc") -> float | None:
    """From the job's processes on this node (this user's only: another's are not readable); None when none."""
    wanted = ("SLURM_JOB_ID=" + job_id).encode()
    own = ("SLURM_STEP_ID=" + own_step).encode() if own_step else None
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    total, seen = 0, 0
    for name in os.listdir(proc):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(os.path.join(proc, name, "environ"), "rb") as env:
                variables = env.read().split(b"\0")
            if wanted not in variables or (own is not None and own in variables):
                continue
            with open(os.path.join(proc, name, "stat")) as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone, or not ours
        total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
        seen += 1
    return total / ticks if seen else None


def _stat_value(path: str, key: str) -> int | None:
    try:
        with open(path) as lines:
            for line in lines:
                name, _, value = line.partition(" ")
                if name == key:
                    return int(value)
    except (OSError, ValueError):
        return None
    return None


def _number(path: str) -> int | None:
    try:
        with open(path) as text:
            return int(text.read().strip())
    except (OSError, ValueError):
        return None
