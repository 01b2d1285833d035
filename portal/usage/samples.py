"""GPU utilisation reported by a job's own sampler (fabrics.sampler): the environment it gets, and its reports.

At dispatch a job on Slurm, PBS or the local fabric gets a samples URL, the interval
(GRIDLANE_SAMPLE_SECONDS) and the workload's secret: the one its notebook callback uses
(portal.workloads.notebook_endpoint), derived from the run id, so an earlier attempt's job or another
workload's cannot speak for this one. A native script (the user's own, byte for byte) gets none: once its
job runs, the worker starts the sampler as a step inside the job's allocation, on every node, as the job's
owner (portal.worker.samplers, fabrics.slurm.sampling), with the same URL and secret.

A report is nvidia-smi's output as printed, one reading (`{"nvidia_smi": "..."}`, taken as it arrives) or
several (`{"readings": [{"age": <seconds before the post>, "nvidia_smi": "..."}, ...]}`): the sampler reads
every GRIDLANE_SAMPLE_SECONDS and posts GRIDLANE_SAMPLE_BATCH readings at a time (its first at once, its last
when the job ends), so that 2,000 GPUs sampled every 30 s cost the portal a post every 150 ms, not every 15 ms
(`make bench BENCH=samples`). Ages, not clocks: the portal dates each reading from its own clock, so a node's
clock cannot misdate it. `check_sample` reads a report strictly (fabrics.sampler.parse); `do_sample` keeps
one UsageSample per reading (and one UsageGpuSample per GPU of it), while the workload starts or runs, no two
of a workload's node closer than
GRIDLANE_SAMPLE_MIN_INTERVAL_S (a sampler gone wild floods nothing: the excess is refused and counted), none
older than `max_age()` (later than the rollups look back: they would never count it) and none before the
workload was admitted. A sample keeps the average utilisation over the GPUs that report one (None where none
does: "unknown", never 0) and the memory they use.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import connection, transaction
from django.db.models import OuterRef, Q, Subquery

from fabrics.sampler import MAX_READINGS, SAMPLE_BATCH_ENV, SAMPLE_SECONDS_ENV, SAMPLES_URL_ENV, Reading, parse
from fabrics.ssh.notebook import ENDPOINT_SECRET_ENV
from portal.counters import counts
from portal.usage import gpu_windows
from portal.usage.models import UsageGpuSample, UsageSample, UsageTurn
from portal.workloads import notebook_endpoint
from portal.workloads.models import Workload, run_id_of
from portal.workloads.notebook_endpoint import secret
from portal.workloads.paths import Paths, path_of
from portal.workloads.states import State

log = logging.getLogger("gridlane.usage")

SAMPLED_FABRICS = frozenset({"slurm", "pbs", "local"})  # agents report their own; Kubernetes has DCGM
INSERT = (
    f"INSERT INTO {UsageSample._meta.db_table} "  # noqa: S608 (the model's own table)
    "(workload_id, at, source, gpus_milli, gpu_utilisation, gpu_memory_mib, node, gpus_read, gpus_idle, "
    "cpu_utilisation, memory_mib) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)
ROWS_PER_INSERT = 500  # rows per statement: at most 5,500 parameters, far below any database's limit
IDLE_BELOW = 80.0  # percent: the seed's threshold; a GPU (or a window's average) below it is idle
CPU_IDLE_BELOW = 10.0  # percent of the CPUs held: idle is GPUs *and* CPUs under their thresholds (the seed's rule)
REPORTING = (State.DISPATCHING, State.RUNNING)  # the job may run before sync has seen it start
FIELDS = frozenset({"nvidia_smi", "readings", "node", "cpu_seconds"})
ITEM_FIELDS = frozenset({"age", "nvidia_smi", "node", "cpu_seconds"})
MAX_CPU_SECONDS = 1e12  # more than any job's CPU time (a thousand cores for thirty years)
NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")  # a host's short name, as the sampler sends it
GPU_INSERT = (
    f"INSERT INTO {UsageGpuSample._meta.db_table} "  # noqa: S608 (the model's own table)
    "(workload_id, at, node, gpu, utilisation, memory_mib) VALUES (%s, %s, %s, %s, %s, %s)"
)
TURN_TAKE = (  # the node's first reading: its turn row, while the workload starts or runs
    f"INSERT INTO {UsageTurn._meta.db_table} (workload_id, node, last_at, cpu_seconds) "  # noqa: S608 (the models' own tables)
    "SELECT %s, %s, %s, CAST(%s AS DOUBLE PRECISION) "
    f"WHERE EXISTS (SELECT 1 FROM {Workload._meta.db_table} WHERE id = %s AND state IN (%s, %s)) "
    "ON CONFLICT (workload_id, node) DO NOTHING"
)
TURN_MOVE = (  # a later reading: the turn moves on only from the value read (two reports racing: one wins)
    f"UPDATE {UsageTurn._meta.db_table} SET last_at = %s, cpu_seconds = %s "  # noqa: S608 (the models' own tables)
    "WHERE workload_id = %s AND node = %s AND last_at = %s "
    f"AND EXISTS (SELECT 1 FROM {Workload._meta.db_table} WHERE id = %s AND state IN (%s, %s))"
)
MAX_AGE_FIELD = 86_400  # an age past a day is nonsense; one past max_age() is read, and not kept


class Refused(Exception):
    """The workload takes no sample now (it neither starts nor runs)."""


class TooSoon(Exception):
    """Another sample of this workload was taken less than the minimum interval ago."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"One sample per {settings.GRIDLANE_SAMPLE_MIN_INTERVAL_S:g} s; try again later.")
        self.retry_after = retry_after


