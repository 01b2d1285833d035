"""What a team's compute came to over a period, from the hourly rollups only (never raw samples).

`check_period` reads `from`, `to` (or `days`) and `by` strictly, and `check_month` a calendar month (the
chargeback page's `?month=YYYY-MM`); `team_usage` answers in three queries whatever the period: the team's
totals (UsageRollup), its reservation (UsageTeamRollup), and, with `by`, one row per member, queue or
fabric (UsageMemberRollup, UsageRollup, UsageFabricRollup).

The figures, in GPU-hours: allocated (held), used (utilisation-weighted), idle (below 80 % over the idle
window), unknown (no utilisation data); the CPU- and memory GB-hours held beside them; the cost of what
was held (GPUs, CPUs and memory, each at its fabric's price) and of the GPUs that sat idle; the
reservation held and the part of it held but unused (each hour's reservation less what the team held that
hour, never below 0: an hour it borrowed beyond its reservation makes up for no other); and the demand
that waited. The reservation is the team's, not a member's, queue's or fabric's: the rows per member,
queue or fabric have no reservation figures. The API, the team dashboard's CSV export and the chargeback page share it;
`team_chargeback` gives the page the totals and all three breakdowns in five queries.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, time, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Sum
from django.utils.dateparse import parse_date, parse_datetime

from portal.accounts.models import ResourceGroup
from portal.usage.models import UsageFabricRollup, UsageMemberRollup, UsageRollup, UsageTeamRollup
from portal.usage.rollup import HOUR, IDLE_BELOW, hour_of

BY = ("member", "queue", "fabric")
DEFAULT_DAYS = 7
MAX_DAYS = 400  # a year and a bit: a yearly report, never an unbounded scan
CSV_COLUMNS = (
    "allocated_gpu_hours",
    "used_gpu_hours",
    "idle_gpu_hours",
    "unknown_gpu_hours",
    "idle_share",
    "cpu_hours",
    "memory_gb_hours",
    "cost",
    "idle_cost",
    # The team's alone: empty on the rows per member, queue or fabric, filled on the total.
    "reserved_gpu_hours",
    "unused_reservation_gpu_hours",
)
FIGURES = (
    "gpu_hours",
    "used_gpu_hours",
    "idle_gpu_hours",
    "unknown_gpu_hours",
    "cpu_hours",
    "memory_gb_hours",
    "cost",
    "idle_cost",
)
# Per `by`: the rollup table and the field that names the row.
TABLES: dict[str, tuple[Any, str]] = {
    "member": (UsageMemberRollup, "user__username"),
    "queue": (UsageRollup, "queue__slug"),
    "fabric": (UsageFabricRollup, "fabric__name"),
}


@dataclass(frozen=True)
class Period:
    start: datetime  # the start of an hour, UTC
    end: datetime  # exclusive, the start of an hour
    by: str | None


def check_period(params: Mapping[str, str], now: datetime) -> tuple[Period | None, dict[str, list[str]]]:
    """The period asked for, or the errors per parameter. `from` and `to` are ISO dates (a day from its
    midnight UTC) or aware date-times, rounded out to whole hours; without them the last `days` (default 7)
    up to the end of the current hour."""
    errors: dict[str, list[str]] = {}
    end = hour_of(now) + HOUR
    start: datetime | None = None
    if params.get("to"):
        parsed = _moment(params["to"])
        if parsed is None:
            errors["to"] = ["An ISO date (2026-11-30) or date-time with a time zone (2026-11-30T12:00:00Z)."]
        else:
            end = hour_of(parsed) + (HOUR if parsed != hour_of(parsed) else timedelta(0))
    if params.get("from"):
        parsed = _moment(params["from"])
        if parsed is None:
            errors["from"] = ["An ISO date (2026-11-01) or date-time with a time zone (2026-11-01T00:00:00Z)."]
        else:
            start = hour_of(parsed)
    days = params.get("days")
    if days and params.get("from"):
        errors["days"] = ["Give `from` or `days`, not both."]
    elif days and (not days.isascii() or not days.isdigit() or not 1 <= int(days) <= MAX_DAYS):
        errors["days"] = [f"A whole number of days, 1 to {MAX_DAYS}."]
    elif start is None:
        start = end - timedelta(days=int(days) if days else DEFAULT_DAYS)
    by = params.get("by") or None
    if by is not None and by not in BY:
        errors["by"] = [f"One of {', '.join(BY)}."]
    if not errors and start is not None:
        if start >= end:
            errors["from"] = ["`from` must come before `to`."]
        elif end - start > timedelta(days=MAX_DAYS):
            errors["from"] = [f"At most {MAX_DAYS} days at a time."]
    if errors or start is None:
        return None, errors
    return Period(start, end, by), {}


MONTH = re.compile(r"([0-9]{4})-([0-9]{2})")


def check_month(text: str | None, now: datetime) -> tuple[Period | None, str | None]:
    """The calendar month (UTC) that `YYYY-MM` names, or the one holding `now` when `text` is empty; None and
    the message to show when it names no month."""
    if not text:
        return month_period(now.astimezone(UTC).year, now.astimezone(UTC).month), None
    found = MONTH.fullmatch(text)
    if found is None or not 1970 <= int(found[1]) <= 9998 or not 1 <= int(found[2]) <= 12:
        return None, "Pick a month as YYYY-MM, for example 2026-11."
    return month_period(int(found[1]), int(found[2])), None


def month_period(year: int, month: int) -> Period:
    """The month from its first midnight UTC to the next month's."""
    start = datetime(year, month, 1, tzinfo=UTC)
    end = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
    return Period(start, end, None)


