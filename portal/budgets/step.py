"""The worker's budget step, run right after each rollup: count what every budget's scope spent in its window
(portal.budgets.spend), keep it on the budget's row, hold new work of a scope whose budget is spent (the row's
held_reason, which the admission's snapshot reads) or release it, and tell the team's leads (and the member, for
a member's budget) when a threshold is crossed: once per threshold and window, however many steps see it.

A fixed number of queries whatever the number of budgets: the budgets, their spend (two), the rows' figures, the
holds that changed, where a threshold was crossed who is told and the messages, and the work no hold covers any
longer given back to the line (holds.sweep: two)."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import Any

from django.conf import settings
from django.urls import reverse

from portal.accounts.models import Membership
from portal.budgets import holds, spend
from portal.budgets.models import Budget, amount
from portal.notify.models import Event, Notification, Preference
from portal.notify.outbox import record

FIGURES = ["spent_gpu_hours", "spent_cost", "spent_at", "alerted_window", "alerted_percent"]


def step(now: datetime) -> dict[str, Any]:
    budgets = list(Budget.objects.select_related("team", "user"))
    if not budgets:
        return {"released": holds.sweep()}
    figures = spend.spent(budgets, now)
    changed: list[Budget] = []
    crossed: list[tuple[Budget, int, float]] = []  # (budget, the highest threshold newly crossed, its share)
    for b in budgets:
        s = figures[b.pk]
        held = spend.held_words(b, s, now)
        if held != b.held_reason:
            b.held_reason = held
            changed.append(b)
        b.spent_gpu_hours, b.spent_cost, b.spent_at = s.gpu_hours, s.cost, now
        start, _ = b.window_at(now)
        if b.alerted_window != start:  # a new window: every threshold may be crossed again
            b.alerted_window, b.alerted_percent = start, 0
        share = spend.percent(b, s)
        reached = [t for t in b.thresholds or () if t <= share and t > b.alerted_percent]
        if reached:
            b.alerted_percent = max(reached)
            crossed.append((b, b.alerted_percent, share))
    Budget.objects.bulk_update(budgets, FIGURES)
    if changed:  # only the holds that changed: a write of held_reason moves the worker's settled generation
        Budget.objects.bulk_update(changed, ["held_reason"])
    told = alert(crossed, now) if crossed else 0
    released = holds.sweep()
    return {
        "budgets": len(budgets),
        "held": sum(1 for b in budgets if b.held_reason),
        "budget alerts": told,
        "released": released,
    }


def alert(crossed: list[tuple[Budget, int, float]], now: datetime) -> int:
    """Record a message per threshold crossed to each lead of the budget's team (and the member whose budget it
    is) on every channel they set, unless they turned budget messages off: two queries. The key makes each message
    once per threshold and window."""
    teams = {b.team_id for b, _, _ in crossed}
    members = {b.user_id for b, _, _ in crossed if b.scope == Budget.Scope.MEMBER}
    leads: defaultdict[int, set[int]] = defaultdict(set)
    for group_id, user_id in Membership.objects.filter(group_id__in=teams, role=Membership.Role.LEAD).values_list(
        "group_id", "user_id"
    ):
        leads[group_id].add(user_id)
    wanted = set().union(*leads.values(), members)
    prefs = {p.user_id: p for p in Preference.objects.filter(user_id__in=wanted).select_related("user")}
    rows: list[Notification] = []
    for b, threshold, share in crossed:
        start, _ = b.window_at(now)
        subject, text = say(b, threshold, share, now)
        url = settings.GRIDLANE_PUBLIC_URL + reverse("dashboards:team", args=[b.team.slug])
        for user_id in sorted(
            leads[b.team_id] | ({b.user_id} if b.scope == Budget.Scope.MEMBER and b.user_id else set())
        ):
            pref = prefs.get(user_id)
            if pref is None or Event.BUDGET not in pref.events:
                continue
            rows += [
                Notification(
                    user_id=user_id, event=Event.BUDGET, channel=channel, subject=subject[:200], text=text, url=url,
                    key=f"budget:{b.pk}:{start:%Y%m%d%H}:{threshold}",
                )
                for channel in pref.channels()
            ]  # fmt: skip
    return record(rows)


def say(b: Budget, threshold: int, share: float, now: datetime) -> tuple[str, str]:
    whose = {
        Budget.Scope.TEAM: f"Team {b.team.slug}",
        Budget.Scope.MEMBER: f"{b.user.username if b.user else ''} in {b.team.slug}",
        Budget.Scope.AGENT: f"Agent {b.user.username if b.user else ''} of {b.team.slug}",
    }[Budget.Scope(b.scope)]
    window = b.window_label(now)
    subject = f"{whose}: {threshold} % of the budget for {window}"
    figures = []
    if b.gpu_hours is not None:
        figures.append(f"{spend.hours(b.spent_gpu_hours)} of {spend.hours(b.gpu_hours)} GPU-hours")
    if b.money is not None:
        figures.append(f"{amount(b.spent_cost, '')} of {amount(b.money, '')}")
    text = f"{whose} has spent {share:.0f} % of its budget for {window}: {'; '.join(figures)}."
    if threshold >= 100:
        text += " New work waits until a lead or IT raises the budget or the window ends; running work goes on."
    return subject, text
