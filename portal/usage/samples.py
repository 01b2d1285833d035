"""GPU utilisation reported by a job's own sampler (fabrics.sampler): the environment it gets, and its reports.

At dispatch a job on Slurm, PBS or the local fabric gets a samples URL, the interval
(GRIDLANE_SAMPLE_SECONDS) and the workload's secret: the one its notebook callback uses
(portal.workloads.notebook_endpoint), derived from the run id, so an earlier attempt's job or another
workload's cannot speak for this one. A native script (the user's own, byte for byte) gets none: its
environment travels on sbatch's command line, and no sampler runs in it.

A report is nvidia-smi's output as printed; `check_sample` reads it strictly (fabrics.sampler.parse) and
`do_sample` keeps one UsageSample of it, while the workload starts or runs, and at most one per workload
every GRIDLANE_SAMPLE_MIN_INTERVAL_S (a sampler gone wild floods nothing: the excess is refused and
counted). The sample keeps the average utilisation over the GPUs that report one (None where none does:
"unknown", never 0) and the memory they use.
"""

from __future__ import annotations

import logging
import math
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.urls import reverse

from fabrics.sampler import SAMPLE_SECONDS_ENV, SAMPLES_URL_ENV, Reading, parse
from fabrics.ssh.notebook import ENDPOINT_SECRET_ENV
from portal.usage.models import UsageSample
from portal.worker import stats
from portal.workloads.models import Workload
from portal.workloads.notebook_endpoint import secret
from portal.workloads.states import State

log = logging.getLogger("gridlane.usage")

SAMPLED_FABRICS = frozenset({"slurm", "pbs", "local"})  # agents report their own; Kubernetes has DCGM
REPORTING = (State.DISPATCHING, State.RUNNING)  # the job may run before sync has seen it start
FIELDS = frozenset({"nvidia_smi"})


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


def job_env(w: Workload) -> dict[str, str]:
    """The sampler's environment: where to post, how often, and the secret (else nothing)."""
    if not sampled(w):
        return {}
    url = settings.GRIDLANE_PUBLIC_URL + reverse("api:workload-samples", args=[w.pk])
    return {
        SAMPLES_URL_ENV: url,
        SAMPLE_SECONDS_ENV: f"{settings.GRIDLANE_SAMPLE_SECONDS:g}",
        ENDPOINT_SECRET_ENV: secret(w.run_id),
    }


def check_sample(data: Any) -> tuple[list[Reading] | None, dict[str, list[str]]]:
    """The GPUs' readings in a report body, or the errors per field: `{"nvidia_smi": "<its output>"}`."""
    if not isinstance(data, dict):
        return None, {"detail": ['Send a JSON object: {"nvidia_smi": "..."}.']}
    errors = {str(name)[:50]: ["Unknown field."] for name in sorted(set(data) - FIELDS, key=str)}
    text = data.get("nvidia_smi")
    if not isinstance(text, str):
        errors["nvidia_smi"] = ["The output of nvidia-smi --query-gpu=index,utilization.gpu,memory.used."]
        return None, errors
    try:
        readings = parse(text)
    except ValueError as error:
        errors["nvidia_smi"] = [str(error)]
    return (None, errors) if errors else (readings, {})


def do_sample(w: Workload, readings: list[Reading], now: datetime) -> UsageSample:
    """Keep one sample of the workload's GPUs at `now`; Refused when it takes none now, TooSoon when the last
    was taken less than the minimum interval ago. One conditional update of the workload's row checks both and
    takes the turn (two reports racing cannot both get it), then one insert: two queries when accepted."""
    interval = timedelta(seconds=settings.GRIDLANE_SAMPLE_MIN_INTERVAL_S)
    took = (
        Workload.objects.filter(pk=w.pk, state__in=REPORTING)
        .filter(Q(last_sample_at__isnull=True) | Q(last_sample_at__lte=now - interval))
        .update(last_sample_at=now)
    )
    if not took:
        state, last = Workload.objects.filter(pk=w.pk).values_list("state", "last_sample_at").get()
        if state not in REPORTING:
            raise Refused("The workload neither starts nor runs; it takes no samples now.")
        raise TooSoon(max(1, math.ceil((last + interval - now).total_seconds())) if last else 1)
    known = [r.utilisation for r in readings if r.utilisation is not None]
    memory = [r.memory_mib for r in readings if r.memory_mib is not None]
    return UsageSample.objects.create(
        workload_id=w.pk,
        at=now,
        source=UsageSample.Source.JOB,
        gpus_milli=w.gpus_milli * w.nodes,
        gpu_utilisation=sum(known) / len(known) if known else None,
        gpu_memory_mib=sum(memory) if memory else None,
    )


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
    stats.count(**{f"usage_samples_{outcome}": 1})