def sampled(w: Workload) -> bool:
    """A workload whose job runs the sampler from Gridlane's own script: placed on Slurm, PBS or the local fabric.
    A native script is sampled from outside it instead, once its job runs (portal.worker.samplers)."""
    return w.fabric is not None and w.fabric.kind in SAMPLED_FABRICS and not w.script


def job_env(w: Workload, paths: Paths | None = None) -> dict[str, str]:
    """The sampler's environment: where to post, how often to read and how many readings a post takes, and the
    secret (else nothing)."""
    if not sampled(w):
        return {}
    url = settings.GRIDLANE_PUBLIC_URL + path_of("api:workload-samples", w.pk, paths)
    return {
        SAMPLES_URL_ENV: url,
        SAMPLE_SECONDS_ENV: f"{settings.GRIDLANE_SAMPLE_SECONDS:g}",
        SAMPLE_BATCH_ENV: str(settings.GRIDLANE_SAMPLE_BATCH),
        ENDPOINT_SECRET_ENV: secret(w.run_id),
    }


def native_env(w: Workload) -> dict[str, str]:
    """What a native job's sampler step gets on its command line (portal.worker.samplers): where to post, how
    often to read, how many readings a post takes; never the secret, which travels on its stdin."""
    url = settings.GRIDLANE_PUBLIC_URL + path_of("api:workload-samples", w.pk)
    return {
        SAMPLES_URL_ENV: url,
        SAMPLE_SECONDS_ENV: f"{settings.GRIDLANE_SAMPLE_SECONDS:g}",
        SAMPLE_BATCH_ENV: str(settings.GRIDLANE_SAMPLE_BATCH),
    }


@dataclass(frozen=True)
class Sampled:
    """What a report needs of its workload, read in one narrow query."""

    pk: UUID
    state: str
    last_sample_at: datetime | None
    admitted_at: datetime | None
    gpus_milli: int
    cpus_milli: int = 0  # per node
    turn: tuple[str, datetime | None, float | None] | None = None  # (node, last_at, cpu_seconds), read with it


