"""The efficiency page's windows start at midnight UTC and cut the day, whichever grouping the database does
(the epoch's where the window divides a day on PostgreSQL, else the day and the number within it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from portal.usage import gpu_windows
from portal.usage.efficiency import _series, _window_start
from portal.usage.models import UsageGpuSample, UsageSample

MIDNIGHT = datetime(2026, 11, 30, 0, 0, tzinfo=UTC)
TIMES = [MIDNIGHT - timedelta(minutes=10), MIDNIGHT + timedelta(minutes=10), MIDNIGHT + timedelta(minutes=40)]


@pytest.mark.parametrize("minutes", [30, 7])  # 30 divides a day (the epoch's grouping), 7 does not
def test_windows_straddle_no_midnight_and_each_reading_lands_in_its_own(alice, submit, minutes):
    w = submit(alice, name="windows", gpus=1.0)
    window = timedelta(minutes=minutes)
    for i, at in enumerate(TIMES):
        UsageSample.objects.create(workload=w, at=at, source="job", gpus_milli=1000, gpu_utilisation=10.0 * (i + 1))
        UsageGpuSample.objects.create(workload=w, at=at, node="n1", gpu=0, utilisation=10.0 * (i + 1))
    gpu_windows.rebuild(w.pk)
    gpus, windows = _series(w, MIDNIGHT - timedelta(hours=1), MIDNIGHT + timedelta(hours=1), window)
    want = sorted({_window_start(at, window) for at in TIMES})
    assert [x.at for x in windows] == want
    assert gpus[0].at == want
    assert windows[0].at < MIDNIGHT <= windows[1].at  # the reading before midnight is in the day before's window
    assert [x.gpu_utilisation for x in windows] == [10.0, 20.0, 30.0]
