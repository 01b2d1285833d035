"""django-q2 tasks. Thin: each takes the lock, then calls the worker's steps in order."""

from __future__ import annotations

import logging
import time
from typing import Any

from django.utils import timezone

from portal.usage import rollup
from portal.worker import apply, dispatch, snapshot, stats, sync, usage
from portal.worker.lock import cycle_lock
from scheduler import decide

log = logging.getLogger("gridlane.worker")


def cycle() -> dict[str, Any]:
    """One scheduling cycle. When another is running, ask it to go round once more instead: the work that
    asked for this cycle (a submit, a cancel) may have arrived after that one took its snapshot."""
    summary: dict[str, Any] = {}
    asked = False
    for _ in range(5):  # bounded: a steady stream of kicks is served by the periodic cycle anyway
        with cycle_lock() as held:
            if held:
                again = _run()
                summary = {k: summary.get(k, 0) + v for k, v in again.items()} | {"waiting": again["waiting"]}
        if not held:
            if asked:
                return summary or {"skipped": True}
            # Ask the running cycle to go round again, then try once more ourselves: it may have let go
            # between our try and our asking, and then nobody would see the request.
            stats.gauge(cycle_requested=1)
            asked = True
            continue
        if not stats.take_request():  # asked for while we ran (or just as we let go)? Go round again.
            break
    return summary


def _run() -> dict[str, Any]:
    started = time.perf_counter()
    # 1. Bring fabric status in: finished work frees its capacity before anything is decided.
    changed = sync.sync_all()
    # 2. Bring each team's decayed GPU use forward (fair share's U).
    now = timezone.now()
    usage.bring_forward(now)
    # 3. Take a snapshot and decide on it, away from the database.
    snap, rows = snapshot.build(now)
    decisions = decide(snap)
    # 4. Apply the decisions in one transaction.
    applied = apply.apply(decisions, rows)
    # 5. Hand admitted work to its fabric.
    dispatched = dispatch.dispatch_all()
    # 6. Bring the hourly rollups that dashboards read up to date.
    rollup.step(now)
    seconds = time.perf_counter() - started
    stats.count(cycles=1, cycle_seconds=seconds, admissions=applied.admitted, preemptions=applied.preempted)
    stats.gauge(last_cycle_seconds=seconds)
    summary = {
        "synced": changed,
        "admitted": applied.admitted,
        "preempted": applied.preempted,
        "dispatched": dispatched,
        "waiting": len(decisions.waiting),
        "seconds": round(seconds, 4),
    }
    if changed or applied.admitted or applied.preempted or dispatched:
        log.info("cycle: %s", summary)
    return summary