def sampled_by(pk: UUID, authorization: str, node: str | None = None) -> Sampled | None:
    """The workload whose job sent `Authorization: Bearer <secret>` (None for a wrong secret or no such workload
    alike), with only the columns a sample needs and, where the post names its node (`?node=` on its URL, as the
    sampler sends it), that node's turn: the web path's one read."""
    rows = Workload.objects.filter(pk=pk)
    fields = ["attempt", "state", "last_sample_at", "admitted_at", "gpus_milli", "nodes", "cpus_milli"]
    if node is not None:
        turn = UsageTurn.objects.filter(workload=OuterRef("pk"), node=node)
        rows = rows.annotate(
            turn_at=Subquery(turn.values("last_at")[:1]), turn_cpu=Subquery(turn.values("cpu_seconds")[:1])
        )
        fields += ["turn_at", "turn_cpu"]
    row = rows.values_list(*fields).first()
    attempt = row[0] if row is not None else 0
    if not notebook_endpoint.speaks_for(run_id_of(pk, attempt), authorization) or row is None:
        return None
    _, state, last, admitted, milli, nodes, cpus, *turn_read = row
    turn_of = (node, turn_read[0], turn_read[1]) if node is not None else None
    return Sampled(pk, state, last, admitted, milli * nodes, cpus, turn_of)


def node_of(request: Any) -> str | None:
    """The node a post names on its URL (`?node=`), where it is a host's short name; else None."""
    node = request.GET.get("node")
    return node if isinstance(node, str) and NODE.match(node) else None


def max_age() -> timedelta:
    """The oldest reading kept: two posts' worth, so that a sampler may miss one post (a portal restarting)."""
    return timedelta(seconds=2 * settings.GRIDLANE_SAMPLE_SECONDS * settings.GRIDLANE_SAMPLE_BATCH)


def check_sample(data: Any) -> tuple[list[Taken] | None, dict[str, Any]]:
    """The readings in a report body, each with its age in seconds and its node, or the errors per field (per
    reading, by its index, under "readings"). One post speaks for one node: its readings name the same one (or
    none, "": a single-node job's sampler of an earlier version)."""
    if not isinstance(data, dict):
        return None, {"detail": ['Send a JSON object: {"nvidia_smi": "..."} or {"readings": [...]}.']}
    errors: dict[str, Any] = {str(name)[:50]: ["Unknown field."] for name in sorted(set(data) - FIELDS, key=str)}
    node, wrong_node = _node(data.get("node", ""))
    if wrong_node:
        errors["node"] = wrong_node
    if ("nvidia_smi" in data) == ("readings" in data):
        errors["detail"] = ['Send either "nvidia_smi" (one reading, taken now) or "readings".']
        return None, errors
    if "nvidia_smi" in data:
        gpus, wrong = _reading(data["nvidia_smi"])
        if wrong:
            errors["nvidia_smi"] = wrong
        cpu, wrong_cpu = _cpu(data.get("cpu_seconds"))
        if wrong_cpu:
            errors["cpu_seconds"] = wrong_cpu
        return (None, errors) if errors else ([Taken(0, gpus, node, cpu)], {})
    listed = data["readings"]
    if not isinstance(listed, list) or not 0 < len(listed) <= MAX_READINGS:
        errors["readings"] = [f'A list of 1 to {MAX_READINGS} readings: {{"age": seconds, "nvidia_smi": "..."}}.']
        return None, errors
    taken, per_item = [], {}
    for index, item in enumerate(listed):
        one, wrong_fields = _item(item, node)
        if wrong_fields:
            per_item[str(index)] = wrong_fields
        elif one is not None:
            taken.append(one)
    if per_item:
        errors["readings"] = per_item
    elif len({t.node for t in taken}) > 1:
        errors["node"] = ["One node per post: its readings name different nodes."]
    return (None, errors) if errors else (taken, {})


