"""The one small interface every fabric implements, and the values that cross it.

Nothing here imports Django: the worker turns database rows into these values and back.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID

if TYPE_CHECKING:
    from fabrics.live import FreeNow


class JobState(enum.StrEnum):
    """A fabric's native states, normalised. Unknown native states map to UNDETERMINED."""

    QUEUED = "queued"  # accepted by the fabric, not started yet
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"  # the fabric stopped it at its runtime limit
    MISSING = "missing"  # the fabric has no such job (any more)
    UNDETERMINED = "undetermined"  # the fabric did not answer, or answered something we cannot read

    @property
    def finished(self) -> bool:
        return self in _FINISHED


_FINISHED = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.TIMED_OUT})


class FabricError(Exception):
    """A fabric call failed. `retryable` says whether trying again later can help."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class TemplateError(ValueError):
    """A queue target's template does not parse, or names something it may not."""


@dataclass(frozen=True, slots=True)
class Resources:
    """A resource amount in integer units: GPUs and CPUs in milli-units, memory in MiB."""

    gpus_milli: int = 0
    cpus_milli: int = 0
    memory_mib: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(
            self.gpus_milli + other.gpus_milli,
            self.cpus_milli + other.cpus_milli,
            self.memory_mib + other.memory_mib,
        )

    def __sub__(self, other: Resources) -> Resources:
        return Resources(
            self.gpus_milli - other.gpus_milli,
            self.cpus_milli - other.cpus_milli,
            self.memory_mib - other.memory_mib,
        )

    def times(self, n: int) -> Resources:
        return Resources(self.gpus_milli * n, self.cpus_milli * n, self.memory_mib * n)

    def fits_in(self, other: Resources) -> bool:
        return (
            self.gpus_milli <= other.gpus_milli
            and self.cpus_milli <= other.cpus_milli
            and self.memory_mib <= other.memory_mib
        )


@dataclass(frozen=True)
class TierHints:
    """What a workload's priority tier asks of a fabric with priorities of its own, as IT set it (validated when
    saved: a Slurm QOS name, a nice value, a PBS priority, a Kubernetes PriorityClass name); empty: nothing."""

    slug: str = ""
    slurm_qos: str = ""
    slurm_nice: int | None = None
    pbs_priority: int | None = None
    kubernetes_priority_class: str = ""


@dataclass(frozen=True)
class JobSpec:
    """Everything a fabric needs to run one workload; the same whatever the fabric."""

    workload_id: UUID
    name: str
    kind: str  # notebook | training | batch | vm
    owner: str
    group: str
    queue: str
    command: str
    per_node: Resources
    nodes: int = 1
    runtime_limit_s: int = 3600
    image: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    template: str = ""  # the queue target's script or manifest template; empty means the fabric's default
    # A native job: the user's own sbatch/qsub script, submitted byte for byte (no template), and what the
    # queue target forces on its command line (partition, account, qos, constraint, reservation: IT's words).
    script: str = ""
    forced: Mapping[str, str] = field(default_factory=dict)
    array: str = ""  # an array's element: its index (Slurm runs it as a one-task array, SLURM_ARRAY_TASK_ID set)
    array_id: str = ""  # an array's element: its array (the parent workload's id), for fabrics with arrays of their own
    # Who the job runs as, from the portal's identity mapping: the owner's POSIX user ("" = the fabric's own
    # account) and the scheduler account it is charged to (Slurm --account, PBS -A; "" = the user's default).
    run_as: str = ""
    account: str = ""
    tier: TierHints = TierHints()  # its priority tier's hints (frozen, so one shared default is safe)
    gpu_type: str = ""  # the GPU type it asked for (h100...); "": any, or what the fabric's settings pin


@dataclass(frozen=True)
class Endpoint:
    """A web server a job runs (a notebook's Jupyter, or an app it publishes), as the portal reaches it.

    `path` is where the server serves from: a notebook's Jupyter serves under the workload's connect path
    (its base_url), so the portal passes request paths on unchanged. `token` is the server's own secret,
    which the portal adds to each request it passes on and which never reaches a browser ("" for none).
    """

    host: str
    port: int
    token: str = ""
    path: str = "/"


@dataclass(frozen=True)
class JobStatus:
    state: JobState
    exit_code: int | None = None
    host: str = ""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    reason: str = ""  # the fabric's own words, e.g. why it still waits
    estimated_start: datetime | None = None  # the fabric's own estimate, for queued jobs
    endpoint: Endpoint | None = None  # notebooks: their server, once the fabric knows it answers
    # Its GPUs' mean utilisation (0-100) now, where the fabric measures it (Kubernetes with DCGM through
    # Prometheus); None where it does not: no data, never 0 or 100.
    gpu_utilisation: float | None = None
    # Its CPUs' utilisation (0-100 of the CPUs it requested) now, where the fabric measures it (Kubernetes with
    # cAdvisor through Prometheus); None where it does not.
    cpu_utilisation: float | None = None
    # Notebooks: when the server last saw use (kernel, terminal or API activity), by its own status API;
    # None where the fabric cannot tell, and then nothing is ever stopped for being idle.
    last_activity: datetime | None = None
    # Kubernetes: the IPs of the job's running pods, where its web server may be reached; () elsewhere.
    addresses: tuple[str, ...] = ()


