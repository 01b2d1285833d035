"""Hourly rollups: the pure arithmetic on spans, then the worker's step against the database."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from hypothesis import given
from hypothesis import settings as examples
from hypothesis import strategies as st

from portal.usage import rollup
from portal.usage.models import UsageMemberRollup, UsageRollup, UsageSample
from portal.usage.rollup import HOUR, Span, compute
from portal.workloads.models import Workload
from portal.workloads.states import State

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


def span(gpus=1.0, submitted=T0, started=None, finished=None, group=1, queue=1, owner=1):
    return Span(group, queue, owner, gpus, submitted, started, finished)


def test_two_gpus_running_half_an_hour_make_one_gpu_hour():
    s = span(gpus=2, started=T0 + timedelta(minutes=30), finished=T0 + timedelta(hours=1))
    cells, members = compute([("w", s)], {}, {}, T0, T0 + timedelta(hours=2))
    assert cells[(1, 1, T0)].gpu_hours == pytest.approx(1.0)
    assert cells[(1, 1, T0)].pending_gpu_hours == pytest.approx(1.0)  # it waited the first half hour
    assert members[(1, 1, T0)].gpu_hours == pytest.approx(1.0)
    assert (1, 1, T0 + timedelta(hours=1)) not in cells


def test_a_run_across_the_hour_is_split_between_both_hours():
    s = span(started=T0 + timedelta(minutes=45), finished=T0 + timedelta(minutes=75))
    cells, _ = compute([("w", s)], {}, {}, T0, T0 + timedelta(hours=2))
    assert cells[(1, 1, T0)].gpu_hours == pytest.approx(0.25)
    assert cells[(1, 1, T0 + timedelta(hours=1))].gpu_hours == pytest.approx(0.25)


def test_the_current_hour_counts_only_up_to_now():
    s = span(started=T0)
    cells, _ = compute([("w", s)], {}, {1: 4.0}, T0, T0 + timedelta(minutes=15))
    assert cells[(1, 1, T0)].gpu_hours == pytest.approx(0.25)
    assert cells[(1, 1, T0)].reserved_gpu_hours == pytest.approx(1.0)  # 4 GPUs reserved for a quarter hour


def test_waits_of_the_workloads_started_in_the_hour_give_p50_and_p95():
    spans = [
        (f"w{i}", span(submitted=T0, started=T0 + timedelta(minutes=i), finished=T0 + timedelta(minutes=i + 1)))
        for i in range(1, 11)
    ]
    cells, _ = compute(spans, {}, {}, T0, T0 + timedelta(hours=1))
    assert sorted(cells[(1, 1, T0)].waits) == [60.0 * i for i in range(1, 11)]


HALF = timedelta(minutes=30)


def test_a_workload_below_80_percent_in_every_window_counts_its_gpu_hours_as_idle():
    s = span(gpus=4, started=T0, finished=T0 + timedelta(hours=1))
    cells, members = compute([("w", s)], {("w", T0): 50.0, ("w", T0 + HALF): 79.9}, {}, T0, T0 + timedelta(hours=1))
    assert cells[(1, 1, T0)].idle_gpu_hours == pytest.approx(4.0)
    assert members[(1, 1, T0)].idle_gpu_hours == pytest.approx(4.0)
    assert cells[(1, 1, T0)].used_gpu_hours == pytest.approx(2 * 0.5 + 2 * 0.799)
    assert cells[(1, 1, T0)].unknown_gpu_hours == 0.0


def test_idle_is_decided_per_window_of_30_minutes_not_per_hour():
    # Half an hour at 50 %, half an hour at 90 %: the hour averages 70 %, yet only the first half is idle.
    s = span(gpus=4, started=T0, finished=T0 + timedelta(hours=1))
    cells, _ = compute([("w", s)], {("w", T0): 50.0, ("w", T0 + HALF): 90.0}, {}, T0, T0 + timedelta(hours=1))
    assert cells[(1, 1, T0)].idle_gpu_hours == pytest.approx(2.0)
    assert cells[(1, 1, T0)].used_gpu_hours == pytest.approx(2 * 0.5 + 2 * 0.9)


def test_an_hour_long_window_takes_the_hour_s_average():
    s = span(gpus=4, started=T0, finished=T0 + timedelta(hours=1))
    cells, _ = compute([("w", s)], {("w", T0): 70.0}, {}, T0, T0 + timedelta(hours=1), timedelta(hours=1))
    assert cells[(1, 1, T0)].idle_gpu_hours == pytest.approx(4.0)


def test_a_window_with_no_samples_is_unknown_never_busy_or_idle():
    s = span(gpus=2, started=T0, finished=T0 + timedelta(hours=1))
    cells, members = compute([("w", s)], {("w", T0): 10.0}, {}, T0, T0 + timedelta(hours=1))
    assert cells[(1, 1, T0)].idle_gpu_hours == pytest.approx(1.0)  # the first half, sampled at 10 %
    assert cells[(1, 1, T0)].unknown_gpu_hours == pytest.approx(1.0)  # the second half, a gap
    assert members[(1, 1, T0)].unknown_gpu_hours == pytest.approx(1.0)
    nothing, _ = compute([("w", s)], {}, {}, T0, T0 + timedelta(hours=1))
    assert nothing[(1, 1, T0)].unknown_gpu_hours == pytest.approx(2.0)
    assert nothing[(1, 1, T0)].idle_gpu_hours == 0.0


def test_a_two_hour_window_spans_the_hours_it_covers():
    s = span(gpus=1, started=T0, finished=T0 + timedelta(hours=2))
    cells, _ = compute([("w", s)], {("w", T0): 30.0}, {}, T0, T0 + timedelta(hours=2), timedelta(hours=2))
    assert cells[(1, 1, T0)].idle_gpu_hours == pytest.approx(1.0)
    assert cells[(1, 1, T0 + timedelta(hours=1))].idle_gpu_hours == pytest.approx(1.0)


def test_windows_start_at_midnight_utc_and_cut_the_hour_into_parts():
    hour = T0 + timedelta(hours=1)  # 11:00
    assert list(rollup.windows_in(hour, HALF)) == [(hour, hour, hour + HALF), (hour + HALF, hour + HALF, hour + HOUR)]
    # 90 minutes: 10:30-12:00 covers the whole of 11:00-12:00.
    assert list(rollup.windows_in(hour, timedelta(minutes=90))) == [(T0 + HALF, hour, hour + HOUR)]
    assert rollup.window_of(datetime(2026, 11, 30, 11, 15, tzinfo=UTC), timedelta(minutes=90)) == T0 + HALF


@examples(max_examples=200, deadline=None)
@given(
    gpus=st.sampled_from([0.25, 1.0, 2.0, 8.0]),
    start_min=st.integers(0, 179),
    length_min=st.integers(1, 240),
    averages=st.dictionaries(st.integers(0, 9), st.floats(0, 100), max_size=10),
    window=st.sampled_from([5, 15, 30, 60, 120]),
)
def test_allocated_gpu_hours_are_always_known_plus_unknown_and_idle_and_used_stay_within(
    gpus, start_min, length_min, averages, window
):
    w = timedelta(minutes=window)
    started = T0 + timedelta(minutes=start_min)
    s = span(gpus=gpus, started=started, finished=started + timedelta(minutes=length_min))
    utilisation = {("w", rollup.window_of(T0, w) + k * w): v for k, v in averages.items()}
    cells, members = compute([("w", s)], utilisation, {}, T0, T0 + timedelta(hours=8), w)
    for c in [*cells.values(), *members.values()]:
        known = c.gpu_hours - c.unknown_gpu_hours
        assert known >= -1e-9
        assert c.idle_gpu_hours <= known + 1e-9
        assert c.used_gpu_hours <= known + 1e-9
    for field in ("gpu_hours", "idle_gpu_hours", "used_gpu_hours", "unknown_gpu_hours"):
        by_member = sum(getattr(c, field) for c in members.values())
        assert by_member == pytest.approx(sum(getattr(c, field) for c in cells.values()))
    assert sum(c.gpu_hours for c in cells.values()) == pytest.approx(gpus * length_min / 60)


def test_the_step_samples_running_work_and_writes_rollups_per_team_queue_and_member(alice, bob, submit):
    # Half past an hour that has passed: two minutes later is still the same hour, whenever the test runs.
    now = (datetime.now(UTC) - timedelta(hours=1)).replace(minute=30, second=0, microsecond=0)
    busy = submit(alice, name="busy", gpus=2)
    lazy = submit(bob, name="lazy", gpus=1)
    waiting = submit(alice, name="waiting", gpus=1)
    started = now - timedelta(minutes=3)
    Workload.objects.filter(pk__in=[busy.pk, lazy.pk]).update(
        state=State.RUNNING, submitted_at=started - timedelta(minutes=1), started_at=started
    )
    Workload.objects.filter(pk=waiting.pk).update(submitted_at=now - timedelta(minutes=2))
    # A fabric reported utilisation: lazy's GPUs sit idle this hour, busy's work hard.
    UsageSample.objects.create(workload=lazy, at=now - timedelta(seconds=30), gpus_milli=1000, gpu_utilisation=5)
    UsageSample.objects.create(workload=busy, at=now - timedelta(seconds=30), gpus_milli=2000, gpu_utilisation=95)

    quotas_from_long_ago()
    rollup.step(now)

    assert UsageSample.objects.filter(at=now).count() == 0  # each has a sample from the last minute
    rows = UsageRollup.objects.filter(group__slug="vision", queue__slug="train")
    gpu_hours = sum(r.gpu_hours for r in rows)
    assert gpu_hours == pytest.approx(3 * 3 / 60, rel=0.02)
    assert sum(r.idle_gpu_hours for r in rows) == pytest.approx(1 * 3 / 60, rel=0.02)
    assert sum(r.pending_gpu_hours for r in rows) == pytest.approx((2 + 1 + 2) / 60, rel=0.05)
    assert sum(r.reserved_gpu_hours for r in rows) > 0
    assert sum(r.started for r in rows) == 2
    by_member = {m.user.username: m.gpu_hours for m in UsageMemberRollup.objects.select_related("user")}
    assert by_member["alice"] == pytest.approx(2 * 3 / 60, rel=0.02)
    assert by_member["bob"] == pytest.approx(3 / 60, rel=0.02)

    rollup.step(now + timedelta(minutes=2))  # idempotent: rows are rewritten, not added to
    assert UsageRollup.objects.filter(group__slug="vision").count() == rows.count()
    assert UsageSample.objects.filter(at=now + timedelta(minutes=2)).count() == 2  # due now: one per running


def test_the_step_never_breaks_the_cycle(monkeypatch, db):
    def boom(*args):
        raise RuntimeError("database went away")

    monkeypatch.setattr(rollup, "_step", boom)
    assert rollup.step(datetime.now(UTC)) == 0


def test_the_worker_cycle_keeps_the_rollups(alice, submit):
    from portal.worker import tasks

    submit(alice, name="waits-a-bit", gpus=1)
    tasks.cycle()
    assert UsageRollup.objects.filter(group__slug="vision").exists()


def test_a_running_workload_without_a_recent_sample_gets_one(alice, submit):
    reported, quiet = submit(alice, name="reported", gpus=1), submit(alice, name="quiet", gpus=0.5)
    now = datetime.now(UTC)
    Workload.objects.filter(pk__in=[reported.pk, quiet.pk]).update(state=State.RUNNING, started_at=now)
    UsageSample.objects.create(workload=reported, at=now - timedelta(seconds=10), gpus_milli=1000, gpu_utilisation=50)
    rollup.step(now)
    assert list(UsageSample.objects.filter(at=now).values_list("workload__name", "gpus_milli")) == [("quiet", 500)]


def test_averages_are_taken_per_workload_and_window_in_the_database(alice, submit, settings):
    w = submit(alice, name="sampled", gpus=1)
    for minute, utilisation in ((5, 20), (25, 40), (35, 100)):
        UsageSample.objects.create(workload=w, at=T0 + timedelta(minutes=minute), gpus_milli=1000,
                                   gpu_utilisation=utilisation)  # fmt: skip
    UsageSample.objects.create(workload=w, at=T0 + timedelta(minutes=40), gpus_milli=1000)  # no data: not a zero
    until = T0 + timedelta(hours=1)
    assert rollup.averages(T0, until, HALF) == {(str(w.pk), T0): 30.0, (str(w.pk), T0 + HALF): 100.0}
    assert rollup.averages(T0, until, HOUR) == {(str(w.pk), T0): pytest.approx(160 / 3)}
    # 90 minutes from midnight: 09:00-10:30 holds the first two, 10:30-12:00 the third.
    assert rollup.averages(T0, until, timedelta(minutes=90)) == {
        (str(w.pk), T0 - HOUR): 30.0,
        (str(w.pk), T0 + HALF): 100.0,
    }


def test_the_step_counts_sampled_idle_windows_as_idle_and_gaps_as_unknown(alice, submit, settings):
    settings.GRIDLANE_IDLE_WINDOW_MINUTES = 30
    now = T0 + timedelta(hours=1)
    w = submit(alice, name="notebook-nobody-uses", gpus=0.25)
    Workload.objects.filter(pk=w.pk).update(state=State.RUNNING, submitted_at=T0, started_at=T0)
    for minute in range(0, 30, 1):  # the job's sampler, the first half hour only: 0 % utilisation
        UsageSample.objects.create(workload=w, at=T0 + timedelta(minutes=minute), gpus_milli=250,
                                   gpu_utilisation=0, source=UsageSample.Source.JOB)  # fmt: skip
    rollup.roll_up(T0, now)
    row = UsageRollup.objects.get(group__slug="vision", hour=T0)
    assert row.gpu_hours == pytest.approx(0.25)
    assert row.idle_gpu_hours == pytest.approx(0.125)
    assert row.unknown_gpu_hours == pytest.approx(0.125)
    assert row.used_gpu_hours == 0.0
    member = UsageMemberRollup.objects.get(user=alice, hour=T0)
    assert member.idle_gpu_hours == pytest.approx(0.125)
    assert member.unknown_gpu_hours == pytest.approx(0.125)


MONTH_WINDOWS = 30 * 48  # half-hour windows in thirty days


@examples(max_examples=15, deadline=None)
@given(
    gpus=st.sampled_from([0.25, 1.0, 4.0]),
    price=st.sampled_from([0.0, 1.5, 2.75]),
    sampled=st.dictionaries(st.integers(0, MONTH_WINDOWS - 1), st.floats(0, 100), max_size=400),
)
def test_a_month_s_chargeback_equals_what_its_samples_and_price_say(gpus, price, sampled):
    """A workload that runs a whole month: each half hour with samples is used by its average and idle below
    80 %, each without is unknown, and the cost is every GPU-hour held at the fabric's price."""
    start, end = T0, T0 + timedelta(days=30)
    s = Span(1, 1, 1, gpus, start, start, end, fabric_id=7, price=price)
    utilisation = {("w", start + k * HALF): v for k, v in sampled.items()}
    cells, _ = compute([("w", s)], utilisation, {}, start, end, HALF)
    total = {f: sum(getattr(c, f) for c in cells.values()) for f in ["gpu_hours", *rollup.COST_FIELDS[1:]]}
    assert total["gpu_hours"] == pytest.approx(gpus * 30 * 24)
    assert total["cost"] == pytest.approx(gpus * 30 * 24 * price)
    assert total["used_gpu_hours"] == pytest.approx(sum(gpus * 0.5 * v / 100 for v in sampled.values()), abs=1e-6)
    idle = sum(gpus * 0.5 for v in sampled.values() if v < 80)
    assert total["idle_gpu_hours"] == pytest.approx(idle, abs=1e-6)
    assert total["idle_cost"] == pytest.approx(idle * price, abs=1e-6)
    assert total["unknown_gpu_hours"] == pytest.approx(gpus * 0.5 * (MONTH_WINDOWS - len(sampled)), abs=1e-6)


