"""GPU utilisation reported by a job's own sampler (fabrics.sampler): the environment it gets, and its reports.

At dispatch a job on Slurm, PBS or the local fabric gets a samples URL, the interval
(GRIDLANE_SAMPLE_SECONDS) and the workload's secret: the one its notebook callback uses
(portal.workloads.notebook_endpoint), derived from the run id, so an earlier attempt's job or another
workload's cannot speak for this one. A native script (the user's own, byte for byte) gets none: its
environment travels on sbatch's command line, and no sampler runs in it.

A report is nvidia-smi's output as printed, one reading (`{"nvidia_smi": "..."}`, taken as it arrives) or
several (`{"readings": [{"age": <seconds before the post>, "nvidia_smi": "..."}, ...]}`): the sampler reads
every GRIDLANE_SAMPLE_SECONDS and posts GRIDLANE_SAMPLE_BATCH readings at a time (its first at once, its last
when the job ends), so that 2,000 GPUs sampled every 30 s cost the portal a post every 150 ms, not every 15 ms
(`make bench BENCH=samples`). Ages, not clocks: the portal dates each reading from its own clock, so a node's
clock cannot misdate it. `check_sample` reads a report strictly (fabrics.sampler.parse); `do_sample` keeps
one UsageSample per reading, while the workload starts or runs, no two of a workload closer than
GRIDLANE_SAMPLE_MIN_INTERVAL_S (a sampler gone wild floods nothing: the excess is refused and counted), none
older than `max_age()` (later than the rollups look back: they would never count it) and none before the
workload was admitted. A sample keeps the average utilisation over the GPUs that report one (None where none
does: "unknown", never 0) and the memory they use.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q

from fabrics.sampler import MAX_READINGS, SAMPLE_BATCH_ENV, SAMPLE_SECONDS_ENV, SAMPLES_URL_ENV, Reading, parse
from fabrics.ssh.notebook import ENDPOINT_SECRET_ENV
from portal.counters import counts
from portal.usage.models import UsageSample
from portal.workloads import notebook_endpoint
from portal.workloads.models import Workload, run_id_of
from portal.workloads.notebook_endpoint import secret
from portal.workloads.paths import Paths, path_of
from portal.workloads.states import State

log = logging.getLogger("gridlane.usage")

SAMPLED_FABRICS = frozenset({"slurm", "pbs", "local"})  # agents report their own; Kubernetes has DCGM
INSERT = (
    f"INSERT INTO {UsageSample._meta.db_table} "  # noqa: S608 (the model's own table)
    "(workload_id, at, source, gpus_milli, gpu_utilisation, gpu_memory_mib) VALUES (%s, %s, %s, %s, %s, %s)"
)
REPORTING = (State.DISPATCHING, State.RUNNING)  # the job may run before sync has seen it start
FIELDS = frozenset({"nvidia_smi", "readings"})
ITEM_FIELDS = frozenset({"age", "nvidia_smi"})
MAX_AGE_FIELD = 86_400  # an age past a day is nonsense; one past max_age() is read, and not kept


class Refused(Exception):
    """The workload takes no sample now (it neither starts nor runs)."""


class TooSoon(Exception):
    """Another sample of this workload was taken less than the minimum interval ago."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"One sample per {settings.GRIDLANE_SAMPLE_MIN_INTERVAL_S:g} s; try again later.")
        self.retry_after = retry_after


def sampled(w: Workload) -> bool:
    """A workload whose job runs the sampler: placed on Slurm, PBS or the local fabric, from Gridlane's script."""
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


@dataclass(frozen=True)
class Sampled:
    """What a report needs of its workload, read in one narrow query."""

    pk: UUID
    state: str
    last_sample_at: datetime | None
    admitted_at: datetime | None
    gpus_milli: int


def sampled_by(pk: UUID, authorization: str) -> Sampled | None:
    """The workload whose job sent `Authorization: Bearer <secret>` (None for a wrong secret or no such workload
    alike), with only the columns a sample needs: the web path's one read."""
    row = (
        Workload.objects.filter(pk=pk)
        .values_list("attempt", "state", "last_sample_at", "admitted_at", "gpus_milli", "nodes")
        .first()
    )
    attempt = row[0] if row is not None else 0
    if not notebook_endpoint.speaks_for(run_id_of(pk, attempt), authorization) or row is None:
        return None
    _, state, last, admitted, milli, nodes = row
    return Sampled(pk, state, last, admitted, milli * nodes)


def max_age() -> timedelta:
    """The oldest reading kept: two posts' worth, so that a sampler may miss one post (a portal restarting)."""
    return timedelta(seconds=2 * settings.GRIDLANE_SAMPLE_SECONDS * settings.GRIDLANE_SAMPLE_BATCH)


def check_sample(data: Any) -> tuple[list[Taken] | None, dict[str, Any]]:
    """The readings in a report body, each with its age in seconds, or the errors per field (per reading, by
    its index, under "readings")."""
    if not isinstance(data, dict):
        return None, {"detail": ['Send a JSON object: {"nvidia_smi": "..."} or {"readings": [...]}.']}
    errors: dict[str, Any] = {str(name)[:50]: ["Unknown field."] for name in sorted(set(data) - FIELDS, key=str)}
    if ("nvidia_smi" in data) == ("readings" in data):
        errors["detail"] = ['Send either "nvidia_smi" (one reading, taken now) or "readings".']
        return None, errors
    if "nvidia_smi" in data:
        gpus, wrong = _reading(data["nvidia_smi"])
        if wrong:
            errors["nvidia_smi"] = wrong
        return (None, errors) if errors else ([Taken(0, gpus)], {})
    listed = data["readings"]
    if not isinstance(listed, list) or not 0 < len(listed) <= MAX_READINGS:
        errors["readings"] = [f'A list of 1 to {MAX_READINGS} readings: {{"age": seconds, "nvidia_smi": "..."}}.']
        return None, errors
    taken, per_item = [], {}
    for index, item in enumerate(listed):
        one, wrong_fields = _item(item)
        if wrong_fields:
            per_item[str(index)] = wrong_fields
        elif one is not None:
            taken.append(one)
    if per_item:
        errors["readings"] = per_item
    return (None, errors) if errors else (taken, {})


