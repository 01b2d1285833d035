"""The dry run: where a submission would land now, recording nothing. The submit's own checks (a refusal is the
submit's), then the worker's latest snapshot plus the request through decide() (scheduler/dryrun.py; one job
goes the fast way, scheduler/dryrun_fast.py).

What it keeps: the last snapshot this process built (snapshot.build, as the worker's admission reads it), with its
parts for the fast path worked out (scheduler/dryrun_fast.py). It is fresh while the submit generation is the one
it was built under and it is younger than GRIDLANE_DRY_RUN_SNAPSHOT_SECONDS (or BUILDS_APART times its build's
time, where that is longer). Once it ages it is still served, while one thread of the process rebuilds it beside
the requests, REBUILD_NICE lower in CPU priority than they are (stale-while-revalidate: at most one rebuild under
way; the answers carry `snapshot_at`, so their age shows). A request builds one itself only where there is none
yet, the generation moved (a changed policy is seen by the next dry run, as by the next submit) or the kept one is
older than STALEST_S. So a dry run costs the submit's checks (under the generation: a kept context, as a submit's)
and, on a kept snapshot, one placement; the build is not in it (with 10,000 waiting, 33 ms on a quiet machine: the
rows unchanged since the process's last build are not read whole again, snapshot.Kept; then 80 ms to decide its
cycle once, Known).

Why a rebuild in the web process rather than the worker's own snapshot published to it: the same code builds it
as before (nothing to serialise, no shared store), each process keeps one, and its age is bounded the same way.
Publishing was built and measured (10,000 waiting): pickling cost the worker's cycle 90 ms per publication, and
reading one back (65 ms) took longer than the incremental build it replaced (33 ms); so it was taken out.

What it writes: nothing. No workload, event, idempotency key, rate-limit count or fair-share usage (the snapshot
reads each team's decayed use as the worker last wrote it, without the GPU-seconds since).
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import connections
from django.utils import timezone

from fabrics.base import Resources
from portal.queues.models import Fabric
from portal.worker import snapshot as snapshots
from portal.workloads import calibration, context, services
from portal.workloads.models import Workload
from scheduler import model
from scheduler.decide import decide
from scheduler.dryrun import ADMIT, Placement, read_back
from scheduler.dryrun_fast import Memo

JOB_ID = "dry-run"  # the asked job's id in the snapshot (never a workload's: those are uuids)
# A snapshot is kept at least this many times as long as its build took: building takes at most a sixth of a
# process's time however slow a build is (10,000 waiting: 0.4 s on a quiet machine, 2.4 s on a loaded one).
BUILDS_APART = 5
# A snapshot older than this (or twice its keeping time, where that is longer) is not served while a rebuild runs
# beside: the request builds one (a rebuild beside that failed or hangs does not leave answers ever older).
STALEST_S = 30.0
# How much lower the CPU priority of a rebuild beside the requests runs (its thread's niceness, added).
REBUILD_NICE = 5


@dataclass(frozen=True)
class Prices:
    gpu: Decimal | None
    cpu: Decimal | None
    memory_gb: Decimal | None


@dataclass(frozen=True)
class Kept:
    """One snapshot and what a dry run reads beside it: each fabric's kind and prices."""

    snapshot: model.Snapshot
    generation: int | None
    built: float  # the clock's reading when it was built
    took: float  # how long the build took, in seconds
    kinds: dict[str, tuple[int, ...]]
    prices: dict[int, Prices]
    slices: Counter[tuple[int, int, str]]  # waiting work per team, queue and tier
    memo: Memo  # placements on this snapshot by shape, its parts worked out with the build