def test_the_step_keeps_cost_per_queue_member_and_fabric_at_the_fabric_s_price(alice, submit, settings):
    from decimal import Decimal

    from portal.queues.models import Fabric
    from portal.usage.models import UsageFabricRollup

    fabric = Fabric.objects.get(name="local")
    Fabric.objects.filter(pk=fabric.pk).update(gpu_hour_price=Decimal("3.5"))
    w = submit(alice, name="priced", gpus=1)
    Workload.objects.filter(pk=w.pk).update(
        state=State.SUCCEEDED, fabric=fabric, submitted_at=T0, started_at=T0, finished_at=T0 + timedelta(hours=1)
    )
    rollup.roll_up(T0, T0 + timedelta(hours=1))
    assert UsageRollup.objects.get(group__slug="vision", hour=T0).cost == pytest.approx(3.5)
    assert UsageMemberRollup.objects.get(user=alice, hour=T0).cost == pytest.approx(3.5)
    by_fabric = UsageFabricRollup.objects.get(group__slug="vision", hour=T0)
    assert (by_fabric.fabric_id, by_fabric.cost, by_fabric.unknown_gpu_hours) == (fabric.pk, 3.5, 1.0)


@examples(max_examples=200, deadline=None)
@given(
    gpus=st.sampled_from([0.0, 0.5, 1.0, 8.0]),
    cpus=st.sampled_from([0.0, 1.0, 16.0]),
    memory_gb=st.sampled_from([0.0, 0.5, 64.0]),
    prices=st.tuples(*[st.sampled_from([0.0, 0.04, 2.75]) for _ in range(3)]),
    start_min=st.integers(0, 179),
    length_min=st.integers(1, 300),
    averages=st.dictionaries(st.integers(0, 15), st.floats(0, 100), max_size=16),
)
def test_cost_is_always_the_sum_of_its_gpu_cpu_and_memory_parts(
    gpus, cpus, memory_gb, prices, start_min, length_min, averages
):
    """Whatever the utilisation, each cell's cost is its GPU-, CPU- and GB-hours at the fabric's prices, and idle
    cost stays the idle GPU-hours' (CPUs and memory are not measured idle)."""
    gpu_price, cpu_price, memory_price = prices
    started = T0 + timedelta(minutes=start_min)
    s = Span(1, 1, 1, gpus, T0, started, started + timedelta(minutes=length_min), fabric_id=7, price=gpu_price,
             cpus=cpus, memory_gb=memory_gb, cpu_price=cpu_price, memory_price=memory_price)  # fmt: skip
    utilisation = {("w", T0 + k * HALF): v for k, v in averages.items()}
    cells, members = compute([("w", s)], utilisation, {}, T0, T0 + timedelta(hours=8), HALF)
    fabric = rollup.by_fabric([("w", s)], utilisation, T0, T0 + timedelta(hours=8), HALF)
    for c in [*cells.values(), *members.values(), *fabric.values()]:
        parts = c.gpu_hours * gpu_price + c.cpu_hours * cpu_price + c.memory_gb_hours * memory_price
        assert c.cost == pytest.approx(parts, abs=1e-9)
        assert c.idle_cost == pytest.approx(c.idle_gpu_hours * gpu_price, abs=1e-9)
    hours = length_min / 60
    for found in (cells, members, fabric):
        assert sum(c.cpu_hours for c in found.values()) == pytest.approx(cpus * hours)
        assert sum(c.memory_gb_hours for c in found.values()) == pytest.approx(memory_gb * hours)
        assert sum(c.cost for c in found.values()) == pytest.approx(s.cost_per_hour * hours)