@dataclass(frozen=True)
class Taken:
    """One reading of the node's GPUs (the job's, as its sampler reads them), `age` seconds before it was posted."""

    age: int
    gpus: list[Reading]
    node: str = ""
    cpu_seconds: float | None = None  # the job's CPU time on the node so far (fabrics.cputime)


def _node(value: Any) -> tuple[str, list[str]]:
    if value == "":
        return "", []
    if not isinstance(value, str) or not NODE.match(value):
        return "", ["A node's short host name: letters, digits, '.', '_' and '-', at most 64."]
    return value, []


def _item(item: Any, node: str) -> tuple[Taken | None, dict[str, list[str]]]:
    if not isinstance(item, dict):
        return None, {"detail": ['A reading: {"age": seconds, "nvidia_smi": "..."}.']}
    wrong: dict[str, list[str]] = {str(k)[:50]: ["Unknown field."] for k in sorted(set(item) - ITEM_FIELDS, key=str)}
    age = item.get("age")
    if isinstance(age, bool) or not isinstance(age, int) or not 0 <= age <= MAX_AGE_FIELD:
        wrong["age"] = [f"Whole seconds before the post it came with, 0 to {MAX_AGE_FIELD}."]
    cpu, bad_cpu = _cpu(item.get("cpu_seconds"))
    if bad_cpu:
        wrong["cpu_seconds"] = bad_cpu
    gpus: list[Reading] = []
    if "nvidia_smi" in item or cpu is None:  # a CPU-only job's reading has its CPU time and no GPU
        gpus, bad = _reading(item.get("nvidia_smi"))
        if bad:
            wrong["nvidia_smi"] = bad
    own, bad_node = _node(item.get("node", node))
    if bad_node:
        wrong["node"] = bad_node
    return (None, wrong) if wrong or not isinstance(age, int) else (Taken(age, gpus, own, cpu), {})


def _cpu(value: Any) -> tuple[float | None, list[str]]:
    if value is None:
        return None, []
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= MAX_CPU_SECONDS:
        return None, ["The job's CPU seconds on the node so far: a number from 0."]
    return float(value), []


def _reading(text: Any) -> tuple[list[Reading], list[str]]:
    if not isinstance(text, str):
        return [], ["The output of nvidia-smi --query-gpu=index,utilization.gpu,memory.used."]
    try:
        return parse(text), []
    except ValueError as error:
        return [], [str(error)]


def do_sample(w: Sampled, taken: list[Taken], now: datetime) -> int:
    """Keep the readings of the workload's GPUs on one node (dated `now` less their age) that are due: no two of
    the node closer than the minimum interval, none before the node's last one kept, none older than `max_age()`
    or from before the workload was admitted. Returns how many were kept (0: all too old); Refused when the
    workload takes none now, TooSoon when every reading is too close to the node's last one kept.

    Each node has its own turn (UsageTurn), so the nodes of a job, reading at the same moment, never crowd each
    other out. Four queries when any is kept, the last three in one transaction: the node's turn read (none where
    `sampled_by` read it with the workload: the sampler names its node on the URL); the turn
    taken with a conditional write (two reports racing cannot both get it; the loser is answered 429 and its
    sampler sends its readings again), only while the workload starts or runs; the readings (UsageSample, one per
    reading, with how many of its GPUs read idle); and their GPUs (UsageGpuSample, one per GPU, with their
    five-minute sums, UsageGpuWindow, which the efficiency page reads: one statement on PostgreSQL)."""
    if w.state not in REPORTING:
        raise Refused("The workload neither starts nor runs; it takes no samples now.")
    node = taken[0].node if taken else ""
    if w.turn is not None and w.turn[0] == node:  # read with the workload (the sampler's ?node=)
        turn, turn_cpu = w.turn[1], w.turn[2]
    else:
        turn, turn_cpu = UsageTurn.objects.filter(workload_id=w.pk, node=node).values_list(
            "last_at", "cpu_seconds"
        ).first() or (None, None)
    interval = timedelta(seconds=settings.GRIDLANE_SAMPLE_MIN_INTERVAL_S)
    oldest = max(now - max_age(), w.admitted_at or now - max_age())
    kept: list[Kept] = []
    last, too_soon = turn, False
    cpu_at, cpu = turn, turn_cpu
    for t in sorted(taken, key=lambda t: -t.age):
        at = now - timedelta(seconds=t.age)
        if at < oldest:
            continue
        if last is not None and at < last + interval:
            too_soon = True
            continue
        kept.append(Kept(at, t.gpus, cpu_share(cpu, cpu_at, t.cpu_seconds, at, w.cpus_milli)))
        if t.cpu_seconds is not None:
            cpu_at, cpu = at, t.cpu_seconds
        last = at
    if not kept:
        if too_soon and turn is not None:
            raise TooSoon(max(1, math.ceil((turn + interval - now).total_seconds())))
        return 0
    with transaction.atomic(savepoint=False):
        took = _take_turn(w, node, turn, kept[-1].at, cpu)
        if took:
            insert([Batch(w.pk, w.gpus_milli, node, kept)])
    if not took:  # another report took the turn, or the workload ended since it was read
        raise TooSoon(max(1, math.ceil(interval.total_seconds())))
    return len(kept)


