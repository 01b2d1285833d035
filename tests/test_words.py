"""How Gridlane says amounts and times: plural-aware, in human units (portal/words.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from portal import words

NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "want"),
    [(Decimal("1.000"), "1 GPU"), (Decimal("0.250"), "0.25 GPU"), (Decimal(2), "2 GPUs"), (0, "0 GPUs"),
     (Decimal("1.5"), "1.5 GPUs"), (0.125, "0.125 GPU"), (None, "")],
)  # fmt: skip
def test_gpus_read_as_people_say_them(value, want):
    assert words.gpus(value) == want


@pytest.mark.parametrize(
    ("seconds", "want"),
    [(3600, "1 hour"), (7200, "2 hours"), (5400, "1.5 hours"), (900, "0.25 hours"), (None, "")],
)  # fmt: skip
def test_hours_are_plural_aware(seconds, want):
    assert words.hours(seconds) == want


@pytest.mark.parametrize(
    ("before", "want"),
    [(timedelta(0), "just now"), (timedelta(seconds=59), "just now"), (timedelta(minutes=1), "1 minute ago"),
     (timedelta(minutes=5, seconds=30), "5 minutes ago"), (timedelta(hours=1), "1 hour ago"),
     (timedelta(days=3), "3 days ago")],
)  # fmt: skip
def test_how_long_ago(before, want):
    assert words.ago(NOW - before, NOW) == want


@pytest.mark.parametrize(
    ("ahead", "want"),
    [(timedelta(hours=2, minutes=5), "2 h 5 min left"), (timedelta(seconds=30), "under a minute left"),
     (timedelta(seconds=-1), "ended"), (timedelta(days=2, hours=3, minutes=4), "2 d 3 h left")],
)  # fmt: skip
def test_time_left(ahead, want):
    assert words.left(NOW + ahead, NOW) == want


def test_kinds_and_requests_in_words():
    assert words.kind_label("vm") == "VM lease"
    assert words.kind_label("training") == "Training run"
    assert words.resources(Decimal("0.25"), Decimal(2), Decimal(8)) == "0.25 GPU, 2 CPUs, 8 GB"
    gang = words.resources(Decimal(1), Decimal(1), Decimal("0.5"), nodes=2)
    assert gang == "1 GPU, 1 CPU, 0.5 GB per node \u00d7 2 nodes"
    assert words.number(Decimal("0.250")) == "0.25"
