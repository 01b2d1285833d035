"""What goes into the outbox: the worker's `collect` turns workload events (started, finished, failed) into
messages for the owners who asked for them, and `tell` records the idle warnings and lease endings the
worker notices itself. Each message exists once per channel and key, so a step run twice records nothing twice.

Events are read from a cursor kept as a counter (portal.counters), with an overlap that catches an event whose
transaction committed after a later one was read; the unique key makes the overlap free of repeats.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q

from portal import words
from portal.counters import counts
from portal.notify.models import Event, Notification, Preference
from portal.words import duration
from portal.workloads.models import Workload, WorkloadEvent
from portal.workloads.states import State

CURSOR = "notify_events_until"
OVERLAP = timedelta(minutes=2)  # a transaction that commits later than this is long past any sane one
FIRST_LOOK = timedelta(minutes=10)  # a fresh worker tells of the last few minutes, not of all history
EVENT_OF = {State.RUNNING: Event.STARTED, State.SUCCEEDED: Event.FINISHED, State.FAILED: Event.FAILED,
            State.EXPIRED: Event.FAILED}  # fmt: skip


def collect(now: datetime) -> int:
    """Record the messages for workload events since the cursor (one query to read, one to write)."""
    until = counts.read(CURSOR)
    since = datetime.fromtimestamp(until, tz=now.tzinfo) - OVERLAP if until is not None else now - FIRST_LOOK
    asked = Q(workload__owner__notify_preference__email=True) | ~Q(workload__owner__notify_preference__webhook_url="")
    events = (
        WorkloadEvent.objects.filter(at__gte=since, at__lte=now, to_state__in=list(EVENT_OF))
        .exclude(from_state="")  # extensions, idle warnings: not changes of state
        .filter(
            asked, workload__owner__notify_preference__isnull=False, workload__array_parent__isnull=True
        )  # an array tells of itself, not of each element
        .select_related("workload__queue", "workload__fabric", "workload__owner__notify_preference")
        .order_by("at", "pk")
    )
    rows = []
    for ev in events:
        w = ev.workload
        event = EVENT_OF[State(ev.to_state)]
        subject, text = say(event, w, reason=ev.reason)
        pref = w.owner.notify_preference  # type: ignore[attr-defined, unused-ignore]
        rows += messages(pref, w, event, f"event:{ev.pk}", subject, text)
    created = record(rows)
    counts.gauge(**{CURSOR: now.timestamp()})
    return created


def tell(workload: Workload, event: Event, key: str, when: datetime | None = None, reason: str = "") -> int:
    """Record an idle warning or a lease ending for the workload's owner, if they asked for it (one query, two
    when they did)."""
    pref = Preference.objects.filter(user_id=workload.owner_id).select_related("user").first()
    if pref is None:
        return 0
    subject, text = say(event, workload, reason, when=when)
    return record(messages(pref, workload, event, key, subject, text))


def tell_people(user_ids: Iterable[int], event: Event, key: str, subject: str, text: str, url: str = "") -> int:
    """Record a message about no workload (a grant decided, a test) for each of these people who asked for this
    event (a test: for everyone with a channel on); one query to read, one to write."""
    rows = []
    for pref in Preference.objects.filter(user_id__in=set(user_ids)).order_by("pk"):
        if event == Event.TEST or event in pref.events:
            rows += [
                Notification(
                    user_id=pref.user_id,
                    event=event,
                    channel=channel,
                    key=key[:120],
                    subject=subject[:200],
                    text=text,
                    url=url[:500],
                )
                for channel in pref.channels()
            ]
    return record(rows)


def messages(pref: Preference, w: Workload, event: Event, key: str, subject: str, text: str) -> list[Notification]:
    if event not in pref.events:
        return []
    url = f"{settings.GRIDLANE_PUBLIC_URL}{w.get_absolute_url()}"
    return [
        Notification(
            user_id=pref.user_id,
            workload=w,
            event=event,
            channel=channel,
            key=key,
            subject=subject[:200],
            text=text,
            url=url,
        )
        for channel in pref.channels()
    ]


def record(rows: Iterable[Notification]) -> int:
    rows = list(rows)
    if not rows:
        return 0
    return len(Notification.objects.bulk_create(rows, ignore_conflicts=True))


def say(event: Event, w: Workload, reason: str = "", when: datetime | None = None) -> tuple[str, str]:
    """The subject and text of a message, as a person would say them."""
    kind = words.kind_label(w.kind)
    if event == Event.STARTED:
        where = w.host or (w.fabric.name if w.fabric else "")
        return f"{w.name} started", f"{kind} {w.name} started" + (f" on {where}." if where else ".")
    ran = duration((w.finished_at - w.started_at).total_seconds()) if w.finished_at and w.started_at else ""
    if event == Event.FINISHED:
        return f"{w.name} finished", f"{kind} {w.name} finished" + (f" after {ran}." if ran else ".")
    if event == Event.FAILED:
        said = "expired" if w.state == State.EXPIRED else "failed"
        code = f" with exit code {w.exit_code}" if w.exit_code not in (None, 0) else ""
        why = f": {reason}" if reason else "."
        return f"{w.name} {said}", f"{kind} {w.name} {said}{code}{why}"
    at = f"{when:%Y-%m-%d %H:%M} UTC" if when else "soon"
    if event == Event.IDLE:
        return f"{w.name} is idle", reason or f"{kind} {w.name} has been idle and stops at {at} unless you use it."
    return (
        f"{w.name}: the lease ends soon",
        f"The lease of {kind.lower()} {w.name} ends at {at}; extend it from its page.",
    )