def test_cpu_only_work_on_a_fabric_is_charged_there_too():
    s = Span(1, 1, 1, 0.0, T0, T0, T0 + HOUR, fabric_id=7, cpus=4, memory_gb=16, cpu_price=0.05, memory_price=0.01)
    fabric = rollup.by_fabric([("w", s)], {}, T0, T0 + HOUR)
    assert fabric[(1, 7, T0)].cost == pytest.approx(4 * 0.05 + 16 * 0.01)
    assert fabric[(1, 7, T0)].gpu_hours == 0.0


def test_the_step_charges_cpus_and_memory_per_node_at_the_fabric_s_prices(alice, submit):
    """Two nodes of 2 GPUs, 8 CPUs and 32 GB for an hour: 4 GPU-hours, 16 CPU-hours, 64 GB-hours."""
    from decimal import Decimal

    from portal.queues.models import Fabric
    from portal.usage.models import UsageFabricRollup

    fabric = Fabric.objects.get(name="local")
    Fabric.objects.filter(pk=fabric.pk).update(
        gpu_hour_price=Decimal("2"), cpu_hour_price=Decimal("0.05"), memory_gb_hour_price=Decimal("0.01")
    )
    w = submit(alice, name="two-nodes", gpus=2, cpus=8, memory_gb=32)
    Workload.objects.filter(pk=w.pk).update(
        state=State.SUCCEEDED, fabric=fabric, nodes=2, submitted_at=T0, started_at=T0, finished_at=T0 + HOUR
    )
    rollup.roll_up(T0, T0 + HOUR)
    want = 4 * 2 + 16 * 0.05 + 64 * 0.01
    for row in (
        UsageRollup.objects.get(group__slug="vision", hour=T0),
        UsageMemberRollup.objects.get(user=alice, hour=T0),
        UsageFabricRollup.objects.get(group__slug="vision", hour=T0),
    ):
        assert (row.gpu_hours, row.cpu_hours, row.memory_gb_hours) == pytest.approx((4.0, 16.0, 64.0))
        assert row.cost == pytest.approx(want)
        assert row.idle_cost == 0.0  # no samples: unknown, never idle