def team_chargeback(group: ResourceGroup, period: Period) -> dict[str, Any]:
    """The chargeback page's figures: the totals and one table per member, queue and fabric (five queries)."""
    answer = team_usage(group, replace(period, by=None))
    answer["tables"] = {by: _rows(group, period, by) for by in BY}
    return answer


def team_usage(group: ResourceGroup, period: Period) -> dict[str, Any]:
    """The team's figures over the period, and per member, queue or fabric where `by` asks: three queries."""
    window = {"group": group, "hour__gte": period.start, "hour__lt": period.end}
    sums = {f: Sum(f) for f in (*FIGURES, "pending_gpu_hours")}
    # The reservation per team and hour (one row each, even for hours in which nothing ran), not per queue row.
    reservation = UsageTeamRollup.objects.filter(**window).aggregate(
        reserved_gpu_hours=Sum("reserved_gpu_hours"), unused_reservation_gpu_hours=Sum("unused_reservation_gpu_hours")
    )
    totals = _figures(UsageRollup.objects.filter(**window).aggregate(**sums) | reservation)
    answer: dict[str, Any] = {
        "group": group.slug,
        "from": period.start.isoformat(),
        "to": period.end.isoformat(),
        "by": period.by,
        "idle_rule": {"below_percent": IDLE_BELOW, "window_minutes": settings.GRIDLANE_IDLE_WINDOW_MINUTES},
        "totals": totals,
    }
    if period.by is not None:
        answer["rows"] = _rows(group, period, period.by)
    return answer


def _rows(group: ResourceGroup, period: Period, by: str) -> list[dict[str, Any]]:
    """One row per member, queue or fabric (`by`), in name order: one query, grouped in the database."""
    table, name = TABLES[by]
    rows = (
        table.objects.filter(group=group, hour__gte=period.start, hour__lt=period.end)
        .values(name)
        .annotate(**{f: Sum(f) for f in FIGURES})
        .order_by(name)
        .values_list(name, *FIGURES)
    )
    return [{by: key, **_figures(dict(zip(FIGURES, values, strict=True)))} for key, *values in rows]


def _figures(sums: Mapping[str, float | None]) -> dict[str, Any]:
    """Rounded figures, named as the API names them, with the idle share of the GPU-hours whose use is known
    (None when none is: unknown is not zero)."""
    value = {k: v or 0.0 for k, v in sums.items()}
    known = value["gpu_hours"] - value["unknown_gpu_hours"]
    figures: dict[str, Any] = {
        "allocated_gpu_hours": round(value["gpu_hours"], 4),
        "used_gpu_hours": round(value["used_gpu_hours"], 4),
        "idle_gpu_hours": round(value["idle_gpu_hours"], 4),
        "unknown_gpu_hours": round(value["unknown_gpu_hours"], 4),
        "idle_share": round(value["idle_gpu_hours"] / known, 4) if known > 1e-9 else None,
        "cpu_hours": round(value["cpu_hours"], 4),
        "memory_gb_hours": round(value["memory_gb_hours"], 4),
        "cost": round(value["cost"], 2),
        "idle_cost": round(value["idle_cost"], 2),
    }
    if "reserved_gpu_hours" in value:
        figures["reserved_gpu_hours"] = round(value["reserved_gpu_hours"], 4)
        figures["unused_reservation_gpu_hours"] = round(value["unused_reservation_gpu_hours"], 4)
        figures["pending_gpu_hours"] = round(value["pending_gpu_hours"], 4)
    return figures


def _moment(text: str) -> datetime | None:
    """An aware date-time from an ISO date (its midnight, UTC) or date-time with a zone; None otherwise."""
    if len(text) > 40:
        return None
    try:
        day = parse_date(text)  # first: Python reads "2026-11-30" as a naive date-time too
        if day is not None:
            return datetime.combine(day, time(0), tzinfo=UTC)
        moment = parse_datetime(text)
    except ValueError:
        return None
    return moment.astimezone(UTC) if moment is not None and moment.tzinfo is not None else None
