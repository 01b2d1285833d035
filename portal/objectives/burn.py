"""Burn rates of a wait objective, as SRE practice alerts on them (multiwindow, multi-burn-rate). Pure: counts in,
figures out; no Django.

A window's burn rate is its share of work that waited longer than the threshold over the error budget: 1 spends
the budget exactly by the end of the objective's M days, 14.4 spends 2 % of a 30-day budget in an hour. Two
alerts, each a long window and a short one that must both burn at its rate or faster (the short one makes the
alert stop soon after the burn does):

    fast  1 h and 5 min     2 % of the budget spent in the hour     14.4 over 30 days
    slow  6 h and 30 min    5 % of the budget spent in the six      6 over 30 days

The windows stay as they are and the rates scale to M (the same share of the budget spent in the same window:
3.36 and 1.4 over 7 days), never below 1 (a burn slower than the budget's own pace is no alert). The Prometheus
rules in deploy/prometheus/ compare the same rates with the same thresholds (portal.metrics exports both).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class Alert:
    name: str
    long: timedelta
    short: timedelta
    spent: float  # the share of the budget spent in the long window that the rate stands for


ALERTS = (
    Alert("fast", HOUR, timedelta(minutes=5), 0.02),
    Alert("slow", 6 * HOUR, timedelta(minutes=30), 0.05),
)
WINDOWS = {f"{a.name}_{w}": getattr(a, w) for a in ALERTS for w in ("long", "short")}


def threshold(alert: Alert, days: int) -> float:
    """The burn rate at which `alert` fires for an objective over `days` (at least 1)."""
    return max(1.0, round(alert.spent * days * 24 * HOUR / alert.long, 3))


def rate(over: int, started: int, budget: float) -> float:
    """A window's burn rate: the share of its starts that waited too long over the budget (0: nothing started)."""
    if not started or budget <= 0:
        return 0.0
    return over / started / budget


def windows(now: datetime, days: int) -> dict[str, tuple[datetime, datetime]]:
    """[since, until) of the objective's whole window ("objective") and of each alert window."""
    return {"objective": (now - timedelta(days=days), now)} | {
        name: (now - span, now) for name, span in WINDOWS.items()
    }


@dataclass(frozen=True)
class Status:
    """An objective's figures at one evaluation."""

    started: int  # work that started over the M days
    over: int  # of it, work that waited longer than the threshold
    wait_s: float | None  # the objective's percentile wait over the M days (None: nothing started)
    budget_remaining: float  # 1: untouched; 0: spent; below 0: overspent
    burn: dict[str, float]  # burn rate per window (WINDOWS)
    thresholds: dict[str, float]  # per alert
    firing: list[str]  # the alerts whose both windows burn at their rate or faster

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def status(
    started: int, over: int, wait_s: float | None, budget: float, days: int, counts: dict[str, tuple[int, int]]
) -> Status:
    """The figures from the M days' counts and each window's (over, started)."""
    spent = rate(over, started, budget)
    burn = {name: round(rate(o, s, budget), 4) for name, (o, s) in counts.items()}
    thresholds = {a.name: threshold(a, days) for a in ALERTS}
    firing = [
        a.name
        for a in ALERTS
        if burn.get(f"{a.name}_long", 0.0) >= thresholds[a.name]
        and burn.get(f"{a.name}_short", 0.0) >= thresholds[a.name]
    ]
    return Status(started, over, wait_s, round(1 - spent, 4), burn, thresholds, firing)
