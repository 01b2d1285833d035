"""django-q2 tasks. Thin: each takes the lock, then calls the worker's steps in order."""

from __future__ import annotations

import logging
from typing import Any

from django.utils import timezone

from portal.worker import apply, dispatch, snapshot, sync
from portal.worker.lock import cycle_lock
from scheduler import decide

log = logging.getLogger("gridlane.worker")


def cycle() -> dict[str, Any]:
    """One scheduling cycle; skipped when another is running (it will see the same work)."""
    with cycle_lock() as held:
        if not held:
            return {"skipped": True}
        # 1. Bring fabric status in: finished work frees its capacity before anything is decided.
        changed = sync.sync_all()
        # 2. Take a snapshot and decide on it, away from the database.
        snap, pending = snapshot.build(timezone.now())
        decisions = decide(snap)
        # 3. Apply the decisions in one transaction.
        admitted = apply.apply(decisions, pending)
        # 4. Hand admitted work to its fabric.
        dispatched = dispatch.dispatch_all()
    summary = {
        "synced": changed,
        "admitted": admitted,
        "dispatched": dispatched,
        "waiting": len(decisions.waiting),
    }
    if changed or admitted or dispatched:
        log.info("cycle: %s", summary)
    return summary