def test_reservation_held_but_unused_is_counted_per_hour_and_an_hour_over_it_counts_zero():
    """Team 1 reserves 4 GPUs. 10:00 it holds 3 (1 unused); 11:00 it holds 6 on two queues (over its
    reservation: 0, and no credit for other hours); 12:00 nothing of it runs (all 4 unused); until 13:00 on the
    hour, so 13:00 is no hour at all. Team 2 reserves nothing and holds 1."""
    spans = [
        ("a", span(gpus=3, started=T0, finished=T0 + HOUR)),
        ("b", span(gpus=4, started=T0 + HOUR, finished=T0 + 2 * HOUR)),
        ("c", span(gpus=2, started=T0 + HOUR, finished=T0 + 2 * HOUR, queue=2)),
        ("d", span(gpus=1, started=T0, finished=T0 + HOUR, group=2)),
    ]
    reservations = {1: 4.0, 2: 0.0}
    until = T0 + 3 * HOUR
    cells, _ = compute(spans, {}, reservations, T0, until)
    teams = rollup.by_team(cells, reservations, T0, until)
    found = {
        key: (t.reserved_gpu_hours, t.gpu_hours, t.unused_reservation_gpu_hours) for key, t in sorted(teams.items())
    }
    assert found == {
        (1, T0): (4.0, 3.0, 1.0),
        (1, T0 + HOUR): (4.0, 6.0, 0.0),
        (1, T0 + 2 * HOUR): (4.0, 0.0, 4.0),
        (2, T0): (0.0, 1.0, 0.0),
    }


