"""The burst autoscaler's decision as tables: demand in, launches and terminations out."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from fabrics.base import Resources
from scheduler import reasons
from scheduler.burst import Live, Offer, Pool, Waiting, Work, plan
from scheduler.decide import decide
from scheduler.model import Admit, FabricState, Job, QueueState, Snapshot

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
GIB = 1024
XLARGE = Offer("g5.xlarge", gpus=1, cpus=4, memory_mib=16 * GIB, price=1.01)
X12 = Offer("g5.12xlarge", gpus=4, cpus=48, memory_mib=192 * GIB, price=5.67)
X12_CHEAP = Offer("g5.12xlarge", gpus=4, cpus=48, memory_mib=192 * GIB, price=2.50)
POOL = Pool("burst", max_instances=4, budget_per_hour=100, budget_per_month=10_000)


def gpu_jobs(team: str, n: int, gpus: int = 1, waited_min: int = 12, group_id: int = 1) -> list[Waiting]:
    since = NOW - timedelta(minutes=waited_min)
    return [Waiting(f"{team}-{i}", group_id, team, Resources(gpus * 1000, 2000, 8 * GIB), since) for i in range(n)]


def instance(state: str, offer: Offer = XLARGE, free: bool = True, age_min: int = 1, idle_min: int | None = None,
             id: str = "i-1") -> Live:  # fmt: skip
    idle_since = None if idle_min is None else NOW - timedelta(minutes=idle_min)
    room = offer.capacity if free else Resources()
    return Live(id, offer.name, state, offer.price, room, NOW - timedelta(minutes=age_min), idle_since)


def test_three_one_gpu_workloads_get_three_small_instances_when_the_large_one_costs_more():
    p = plan(NOW, POOL, [XLARGE, X12], [], gpu_jobs("vision", 3))
    assert [launch.instance_type for launch in p.launch] == ["g5.xlarge"] * 3
    assert [len(launch.workload_ids) for launch in p.launch] == [1, 1, 1]


def test_three_one_gpu_workloads_share_one_instance_where_that_is_cheaper():
    p = plan(NOW, POOL, [XLARGE, X12_CHEAP], [], gpu_jobs("vision", 3))
    (launch,) = p.launch
    assert launch.instance_type == "g5.12xlarge"
    assert launch.workload_ids == ("vision-0", "vision-1", "vision-2")
    assert launch.reason == "launched g5.12xlarge for 3 waiting workloads of team vision: 3 GPUs pending for 12 min"


def test_smaller_work_fills_the_room_larger_work_left():
    jobs = gpu_jobs("vision", 1, gpus=3) + gpu_jobs("nlp", 1, gpus=1, group_id=2)
    (launch,) = plan(NOW, POOL, [XLARGE, X12_CHEAP], [], jobs).launch
    assert launch.instance_type == "g5.12xlarge"
    assert launch.reason.startswith("launched g5.12xlarge for 2 waiting workloads of teams nlp, vision: 4 GPUs")


def test_the_cheapest_type_that_holds_it_with_the_others_as_fallbacks_cheapest_first():
    big = Offer("p4d.24xlarge", gpus=8, cpus=96, memory_mib=1152 * GIB, price=32.77)
    (launch,) = plan(NOW, POOL, [big, X12, XLARGE], [], gpu_jobs("vision", 1, gpus=2)).launch
    assert (launch.instance_type, launch.alternatives) == ("g5.12xlarge", ("p4d.24xlarge",))


def test_work_over_its_teams_limit_on_the_pool_never_bursts():
    headroom = {1: Resources(1000, 10**9, 10**9)}
    p = plan(NOW, POOL, [XLARGE], [], gpu_jobs("vision", 3), headroom)
    assert [launch.workload_ids for launch in p.launch] == [("vision-0",)]
    assert p.held == ("2 waiting workloads of team vision are over its limit on the pool: not bursting for them",)


def test_demand_that_capacity_on_its_way_covers_launches_nothing_again():
    booting = [instance("booting", id="i-1"), instance("pending", id="i-2")]
    p = plan(NOW, POOL, [XLARGE], booting, gpu_jobs("vision", 2))
    assert (p.launch, p.covered) == ((), 2)
    p = plan(NOW, POOL, [XLARGE], booting, gpu_jobs("vision", 3))
    assert [launch.workload_ids for launch in p.launch] == [("vision-2",)]


def test_no_launch_over_the_hourly_budget_and_the_reason_says_so():
    pool = Pool("burst", max_instances=4, budget_per_hour=2.5, budget_per_month=10_000)
    p = plan(NOW, pool, [XLARGE], [instance("busy", free=False)], gpu_jobs("vision", 3))
    assert [launch.instance_type for launch in p.launch] == ["g5.xlarge"]  # 1.01 + 1.01 <= 2.5 < 3.03
    assert p.held == (
        "2 waiting workloads of team vision wait: launching g5.xlarge (1.01/h) would take the pool to 3.03/h, "
        "over its budget of 2.50/h",
    )


def test_no_launch_that_would_cross_the_months_budget():
    pool = Pool("burst", max_instances=4, budget_per_hour=100, budget_per_month=500, month_spent=499.5)
    p = plan(NOW, pool, [XLARGE], [], gpu_jobs("vision", 1))
    assert p.launch == ()
    assert "the month's budget of 500.00 would be crossed (499.50 spent)" in p.held[0]


def test_everything_stops_before_the_months_budget_is_crossed():
    pool = Pool("burst", budget_per_hour=100, budget_per_month=500, month_spent=499.5)
    busy = [instance("busy", free=False, id="i-1"), instance("idle", idle_min=1, id="i-2")]
    p = plan(NOW, pool, [XLARGE], busy, gpu_jobs("vision", 1))
    assert (p.launch, sorted(t.id for t in p.terminate)) == ((), ["i-1", "i-2"])
    assert p.terminate[0].reason == "499.50 of the month's budget of 500.00 spent: stopping before it is crossed"


def test_at_the_maximum_the_rest_waits():
    p = plan(NOW, Pool("burst", max_instances=2, budget_per_hour=100, budget_per_month=1000), [XLARGE],
             [instance("busy", free=False)], gpu_jobs("vision", 3))  # fmt: skip
    assert len(p.launch) == 1
    assert p.held == ("2 waiting workloads of team vision wait: the pool is at its maximum of 2 instances",)


@pytest.mark.parametrize(
    ("idle_min", "waiting", "min_instances", "want_terminated"),
    [
        (11, 0, 0, True),  # idle past the limit of 10
        (9, 0, 0, False),  # not yet
        (11, 1, 0, False),  # waiting work is about to land on it
        (11, 0, 1, False),  # the pool's minimum
    ],
)
def test_idle_instances_end_past_the_limit_unless_work_or_the_minimum_keeps_them(
    idle_min, waiting, min_instances, want_terminated
):
    pool = Pool("burst", min_instances=min_instances, max_idle=timedelta(minutes=10), budget_per_hour=100,
                budget_per_month=1000)  # fmt: skip
    p = plan(NOW, pool, [XLARGE], [instance("idle", idle_min=idle_min)], gpu_jobs("vision", waiting))
    assert bool(p.terminate) == want_terminated
    if want_terminated:
        assert p.terminate[0].reason == "idle for 11 min, past the pool's limit of 10 min"


def test_an_instance_that_never_enrolled_within_the_boot_timeout_ends_and_the_demand_launches_again():
    stuck = instance("booting", age_min=16)
    p = plan(NOW, Pool("burst", boot_timeout=timedelta(minutes=15), budget_per_hour=10, budget_per_month=100),
             [XLARGE], [stuck], gpu_jobs("vision", 1))  # fmt: skip
    assert [(t.id, t.reason) for t in p.terminate] == [("i-1", "never enrolled within the boot timeout of 15 min")]
    assert [launch.workload_ids for launch in p.launch] == [("vision-0",)]


def test_the_minimum_is_kept_with_the_cheapest_type():
    pool = Pool("burst", min_instances=2, budget_per_hour=100, budget_per_month=1000)
    p = plan(NOW, pool, [X12, XLARGE], [], [])
    assert [(launch.instance_type, launch.workload_ids) for launch in p.launch] == [("g5.xlarge", ())] * 2


def test_work_no_type_holds_and_gangs_are_held_with_their_reason():
    gang = Waiting("gang", 1, "vision", Resources(1000, 1000, GIB), NOW, nodes=2)
    p = plan(NOW, POOL, [XLARGE], [], [*gpu_jobs("vision", 1, gpus=2), gang])
    assert p.launch == ()
    assert p.held == (
        "1 waiting workloads need 2 GPUs, 2 CPUs, 8 GB: no instance type holds that",
        "1 waiting gangs (several nodes at once) do not burst: an instance's agent runs one node's work, so a gang "
        "waits for capacity where all its nodes start together",
    )


def expected(job: Waiting, in_min: int | None) -> Waiting:
    return replace(job, expected_start=None if in_min is None else NOW + timedelta(minutes=in_min))


@pytest.mark.parametrize(
    ("starts_in_min", "want_launched"),
    [
        (None, True),  # no estimate: too far down the line, or nothing running frees enough
        (-5, False),  # expected already: it starts at the next admission
        (10, False),  # within the pool's 10 minutes: on premises it goes
        (11, True),
        (240, True),
    ],
)
def test_work_expected_to_start_on_premises_soon_does_not_burst(starts_in_min: int | None, want_launched: bool):
    pool = replace(POOL, burst_after=timedelta(minutes=10))
    (job,) = gpu_jobs("vision", 1)
    p = plan(NOW, pool, [XLARGE], [], [expected(job, starts_in_min)])
    assert [launch.workload_ids for launch in p.launch] == ([("vision-0",)] if want_launched else [])
    if not want_launched:
        assert p.held == ("1 waiting workloads are expected to start where they wait within 10 min: not bursting "
                          "for them",)  # fmt: skip


def test_work_that_starts_soon_takes_no_room_on_instances_nor_its_teams_limit():
    pool = replace(POOL, burst_after=timedelta(minutes=10))
    soon, late = (expected(j, m) for j, m in zip(gpu_jobs("vision", 2), (5, 60), strict=True))
    # The team has room for one more GPU on the pool: the late one takes it, the soon one is not counted.
    p = plan(NOW, pool, [XLARGE], [], [soon, late], headroom={1: Resources(1000, 2000, 8 * GIB)})
    assert [launch.workload_ids for launch in p.launch] == [(late.id,)]
    # An idle instance there is no reason to take it either: it is left for work that waits long.
    p = plan(NOW, pool, [XLARGE], [instance("idle", idle_min=20)], [soon])
    assert p.covered == 0
    assert [t.id for t in p.terminate] == ["i-1"]


def test_a_gang_is_never_admitted_to_an_agent_fabric_it_waits_where_all_its_nodes_start_together():
    # The queue tries the cluster first and the burst pool's agent fabric last; the burst pool has room.
    onprem = FabricState(1, "cluster", Resources(4000, 10**6, 10**7))
    agents = FabricState(2, "burst", Resources(8000, 10**6, 10**7), max_nodes=1)
    queue = QueueState(1, "train", (1, 2))
    gang = Job("gang", 1, 1, Resources(2000, 1000, GIB), nodes=2, submitted_at=NOW)
    one = Job("one", 1, 1, Resources(2000, 1000, GIB), submitted_at=NOW)
    decided = decide(Snapshot(NOW, {1: onprem, 2: agents}, {1: queue}, pending=(gang, one)))
    assert decided.admit == (Admit("one", 1),)  # the single-node job takes half the cluster; the gang needs all
    (waiting,) = decided.waiting
    assert (waiting.job_id, waiting.reason.code) == ("gang", reasons.GANG_DOES_NOT_FIT)


BOOT = timedelta(minutes=3)


def runs_for(job: Waiting, minutes: int | None) -> Waiting:
    return replace(job, runtime=None if minutes is None else timedelta(minutes=minutes))


@pytest.mark.parametrize(
    ("runtime_min", "want_launched"),
    [
        (None, True),  # no runtime limit known: long enough for any instance
        (2, False),  # over before an instance would be up
        (3, True),  # as long as a boot
        (120, True),
    ],
)
def test_work_shorter_than_a_boot_launches_no_instance(runtime_min: int | None, want_launched: bool):
    (job,) = gpu_jobs("vision", 1)
    p = plan(NOW, replace(POOL, boot=BOOT), [XLARGE], [], [runs_for(job, runtime_min)])
    assert [launch.workload_ids for launch in p.launch] == ([("vision-0",)] if want_launched else [])
    if not want_launched:
        assert p.held == ("1 waiting workloads run for less than an instance takes to boot (3 min): not launching "
                          "for them",)  # fmt: skip


def test_work_shorter_than_a_boot_still_takes_room_on_an_instance_already_up():
    short = [runs_for(j, 1) for j in gpu_jobs("vision", 2)]
    p = plan(NOW, replace(POOL, boot=BOOT), [XLARGE], [instance("idle", idle_min=1)], short)
    assert (p.covered, p.launch, p.terminate) == (1, (), ())
    assert p.held == ("1 waiting workloads run for less than an instance takes to boot (3 min): not launching "
                      "for them",)  # fmt: skip


def test_work_expected_to_start_on_premises_before_an_instance_could_boot_does_not_burst():
    # The pool's burst_after is shorter than its boots: a launch would come up after the work started elsewhere.
    pool = replace(POOL, burst_after=timedelta(minutes=1), boot=timedelta(minutes=5))
    soon, late = (expected(j, m) for j, m in zip(gpu_jobs("vision", 2), (4, 6), strict=True))
    p = plan(NOW, pool, [XLARGE], [], [soon, late])
    assert [launch.workload_ids for launch in p.launch] == [(late.id,)]
    assert p.held == ("1 waiting workloads are expected to start where they wait within 5 min: not bursting for them",)


ROOM = Resources(8000, 64_000, 256 * GIB)  # free on premises now


@pytest.mark.parametrize(
    ("elsewhere", "waiting", "min_instances", "want_terminated"),
    [
        ((ROOM,), 0, 0, True),  # nothing waits for it, and on premises takes what arrives next
        ((Resources(), ROOM), 0, 0, True),  # one of the fabrics tried before the pool has room
        ((), 0, 0, False),  # no room known elsewhere: it waits out max_idle for work that arrives
        ((Resources(500, 64_000, 256 * GIB),), 0, 0, False),  # on premises cannot take all it could
        ((ROOM,), 1, 0, False),  # waiting work lands on it
        ((ROOM,), 0, 1, False),  # the pool's minimum
    ],
)
def test_an_idle_instance_ends_before_max_idle_when_no_work_needs_it_and_on_premises_has_room(
    elsewhere: tuple[Resources, ...], waiting: int, min_instances: int, want_terminated: bool
):
    pool = replace(POOL, min_instances=min_instances, max_idle=timedelta(minutes=10))
    idle = instance("idle", idle_min=2)
    p = plan(NOW, pool, [XLARGE], [idle], gpu_jobs("vision", waiting), elsewhere=elsewhere)
    assert [(t.id, t.reason) for t in p.terminate] == (
        [("i-1", "idle with no waiting work for it, and on premises has room for all it could take")]
        if want_terminated
        else []
    )


def test_an_early_end_keeps_a_busy_instance_and_one_that_waiting_work_fills():
    busy = instance("busy", free=False, id="i-1")
    wanted = instance("idle", idle_min=2, id="i-2")
    spare = instance("idle", idle_min=1, id="i-3")
    p = plan(NOW, POOL, [XLARGE], [busy, wanted, spare], gpu_jobs("vision", 1), elsewhere=(ROOM,))
    assert (p.covered, [t.id for t in p.terminate]) == (1, ["i-3"])


SPOKEN_FOR = replace(instance("idle", X12, idle_min=2), free=Resources(3000, 48_000, 192 * GIB))
ENDS_AT_ONCE = (
    "idle with no waiting work for it, and g5.xlarge holds what arrives next for less (1.01/h against 5.67/h)"
)


@pytest.mark.parametrize(
    ("idle", "offers", "waiting", "min_instances", "want_terminated"),
    [
        (instance("idle", X12, idle_min=2), [XLARGE, X12], [], 0, True),  # small work would land on it
        (instance("idle", XLARGE, idle_min=2), [XLARGE, X12], [], 0, False),  # the cheapest waits out max idle
        (instance("idle", X12, idle_min=2), [XLARGE, X12], gpu_jobs("vision", 1, gpus=4), 0, False),  # wanted
        (instance("idle", X12, idle_min=2), [XLARGE, X12], [], 1, False),  # the pool's minimum
        (instance("idle", X12, idle_min=2), [X12], [], 0, False),  # no cheaper type in the pool
        (instance("idle", X12, idle_min=2), [XLARGE], [], 0, False),  # its type is not offered now: no verdict
        (SPOKEN_FOR, [XLARGE, X12], [], 0, False),  # work admitted to the pool may be on its way to it
    ],
)
def test_a_large_idle_instance_ends_at_once_when_a_cheaper_type_holds_what_arrives_next(
    idle: Live, offers: list[Offer], waiting: list[Waiting], min_instances: int, want_terminated: bool
):
    pool = replace(POOL, min_instances=min_instances, max_idle=timedelta(minutes=10))
    p = plan(NOW, pool, offers, [idle], waiting)
    assert [(t.id, t.reason) for t in p.terminate] == ([("i-1", ENDS_AT_ONCE)] if want_terminated else [])


def running(started_min_ago: int, limit_h: int | None = 10, requeue: bool = True) -> Work:
    runtime = None if limit_h is None else timedelta(hours=limit_h)
    return Work(NOW - timedelta(minutes=started_min_ago), runtime, requeue)


def busy(*work: Work, id: str = "i-1") -> Live:
    return replace(instance("busy", free=False, id=id), work=work)


MOVED = (
    "on premises has room for its 1 workload: back in line to restart there (10 min run lost, up to 590 min on this "
    "instance saved)"
)


@pytest.mark.parametrize(
    ("live", "elsewhere", "min_instances", "want_terminated"),
    [
        ([busy(running(10))], (ROOM,), 0, ["i-1"]),  # 10 min lost, 9 h 50 min of the instance saved
        ([busy(running(60))], (ROOM,), 0, []),  # an hour would be lost: more than 5% of the 9 h it would save
        ([busy(running(10), running(60))], (ROOM,), 0, []),  # all its work restarts, or none
        ([busy(running(10, requeue=False))], (ROOM,), 0, []),  # its queue does not put it back in line
        ([busy(running(10, limit_h=None))], (ROOM,), 0, []),  # how long it would still run is not known
        ([busy(running(10))], (Resources(1500, 64_000, 256 * GIB),), 0, []),  # room for it, but not twice over
        ([busy(running(10))], (), 0, []),  # no room known on premises
        ([busy(running(10))], (ROOM,), 1, []),  # the pool's minimum
        # The room one instance's work takes is not there for the next one's.
        ([busy(running(10)), busy(running(10), id="i-2")], (Resources(2500, 64_000, 256 * GIB),), 0, ["i-1"]),
    ],
)
def test_young_work_on_an_instance_moves_back_on_premises_when_there_is_room_for_it_twice_over(
    live: list[Live], elsewhere: tuple[Resources, ...], min_instances: int, want_terminated: list[str]
):
    p = plan(NOW, replace(POOL, min_instances=min_instances), [XLARGE], live, [], elsewhere=elsewhere)
    assert [t.id for t in p.terminate] == want_terminated
    if want_terminated:
        assert p.terminate[0].reason == MOVED
