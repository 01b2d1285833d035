"""Asking for a what-if (check_request, then do_request) and running one (do_replay, from the django-q2 task)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.utils import timezone

from portal.objectives import predict
from portal.objectives.models import WaitObjective
from portal.whatif import history
from portal.whatif.forms import WhatIfForm
from portal.whatif.models import WhatIfRun
from scheduler.replay import ChangeError, actual, apply_change, replay

log = logging.getLogger("gridlane.whatif")

TASK = "portal.whatif.tasks.replay"
# A replay of 30 days of 10,000 workloads takes well under a minute; django-q2 retries after 180 s (settings).
TASK_TIMEOUT_S = 170
LOADED = 4  # percent of the progress bar the loading takes; each replay takes half of the rest


def form(data: Mapping[str, Any] | None = None) -> WhatIfForm:
    """The form, with the site's teams and enabled fabrics to choose from (two queries)."""
    site, _ = history.site_now(timezone.now())
    teams = sorted(t.slug for t in site.teams.values())
    fabrics = sorted(f.name for f in site.fabrics.values())
    return WhatIfForm(data, teams=teams, fabrics=fabrics)


def check_request(data: Mapping[str, Any]) -> tuple[WhatIfForm, dict[str, Any] | None]:
    """The bound form, and the change when the form is valid and the change applies to the site now (None
    otherwise, with the errors on the form: nothing is queued)."""
    bound = form(data)
    if not bound.is_valid():
        return bound, None
    change = bound.change()
    site, _ = history.site_now(timezone.now())
    try:
        apply_change(site, change)
    except ChangeError as error:
        bound.add_error(None, str(error))
        return bound, None
    return bound, change


def do_request(user: Any, days: int, change: dict[str, Any], objective: WaitObjective | None = None) -> WhatIfRun:
    """Record the request (with the wait objective to predict its effect on, if any) and queue its replay once
    the record is committed."""
    run = WhatIfRun.objects.create(requested_by=user, days=days, change=change, objective=objective)

    def enqueue() -> None:
        from django_q.tasks import async_task

        async_task(TASK, run.pk, task_name=f"what-if {run.pk}", group="whatif", timeout=TASK_TIMEOUT_S)

    transaction.on_commit(enqueue)
    return run


def do_replay(run_id: int) -> None:
    """Replay the run's window: what happened, the current policy and the proposed change, side by side.
    Writes its progress as it goes; a run another worker took already is left alone."""
    if WhatIfRun.objects.filter(pk=run_id, state=WhatIfRun.State.QUEUED).update(
        state=WhatIfRun.State.RUNNING, started_at=timezone.now(), progress=1
    ) != 1:  # fmt: skip
        return  # another worker got there first (or it is gone)
    run = WhatIfRun.objects.select_related("objective__tier").get(pk=run_id)
    goal = run.objective
    select = predict.selector(goal) if goal is not None else None
    try:
        started = time.perf_counter()
        site, work, start, end = history.load(run.days, run.created_at)
        proposed = apply_change(site, run.change)
        loaded = time.perf_counter() - started
        _progress(run_id, LOADED)
        half = (100 - LOADED) / 2
        result: dict[str, Any] = {
            "start": start.isoformat(),
            "end": end.isoformat(),
            "workloads": len(work),
            "actual": actual(site, work, start, end, select),
            "current": replay(
                site, work, start, end, progress=lambda f: _progress(run_id, LOADED + half * f), select=select
            ),
            "proposed": replay(
                proposed, work, start, end, progress=lambda f: _progress(run_id, 50 + half * f), select=select
            )
            if run.change
            else None,
        }
        if goal is not None:  # the objective's figures per column; the waits themselves are not kept
            result["objective"] = {
                column: predict.figures(goal, result[column].pop("selected_waits", []))
                for column in ("actual", "current", "proposed")
                if result[column] is not None
            }
        result["seconds"] = {"load": round(loaded, 2), "all": round(time.perf_counter() - started, 2)}
    except Exception as error:  # the page says it failed; the log has the rest
        log.exception("what-if %s failed", run_id)
        WhatIfRun.objects.filter(pk=run_id).update(
            state=WhatIfRun.State.FAILED, error=str(error)[:500] or type(error).__name__, finished_at=timezone.now()
        )
        return
    WhatIfRun.objects.filter(pk=run_id).update(
        state=WhatIfRun.State.DONE, progress=100, result=result, finished_at=timezone.now()
    )


def _progress(run_id: int, percent: float) -> None:
    WhatIfRun.objects.filter(pk=run_id, state=WhatIfRun.State.RUNNING).update(progress=min(99, int(percent)))