@dataclass(frozen=True)
class Capacity:
    total: Resources
    healthy: bool = True
    detail: str = ""
    free: FreeNow | None = None  # what is free now, in the fabric's terms (fabrics/live.py); None: not observed


class Fabric(Protocol):
    """A place where workloads run. Every job it starts is tagged with its workload id."""

    def render(self, job: JobSpec) -> str:
        """The script or manifest `submit` would send, for the record. Pure."""
        ...

    def submit(self, job: JobSpec) -> str:
        """Start the job and return its external id."""
        ...

    def find(self, workload_id: UUID) -> str | None:
        """The external id of the job tagged with this workload id, or None when there is none."""
        ...

    def poll(self, ids: Sequence[str]) -> dict[str, JobStatus]:
        """Status of each job in one round trip; ids the fabric does not know come back MISSING."""
        ...

    def cancel(self, external_id: str) -> None: ...

    def tail(self, external_id: str, max_bytes: int = 16_384) -> str:
        """The end of the job's output, or "" when the fabric keeps none."""
        ...

    def capacity(self) -> Capacity: ...


class BatchFabric(Fabric, Protocol):
    """A fabric that looks up and submits many jobs in one round trip (an SSH command costs ~50 ms)."""

    def find_many(self, workload_ids: Sequence[UUID]) -> dict[UUID, str]:
        """External ids of the jobs already tagged with these workload ids; absent ones are left out."""
        ...

    def submit_many(self, jobs: Sequence[JobSpec]) -> dict[UUID, str | FabricError]:
        """Submit each job; per workload id its external id, or the error that job met."""
        ...


class InDatabaseFabric(BatchFabric, Protocol):
    """A fabric whose jobs are rows of the portal's own database (the agents' claims: agents pull them). Its
    `submit_many` writes only there, inside whatever transaction is open, and each job's external id is known
    before it is placed: the dispatcher records intent, the jobs and their ids in one transaction."""

    IN_DATABASE: bool  # True: how the dispatcher tells (in_database)
    QUEUED_REASON: str  # why a job placed there waits, until it starts: what its poll says of it

    def job_id(self, job: JobSpec) -> str:
        """The external id `submit_many` gives this job."""
        ...


def in_database(fabric: object) -> bool:
    """Whether a fabric places its jobs in the portal's own database (InDatabaseFabric)."""
    return bool(getattr(fabric, "IN_DATABASE", False))


class Batched:
    """`find` and `submit` for a fabric that does both in batches: one workload is a batch of one."""

    def find_many(self, workload_ids: Sequence[UUID]) -> dict[UUID, str]:
        raise NotImplementedError

    def submit_many(self, jobs: Sequence[JobSpec]) -> dict[UUID, str | FabricError]:
        raise NotImplementedError

    def find(self, workload_id: UUID) -> str | None:
        """The external id of the job tagged with this workload id, or None when there is none."""
        return self.find_many([workload_id]).get(workload_id)

    def submit(self, job: JobSpec) -> str:
        outcome = self.submit_many([job])[job.workload_id]
        if isinstance(outcome, FabricError):
            raise outcome
        return outcome


class ExtendableFabric(Fabric, Protocol):
    """A fabric that can let a running job run longer (a notebook's or a VM's lease, extended)."""

    def extend(self, external_id: str, ends_at: datetime) -> None:
        """Let the job run until `ends_at` (aware) instead of the end it was given; FabricError when it cannot."""
        ...


CANNOT_EXTEND = "this fabric cannot extend a lease"


def can_extend(fabric: object, settings: Mapping[str, Any] | None = None) -> bool:
    """Whether a fabric (or a fabric class) implements `extend`, and, where that depends on its settings (a
    classmethod `extends_with(settings)`: Slurm's `extend_time_limit`), whether these settings allow it
    (an instance's own settings when none are given)."""
    if not callable(getattr(fabric, "extend", None)):
        return False
    extends_with = getattr(fabric, "extends_with", None)
    if extends_with is None:
        return True
    if settings is None:
        settings = getattr(getattr(fabric, "config", None), "settings", {})
    return bool(extends_with(settings))


def extend(fabric: Fabric, external_id: str, ends_at: datetime) -> None:
    """`extend` where the fabric has it; elsewhere a FabricError that no retry helps."""
    method = getattr(fabric, "extend", None)
    if method is None:
        raise FabricError(CANNOT_EXTEND, retryable=False)
    method(external_id, ends_at)


