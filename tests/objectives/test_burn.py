"""Burn rates and their thresholds (pure), and the wait counts they are read from."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from portal.objectives import burn
from portal.usage import waits

T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
FAST, SLOW = burn.ALERTS


def test_over_30_days_the_alerts_fire_at_sre_practice_s_rates():
    assert burn.threshold(FAST, 30) == pytest.approx(14.4)
    assert burn.threshold(SLOW, 30) == pytest.approx(6.0)


def test_a_shorter_objective_scales_the_rates_to_the_same_share_of_its_budget():
    assert burn.threshold(FAST, 7) == pytest.approx(3.36)
    assert burn.threshold(SLOW, 7) == pytest.approx(1.4)
    assert burn.threshold(SLOW, 1) == 1.0  # never below the budget's own pace


def test_a_window_s_rate_is_its_share_waiting_too_long_over_the_budget():
    assert burn.rate(over=1, started=20, budget=0.05) == pytest.approx(1.0)
    assert burn.rate(over=0, started=0, budget=0.05) == 0.0


def test_an_alert_fires_only_when_its_long_and_short_windows_both_burn():
    only_long = burn.status(100, 10, 900.0, 0.05, 30, {"fast_long": (20, 20), "fast_short": (0, 5)})
    assert only_long.firing == []
    both = burn.status(100, 10, 900.0, 0.05, 30, {"fast_long": (20, 20), "fast_short": (5, 5)})
    assert both.firing == ["fast"]
    assert both.budget_remaining == pytest.approx(1 - 0.1 / 0.05)  # 10 % waited too long on a 5 % budget


def test_starts_are_counted_per_team_queue_tier_and_five_minutes_against_each_threshold():
    starts = [
        (1, 2, "normal", T0, T0 + timedelta(minutes=3)),  # waited 3 minutes
        (1, 2, "normal", T0, T0 + timedelta(minutes=4)),  # same slice: 4 minutes
        (1, 2, "high", T0, T0 + timedelta(minutes=4)),  # another tier
        (1, 2, "normal", T0, T0 + timedelta(minutes=40)),  # a later slice, 40 minutes
        (1, 2, "normal", T0, T0 + timedelta(hours=3)),  # after the window: not counted
    ]
    cells = waits.compute(starts, T0, T0 + timedelta(hours=1))
    first = cells[(1, 2, "normal", T0)]
    assert first.started == 2
    assert first.over[1] == 2
    assert first.over[5] == 0
    assert cells[(1, 2, "high", T0)].started == 1
    late = cells[(1, 2, "normal", T0 + timedelta(minutes=40))]
    assert (late.over[30], late.over[60]) == (1, 0)
    assert len(cells) == 3


def test_a_percentile_is_interpolated_inside_the_threshold_it_falls_in():
    counts = waits.Counts()
    for minutes in [0.5] * 90 + [20] * 10:  # 90 under a minute, 10 between 15 and 30 minutes
        counts.add(minutes * 60)
    assert counts.quantile(0.5) == pytest.approx(60 * 50 / 90)
    p95 = counts.quantile(0.95)
    assert p95 is not None
    assert 15 * 60 < p95 < 30 * 60
    assert counts.share_over(15) == pytest.approx(0.1)
    assert waits.Counts().quantile(0.95) is None
