"""Calibrated estimates: how good the estimated starts Gridlane shows have been, and the runtimes it learns.

Every estimate shown is kept with its workload (the first, and the latest before it started: the waiting writer,
store.write_waiting_reasons, records both in the statement that writes the estimate), and when the work starts
the error (actual start minus the latest estimate, in seconds) is kept in the same statement that sets its start
(services.lifecycle). Per queue, the errors of the last ERROR_WINDOW give its median and p90 absolute error and
the band it puts around new estimates (scheduler.estimates.band: the central 90 % of signed errors).

Learned runtimes: per team, queue and shape (scheduler.estimates.shape_of), the LEARNED_PERCENTILE of how long
the work that finished in the last LEARN_WINDOW ran, where there are MIN_HISTORY runs or more, capped at the
limit; the worker reads them once every LEARN_EVERY (one aggregate query) and hands them to the scheduler in the
snapshot, whose estimates use them instead of the limit.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import F, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from portal.words import duration
from portal.workloads.models import Workload
from portal.workloads.states import FINISHED
from scheduler.estimates import LEARNED_PERCENTILE, MIN_HISTORY, Shape, band, learned_runtime, percentile

ERROR_WINDOW = timedelta(days=7)
LEARN_WINDOW = timedelta(days=30)
LEARN_EVERY = timedelta(minutes=10)
BAND_KEPT_S = 60.0  # band_for keeps a queue's band this long (a dry run asks for it many times a second)


def error_s(started_at: datetime | None, estimate: datetime | None) -> int | None:
    """Actual start minus the latest estimate, in whole seconds (late is positive); None without an estimate."""
    if started_at is None or estimate is None:
        return None
    return round((started_at - estimate).total_seconds())


def shown(estimate: datetime | None) -> dict[str, Any]:
    """The fields an UPDATE that shows `estimate` sets with it, so that it is recorded too (none for no estimate)."""
    if estimate is None:
        return {}
    return {
        "last_estimated_start": estimate,
        "first_estimated_start": Coalesce(F("first_estimated_start"), Value(estimate)),
    }


@dataclass(frozen=True)
class Calibration:
    """How good a queue's estimates have been over ERROR_WINDOW."""

    starts: int  # starts that had an estimate
    median_abs_s: float
    p90_abs_s: float
    band: tuple[int, int] | None  # put around a new estimate: (low <= 0, high >= 0) seconds; None: too few starts

    def as_dict(self) -> dict[str, Any]:
        low, high = self.band if self.band is not None else (None, None)
        return {
            "starts": self.starts,
            "median_abs_error_seconds": round(self.median_abs_s),
            "p90_abs_error_seconds": round(self.p90_abs_s),
            "band_low_seconds": low,
            "band_high_seconds": high,
        }


def calibration_of(errors: Iterable[float]) -> Calibration | None:
    signed = list(errors)
    if not signed:
        return None
    absolute = [abs(e) for e in signed]
    return Calibration(len(signed), percentile(absolute, 50) or 0.0, percentile(absolute, 90) or 0.0, band(signed))


def queue_calibrations(queue_ids: Iterable[int]) -> dict[int, Calibration]:
    """How good each queue's estimates were over ERROR_WINDOW, where a start had one (one query)."""
    errors: defaultdict[int, list[float]] = defaultdict(list)
    for queue_id, error in Workload.objects.filter(
        queue_id__in=list(queue_ids), started_at__gte=timezone.now() - ERROR_WINDOW, estimate_error_s__isnull=False
    ).values_list("queue_id", "estimate_error_s"):
        if error is not None:
            errors[queue_id].append(float(error))
    return {q: c for q, e in errors.items() if (c := calibration_of(e)) is not None}


_bands: dict[int, tuple[float, tuple[int, int] | None]] = {}  # queue -> (when read, its band)


def band_for(queue_id: int) -> tuple[int, int] | None:
    """The band the queue puts around a new estimate: (low_s, high_s) to add to it (low <= 0 <= high), or None
    where too few recent starts had an estimate. One query, then kept for BAND_KEPT_S in this process."""
    kept = _bands.get(queue_id)
    clock = time.monotonic()
    if kept is not None and clock - kept[0] < BAND_KEPT_S:
        return kept[1]
    since = timezone.now() - ERROR_WINDOW
    errors = Workload.objects.filter(
        queue_id=queue_id, started_at__gte=since, estimate_error_s__isnull=False
    ).values_list("estimate_error_s", flat=True)
    found = band([float(e) for e in errors if e is not None])
    _bands[queue_id] = (clock, found)
    return found


