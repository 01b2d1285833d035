"""When an idle notebook is warned, cleared and stopped: a table over the pure decision, times in minutes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from portal.worker.idle import Act, decide, warning_window

T0 = datetime(2026, 5, 4, 13, 0, tzinfo=UTC)
WARNING = timedelta(minutes=10)


def at(minutes: float) -> datetime:
    """T0 plus some minutes."""
    return T0 + timedelta(minutes=minutes)


@dataclass
class Case:
    name: str
    now: float  # minutes after T0
    last_activity: float | None
    limit: float | None = 60
    warned_stop_at: float | None = None
    want: Act = Act.NOTHING
    want_stop_at: float | None = None


# fmt: off
CASES = [
    Case("used a minute ago: nothing", now=1, last_activity=0),
    Case("idle 49 of 60 minutes: not yet", now=49, last_activity=0),
    Case("idle 50 of 60 minutes: warned, to stop at the limit", now=50, last_activity=0,
         want=Act.WARN, want_stop_at=60),
    Case("warned and still idle before the stop: nothing more", now=55, last_activity=0, warned_stop_at=60),
    Case("warned and idle to the stop: stopped", now=60, last_activity=0, warned_stop_at=60, want=Act.STOP),
    Case("warned, then used: the warning is taken back", now=55, last_activity=54, warned_stop_at=60, want=Act.CLEAR),
    Case("used after a warning and idle again to the threshold: warned again", now=104, last_activity=54,
         want=Act.WARN, want_stop_at=114),
    Case("first seen idle past the limit: warned a full window ahead, not stopped", now=90, last_activity=0,
         want=Act.WARN, want_stop_at=100),
    Case("its server does not answer: nothing is known, nothing is done", now=90, last_activity=None),
    Case("warned, and the server stops answering: the warning stands", now=58, last_activity=None, warned_stop_at=60),
    Case("a queue without an idle limit: never warned", now=600, last_activity=0, limit=None),
    Case("an idle limit of 0 means never", now=600, last_activity=0, limit=0),
    Case("warned, then the queue drops its limit: the warning is taken back", now=55, last_activity=0, limit=None,
         warned_stop_at=60, want=Act.CLEAR),
    Case("a 12-minute limit warns 2 minutes ahead (a sixth), not 10", now=10, last_activity=0, limit=12,
         want=Act.WARN, want_stop_at=12),
]
# fmt: on


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_idle_decisions(case):
    limit = None if case.limit is None else timedelta(minutes=case.limit)
    last = None if case.last_activity is None else at(case.last_activity)
    stop_at = None if case.warned_stop_at is None else at(case.warned_stop_at)
    decision = decide(at(case.now), last, limit, WARNING, stop_at)
    assert decision.act == case.want
    if case.want_stop_at is not None:
        assert decision.stop_at == at(case.want_stop_at)


def test_the_warning_comes_at_most_ten_minutes_and_at_most_a_sixth_of_the_limit_ahead():
    assert warning_window(timedelta(minutes=60), WARNING) == timedelta(minutes=10)
    assert warning_window(timedelta(minutes=600), WARNING) == timedelta(minutes=10)
    assert warning_window(timedelta(minutes=30), WARNING) == timedelta(minutes=5)