class Snapshots:
    """The last snapshot, kept while its generation holds and it is young; past that, served while one rebuild
    runs beside the requests (see the module docstring)."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        spawn: Callable[[Callable[[], None]], None] | None = None,
    ) -> None:
        self.clock = clock
        self.spawn = spawn or _in_thread  # how a rebuild runs beside the requests (a test runs it when it likes)
        self._kept: Kept | None = None
        self._lock = threading.Lock()  # one build in the request at a time: the others wait for it, then take it
        self._flight = threading.Lock()  # guards _rebuilding and _epoch
        self._rebuilding = False  # a rebuild is under way beside the requests: at most one
        self._epoch = 0  # forget() moves it: what a rebuild begun before it builds is not kept

    def latest(self, generation: int | None) -> Kept:
        """The kept snapshot; where it aged, still the kept one while a rebuild runs beside (started here unless
        one is under way); a new one, built here, where there is none, the `generation`
        (context.read_generation) moved, or it is older than STALEST_S (a rebuild that does not come back)."""
        kept = self._kept
        if kept is not None and kept.generation == generation:
            age, most = self.clock() - kept.built, self._most(kept)
            if 0 <= age < most:
                return kept
            if 0 <= age < max(STALEST_S, 2 * most):
                self._refresh(generation)
                return kept
        with self._lock:
            kept = self._kept
            if kept is None or not self._usable(kept, generation):
                kept = self._kept = _build(generation, self.clock())
        return kept

    def _most(self, kept: Kept) -> float:
        return max(settings.GRIDLANE_DRY_RUN_SNAPSHOT_SECONDS, BUILDS_APART * kept.took)

    def _usable(self, kept: Kept, generation: int | None) -> bool:
        age = self.clock() - kept.built
        return kept.generation == generation and 0 <= age < max(STALEST_S, 2 * self._most(kept))

    def _refresh(self, generation: int | None) -> None:
        """Start a rebuild beside the requests, unless one is under way."""
        with self._flight:
            if self._rebuilding:
                return
            self._rebuilding = True
            epoch = self._epoch

        def rebuild() -> None:
            try:
                fresh = _build(generation, self.clock())
                with self._flight:
                    kept = self._kept
                    if self._epoch == epoch and (kept is None or kept.built <= fresh.built):
                        self._kept = fresh  # (not over one built since, in a request, under a newer generation)
            finally:
                with self._flight:
                    self._rebuilding = False

        self.spawn(rebuild)

    def forget(self) -> None:
        with self._flight:
            self._epoch += 1
            self._kept = None


def _in_thread(rebuild: Callable[[], None]) -> None:
    """Run a rebuild in a thread of its own, which closes its database connection when done."""

    def run() -> None:
        _yield_cpu()
        try:
            rebuild()
        finally:
            connections.close_all()  # (this thread's own)

    threading.Thread(target=run, name="dry-run snapshot", daemon=True).start()


def _yield_cpu() -> None:
    """Lower this thread's CPU priority by REBUILD_NICE (Linux keeps a niceness per thread; elsewhere nothing):
    the rebuild is best-effort work, and the requests of its process, the worker and the database come first."""
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + REBUILD_NICE))
    except (AttributeError, OSError):  # no per-thread niceness here
        pass


def _build(generation: int | None, built: float) -> Kept:
    started = time.perf_counter()
    snap, _ = snapshots.build(timezone.now())
    rows = Fabric.objects.filter(enabled=True).values_list(
        "pk", "kind", "gpu_hour_price", "cpu_hour_price", "memory_gb_hour_price"
    )
    kinds: dict[str, tuple[int, ...]] = {}
    prices = {}
    for pk, kind, gpu, cpu, memory in rows:
        kinds[kind] = (*kinds.get(kind, ()), pk)
        prices[pk] = Prices(gpu, cpu, memory)
    slices = Counter((j.group_id, j.queue_id, j.priority) for j in snap.pending)
    memo = Memo()
    memo.prepare(snap)
    return Kept(snap, generation, built, time.perf_counter() - started, kinds, prices, slices, memo)


SNAPSHOTS = Snapshots()


def job_of(workload: Workload, kept: Kept) -> model.Job:
    """The workload a submit would record, as the scheduler would see it: submitted at the snapshot's `now`.
    An array is one of its elements (an array's parent is never scheduled)."""
    return model.Job(
        id=JOB_ID,
        group_id=workload.group_id,
        queue_id=workload.queue_id,
        per_node=Resources(workload.gpus_milli, workload.cpus_milli, workload.memory_mib),
        nodes=workload.nodes,
        priority=workload.priority,
        submitted_at=kept.snapshot.now,
        runtime_limit_s=workload.runtime_limit_s,
        owner_id=workload.owner_id,
        only_on=kept.kinds.get(workload.native_kind, ()) if workload.native_kind else None,
        array_id=JOB_ID if workload.array_size else "",
        array_throttle=workload.array_throttle or 0,
        gpu_type=workload.gpu_type,
    )


def estimate_band(queue_id: int, estimated: datetime | None, now: datetime) -> tuple[datetime, datetime] | None:
    """The band around an estimated start, where the queue's measured estimate error gives one; None until it does
    (the queue's band: workloads.calibration, one query per queue and minute in a process)."""
    if estimated is None:
        return None
    found = calibration.band_for(queue_id)
    if found is None:
        return None
    low, high = found
    return max(estimated + timedelta(seconds=low), now), estimated + timedelta(seconds=high)


def dry_run(user: Any, req: services.SubmitRequest, generation: int | None = None) -> dict[str, Any]:
    """The answer to one submission: refused as a submit would be (SubmitRejected, QueueForbidden), or where it
    would land. Work whose team, queue and tier already have a whole slice of candidates waiting (the cycle
    considers the oldest GRIDLANE_CANDIDATES_PER_QUEUE of each) waits behind them, unconsidered this cycle."""
    if generation is None:  # (the caller's, where it read it: auth.confirmed_generation)
        generation = context.read_generation()  # the submit's context is kept under it too, as a submit's is
    workload = services.check_submit(user, req, generation=generation)
    kept = SNAPSHOTS.latest(generation)
    job = job_of(workload, kept)
    if kept.slices[job.group_id, job.queue_id, job.priority] >= settings.GRIDLANE_CANDIDATES_PER_QUEUE:
        return _answer(workload, kept, Placement("wait", _first_target(kept, job), position=None), sliced=True)
    return _answer(workload, kept, kept.memo.place(kept.snapshot, job))


def dry_run_many(user: Any, items: list[tuple[services.SubmitRequest, str | None]]) -> list[dict[str, Any]]:
    """A bulk submit's answers, item by item: refused as the bulk submit would be (BulkRejected, SubmitRejected),
    or each where it would land beside the others (all in one decide())."""
    checked = services.check_submit_many(user, items)
    kept = SNAPSHOTS.latest(context.read_generation())
    if len(checked) == 1:
        return [_answer(checked[0][0], kept, kept.memo.place(kept.snapshot, job_of(checked[0][0], kept)))]
    jobs = [replace(job_of(w, kept), id=f"{JOB_ID}-{i}") for i, (w, _) in enumerate(checked)]
    whole = replace(kept.snapshot, pending=(*kept.snapshot.pending, *jobs))
    decisions = decide(whole)
    return [_answer(w, kept, read_back(whole, decisions, job)) for (w, _), job in zip(checked, jobs, strict=True)]


def _first_target(kept: Kept, job: model.Job) -> int | None:
    queue = kept.snapshot.queues.get(job.queue_id)
    return queue.fabric_ids[0] if queue is not None and queue.fabric_ids else None


def _answer(workload: Workload, kept: Kept, placed: Placement, sliced: bool = False) -> dict[str, Any]:
    snap = kept.snapshot
    fabric = snap.fabrics.get(placed.fabric_id) if placed.fabric_id is not None else None
    if placed.outcome == ADMIT:
        reason = "It would start now."
        if fabric is not None:
            reason = f"It would start now on {fabric.name}."
    elif sliced:
        reason = (
            f"It would wait behind {settings.GRIDLANE_CANDIDATES_PER_QUEUE} or more earlier workloads of its team "
            "in this queue and tier; it is considered when those go."
        )
    else:
        reason = placed.reason.message if placed.reason is not None else "It would wait."
    band = estimate_band(workload.queue_id, placed.estimated_start, snap.now)
    return {
        "outcome": placed.outcome,
        "target": fabric.name if fabric is not None else None,
        "estimated_start": snap.now if placed.outcome == ADMIT else placed.estimated_start,
        "estimate_band": list(band) if band is not None else None,
        "position": placed.position,
        "reason_code": placed.reason.code if placed.reason is not None else "",
        "reason": reason,
        "borrowing": placed.borrowing,
        "preemptible": placed.borrowing and _preemptible(snap, workload.queue_id),
        "estimated_cost": _cost(workload, kept.prices.get(placed.fabric_id or 0)),
        "snapshot_at": snap.now,
    }


def _preemptible(snap: model.Snapshot, queue_id: int) -> bool:
    queue = snap.queues.get(queue_id)
    return queue is not None and queue.preemptible


def _cost(workload: Workload, prices: Prices | None) -> dict[str, Any] | None:
    """Its runtime limit at the target's prices (GPUs, CPUs and memory, as the chargeback counts them): the most
    it would cost; None where the target has no price."""
    if prices is None or (prices.gpu is None and prices.cpu is None and prices.memory_gb is None):
        return None
    hours = Decimal(workload.runtime_limit_s) / 3600
    nodes = Decimal(workload.nodes)
    per_hour = (
        Decimal(workload.gpus_milli) / 1000 * (prices.gpu or 0)
        + Decimal(workload.cpus_milli) / 1000 * (prices.cpu or 0)
        + Decimal(workload.memory_mib) / 1024 * (prices.memory_gb or 0)
    )
    amount = (per_hour * nodes * hours).quantize(Decimal("0.01"))
    return {"amount": str(amount), "currency": settings.GRIDLANE_CURRENCY}