def forget_bands() -> None:
    _bands.clear()


# -- learned runtimes ---------------------------------------------------------------------------------------

_LEARN_SQL = """
SELECT group_id, queue_id, gpus_milli, nodes, runtime_limit_s,
       percentile_cont(%s) WITHIN GROUP (ORDER BY EXTRACT(EPOCH FROM finished_at - started_at))
FROM {table}
WHERE state = ANY(%s) AND submitted_at >= %s AND finished_at >= %s AND started_at IS NOT NULL
      AND finished_at >= started_at
      AND array_size = 0
GROUP BY group_id, queue_id, gpus_milli, nodes, runtime_limit_s
HAVING count(*) >= %s
"""


def learned_runtimes(now: datetime) -> dict[Shape, int]:
    """Every shape's learned runtime from the work submitted and finished in the last LEARN_WINDOW (one query,
    which the index on state and submitted_at narrows)."""
    since = now - LEARN_WINDOW
    finished = sorted(str(s) for s in FINISHED)
    if connection.vendor == "postgresql":
        table = connection.ops.quote_name(Workload._meta.db_table)
        with connection.cursor() as cursor:
            cursor.execute(
                _LEARN_SQL.format(table=table), [LEARNED_PERCENTILE / 100, finished, since, since, MIN_HISTORY]
            )
            rows = cursor.fetchall()
        return {
            (g, q, gpus, nodes, limit): max(1, min(limit, int(float(seen) + 0.999)))
            for g, q, gpus, nodes, limit, seen in rows
        }
    runs: defaultdict[Shape, list[float]] = defaultdict(list)
    for g, q, gpus, nodes, limit, started, ended in Workload.objects.filter(
        state__in=finished, submitted_at__gte=since, finished_at__gte=since, started_at__isnull=False, array_size=0
    ).values_list("group_id", "queue_id", "gpus_milli", "nodes", "runtime_limit_s", "started_at", "finished_at"):
        if ended is not None and started is not None and ended >= started:
            runs[(g, q, gpus, nodes, limit)].append((ended - started).total_seconds())
    out = {}
    for shape, seen in runs.items():
        learned = learned_runtime(seen, shape[4])
        if learned is not None:
            out[shape] = learned
    return out


class Learned:
    """The learned runtimes as last read, read again once they are LEARN_EVERY old (the worker's, per cycle)."""

    def __init__(self) -> None:
        self._kept: tuple[datetime | None, dict[Shape, int]] = (None, {})

    def at(self, now: datetime) -> dict[Shape, int]:
        read_at, table = self._kept
        if read_at is None or not read_at <= now < read_at + LEARN_EVERY:
            table = learned_runtimes(now)
            self._kept = (now, table)
        return table

    def forget(self) -> None:
        self._kept = (None, {})


LEARNED = Learned()


# -- in words -----------------------------------------------------------------------------------------------


def _minutes(seconds: int) -> int:
    return -(-abs(seconds) // 60)  # whole minutes, rounded up: "within" errs wide


def band_words(found: tuple[int, int] | None) -> str:
    """A band as the pages say it: "usually within -3/+12 min (a minus sign)"; "" for none."""
    if found is None:
        return ""
    low, high = found
    if max(-low, high) < 90 * 60:
        return f"usually within \u2212{_minutes(low)}/+{_minutes(high)} min"
    return f"usually within \u2212{duration(-low)}/+{duration(high)}"


def error_words(error: int | None) -> str:
    """A start's error as its page says it: "4 min later than estimated"; "" for none."""
    if error is None:
        return ""
    if abs(error) < 60:
        return "within a minute of its estimate"
    return f"{duration(abs(error))} {'later' if error > 0 else 'earlier'} than estimated"


def calibration_words(c: Calibration | None) -> str:
    """A queue's record: "off by 4 min (median), 20 min (p90) over 7 days; usually within -3/+12 min (a minus sign)"."""
    if c is None:
        return ""
    said = f"off by {duration(c.median_abs_s) or '0 s'} (median), {duration(c.p90_abs_s) or '0 s'} (p90)"
    said += f" over 7 days, {c.starts} start{'s' if c.starts != 1 else ''}"
    return f"{said}; {band_words(c.band)}" if c.band is not None else said