def test_the_current_hour_s_unused_reservation_runs_only_up_to_now():
    reservations = {1: 4.0}
    cells, _ = compute([("w", span(gpus=1, started=T0))], {}, reservations, T0, T0 + timedelta(minutes=15))
    t = rollup.by_team(cells, reservations, T0, T0 + timedelta(minutes=15))[(1, T0)]
    assert (t.reserved_gpu_hours, t.gpu_hours, t.unused_reservation_gpu_hours) == pytest.approx((1.0, 0.25, 0.75))


@examples(max_examples=200, deadline=None)
@given(
    reserved=st.sampled_from([0.0, 1.0, 4.0]),
    runs=st.lists(st.tuples(st.sampled_from([0.5, 1.0, 4.0]), st.integers(0, 239), st.integers(1, 240)), max_size=5),
)
def test_unused_reservation_is_never_negative_nor_more_than_reserved_and_adds_up_hour_by_hour(reserved, runs):
    spans = [
        (f"w{i}", span(gpus=g, started=T0 + timedelta(minutes=m), finished=T0 + timedelta(minutes=m + n)))
        for i, (g, m, n) in enumerate(runs)
    ]
    until = T0 + timedelta(hours=6)
    cells, _ = compute(spans, {}, {1: reserved}, T0, until)
    teams = rollup.by_team(cells, {1: reserved}, T0, until)
    for t in teams.values():
        assert 0.0 <= t.unused_reservation_gpu_hours <= t.reserved_gpu_hours
        assert t.unused_reservation_gpu_hours == pytest.approx(max(0.0, t.reserved_gpu_hours - t.gpu_hours))
    assert sum(t.reserved_gpu_hours for t in teams.values()) == pytest.approx(reserved * 6)
    assert sum(t.gpu_hours for t in teams.values()) == pytest.approx(sum(c.gpu_hours for c in cells.values()))


