"""Figures are plain dicts built by pure functions: assert on what they would draw, no browser needed."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from portal.dashboards import figures

HOURS = [datetime(2026, 11, 30, h, tzinfo=UTC) for h in range(3)]


def test_use_is_drawn_against_the_reservation_and_a_flat_limit():
    fig = figures.use_against_quota(HOURS, [1.0, 5.0, 2.0], [4.0, 4.0, 4.0], 6.0)
    names = [t["name"] for t in fig["data"]]
    assert names == ["In use", "Reservation", "Limit"]
    assert fig["data"][0]["y"] == [1.0, 5.0, 2.0]
    assert fig["data"][0]["x"][0] == "2026-11-30T00:00:00+00:00"
    assert fig["data"][2]["y"] == [6.0, 6.0, 6.0]
    json.dumps(fig)  # it must reach the page as JSON


def test_a_fresh_sites_limit_in_its_first_hour_alone_is_drawn_as_a_marker():
    fig = figures.use_against_quota(HOURS, [0.0, 0.0, 1.0], [0.0, 0.0, 4.0], [None, None, 6.0])
    limit = next(t for t in fig["data"] if t["name"] == "Limit")
    assert "markers" in limit["mode"]
    assert limit["marker"]["size"] == [0, 0, 7]  # a single point: a line alone would draw nothing
    flat = next(t for t in figures.use_against_quota(HOURS, [0, 0, 0], [0, 0, 0], 6.0)["data"] if t["name"] == "Limit")
    assert flat["marker"]["size"] == [0, 0, 0]  # a line of points needs no markers


def test_no_limit_draws_no_limit_line():
    fig = figures.use_against_quota(HOURS, [0, 0, 0], [0, 0, 0], None)
    assert [t["name"] for t in fig["data"]] == ["In use", "Reservation"]


def test_gpu_hours_by_member_puts_the_biggest_user_on_top():
    fig = figures.gpu_hours_by("GPU-hours by member", {"alice": 3.0, "bob": 10.0, "carol": 0.5})
    bar = fig["data"][0]
    assert bar["orientation"] == "h"
    assert bar["y"] == ["carol", "alice", "bob"]  # plotly draws the last bar on top
    assert bar["x"] == [0.5, 3.0, 10.0]


def test_idle_hours_stack_under_busy_hours():
    fig = figures.idle_gpu_hours(HOURS, [4.0, 4.0, 2.0], [1.0, 0.0, 2.0])
    busy, idle, unknown = fig["data"]
    assert busy["y"] == [3.0, 4.0, 0.0]
    assert idle["y"] == [1.0, 0.0, 2.0]
    assert unknown["y"] == [0.0, 0.0, 0.0]
    assert fig["layout"]["barmode"] == "stack"


def test_gpu_hours_with_no_utilisation_data_are_a_hatched_bar_of_their_own_not_busy():
    fig = figures.idle_gpu_hours(HOURS, [4.0, 4.0, 2.0], [1.0, 0.0, 0.0], [3.0, 0.0, 2.0])
    busy, idle, unknown = fig["data"]
    assert busy["y"] == [0.0, 4.0, 0.0]
    assert idle["y"] == [1.0, 0.0, 0.0]
    assert unknown["y"] == [3.0, 0.0, 2.0]
    assert unknown["marker"]["pattern"]["shape"] == "/"
    assert unknown["name"].startswith("Unknown")


def test_wait_is_in_minutes_per_queue_with_the_slo_line_drawn():
    fig = figures.wait_against_slo({"train": (HOURS[:2], [60.0, None], [600.0, 1200.0])}, slo_seconds=900)
    p95, p50 = fig["data"]
    assert p95["name"] == "train p95"
    assert p95["y"] == [10.0, 20.0]
    assert p50["y"] == [1.0, None]  # no start that hour: a gap, not a zero
    (slo,) = fig["layout"]["shapes"]
    assert (slo["y0"], slo["y1"], slo["xref"]) == (15.0, 15.0, "paper")
    assert "SLO p95 15 min" in fig["layout"]["annotations"][0]["text"]


def test_pending_demand_fills_under_the_line():
    fig = figures.pending_demand(HOURS, [0.0, 2.5, 1.0])
    assert fig["data"][0]["y"] == [0.0, 2.5, 1.0]
    assert fig["data"][0]["fill"] == "tozeroy"


def test_demand_against_capacity_stacks_use_and_waiting_under_capacity():
    fig = figures.demand_against_capacity(HOURS, [6.0, 8.0, 8.0], [0.0, 3.0, 9.0], 8.0, "local (demo)")
    used, waiting, capacity = fig["data"]
    assert used["stackgroup"] == waiting["stackgroup"]
    assert capacity["y"] == [8.0] * 3
    assert fig["layout"]["title"]["text"] == "local (demo)"


def test_an_empty_window_still_makes_a_valid_figure():
    hours = [datetime(2026, 11, 30, tzinfo=UTC) + timedelta(hours=i) for i in range(24)]
    fig = figures.wait_against_slo({}, 3600)
    assert fig["data"] == []
    assert figures.gpu_hours_by("x", {})["data"][0]["y"] == []
    assert len(figures.pending_demand(hours, [0.0] * 24)["data"][0]["x"]) == 24


def test_one_hour_gets_an_axis_of_the_window_not_of_a_millisecond():
    """One point alone made plotly's axis read "12:59:59.999": the axis spans the window's hours."""
    fig = figures.use_against_quota(HOURS[:1], [0.0001], [0.0], None)
    x = fig["layout"]["xaxis"]
    assert x["type"] == "date"
    assert x["range"] == ["2026-11-29T23:30:00+00:00", "2026-11-30T00:30:00+00:00"]
    assert x["tickformat"] == "%H:%M"


def test_gpu_axes_never_use_si_prefixes_and_start_at_zero_up_to_at_least_one():
    """0.0001 GPUs drawn on a 0..1 axis in plain numbers, not as "100\u03bc"."""
    fig = figures.use_against_quota(HOURS, [0.0001, 0.0002, 0.0], [0.0, 0.0, 0.0], None)
    y = fig["layout"]["yaxis"]
    assert y["exponentformat"] == "none"
    assert y["range"] == [0, 1.0]
    assert "~" in y["tickformat"]  # trims trailing zeros: 0.5, not 0.50


def test_a_week_is_ticked_by_day_and_a_limit_history_has_gaps():
    week = [HOURS[0] + timedelta(hours=h) for h in range(7 * 24)]
    limits = [None] * 24 + [6.0] * (6 * 24)
    fig = figures.use_against_quota(week, [1.0] * len(week), [0.0] * len(week), limits)
    assert fig["layout"]["xaxis"]["tickformat"] == "%b %-d"
    limit = fig["data"][2]
    assert limit["y"][0] is None
    assert limit["connectgaps"] is False
    assert fig["layout"]["yaxis"]["range"][1] == 6.0 * 1.15


def test_titles_sit_left_where_the_toolbar_is_not():
    fig = figures.pending_demand(HOURS, [1.0, 2.0, 0.0])
    assert fig["layout"]["title"]["x"] == 0
    assert fig["layout"]["title"]["xanchor"] == "left"
