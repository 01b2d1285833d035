"""Estimated starts (estimates.py): the first window where the work fits, against a plain search of every start."""

from __future__ import annotations

import os
from datetime import datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler.estimates import Profile
from scheduler.ledger import Amount, fits
from tests.scheduler.shapes import NOW

SETTINGS = settings(
    max_examples=int(os.environ.get("GRIDLANE_HYPOTHESIS_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
amounts = st.tuples(st.integers(-4, 8), st.integers(-4, 8), st.integers(-4, 8)).map(
    lambda a: (a[0] * 1000, a[1] * 1000, a[2] * 1024)
)
releases = st.lists(st.tuples(st.integers(0, 20_000), amounts), max_size=12).map(
    lambda rs: sorted(((NOW + timedelta(seconds=s), a) for s, a in rs), key=lambda r: r[0])
)
asks = st.lists(st.tuples(amounts, st.sampled_from([0, 60, 300, 3600, 7200, 30_000])), min_size=1, max_size=8)


def earliest_by_every_start(profile: Profile, need: Amount, runtime_s: int) -> datetime | None:
    """Each start in turn, every step inside its window checked: what the estimate must find."""
    for i, start in enumerate(profile.times):
        end = start + timedelta(seconds=runtime_s)
        inside = [k for k in range(i, len(profile.times)) if profile.times[k] < end]
        if all(fits(need, profile.free[k]) for k in inside):
            return start
    return None


@SETTINGS
@given(amounts, releases, asks)
def test_an_estimate_is_the_first_start_whose_whole_window_has_room(
    free: Amount, released: list[tuple[datetime, Amount]], asked: list[tuple[Amount, int]]
) -> None:
    profile = Profile(NOW, free, released)
    for need, runtime_s in asked:
        expected = earliest_by_every_start(profile, need, runtime_s)
        assert profile.earliest(need, runtime_s) == expected