def test_the_step_keeps_a_row_for_every_reserved_hour_even_when_nothing_ran(cast):
    from portal.accounts.models import ResourceGroup
    from portal.queues.models import Fabric, Quota
    from portal.usage.models import UsageTeamRollup

    idle_team = ResourceGroup.objects.create(slug="idle-team", name="Idle team")
    with time_machine.travel(T0 - HOUR, tick=False):  # the quota exists before the hours rolled up
        Quota.objects.create(group=idle_team, fabric=Fabric.objects.get(name="local"), gpu_reservation_milli=2000)
    rollup.roll_up(T0, T0 + 2 * HOUR)
    rows = UsageTeamRollup.objects.filter(group=idle_team).order_by("hour")
    assert [(r.hour, r.reserved_gpu_hours, r.gpu_hours, r.unused_reservation_gpu_hours) for r in rows] == [
        (T0, 2.0, 0.0, 2.0),
        (T0 + HOUR, 2.0, 0.0, 2.0),
    ]
    assert not UsageRollup.objects.filter(group=idle_team).exists()


def quotas_from_long_ago():
    """The cast's quotas, made by the seed just now, as if made long before the hours a test rolls up (a
    reservation counts only from its quota's creation)."""
    from portal.accounts.models import AuditEvent

    AuditEvent.objects.filter(action="quota.created").update(at=datetime(2020, 1, 1, tzinfo=UTC))