@dataclass(frozen=True)
class Kept:
    """One reading of one node, dated, as it is written: its GPUs one by one, the job's CPU share there."""

    at: datetime
    gpus: list[Reading]
    cpu_utilisation: float | None
    memory_mib: int | None = None  # the job's host memory on the node, where its reader says
    # A job-wide GPU reading without its GPUs, (utilisation, memory): an agent of an earlier version
    # (portal.agents.native); kept as said, with no per-GPU rows and no idle count.
    averaged: tuple[float | None, int | None] | None = None


@dataclass(frozen=True)
class Batch:
    """A workload's readings on one node, for `insert`."""

    workload: Any  # its pk
    gpus_milli: int  # the GPUs it holds over all its nodes
    node: str
    kept: list[Kept]


def cpu_share(
    before: float | None, before_at: datetime | None, now: float | None, at: datetime, cpus_milli: int
) -> float | None:
    """The job's CPU utilisation on a node between two readings of its CPU time, in percent of the CPUs it holds
    there (0-100); None without two readings, with time that went back (its processes ended and were not counted
    any more), or without CPUs."""
    if before is None or before_at is None or now is None or cpus_milli <= 0 or at <= before_at or now < before:
        return None
    return min(100.0, 100.0 * (now - before) / ((at - before_at).total_seconds() * cpus_milli / 1000))


def _take_turn(w: Sampled, node: str, turn: datetime | None, last: datetime, cpu: float | None = None) -> bool:
    pk = UsageTurn._meta.get_field("workload").get_db_prep_value(w.pk, connection)
    at = connection.ops.adapt_datetimefield_value(last)
    states = [s.value for s in REPORTING]
    with connection.cursor() as cursor:
        if turn is None:
            cursor.execute(TURN_TAKE, [pk, node, at, cpu, pk, *states])
        else:
            old = connection.ops.adapt_datetimefield_value(turn)
            cursor.execute(TURN_MOVE, [at, cpu, pk, node, old, pk, *states])
        return bool(cursor.rowcount == 1)


