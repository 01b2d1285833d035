"""Idle notebooks: warned once as they near their queue's idle limit, stopped past it, unless used again.

`decide` is a pure function of times; `follow` applies it to one running notebook through the services.
Activity is what the notebook's own server reports (kernel, terminal and API use), via its fabric's poll;
where the fabric cannot know (Slurm, PBS), `ask_server` asks the server its job reported, as batchspawner's
hub does, within the cycle's budget.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from fabrics import jupyter
from fabrics.base import JobStatus
from portal import outbound
from portal.connect import server_reach, tunnel
from portal.notify import outbox
from portal.notify.models import Event
from portal.workloads import notebook_endpoint, services
from portal.workloads.models import Workload


class Act(enum.StrEnum):
    NOTHING = "nothing"
    WARN = "warn"  # record when it stops, unless used
    CLEAR = "clear"  # used again (or no limit any more): the warning no longer applies
    STOP = "stop"


@dataclass(frozen=True)
class Decision:
    act: Act
    stop_at: datetime | None = None  # WARN: when it stops unless used
    idle: timedelta = timedelta(0)  # how long it has been idle


NOTHING = Decision(Act.NOTHING)


def warning_window(limit: timedelta, warning: timedelta) -> timedelta:
    """How long before the stop the warning comes: the configured warning, at most a sixth of the limit."""
    return min(warning, limit / 6)


def decide(
    now: datetime,
    last_activity: datetime | None,
    limit: timedelta | None,
    warning: timedelta,
    stop_at: datetime | None,
) -> Decision:
    """What to do about one running notebook now.

    `limit` is its queue's idle limit (None: never stopped); `stop_at` the stop time of the warning already
    given (None: not warned). A notebook is always warned first, at least the warning window ahead, even
    when the worker only notices it late: it is stopped only once a warning's time has come.
    """
    if limit is None or limit <= timedelta(0):
        return Decision(Act.CLEAR) if stop_at is not None else NOTHING
    if last_activity is None:
        return NOTHING  # its server did not answer: nothing is known, so nothing is done
    idle = now - last_activity
    if stop_at is not None and last_activity + limit > stop_at:
        return Decision(Act.CLEAR, idle=idle)  # used since the warning
    window = warning_window(limit, warning)
    if stop_at is None:
        if idle >= limit - window:
            return Decision(Act.WARN, stop_at=max(last_activity + limit, now + window), idle=idle)
        return NOTHING
    if now >= stop_at:
        return Decision(Act.STOP, idle=idle)
    return NOTHING


def limit_of(w: Workload) -> timedelta | None:
    """The idle limit of the workload's queue; None when its queue has none."""
    minutes = w.queue.notebook_idle_minutes
    return timedelta(seconds=minutes * settings.GRIDLANE_IDLE_MINUTE_S) if minutes else None


def _minutes(span: timedelta) -> int:
    return int(span.total_seconds() // settings.GRIDLANE_IDLE_MINUTE_S)


def ask_server(w: Workload, status: JobStatus, budget: jupyter.Budget) -> JobStatus:
    """The status with the last activity the notebook's server reports, when the fabric's status has none and
    the job reported its server (notebook_endpoint); as it was when the server does not answer in time or the
    budget is spent (then nothing is decided about it until a later cycle)."""
    server = notebook_endpoint.stored(w)
    if status.last_activity is not None or server is None:
        return status
    if limit_of(w) is None and w.idle_stop_at is None:
        return status  # nothing would be done with the answer
    try:
        server = server_reach.reach(w, server)  # the address checked, on the fabric's own nodes (portal.outbound)
    except outbound.Refused:
        return status
    if w.fabric is not None:  # through the login node where the fabric says so (portal.connect.tunnel)
        server = tunnel.reachable(w.fabric_id, w.fabric.settings, server)
    answered, last_activity = budget.probe(server)
    return replace(status, last_activity=last_activity) if answered else status


def follow(w: Workload, status: JobStatus) -> bool:
    """Warn, take back the warning, or stop this running notebook as `decide` says; True when it was stopped."""
    limit = limit_of(w)
    warning = timedelta(seconds=settings.GRIDLANE_NOTEBOOK_IDLE_WARNING_MINUTES * settings.GRIDLANE_IDLE_MINUTE_S)
    decision = decide(timezone.now(), status.last_activity, limit, warning, w.idle_stop_at)
    if decision.act == Act.WARN and decision.stop_at is not None:
        stop_at = decision.stop_at
        reason = f"Idle for {_minutes(decision.idle)} min: this notebook stops at {stop_at:%H:%M} UTC unless it is used"
        if services.do_warn_idle(w, stop_at, reason):
            outbox.tell(w, Event.IDLE, key=f"idle:{w.pk}:{stop_at.isoformat()}", when=stop_at)
    elif decision.act == Act.CLEAR:
        why = "in use again" if limit is not None else "its queue no longer stops idle notebooks"
        services.do_clear_idle(w, f"{why}: it will not be stopped for being idle")
    elif decision.act == Act.STOP and limit is not None:
        reason = f"stopped: idle for {_minutes(decision.idle)} minutes (the queue's limit is {_minutes(limit)})"
        services.do_cancel(None, w, reason=reason)
        return True
    return False