def test_no_hour_is_reserved_before_the_quota_existed_and_its_first_hour_only_from_then(cast):
    from portal.accounts.models import ResourceGroup
    from portal.queues.models import Fabric, Quota
    from portal.usage.models import UsageTeamRollup

    team = ResourceGroup.objects.create(slug="new-team", name="New team")
    with time_machine.travel(T0 + HOUR + timedelta(minutes=30), tick=False):
        Quota.objects.create(group=team, fabric=Fabric.objects.get(name="local"), gpu_reservation_milli=2000)
    rollup.roll_up(T0, T0 + 3 * HOUR)
    rows = UsageTeamRollup.objects.filter(group=team).order_by("hour")
    assert [(r.hour, r.reserved_gpu_hours) for r in rows] == [(T0 + HOUR, 1.0), (T0 + 2 * HOUR, 2.0)]


def test_a_job_holding_eight_gpus_and_using_two_has_six_idle_however_busy_the_two_are():
    s = Span(1, 1, 1, 8.0, T0, T0, T0 + HOUR, fabric_id=7, price=2.0)
    busy = {("w", T0): 24.5, ("w", T0 + HALF): 24.5}  # two GPUs at 98 %: the average is below 80 % anyway
    shares = {("w", T0): 0.75, ("w", T0 + HALF): 0.75}  # six of eight read idle
    cells, members = compute([("w", s)], busy, {}, T0, T0 + HOUR, HALF, idle_shares=shares)
    fabric = rollup.by_fabric([("w", s)], busy, T0, T0 + HOUR, HALF, shares)
    for cell in (cells[(1, 1, T0)], members[(1, 1, T0)], fabric[(1, 7, T0)]):
        assert cell.idle_gpu_hours == pytest.approx(6.0)
        assert cell.idle_cost == pytest.approx(12.0)
        assert cell.used_gpu_hours == pytest.approx(8 * 0.245)
    whole, _ = compute([("w", s)], busy, {}, T0, T0 + HOUR, HALF)  # without per-GPU readings: all eight idle
    assert whole[(1, 1, T0)].idle_gpu_hours == pytest.approx(8.0)


