"""Queue waits in five-minute slices (WaitSlice), kept by the rollup step from the spans it reads anyway.

The hourly UsageRollup keeps a p50 and a p95 per hour, which cannot be summed over days nor split by priority
tier, and an hour is too coarse for a burn-rate alert's short window. A slice counts, per team, queue and tier,
the workloads that started in its five minutes and how many of them had waited longer than each fixed threshold
(THRESHOLDS_MIN); any window is then one SUM over its slices (`totals`, `burns`), whatever the number of workloads.
Recomputing a slice is idempotent, as the hourly rollups are: it is the count over the spans that started in it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Q, Sum
from django.db.models.functions import Coalesce, TruncHour

from portal.usage.models import WaitSlice

SLICE = timedelta(minutes=5)
# The waits an objective may name, in minutes: each is a column of WaitSlice (over_<m>m).
THRESHOLDS_MIN = (1, 5, 10, 15, 30, 60, 120, 240, 480, 1440)
COLUMNS = tuple(f"over_{m}m" for m in THRESHOLDS_MIN)


def slice_of(at: datetime) -> datetime:
    """The start of the five minutes holding `at` (UTC)."""
    at = at.astimezone(UTC)
    return at.replace(minute=at.minute - at.minute % 5, second=0, microsecond=0)


@dataclass
class Counts:
    """Starts in a window, and how many of them waited longer than each threshold (by minutes)."""

    started: int = 0
    over: dict[int, int] = field(default_factory=lambda: dict.fromkeys(THRESHOLDS_MIN, 0))

    def add(self, wait_s: float) -> None:
        self.started += 1
        for m in THRESHOLDS_MIN:
            if wait_s > m * 60:
                self.over[m] += 1

    def share_over(self, minutes: int) -> float | None:
        """The share of starts that waited longer than `minutes` (None: nothing started)."""
        return self.over[minutes] / self.started if self.started else None

    def quantile(self, q: float) -> float | None:
        """The wait, in seconds, below which a share `q` of the starts fell, interpolated linearly inside the
        threshold it falls in (as Prometheus' histogram_quantile does); beyond the last threshold: that threshold.
        None: nothing started."""
        if not self.started:
            return None
        rank = q * self.started
        below, low = 0, 0.0
        for m in THRESHOLDS_MIN:
            at_most = self.started - self.over[m]
            if at_most >= rank:
                inside = at_most - below
                part = (rank - below) / inside if inside else 1.0
                return low + (m * 60 - low) * part
            below, low = at_most, m * 60.0
        return float(THRESHOLDS_MIN[-1] * 60)


def compute(
    starts: Iterable[tuple[int, int, str, datetime, datetime]], start: datetime, until: datetime
) -> dict[tuple[int, int, str, datetime], Counts]:
    """Pure: per (team, queue, tier, slice) the counts of the workloads (team, queue, tier, submitted, started)
    that started in [start, until)."""
    cells: defaultdict[tuple[int, int, str, datetime], Counts] = defaultdict(Counts)
    for group_id, queue_id, tier, submitted_at, started_at in starts:
        if start <= started_at < until:
            wait = max(0.0, (started_at - submitted_at).total_seconds())
            cells[(group_id, queue_id, tier, slice_of(started_at))].add(wait)
    return dict(cells)


def store(cells: dict[tuple[int, int, str, datetime], Counts]) -> int:
    """Write the slices (one insert, or none); returns how many."""
    rows = [
        WaitSlice(
            group_id=group_id, queue_id=queue_id, tier=tier, start=at, started=c.started,
            **{col: c.over[m] for col, m in zip(COLUMNS, THRESHOLDS_MIN, strict=True)},
        )
        for (group_id, queue_id, tier, at), c in cells.items()
    ]  # fmt: skip
    if rows:
        WaitSlice.objects.bulk_create(
            rows,
            update_conflicts=True,
            unique_fields=["group", "queue", "tier", "start"],
            update_fields=["started", *COLUMNS],
        )
    return len(rows)


def _sums(prefix: str = "") -> dict[str, Any]:
    return {f"{prefix}{name}": Coalesce(Sum(name), 0) for name in ("started", *COLUMNS)}


def _counts(row: dict[str, Any], prefix: str = "") -> Counts:
    return Counts(
        int(row[f"{prefix}started"]),
        {m: int(row[f"{prefix}{c}"]) for m, c in zip(THRESHOLDS_MIN, COLUMNS, strict=True)},
    )


def totals(scope: Q, since: datetime, until: datetime) -> Counts:
    """The counts of the slices in `scope` (a filter on team, queue or tier) over [since, until): one query, a sum
    in the database. A window takes whole slices: from the one holding `since` to the one holding the last moment
    before `until`."""
    row = WaitSlice.objects.filter(scope, start__gte=slice_of(since), start__lt=until).aggregate(**_sums())
    return _counts(row)


def burns(scope: Q, windows: Sequence[tuple[datetime, datetime]], minutes: int) -> list[tuple[int, int]]:
    """(waited longer than `minutes`, started) in each window of the slices in `scope`: one query over the rows
    of the widest (an objective's alert windows: hours, not its days), whole slices as in `totals`."""
    if not windows:
        return []
    windows = [(slice_of(since), until) for since, until in windows]
    column = COLUMNS[THRESHOLDS_MIN.index(minutes)]
    sums: dict[str, Any] = {}
    for i, (since, until) in enumerate(windows):
        inside = Q(start__gte=since, start__lt=until)
        sums |= {f"o{i}": Coalesce(Sum(column, filter=inside), 0), f"s{i}": Coalesce(Sum("started", filter=inside), 0)}
    low = min(since for since, _ in windows)
    high = max(until for _, until in windows)
    row = WaitSlice.objects.filter(scope, start__gte=low, start__lt=high).aggregate(**sums)
    return [(int(row[f"o{i}"]), int(row[f"s{i}"])) for i in range(len(windows))]


def hourly(scope: Q, since: datetime, until: datetime) -> dict[datetime, Counts]:
    """The counts per hour of [since, until) in `scope` (one query, grouped in the database): for charts."""
    rows = (
        WaitSlice.objects.filter(scope, start__gte=since, start__lt=until)
        .annotate(hour=TruncHour("start", tzinfo=UTC))
        .values("hour")
        .annotate(**_sums())
        .order_by("hour")
    )
    return {row["hour"]: _counts(row) for row in rows}


def prune(before: datetime) -> int:
    """Delete slices older than `before` (the longest objective's window and some): one statement."""
    deleted, _ = WaitSlice.objects.filter(start__lt=before).delete()
    return deleted
