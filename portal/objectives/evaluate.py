"""The worker's objectives step, after each rollup: every enabled wait objective's figures from the wait slices
(portal.usage.waits), and its burn-rate alert, sent once per burn episode.

An episode begins when an alert's long and short windows both burn at its rate (portal.objectives.burn); its
message goes, once, to the leads of the teams the objective covers and to IT (whoever of them has e-mail or a
webhook on), through the notifications outbox. While it burns, later cycles send nothing; once no alert fires
any more the objective is re-armed, and the next burn is a new episode with a message of its own. The change of
state is a compare-and-swap and the message's key names the episode, so two workers never send it twice.

Queries per run: one for the objectives, two per objective (its days, its alert windows), one write per
objective, and two more (recipients, outbox) for each episode that begins.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from portal import words
from portal.accounts.models import Membership, ResourceGroup
from portal.notify import outbox
from portal.notify.models import Event, Notification, Preference
from portal.objectives import burn
from portal.objectives.models import MAX_DAYS, WaitObjective
from portal.usage import waits

log = logging.getLogger("gridlane.objectives")

KEEP = timedelta(days=MAX_DAYS + 1)  # wait slices older than the longest objective's window go


def measure(objective: WaitObjective, now: datetime) -> burn.Status:
    """The objective's figures at `now`: two queries (its days; its alert windows, hours long)."""
    spans = burn.windows(now, objective.days)
    whole = waits.totals(objective.scope(), *spans.pop("objective"))
    m = objective.threshold_minutes
    names = list(spans)
    counts = waits.burns(objective.scope(), [spans[n] for n in names], m)
    return burn.status(
        whole.started,
        whole.over[m],
        whole.quantile(objective.percent / 100),
        objective.budget,
        objective.days,
        dict(zip(names, counts, strict=True)),
    )


def step(now: datetime) -> dict[str, int]:
    """Evaluate every enabled objective; returns how many were evaluated and how many episodes began. Never
    raises: an objective that cannot be read must not stop the worker."""
    try:
        return _step(now)
    except Exception:  # logged; the next rollup tries again
        log.exception("wait objectives failed")
        return {}


def _step(now: datetime) -> dict[str, int]:
    evaluated = began = 0
    for objective in WaitObjective.objects.filter(enabled=True).select_related("queue", "tier", "team"):
        status = measure(objective, now)
        evaluated += 1
        fields = {"status": status.as_dict(), "evaluated_at": now}
        mine = WaitObjective.objects.filter(pk=objective.pk)
        if status.firing and objective.alert == WaitObjective.Alert.OK:
            # The episode begins here, once (another worker that got there first has changed the state), and its
            # messages with it: both or neither.
            with transaction.atomic():
                if mine.filter(alert=WaitObjective.Alert.OK).update(
                    alert=WaitObjective.Alert.BURNING, alert_since=now, **fields
                ) == 1:  # fmt: skip
                    alert(objective, status, now)
                    began += 1
            continue
        if not status.firing and objective.alert == WaitObjective.Alert.BURNING:
            fields |= {"alert": WaitObjective.Alert.OK, "alert_since": None}  # recovered: re-armed
        mine.update(**fields)
    waits.prune(now - KEEP)
    return {"evaluated": evaluated, "episodes": began}


def teams_of(objective: WaitObjective) -> Q:
    """The teams an objective covers, as a filter on teams: its team, the queue's teams, the tier's teams (a
    tier open to every team: every team)."""
    if objective.kind == WaitObjective.Kind.TEAM:
        return Q(pk=objective.team_id)
    if objective.kind == WaitObjective.Kind.QUEUE:
        return Q(queues=objective.queue_id)
    if objective.tier is not None and objective.tier.open_to_all:
        return Q()
    return Q(priority_tiers=objective.tier_id)


def recipients(objective: WaitObjective) -> list[Preference]:
    """The preferences, with a channel on, of IT and of the leads of the teams the objective covers: one query."""
    teams = ResourceGroup.objects.filter(teams_of(objective)).values("pk")
    leads = Membership.objects.filter(role=Membership.Role.LEAD, group__in=teams).values("user_id")
    people = Q(user__is_staff=True) | Q(user__is_superuser=True) | Q(user_id__in=leads)
    on = Q(email=True) | ~Q(webhook_url="")
    return list(Preference.objects.filter(people, on, user__is_active=True).select_related("user"))


def alert(objective: WaitObjective, status: burn.Status, now: datetime) -> bool:
    """Record the episode's message for each recipient (two queries); whether any was recorded."""
    subject, text = say(objective, status)
    key = f"objective:{objective.pk}:{now.isoformat()}"
    url = f"{settings.GRIDLANE_PUBLIC_URL}{objective.get_absolute_url()}"
    rows: Iterable[Notification] = (
        Notification(
            user_id=pref.user_id, event=Event.OBJECTIVE, channel=channel, key=key, subject=subject[:200], text=text,
            url=url,
        )
        for pref in recipients(objective)
        for channel in pref.channels()
    )  # fmt: skip
    return outbox.record(rows) > 0


def say(objective: WaitObjective, status: burn.Status) -> tuple[str, str]:
    """The subject and text of an episode's message."""
    which = " and ".join(status.firing)
    rates = ", ".join(f"{name.replace('_', ' ')} {rate:g}x" for name, rate in status.burn.items())
    wait = words.duration(status.wait_s) if status.wait_s is not None else "no starts"
    left = f"{max(-9.99, status.budget_remaining) * 100:.0f} %"
    return (
        f"Wait objective {objective.name} is burning its error budget",
        f"{objective.name} ({objective.scope_label()}: {objective.words()}) burns its error budget ({which} burn). "
        f"Burn rates: {rates}. p{objective.percent:g} wait over {objective.days} days: {wait}; "
        f"error budget left: {left}.",
    )
