"""Native PBS jobs on the agent's own node, sampled by the agent (`gridlane agent --pbs-jobs`).

A PBS whose qsub is not Slurm's cannot add Gridlane's sampler to a running job from outside it (fabrics.pbs.
sampling), but the node's agent, which runs as root beside the job, can read it where it runs:

- its processes: every one whose environment says PBS_JOBID=<id> (PBS's MoM sets it in every task of the job);
- its GPUs: the CUDA_VISIBLE_DEVICES its processes were given (PBS's cgroup hook sets it to the GPUs it assigned
  the job), by index or by UUID (mapped through `nvidia-smi --query-gpu=index,uuid`); where none of its processes
  has one, or one names a GPU this node does not show, its GPUs are unknown (None), never the node's all;
- its CPU time: from its cgroup (the folder named after the job on a process's cgroup path, PBS's cgroup hook's
  `pbs_jobs.service/jobid/<id>`: cgroup v2's cpu.stat, else v1's cpuacct.usage), else the sum over its processes
  (fields 14-17 of /proc/<pid>/stat), against the CPUs its processes may run on (their affinity: the job's
  cpuset), 0-100.

`Sampler.sample` reads every such job once (one scan of /proc) and gives a reading per job like the agent's own
jobs' (fabrics.agent.runner), with the job's GPUs on this node one by one (`gpus`: index, utilisation, memory; a
GPU that reads no utilisation, a MIG instance without NVML's answer, says null); the agent posts them to
`agent/pbs-jobs/usage/` and the portal keeps them as the running PBS workload's with that job id that runs on this
host, one of its execution hosts (portal.agents.native): each node's agent speaks for its own node of the job.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fabrics import cputime
from fabrics.agent import gpus as gpu_query
from fabrics.agent.client import ApiError

JOB_ENV = b"PBS_JOBID="
GPUS_ENV = b"CUDA_VISIBLE_DEVICES="
MAX_JOBS = 256  # jobs on one node read at once
UUID_QUERY = ["--query-gpu=index,uuid", "--format=csv,noheader"]
USAGE_PATH = "agent/pbs-jobs/usage/"


@dataclass
class NativeJob:
    job_id: str
    pids: list[int] = field(default_factory=list)
    gpus: set[str] = field(default_factory=set)  # the CUDA_VISIBLE_DEVICES entries its processes were given
    ungpued: bool = False  # one of its processes was given none


def discover(proc: Path = Path("/proc")) -> dict[str, NativeJob]:
    """The PBS jobs with a process on this node, by job id (one scan of /proc)."""
    jobs: dict[str, NativeJob] = {}
    for entry in proc.iterdir() if proc.is_dir() else []:
        if not entry.name.isdigit():
            continue
        try:
            variables = (entry / "environ").read_bytes().split(b"\0")
        except OSError:  # gone, or not readable
            continue
        job_id = next((v[len(JOB_ENV) :].decode(errors="replace") for v in variables if v.startswith(JOB_ENV)), "")
        if not job_id or (job_id not in jobs and len(jobs) >= MAX_JOBS):
            continue
        job = jobs.setdefault(job_id, NativeJob(job_id))
        job.pids.append(int(entry.name))
        given = next((v[len(GPUS_ENV) :].decode(errors="replace") for v in variables if v.startswith(GPUS_ENV)), None)
        if given is None:
            job.ungpued = True
        else:
            job.gpus.update(g.strip() for g in given.split(",") if g.strip())
    return jobs


def gpu_indexes(job: NativeJob, uuids: dict[str, int] | None = None) -> list[int] | None:
    """The job's GPUs as indexes, those given by UUID through `uuids` (nvidia-smi's index of each GPU's UUID);
    None where they are unknown (none given, or a UUID this node does not show), [] where it holds none
    (CUDA_VISIBLE_DEVICES empty in all its processes)."""
    if job.ungpued and not job.gpus:
        return None
    indexes = [int(g) if g.isdigit() else (uuids or {}).get(g, -1) for g in job.gpus]
    return None if -1 in indexes else sorted(indexes)


def uuid_indexes(binary: str) -> dict[str, int]:
    """Each GPU's index by its UUID (`nvidia-smi --query-gpu=index,uuid`); {} where nvidia-smi cannot say."""
    path = shutil.which(binary)
    if path is None:
        return {}
    try:
        out = subprocess.run([path, *UUID_QUERY], capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    pairs = [[f.strip() for f in line.split(",")] for line in out.splitlines()]
    return {p[1]: int(p[0]) for p in pairs if len(p) == 2 and p[0].isdigit() and p[1].startswith(("GPU-", "MIG-"))}


def cgroup_cpu_seconds(job: NativeJob, proc: Path, roots: tuple[str, ...]) -> float | None:
    """From the job's own cgroup, on the cgroup path of one of its processes; None without one."""
    for pid in job.pids:
        try:
            entries = [line.split(":", 2) for line in (proc / str(pid) / "cgroup").read_text().splitlines()]
        except OSError:
            continue
        for entry in sorted(entries, key=lambda e: e[0] != "0"):  # v2 ("0::/...") first
            if len(entry) != 3 or f"/{job.job_id}/" not in entry[2] + "/":
                continue
            path = entry[2][: entry[2].index(f"/{job.job_id}") + len(job.job_id) + 1]
            for root in roots:
                if entry[0] == "0":
                    usec = cputime._stat_value(os.path.join(root + path, "cpu.stat"), "usage_usec")
                    if usec is not None:
                        return usec / 1e6
                elif "cpuacct" in entry[1].split(","):
                    for folder in ("cpuacct", "cpu,cpuacct"):
                        nsec = cputime._number(os.path.join(root, folder + path, "cpuacct.usage"))
                        if nsec is not None:
                            return nsec / 1e9
    return None


def processes_cpu_seconds(job: NativeJob, proc: Path) -> float | None:
    """The user, system and reaped children's time of its processes; None when none can be read."""
    total, seen = 0, 0
    for pid in job.pids:
        try:
            fields = (proc / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(f) for f in fields[11:15])
            seen += 1
        except (OSError, IndexError, ValueError):
            continue
    return total / os.sysconf("SC_CLK_TCK") if seen else None


def cpus_of(job: NativeJob) -> int:
    """The CPUs its processes may run on (the job's cpuset, as PBS's cgroup hook sets it); the node's otherwise."""
    allowed: set[int] = set()
    for pid in job.pids:
        try:
            allowed |= os.sched_getaffinity(pid)
        except OSError:
            continue
    return len(allowed) or os.cpu_count() or 1


@dataclass
class Sampler:
    """Every native PBS job's reading, each time `sample` is called; the CPU share from the last call's time."""

    nvidia_smi: str = "nvidia-smi"
    proc: Path = Path("/proc")
    roots: tuple[str, ...] = cputime.CGROUP_ROOTS
    clock: Any = time.monotonic
    cpus: Callable[[NativeJob], int] = cpus_of
    last: dict[str, tuple[float, float]] = field(default_factory=dict)  # job id: (when, its CPU seconds)

    def sample(self) -> dict[str, dict[str, Any]]:
        jobs = discover(self.proc)
        now, at = self.clock(), datetime.now(UTC).isoformat()
        node_gpus = gpu_query.query(self.nvidia_smi) if jobs else []
        by_uuid = None
        if any(not g.isdigit() for job in jobs.values() for g in job.gpus):  # PBS gave some GPUs by UUID
            by_uuid = uuid_indexes(self.nvidia_smi)
        readings = {}
        for job_id, job in jobs.items():
            seconds = cgroup_cpu_seconds(job, self.proc, self.roots)
            seconds = seconds if seconds is not None else processes_cpu_seconds(job, self.proc)
            cpu, before = None, self.last.get(job_id)
            if seconds is not None and before is not None and now > before[0]:
                cpu = max(0.0, min(100.0, 100.0 * (seconds - before[1]) / (now - before[0]) / self.cpus(job)))
            if seconds is not None:
                self.last[job_id] = (now, seconds)
            reading: dict[str, Any] = {"at": at, "cpu_utilisation": cpu, "gpu_utilisation": None,
                                       "gpu_memory_mib": None}  # fmt: skip
            indexes = gpu_indexes(job, by_uuid)
            mine = [g for g in node_gpus if indexes is not None and g.index in indexes]
            if indexes is not None:  # its GPUs one by one, those that read none (MIG) with null
                reading["gpus"] = [{"index": g.index, "utilisation": g.utilisation, "memory_mib": g.memory_used_mib}
                                   for g in mine]  # fmt: skip
            utils = [g.utilisation for g in mine if g.utilisation is not None]
            if utils:  # the job-wide figures too, as an agent of an earlier version sent them
                reading["gpu_utilisation"] = sum(utils) / len(utils)
                reading["gpu_memory_mib"] = sum(g.memory_used_mib for g in mine)
            readings[job_id] = reading
        self.last = {job_id: kept for job_id, kept in self.last.items() if job_id in jobs}  # ended: forgotten
        return readings


@dataclass
class Poster:
    """Posts a sample's readings for this host. A portal of an earlier version does not know `gpus` (its 400 names
    it an unknown field): the same readings go again without it, and so do all later ones (the job-wide averages
    it knows), rather than none being kept until the portal is upgraded."""

    post: Callable[[str, dict[str, Any]], Any]
    host: str
    per_gpu: bool = True

    def __call__(self, readings: dict[str, dict[str, Any]]) -> None:
        try:
            self.post(USAGE_PATH, self._body(readings))
        except ApiError as error:
            if not (self.per_gpu and error.status == 400 and ".gpus: Unknown field" in str(error)):
                raise
            self.per_gpu = False
            self.post(USAGE_PATH, self._body(readings))

    def _body(self, readings: dict[str, dict[str, Any]]) -> dict[str, Any]:
        jobs = {job_id: [r if self.per_gpu else {k: v for k, v in r.items() if k != "gpus"}]
                for job_id, r in readings.items()}  # fmt: skip
        return {"host": self.host, "jobs": jobs}
