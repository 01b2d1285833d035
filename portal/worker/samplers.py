"""Samplers for native jobs: a user's own script runs as written, and Gridlane samples it from outside.

Once a native workload (its own sbatch script) runs, this step starts the GPU sampler inside its job's
allocation, on every node, as the job's owner (fabrics.slurm.sampling: a step `srun --jobid --overlap`), once
per run of the workload. A SamplerStart row is written before the fabric is asked (intent first: a worker that
dies between the two never starts a second sampler in the same job) and says afterwards whether it started, or
why not. A sampler that could not start leaves the job untouched and its use "unknown", with that reason.

PBS joins the job the same way where it is Slurm's Torque wrappers (fabrics.pbs.sampling); any other PBS cannot
start a process inside a running job from outside it (pbsdsh works only inside the job), and its reason names
the missing piece: Gridlane's agent on the cluster's nodes. A fabric with no way at all says so (NO_STEP).
One query finds the due workloads, at most MAX_PER_CYCLE a cycle (each start is one SSH round trip).

A sampler step that dies at once (the fabric says so: a retryable FabricError, e.g. a step that ended before the
job's own processes were there to share its allocation with) is tried again, at most MAX_TRIES times for a run,
RETRY_S, then twice, four times as long after each failure; meanwhile its reason says it will be tried again, and
after the last its reason stays, with how many tries it took. A failure that no retry can mend (no way to start a
step, a refused user, a setting) is final at once.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Exists, OuterRef

from fabrics.base import FabricError
from portal.usage import efficiency, samples
from portal.usage.models import SamplerStart
from portal.worker.connections import fabric_for
from portal.workloads.models import Workload
from portal.workloads.notebook_endpoint import secret
from portal.workloads.states import State

log = logging.getLogger("gridlane.worker")

MAX_PER_CYCLE = 20
MAX_TRIES = 4
RETRY_S = 15.0  # the first retry's delay; each later one waits twice as long
STARTING = "starting"
KINDS = ("slurm", "pbs")
NO_STEP = "{kind} cannot start a process inside a running job from outside it; GPU use stays unknown"


def due(now: datetime | None = None) -> list[Workload]:
    """Running native workloads on Slurm or PBS whose current run has no SamplerStart yet, or one whose retry is
    due (by `now`), oldest start first."""
    tried = SamplerStart.objects.filter(workload=OuterRef("pk"), attempt=OuterRef("attempt"))
    again = tried.filter(started=False, retry_at__isnull=False, retry_at__lte=now) if now is not None else None
    running = (
        Workload.objects.filter(state=State.RUNNING, fabric__kind__in=KINDS, started_at__isnull=False)
        .exclude(script="")
        .exclude(external_id="")
    )
    wanted = ~Exists(tried) if again is None else ~Exists(tried) | Exists(again)
    return list(
        running.filter(wanted)
        .select_related("fabric")
        .only("pk", "attempt", "external_id", "nodes", "fabric", "started_at")
        .order_by("started_at")[:MAX_PER_CYCLE]
    )


def step(now: datetime) -> dict[str, int]:
    """Start the sampler of every due workload (how many started, how many could not and will be tried again, how
    many could not for good), and keep the summaries of workloads that finished
    (portal.usage.efficiency.keep_summaries)."""
    counts = {"started": 0, "unknown": 0, "retrying": 0}
    for w in due(now):
        reason = start(w, now)
        counts["started" if not reason else "retrying" if reason.endswith(AGAIN) else "unknown"] += 1
    counts["summaries"] = efficiency.keep_summaries(now, timedelta(minutes=settings.GRIDLANE_IDLE_WINDOW_MINUTES))
    return counts


AGAIN = "; it will be tried again)"


def start(w: Workload, now: datetime) -> str:
    """Start one workload's sampler; "" when it started, else why not (also kept on its SamplerStart)."""
    before = SamplerStart.objects.filter(workload_id=w.pk, attempt=w.attempt).values_list("tries", flat=True).first()
    tries = (before or 0) + 1
    SamplerStart.objects.update_or_create(
        workload_id=w.pk,
        defaults={
            "attempt": w.attempt, "at": now, "started": False, "reason": STARTING, "tries": tries, "retry_at": None,
        },
    )  # fmt: skip
    reason, retry = "", False
    launch = getattr(fabric_for(w.fabric), "start_sampler", None) if w.fabric is not None else None
    if launch is None:
        reason = NO_STEP.format(kind=w.fabric.kind.upper() if w.fabric is not None else "no fabric")
    else:
        try:
            launch(w.external_id, w.nodes, samples.native_env(w), secret(w.run_id))
        except FabricError as error:
            reason, retry = str(error)[:240] or "the sampler did not start", error.retryable
    retry_at = None
    if reason and retry and tries < MAX_TRIES:
        retry_at = now + timedelta(seconds=RETRY_S * 2 ** (tries - 1))
        reason = f"{reason} (try {tries} of {MAX_TRIES}{AGAIN}"
    elif reason and retry:
        reason = f"{reason} (after {tries} tries)"
    SamplerStart.objects.filter(workload_id=w.pk, attempt=w.attempt).update(
        started=not reason, reason=reason, retry_at=retry_at
    )
    if reason:
        log.info("no sampler for %s (job %s): %s", w.pk, w.external_id, reason)
    return reason
