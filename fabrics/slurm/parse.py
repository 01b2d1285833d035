"""What Slurm's commands print, read into values. Pure; tested on output captured from a real cluster.

The fabric asks for text with chosen fields (`squeue -O`, `sacct -P`, `sinfo -O`) rather than
`--json`: 22.05's `squeue --json` ignores every filter and dumps the whole cluster, and the JSON
shape changes with each data_parser version, while these field names hold from 20.11 to 24.x.
Fields end with \\x1f and records with \\x1e, so no value can split a row. Times are asked for in
UTC (the commands run with TZ=UTC) and printed as `2026-11-30T02:26:07`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from fabrics.base import JobState, JobStatus, Resources
from fabrics.slurm import reasons

FIELD_END = "\x1f"
RECORD_END = "\x1e"

# squeue -O fields, in this order; the free-text ones last.
SQUEUE_FIELDS = (
    "JobID",
    "State",
    "Reason",
    "exit_code",
    "SubmitTime",
    "StartTime",
    "EndTime",
    "BatchHost",
    "tres-alloc",
    "Name",
    "Comment",
)
SACCT_FIELDS = ("JobIDRaw", "State", "Reason", "ExitCode", "Submit", "Start", "End", "NodeList", "AllocTRES", "JobName")
SINFO_FIELDS = ("NodeHost", "Partition", "StateLong", "CPUs", "CPUsState", "Memory", "AllocMem", "Gres", "GresUsed")

# Slurm's job states -> ours. Anything else is undetermined (REVOKED, a state of a newer Slurm...).
STATES = {
    "PENDING": JobState.QUEUED,
    "CONFIGURING": JobState.QUEUED,  # nodes allocated, still booting
    "REQUEUED": JobState.QUEUED,
    "REQUEUE_HOLD": JobState.QUEUED,
    "REQUEUE_FED": JobState.QUEUED,
    "RESV_DEL_HOLD": JobState.QUEUED,
    "SPECIAL_EXIT": JobState.QUEUED,  # held after a special exit code, until released
    "RUNNING": JobState.RUNNING,
    "COMPLETING": JobState.RUNNING,
    "SUSPENDED": JobState.RUNNING,
    "STOPPED": JobState.RUNNING,
    "SIGNALING": JobState.RUNNING,
    "STAGE_OUT": JobState.RUNNING,
    "RESIZING": JobState.RUNNING,
    "COMPLETED": JobState.SUCCEEDED,
    "FAILED": JobState.FAILED,
    "NODE_FAIL": JobState.FAILED,
    "BOOT_FAIL": JobState.FAILED,
    "OUT_OF_MEMORY": JobState.FAILED,
    "PREEMPTED": JobState.FAILED,
    "CANCELLED": JobState.CANCELLED,
    "TIMEOUT": JobState.TIMED_OUT,
    "DEADLINE": JobState.TIMED_OUT,
}
# Why a job failed, when its exit code alone does not say.
FAILURES = {
    "NODE_FAIL": "the node it ran on failed",
    "BOOT_FAIL": "its node failed to boot",
    "OUT_OF_MEMORY": "it ran out of memory",
    "PREEMPTED": "Slurm preempted it for another job",
    "DEADLINE": "it missed the deadline it was given",
}
_NO_VALUE = {"", "N/A", "n/a", "Unknown", "None", "(null)", "None assigned"}


@dataclass(frozen=True)
class SlurmJob:
    job_id: str
    state: str  # Slurm's word: PENDING, RUNNING, CANCELLED...
    reason: str = ""
    exit_code: int | None = None  # as a shell reports it: 128 + N for a job killed by signal N
    submitted_at: datetime | None = None
    started_at: datetime | None = None  # for a pending job: Slurm's estimate, if it has one
    finished_at: datetime | None = None
    host: str = ""
    allocated: Mapping[str, str] = field(default_factory=dict)  # TRES: cpu=2, mem=1G, gres/gpu=2
    name: str = ""
    comment: str = ""

    @property
    def gpus(self) -> int:
        """GPUs allocated to the job (0 while it waits)."""
        value = self.allocated.get("gres/gpu", "0")
        return int(value) if value.isdigit() else 0

    def status(self) -> JobStatus:
        state = STATES.get(self.state, JobState.UNDETERMINED)
        waiting = state is JobState.QUEUED
        reason = ""
        if waiting:
            reason = reasons.pending(self.reason)
        elif state is JobState.FAILED or state is JobState.TIMED_OUT:
            reason = FAILURES.get(self.state, "")
        elif state is JobState.UNDETERMINED:
            reason = f"Slurm reports the state {self.state or '(none)'}"
        return JobStatus(
            state,
            exit_code=self.exit_code if state.finished else None,
            host=self.host,
            started_at=None if waiting else self.started_at,
            finished_at=self.finished_at if state.finished else None,
            reason=reason,
            estimated_start=self.started_at if waiting else None,
        )


def squeue_format() -> str:
    """The `squeue -O` argument for SQUEUE_FIELDS."""
    return _format(SQUEUE_FIELDS)


def sinfo_format() -> str:
    return _format(SINFO_FIELDS)


def _format(fields: tuple[str, ...]) -> str:
    return ",".join(f"{name}:{RECORD_END if i == len(fields) - 1 else FIELD_END}" for i, name in enumerate(fields))


def records(text: str, fields: int) -> list[list[str]]:
    """Rows of exactly `fields` values from -O output; anything else (a login shell's chatter) is dropped."""
    rows = []
    for record in text.split(RECORD_END):
        values = record.split(FIELD_END)
        values[0] = values[0].rsplit("\n", 1)[-1]  # the first field holds no newline: what precedes it is chatter
        if len(values) == fields:
            rows.append(values)
    return rows


def squeue(text: str) -> list[SlurmJob]:
    """`squeue -h -t all -O <squeue_format()>` output (TZ=UTC)."""
    jobs = []
    for row in records(text, len(SQUEUE_FIELDS)):
        if not row[0].strip().isdigit():
            continue  # array and heterogeneous jobs (123_4, 123+0) are none of Gridlane's
        jobs.append(_squeue_job(row[0].strip(), row[1:]))
    return jobs


# Array elements: `squeue -r` (one line per element) with the array's job id and the element's index first.
TASK_FIELDS = ("ArrayJobID", "ArrayTaskID")


def squeue_tasks_format() -> str:
    return _format(TASK_FIELDS + SQUEUE_FIELDS)


def squeue_tasks(text: str) -> list[SlurmJob]:
    """`squeue -h -t all -r -O <squeue_tasks_format()>` output: array elements, each as `<array job id>_<index>`
    (what sbatch's %A_%a names); jobs of no array are left out."""
    jobs = []
    for row in records(text, len(TASK_FIELDS) + len(SQUEUE_FIELDS)):
        array_job, task = row[0].strip(), row[1].strip()
        if array_job.isdigit() and task.isdigit() and row[2].strip().isdigit():
            jobs.append(_squeue_job(f"{array_job}_{task}", row[3:]))
    return jobs


def _squeue_job(job_id: str, row: list[str]) -> SlurmJob:
    state, reason, exit_code, submitted, started, ended, host, tres, name, comment = row
    return SlurmJob(
        job_id=job_id,
        state=state.strip().split(" ")[0],
        reason=reason.strip(),
        exit_code=_wait_status(exit_code),
        submitted_at=parse_time(submitted),
        started_at=parse_time(started),
        finished_at=parse_time(ended),
        host="" if host.strip() in _NO_VALUE else host.strip(),
        allocated=_tres(tres),
        name=name,
        comment="" if comment in _NO_VALUE else comment,
    )


def sacct(text: str) -> list[SlurmJob]:
    """`sacct -X -n -P --delimiter=$'\\x1f' -o <SACCT_FIELDS>` output (TZ=UTC); the newest record per job id.

    sacct keeps jobs after slurmctld forgets them (MinJobAge), so it answers for old jobs. Job ids
    can repeat in accounting when a cluster starts its numbering again; the newest submission wins.
    Exit codes come from the text form: 22.05's `sacct --json` reports exit 0 for `exit 3`.
    """
    return _newest(
        _sacct_job(values[0].strip(), values[1:])
        for line in text.splitlines()
        if len(values := line.split(FIELD_END)) == len(SACCT_FIELDS) and values[0].strip().isdigit()
    )


# Array elements in accounting: JobID names them `<array job id>_<index>` (JobIDRaw is each one's own number).
SACCT_TASK_FIELDS = ("JobID", *SACCT_FIELDS)
_ELEMENT = re.compile(r"^\d+_\d+$")


def sacct_tasks(text: str) -> list[SlurmJob]:
    """`sacct -X -n -P -o <SACCT_TASK_FIELDS>` output: array elements as `<array job id>_<index>`, the newest
    record of each; elements that never started (`42_[6-9]`) and jobs of no array are left out."""
    return _newest(
        _sacct_job(values[0].strip(), values[2:])
        for line in text.splitlines()
        if len(values := line.split(FIELD_END)) == len(SACCT_TASK_FIELDS) and _ELEMENT.match(values[0].strip())
    )


def _sacct_job(job_id: str, values: list[str]) -> SlurmJob:
    state, reason, exit_code, submitted, started, ended, nodes, tres, name = values
    return SlurmJob(
        job_id=job_id,
        state=state.strip().split(" ")[0],  # "CANCELLED by 1001"
        reason=reason.strip(),
        exit_code=_exit_pair(exit_code),
        submitted_at=parse_time(submitted),
        started_at=parse_time(started),
        finished_at=parse_time(ended),
        host="" if nodes.strip() in _NO_VALUE else nodes.strip(),
        allocated=_tres(tres),
        name=name,
    )


def _newest(jobs: Iterable[SlurmJob]) -> list[SlurmJob]:
    newest: dict[str, SlurmJob] = {}
    for job in jobs:
        old = newest.get(job.job_id)
        if old is None or (job.submitted_at or _EPOCH) >= (old.submitted_at or _EPOCH):
            newest[job.job_id] = job
    return list(newest.values())


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_time(text: str) -> datetime | None:
    """An aware UTC datetime from `2026-11-30T02:26:07`; None for N/A, Unknown, None."""
    text = text.strip()
    if text in _NO_VALUE:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    except ValueError:
        return None


def _wait_status(text: str) -> int | None:
    """squeue's exit_code is the raw wait status: 768 is `exit 3`, 9 is SIGKILL."""
    text = text.strip()
    if not text.isdigit():
        return None
    status = int(text)
    signal = status & 0x7F
    return 128 + signal if signal else (status >> 8) & 0xFF


def _exit_pair(text: str) -> int | None:
    """sacct's ExitCode is `code:signal`: `3:0` is exit 3, `0:9` is SIGKILL."""
    code, _, signal = text.strip().partition(":")
    if not code.isdigit():
        return None
    return 128 + int(signal) if signal.isdigit() and int(signal) else int(code)


def _tres(text: str) -> dict[str, str]:
    """`cpu=2,mem=1G,node=1,billing=2,gres/gpu=2` as a dict."""
    pairs = (item.partition("=") for item in text.strip().split(",") if "=" in item)
    return {key: value for key, _, value in pairs}


def submitted_id(stdout: str) -> str | None:
    """The job id `sbatch --parsable` printed (`42`, or `42;cluster`), or an array element's as Gridlane records
    it (`42_5`); None when there is none."""
    for line in reversed(stdout.strip().splitlines()):
        match = re.match(r"^(\d+(?:_\d+)?)(;\S+)?$", line.strip())
        if match:
            return match.group(1)
    return None


@dataclass(frozen=True)
class Partition:
    name: str
    default: bool
    nodes: int
    usable_nodes: int
    total: Resources  # of the usable nodes
    free: Resources
    gpu_types: Mapping[str, int]  # GPUs of each type on usable nodes ("" when untyped)


@dataclass(frozen=True)
class Inventory:
    partitions: list[Partition]
    total: Resources  # every usable node once, whatever its partitions
    free: Resources

    def describe(self) -> str:
        parts = []
        for p in self.partitions:
            gpus = ", ".join(f"{n} {t or 'GPU'}" for t, n in sorted(p.gpu_types.items()))
            line = f"{p.name}: {p.usable_nodes}/{p.nodes} nodes up, {p.total.cpus_milli // 1000} CPUs"
            line += f", {p.total.memory_mib // 1024} GiB" + (f", GPUs: {gpus}" if gpus else "")
            parts.append(line)
        return "; ".join(parts)


_UNUSABLE = re.compile(r"down|drain|fail|maint|unk|inval|power|reboot|future|no_respond|[*~#!%$@]")


@dataclass(frozen=True)
class _NodeRow:
    host: str
    partition: str
    default: bool
    usable: bool
    total: Resources
    free: Resources
    gpu_types: Mapping[str, int]

    @classmethod
    def read(cls, row: list[str]) -> _NodeRow:
        host, partition, state, cpus, cpu_state, memory, alloc_mem, gres, gres_used = (v.strip() for v in row)
        gpus, used = _gres_counts(gres), _gres_counts(gres_used)
        idle_cpus = _int(cpu_state.split("/")[1]) if cpu_state.count("/") == 3 else 0  # alloc/idle/other/total
        return cls(
            host=host,
            partition=partition.rstrip("*"),
            default=partition.endswith("*"),
            usable=not _UNUSABLE.search(state.lower()),
            total=Resources(1000 * sum(gpus.values()), 1000 * _int(cpus), _int(memory)),
            free=Resources(
                1000 * (sum(gpus.values()) - sum(used.values())), 1000 * idle_cpus, _int(memory) - _int(alloc_mem)
            ),
            gpu_types=gpus,
        )


def sinfo(text: str) -> Inventory:
    """`sinfo -h -N -O <sinfo_format()>` output: one row per node and partition."""
    rows = [_NodeRow.read(row) for row in records(text, len(SINFO_FIELDS))]
    partitions = []
    for name in dict.fromkeys(row.partition for row in rows):
        members = [row for row in rows if row.partition == name]
        usable = [row for row in members if row.usable]
        types: dict[str, int] = {}
        for row in usable:
            for gpu_type, count in row.gpu_types.items():
                types[gpu_type] = types.get(gpu_type, 0) + count
        partitions.append(
            Partition(
                name=name,
                default=any(row.default for row in members),
                nodes=len(members),
                usable_nodes=len(usable),
                total=sum((row.total for row in usable), Resources()),
                free=sum((row.free for row in usable), Resources()),
                gpu_types=types,
            )
        )
    nodes = {row.host: row for row in rows if row.usable}  # a node in two partitions counts once
    return Inventory(
        partitions,
        total=sum((row.total for row in nodes.values()), Resources()),
        free=sum((row.free for row in nodes.values()), Resources()),
    )


def _gres_counts(text: str) -> dict[str, int]:
    """GPUs by type from `gpu:a100:4,gpu:h100:4(S:0-1)` or `gpu:a100:0(IDX:N/A)`; "" is the untyped."""
    counts: dict[str, int] = {}
    for item in _split_gres(text):
        item = re.sub(r"\(.*?\)", "", item)
        parts = item.split(":")
        if parts[0] != "gpu" or len(parts) < 2:
            continue
        count = parts[-1]
        gpu_type = parts[1] if len(parts) > 2 else ""
        if count.isdigit():
            counts[gpu_type] = counts.get(gpu_type, 0) + int(count)
    return counts


def _split_gres(text: str) -> Iterable[str]:
    """Split on the commas outside brackets: `gpu:a100:2(IDX:0-1),gpu:h100:0(IDX:N/A)`."""
    depth, start = 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            yield text[start:i]
            start = i + 1
    if text[start:]:
        yield text[start:]


def _int(text: str) -> int:
    digits = re.match(r"\d+", text.strip())
    return int(digits.group()) if digits else 0