def test_the_step_judges_each_gpu_of_a_sampled_job_and_keeps_every_rollup_consistent(alice, submit, settings):
    from portal.queues.models import Fabric
    from portal.usage.models import UsageFabricRollup, UsageTeamRollup

    settings.GRIDLANE_IDLE_WINDOW_MINUTES = 30
    fabric = Fabric.objects.create(name="hpc", kind="slurm", gpus_milli=16000, cpus_milli=64000, memory_mib=64000)
    w = submit(alice, name="eight-gpus-two-used", gpus=4)
    Workload.objects.filter(pk=w.pk).update(
        state=State.RUNNING, submitted_at=T0, started_at=T0, nodes=2, fabric=fabric
    )  # two nodes of four GPUs: eight held
    for minute in range(0, 60, 5):  # per node: one GPU at 100 %, three at 0 %
        for node in ("n1", "n2"):
            UsageSample.objects.create(
                workload=w, at=T0 + timedelta(minutes=minute), gpus_milli=8000, node=node, gpu_utilisation=25.0,
                gpus_read=4, gpus_idle=3, source=UsageSample.Source.JOB,
            )  # fmt: skip
    rollup.roll_up(T0, T0 + HOUR)
    row = UsageRollup.objects.get(group__slug="vision", hour=T0)
    assert row.gpu_hours == pytest.approx(8.0)
    assert row.idle_gpu_hours == pytest.approx(6.0)
    assert row.used_gpu_hours == pytest.approx(2.0)
    assert row.unknown_gpu_hours == 0.0
    member = UsageMemberRollup.objects.get(user=alice, hour=T0)
    by_fabric = UsageFabricRollup.objects.get(fabric=fabric, hour=T0)
    assert member.idle_gpu_hours == pytest.approx(6.0)
    assert by_fabric.idle_gpu_hours == pytest.approx(6.0)
    team = UsageTeamRollup.objects.filter(group__slug="vision", hour=T0).values_list("gpu_hours", flat=True)
    assert list(team) in ([], [pytest.approx(8.0)])  # a row only for a team with a reservation: the same GPU-hours


def test_a_window_whose_cpus_worked_has_no_idle_gpu_hours(alice, submit, settings):
    settings.GRIDLANE_IDLE_WINDOW_MINUTES = 30
    w = submit(alice, name="cpu-bound-preprocessing", gpus=1)
    Workload.objects.filter(pk=w.pk).update(state=State.RUNNING, submitted_at=T0, started_at=T0)
    for minute in range(0, 60, 5):  # GPU at 0 % all hour; CPUs busy in the first half hour only
        UsageSample.objects.create(
            workload=w, at=T0 + timedelta(minutes=minute), gpus_milli=1000, gpu_utilisation=0.0, gpus_read=1,
            gpus_idle=1, cpu_utilisation=90.0 if minute < 30 else 2.0, source=UsageSample.Source.JOB,
        )  # fmt: skip
    rollup.roll_up(T0, T0 + HOUR)
    row = UsageRollup.objects.get(group__slug="vision", hour=T0)
    assert row.idle_gpu_hours == pytest.approx(0.5)  # the second half hour: GPUs and CPUs idle