@dataclass(frozen=True)
class Taken:
    """One reading of the node's GPUs, `age` seconds before it was posted."""

    age: int
    gpus: list[Reading]


def _item(item: Any) -> tuple[Taken | None, dict[str, list[str]]]:
    if not isinstance(item, dict):
        return None, {"detail": ['A reading: {"age": seconds, "nvidia_smi": "..."}.']}
    wrong: dict[str, list[str]] = {str(k)[:50]: ["Unknown field."] for k in sorted(set(item) - ITEM_FIELDS, key=str)}
    age = item.get("age")
    if isinstance(age, bool) or not isinstance(age, int) or not 0 <= age <= MAX_AGE_FIELD:
        wrong["age"] = [f"Whole seconds before the post it came with, 0 to {MAX_AGE_FIELD}."]
    gpus, bad = _reading(item.get("nvidia_smi"))
    if bad:
        wrong["nvidia_smi"] = bad
    return (None, wrong) if wrong or not isinstance(age, int) else (Taken(age, gpus), {})


def _reading(text: Any) -> tuple[list[Reading], list[str]]:
    if not isinstance(text, str):
        return [], ["The output of nvidia-smi --query-gpu=index,utilization.gpu,memory.used."]
    try:
        return parse(text), []
    except ValueError as error:
        return [], [str(error)]


def do_sample(w: Sampled, taken: list[Taken], now: datetime) -> int:
    """Keep the readings of the workload's GPUs (dated `now` less their age) that are due: no two closer than
    the minimum interval, none before the last one kept, none older than `max_age()` or from before the
    workload was admitted. Returns how many were kept (0: all too old); Refused when the workload takes none
    now, TooSoon when every reading is too close to the last one kept. Two queries when any is kept, in one
    transaction: a conditional update of the workload's row takes the turn (two reports racing cannot both
    get it; the loser is answered 429 and its sampler sends its readings again), and one insert."""
    if w.state not in REPORTING:
        raise Refused("The workload neither starts nor runs; it takes no samples now.")
    interval = timedelta(seconds=settings.GRIDLANE_SAMPLE_MIN_INTERVAL_S)
    oldest = max(now - max_age(), w.admitted_at or now - max_age())
    kept: list[tuple[datetime, list[Reading]]] = []
    last, too_soon = w.last_sample_at, False
    for t in sorted(taken, key=lambda t: -t.age):
        at = now - timedelta(seconds=t.age)
        if at < oldest:
            continue
        if last is not None and at < last + interval:
            too_soon = True
            continue
        kept.append((at, t.gpus))
        last = at
    if not kept:
        if too_soon and w.last_sample_at is not None:
            raise TooSoon(max(1, math.ceil((w.last_sample_at + interval - now).total_seconds())))
        return 0
    with transaction.atomic(savepoint=False):
        took = (
            Workload.objects.filter(pk=w.pk, state__in=REPORTING, last_sample_at=w.last_sample_at)
            if w.last_sample_at is not None
            else Workload.objects.filter(pk=w.pk, state__in=REPORTING, last_sample_at__isnull=True)
        ).update(last_sample_at=kept[-1][0])
        if took:
            _insert(w, kept)
    if not took:  # another report took the turn, or the workload ended since it was read
        raise TooSoon(max(1, math.ceil(interval.total_seconds())))
    return len(kept)


def _insert(w: Sampled, kept: list[tuple[datetime, list[Reading]]]) -> None:
    """The samples in one statement, written out: the ORM's bulk_create spends more on ten model instances than
    the database spends on the insert, and this is the path every sampler of a site takes."""
    workload = UsageSample._meta.get_field("workload").get_db_prep_value(w.pk, connection)
    rows = []
    for at, gpus in kept:
        known = [r.utilisation for r in gpus if r.utilisation is not None]
        memory = [r.memory_mib for r in gpus if r.memory_mib is not None]
        rows.append((
            workload,
            connection.ops.adapt_datetimefield_value(at),
            UsageSample.Source.JOB.value,
            w.gpus_milli,
            sum(known) / len(known) if known else None,
            sum(memory) if memory else None,
        ))  # fmt: skip
    with connection.cursor() as cursor:
        cursor.executemany(INSERT, rows)


def from_fabric(w: Workload, utilisation: float, now: datetime) -> bool:
    """Keep the fabric's own measure of a running workload's GPUs (Kubernetes: DCGM through Prometheus, read by
    sync), at most one per interval like a job's; False when it is not its turn. No query when the workload in
    hand says it is not (sync sees every running workload every cycle)."""
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
        gpu_utilisation=max(0.0, min(100.0, utilisation)),
    )  # fmt: skip
    return True


def count(outcome: str) -> None:
    """Count a report by how it was answered, for /metrics (gridlane_usage_samples_<outcome>)."""
    counts.count(**{f"usage_samples_{outcome}": 1})
