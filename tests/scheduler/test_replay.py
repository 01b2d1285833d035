"""The what-if replay: the site's own history through decide() under a proposed change, counted like what
actually happened. Histories are built here from helpers named by shape."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fabrics.base import Resources
from scheduler.model import FabricState, Job, QueueState, Quota
from scheduler.replay import ChangeError, Site, Team, Work, actual, apply_change, replay

START = datetime(2026, 3, 1, tzinfo=UTC)
DAY = timedelta(days=1)
BIG = 10**9


def site(gpus: int = 8, reserve_b: int = 0, preemptible: bool = True) -> Site:
    """One fabric `pool` of `gpus` GPUs, one queue, teams a (id 1) and b (id 2) with a 10-minute wait objective."""
    quotas: dict[tuple[int, int | None], Quota] = {}
    if reserve_b:
        quotas[(2, 1)] = Quota(2, 1, reservation=Resources(reserve_b * 1000, 0, 0))
    return Site(
        fabrics={1: FabricState(1, "pool", Resources(gpus * 1000, BIG, BIG))},
        queues={1: QueueState(1, "train", (1,), preemptible=preemptible)},
        quotas=quotas,
        teams={1: Team(1, "a", wait_slo_s=600), 2: Team(2, "b", wait_slo_s=600)},
    )


def gpu_jobs(team: int, n: int, gpus: int = 1, at: timedelta = timedelta(0), every: timedelta = timedelta(0),
             runtime: float | None = 3600, **kw) -> list[Work]:  # fmt: skip
    """n jobs of one team, the first submitted `at` into the window, one every `every`, each running `runtime`."""
    return [
        Work(Job(f"{team}-{at.total_seconds():.0f}-{i:03d}", team, 1, Resources(gpus * 1000, 0, 0),
                 submitted_at=START + at + i * every, runtime_limit_s=7200), runtime, **kw)
        for i in range(n)
    ]  # fmt: skip


def test_an_idle_pool_starts_everything_on_arrival():
    result = replay(site(), gpu_jobs(1, 4, every=timedelta(hours=2)), START, START + DAY)
    a = result["teams"]["a"]
    assert (a["workloads"], a["p50_wait_s"], a["p95_wait_s"], a["slo_breaches"], a["preemptions"]) == (4, 0, 0, 0, 0)
    assert a["gpu_hours"] == 4.0
    assert a["utilisation"] == round(4 / (8 * 24), 4)
    assert result["in_use"]["a"][:3] == [1.0, 0.0, 1.0]  # one GPU in the first hour, none in the second


def test_sixteen_one_gpu_jobs_on_eight_gpus_the_second_eight_wait_an_hour():
    result = replay(site(), gpu_jobs(1, 16), START, START + DAY)
    a = result["teams"]["a"]
    assert (a["p50_wait_s"], a["p95_wait_s"], a["slo_breaches"]) == (3600, 3600, 8)
    assert result["pending"]["a"][0] == 8.0  # eight GPUs' worth waited through the first hour


def test_a_reservation_for_b_takes_its_gpus_back_from_a_by_preemption():
    history = gpu_jobs(1, 8, runtime=5 * 3600) + gpu_jobs(2, 4, at=timedelta(minutes=30))
    before = replay(site(), history, START, START + DAY)
    after = replay(apply_change(site(), {"quota": {"team": "b", "fabric": "pool", "gpu_reservation": 4}}),
                   history, START, START + DAY)  # fmt: skip
    assert before["teams"]["b"]["p95_wait_s"] > 4 * 3600  # b waits for a's five-hour jobs
    assert before["teams"]["a"]["preemptions"] == 0
    assert after["teams"]["b"]["p95_wait_s"] <= 2  # within a cycle
    assert after["teams"]["a"]["preemptions"] == 4
    assert after["overall"]["preemptions"] == 4


def test_more_capacity_means_no_wait():
    history = gpu_jobs(1, 16)
    bigger = apply_change(site(), {"capacity": {"fabric": "pool", "gpus": 16}})
    result = replay(bigger, history, START, START + DAY)
    assert result["capacity_gpus"] == 16
    assert result["teams"]["a"]["p95_wait_s"] == 0
    assert result["teams"]["a"]["utilisation"] == round(16 / (16 * 24), 4)


def test_a_limit_holds_a_team_back():
    capped = apply_change(site(), {"quota": {"team": "a", "fabric": "pool", "gpu_limit": 2}})
    result = replay(capped, gpu_jobs(1, 4), START, START + DAY)
    assert result["teams"]["a"]["p95_wait_s"] == 3600  # two at a time


def test_work_that_never_ran_waits_until_it_was_cancelled_or_the_window_ends():
    cancelled = gpu_jobs(1, 1, gpus=16, runtime=None, finished_at=START + timedelta(minutes=10))
    waiting = gpu_jobs(2, 1, gpus=16, runtime=None, at=timedelta(hours=23))
    result = replay(site(), cancelled + waiting, START, START + DAY)
    assert result["teams"]["a"]["p50_wait_s"] == 600  # left the line when it was cancelled
    assert result["teams"]["b"]["p50_wait_s"] == 3600  # still waiting when the window ended
    # With the room to run, it holds what it asked for until it was cancelled.
    roomy = replay(apply_change(site(), {"capacity": {"fabric": "pool", "gpus": 16}}), cancelled, START, START + DAY)
    assert roomy["teams"]["a"]["gpu_hours"] == round(16 * 10 / 60, 2)


def test_what_actually_happened_is_counted_from_the_timestamps():
    submitted = START + timedelta(hours=1)
    ran = Work(Job("ran", 1, 1, Resources(2000, 0, 0), submitted_at=submitted), 1800,
               admitted_at=submitted + timedelta(minutes=20), started_at=submitted + timedelta(minutes=21),
               finished_at=submitted + timedelta(minutes=51), preemptions=1)  # fmt: skip
    gave_up = Work(Job("gave-up", 2, 1, Resources(1000, 0, 0), submitted_at=submitted), None,
                   finished_at=submitted + timedelta(minutes=5))  # fmt: skip
    still = Work(Job("still", 2, 1, Resources(1000, 0, 0), submitted_at=START + timedelta(hours=23)), None)
    before = Work(Job("before", 1, 1, Resources(1000, 0, 0), submitted_at=START - DAY), 3600)
    result = actual(site(), [ran, gave_up, still, before], START, START + DAY)
    a, b = result["teams"]["a"], result["teams"]["b"]
    assert (a["workloads"], a["p50_wait_s"], a["gpu_hours"], a["preemptions"], a["slo_breaches"]) == (1, 1200, 1, 1, 1)
    # Five minutes until it was cancelled (within the objective), an hour until the window ended (beyond it).
    assert (b["workloads"], b["p95_wait_s"], b["slo_breaches"]) == (2, 3600, 1)
    assert result["overall"]["slo_breaches"] == 2


def test_progress_is_reported_as_the_window_is_replayed():
    seen: list[float] = []
    replay(site(), gpu_jobs(1, 100, every=timedelta(minutes=14)), START, START + DAY, progress=seen.append)
    assert len(seen) >= 10
    assert seen == sorted(seen)
    assert seen[-1] >= 0.9


def test_the_current_policy_is_no_change():
    assert apply_change(site(), None) == site()
    assert apply_change(site(), {}) == site()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"quota": {"team": "nobody", "fabric": "pool", "gpu_reservation": 1}}, "No team 'nobody'."),
        ({"quota": {"team": "a", "fabric": "nowhere", "gpu_limit": 1}}, "No fabric 'nowhere'."),
        ({"quota": {"team": "a", "fabric": "pool", "gpu_reservation": -1}}, "0 or more"),
        ({"quota": {"team": "a", "fabric": "pool", "gpu_reservation": 4, "gpu_limit": 2}}, "below the reservation"),
        ({"quota": {"team": "a", "fabric": None, "gpu_reservation": 4}}, "A reservation is per fabric"),
        ({"capacity": {"fabric": "pool", "gpus": float("nan")}}, "0 or more"),
        ({"capacity": {"fabric": "pool", "gpus": True}}, "0 or more"),
        ({"weight": {"team": "a", "fair_share_weight": 0}}, "1 or more"),
        ({"department": {"team": "a", "parent": "nobody"}}, "No team 'nobody'."),
        ({"department": {"team": "a", "parent": "a"}}, "a department cycle"),
        ({"tier_weight": {"tier": "gold", "weight": 2}}, "not modelled"),
        ({"reboot": {}}, "Unknown change 'reboot'"),
        ({"capacity": {"fabric": "pool", "gpus": 9}, "weight": {}}, "one change at a time"),
    ],
)
def test_a_change_that_cannot_apply_says_why(change, message):
    with pytest.raises(ChangeError, match=message.replace("(", r"\(")):
        apply_change(site(), change)


def test_a_weight_changes_the_teams_allocation():
    heavier = apply_change(site(), {"weight": {"team": "b", "fair_share_weight": 3}})
    assert heavier.teams[2].fair_share_weight == 3
    assert heavier.teams[1] == site().teams[1]


def test_moving_a_team_into_a_department_puts_it_under_the_department_s_limit():
    from dataclasses import replace

    capped = Quota(3, 1, limit=Resources(4000, BIG, BIG))
    with_department = replace(site(), teams={**site().teams, 3: Team(3, "lab")}, quotas={(3, 1): capped})
    history = gpu_jobs(1, 8)
    alone = replay(with_department, history, START, START + DAY)
    moved = apply_change(with_department, {"department": {"team": "a", "parent": "lab"}})
    assert moved.teams[1].parent_id == 3
    under = replay(moved, history, START, START + DAY)
    assert alone["teams"]["a"]["p95_wait_s"] == 0
    assert under["teams"]["a"]["p95_wait_s"] == 3600  # four at a time: the second four wait an hour
    with pytest.raises(ChangeError, match="department cycle"):
        apply_change(moved, {"department": {"team": "lab", "parent": "a"}})
    assert apply_change(moved, {"department": {"team": "a", "parent": None}}).teams[1].parent_id is None