class ReprioritisableFabric(Fabric, Protocol):
    """A fabric with priorities of its own that can change a queued job's (Slurm, PBS)."""

    def reprioritise(self, external_id: str, tier: TierHints) -> bool:
        """Give a job that has not started yet its new tier's priority; False when the tier asks nothing of this
        fabric. FabricError when the fabric refuses (e.g. the job started meanwhile)."""
        ...


def reprioritise(fabric: Fabric, external_id: str, tier: TierHints) -> bool:
    """`reprioritise` where the fabric has it; elsewhere nothing to do (False): the job keeps the priority it
    was submitted with, and Gridlane's own order is what changed."""
    method = getattr(fabric, "reprioritise", None)
    if method is None:
        return False
    return bool(method(external_id, tier))


# What a fabric that cannot read its logs by range still hands over as "the whole log": its last 8 MiB.
LOG_TAIL_FALLBACK_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class LogChunk:
    """Bytes [start, start + len(data)) of a job's output, of `total` bytes in all; `whole` is False where the
    fabric could only give its end (then `start` counts from the first byte it gave)."""

    data: bytes
    start: int
    total: int
    whole: bool = True


def read_log(fabric: Fabric, external_id: str, offset: int | None, length: int) -> LogChunk:
    """Part of a job's output: `length` bytes from `offset` (None: the last `length`), for every fabric.

    Fabrics with `read_log(external_id, offset, length) -> (bytes, total)` (the local fabric reads its files)
    give any range; the others give what `tail` reaches, at most LOG_TAIL_FALLBACK_BYTES, paged the same way."""
    method = getattr(fabric, "read_log", None)
    if method is not None:
        if offset is None:
            _, total = method(external_id, 0, 0)
            offset = max(0, total - length)
        data, total = method(external_id, offset, length)
        return LogChunk(data, offset, total)
    text = fabric.tail(external_id, max_bytes=LOG_TAIL_FALLBACK_BYTES).encode("utf-8", "replace")
    total = len(text)
    start = max(0, total - length) if offset is None else min(max(0, offset), total)
    return LogChunk(text[start : start + length], start, total, whole=total < LOG_TAIL_FALLBACK_BYTES)


def find_many(fabric: Fabric, workload_ids: Sequence[UUID]) -> dict[UUID, str]:
    """`find` for many workloads, in one round trip where the fabric can."""
    batch = getattr(fabric, "find_many", None)
    if batch is not None:
        return dict(batch(workload_ids))
    return {wid: external for wid in workload_ids if (external := fabric.find(wid)) is not None}


def submit_many(fabric: Fabric, jobs: Sequence[JobSpec]) -> dict[UUID, str | FabricError]:
    """`submit` for many jobs, in one round trip where the fabric can; one job's error does not stop the rest."""
    batch = getattr(fabric, "submit_many", None)
    if batch is not None:
        return dict(batch(jobs))
    results: dict[UUID, str | FabricError] = {}
    for job in jobs:
        try:
            results[job.workload_id] = fabric.submit(job)
        except FabricError as error:
            results[job.workload_id] = error
    return results


def place_many(
    fabric: Fabric, jobs: Sequence[JobSpec], *, fresh: Collection[UUID] = ()
) -> dict[UUID, str | FabricError]:
    """Each job's external id: the job its workload already has (from a dispatch that crashed), else a new one.

    One round trip where the fabric looks up and submits together (`place_many`: Slurm and PBS, one
    script under the login node's submit lock); elsewhere `find_many` for the jobs that are not fresh, then
    `submit_many` for the rest. When the look-up fails, that is every job's outcome: nothing is submitted blind.

    fresh: workloads whose tags were never handed to a fabric before (the dispatcher moved them from
    admitted to dispatching in this very dispatch, and a tag is never reused): there is nothing to find for
    them. Here they are not looked up at all (a burst's dispatch then costs an agent fabric no query of its
    claims, and Kubernetes no list of its Jobs); a fabric with a `place_many` of its own may skip the cluster
    query for them, and its own records of what it sent it still reads.
    """
    batch = getattr(fabric, "place_many", None)
    if batch is not None:
        return dict(batch(jobs, fresh=fresh))
    wanted = [job.workload_id for job in jobs if job.workload_id not in fresh]
    try:
        placed: dict[UUID, str | FabricError] = dict(find_many(fabric, wanted)) if wanted else {}
    except FabricError as error:
        return {job.workload_id: error for job in jobs}
    rest = [job for job in jobs if job.workload_id not in placed]
    if rest:
        placed |= submit_many(fabric, rest)
    return placed


@dataclass(frozen=True)
class FabricConfig:
    """What the portal knows of a fabric: its declared capacity and kind-specific settings."""

    name: str
    kind: str
    capacity: Resources
    settings: Mapping[str, Any] = field(default_factory=dict)