def insert(batches: list[Batch], source: str = UsageSample.Source.JOB.value) -> None:
    """The samples in one statement and their GPUs in another, written out: the ORM's bulk_create spends more on
    ten model instances than the database spends on the insert, and this is the path every sampler of a site
    takes (a job's sampler, one workload's node a post; a node's agent, every native PBS job there a post). A GPU
    is idle in a reading when it reads below IDLE_BELOW; one that reads no utilisation (a MIG instance without
    NVML's answer) is neither idle nor busy: it counts in neither gpus_read nor gpus_idle."""
    prep = UsageSample._meta.get_field("workload").get_db_prep_value
    rows, gpu_rows, windows = [], [], []
    for batch in batches:
        workload, node = prep(batch.workload, connection), batch.node
        for k in batch.kept:
            known = [r.utilisation for r in k.gpus if r.utilisation is not None]
            memory = [r.memory_mib for r in k.gpus if r.memory_mib is not None]
            utilisation, used = (sum(known) / len(known) if known else None), (sum(memory) if memory else None)
            if k.averaged is not None and not k.gpus:
                utilisation, used = k.averaged
            when = connection.ops.adapt_datetimefield_value(k.at)
            rows.append((
                workload, when, source, batch.gpus_milli, utilisation, used, node, len(known) if known else None,
                sum(1 for u in known if u < IDLE_BELOW) if known else None, k.cpu_utilisation, k.memory_mib,
            ))  # fmt: skip
            gpu_rows += [(workload, when, node, r.index, r.utilisation, r.memory_mib) for r in k.gpus]
            windows += [(workload, k.at, node, r.index, r.utilisation, r.memory_mib) for r in k.gpus]
    if not rows:
        return
    with connection.cursor() as cursor:
        for first in range(0, len(rows), ROWS_PER_INSERT):
            cursor.execute(*_values(INSERT, rows[first : first + ROWS_PER_INSERT]))
        chunks = [gpu_rows[first : first + ROWS_PER_INSERT] for first in range(0, len(gpu_rows), ROWS_PER_INSERT)]
        for chunk in chunks[:-1]:
            cursor.execute(*_values(GPU_INSERT, chunk))
        # The last (the usual post's only) with their five-minute sums: one statement on PostgreSQL.
        gpu_windows.add(cursor, windows, before=_values(GPU_INSERT, chunks[-1]) if chunks else None)


def _values(statement: str, rows: list[tuple[Any, ...]]) -> tuple[str, list[Any]]:
    """One INSERT of all `rows` (`statement` ends with one row's VALUES (%s, ...)): one statement, not one each."""
    head, _, one = statement.rpartition("VALUES ")
    return head + "VALUES " + ", ".join([one] * len(rows)), [value for row in rows for value in row]


def from_fabric(w: Workload, utilisation: float | None, now: datetime, cpu: float | None = None) -> bool:
    """Keep the fabric's own measure of a running workload's GPUs and CPUs (Kubernetes: DCGM and cAdvisor
    through Prometheus, read by sync), at most one per interval like a job's; False when it is not its turn or
    there is nothing to keep. No query when the workload in hand says it is not (sync sees every running workload
    every cycle). Idle is judged on both, as on Slurm: GPUs *and* CPUs under their thresholds."""
    if utilisation is None and cpu is None:
        return False
    interval = timedelta(seconds=settings.GRIDLANE_SAMPLE_MIN_INTERVAL_S)
    if w.last_sample_at is not None and w.last_sample_at > now - interval:
        return False
    took = (
        Workload.objects.filter(pk=w.pk, state=State.RUNNING)
        .filter(Q(last_sample_at__isnull=True) | Q(last_sample_at__lte=now - interval))
        .update(last_sample_at=now)
    )
    if not took:
        return False
    w.last_sample_at = now
    UsageSample.objects.create(
        workload_id=w.pk, at=now, source=UsageSample.Source.FABRIC, gpus_milli=w.gpus_milli * w.nodes,
        gpu_utilisation=None if utilisation is None else max(0.0, min(100.0, utilisation)),
        cpu_utilisation=None if cpu is None else max(0.0, min(100.0, cpu)),
    )  # fmt: skip
    return True


def count(outcome: str) -> None:
    """Count a report by how it was answered, for /metrics (gridlane_usage_samples_<outcome>)."""
    counts.count(**{f"usage_samples_{outcome}": 1})
