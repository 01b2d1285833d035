"""The worker's counters and gauges (portal.worker.stats), which /metrics serves: a counter adds, a gauge is set,
and an admission records both in one statement."""

from __future__ import annotations

from portal.worker import stats
from portal.worker.models import WorkerStats


def values() -> dict[str, float]:
    return dict(WorkerStats.objects.values_list("name", "value"))


def test_counters_add_and_gauges_are_set_in_one_statement(db, django_assert_num_queries):
    with django_assert_num_queries(1):
        stats.record({"cycles": 1, "admissions": 3}, {"last_cycle_seconds": 0.5})
    with django_assert_num_queries(1):
        stats.record({"cycles": 1, "admissions": 2, "preemptions": 0}, {"last_cycle_seconds": 0.25})
    assert values() == {"cycles": 2, "admissions": 5, "last_cycle_seconds": 0.25}  # a zero is not counted


def test_count_and_gauge_alone(db):
    stats.count(cycles=2)
    stats.count(cycles=3)
    stats.gauge(last_cycle_at=10.0)
    stats.gauge(last_cycle_at=20.0)
    assert values() == {"cycles": 5, "last_cycle_at": 20.0}
    stats.record({}, {})  # nothing to record: no statement, nothing written
    assert values() == {"cycles": 5, "last_cycle_at": 20.0}
