"""The worker's snapshot keeps what IT configures between admissions (snapshot.Settled): a build reads it again only
when the generation that every write of those tables moves has moved, so any change is in the very next build;
what changes with the clock alone is worked out afresh at each build."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal.accounts.models import ResourceGroup, ServiceIdentity
from portal.budgets.models import Budget
from portal.queues.models import Fabric, PriorityTier, Queue, QueueTarget, Quota, QuotaGrant
from portal.worker import snapshot
from portal.workloads import calibration, context


def build(at: Any = None) -> Any:
    snap, _ = snapshot.build(at or timezone.now())
    return snap


def statements(at: Any = None) -> int:
    with CaptureQueriesContext(connection) as captured:
        build(at)
    return len(captured.captured_queries)


def test_a_build_with_nothing_configured_changed_leaves_eight_reads_out(cast):
    first = statements()  # the generation, then what IT configures in eight reads (budget holds too), then the work
    again = statements()  # the generation, what was observed of the kept fabrics (one read), then the work
    # (and the learned runtimes, read in the first build and kept for ten minutes: calibration.LEARNED)
    assert again == first - 8 + 1 - 1
    assert statements() == again


def _local() -> Fabric:
    return Fabric.objects.get(name="local")


def _vision() -> ResourceGroup:
    return ResourceGroup.objects.get(slug="vision")


def _train(snap: Any) -> Any:
    return next(q for q in snap.queues.values() if q.slug == "train")


def test_an_observation_of_a_fabric_moves_no_generation_and_the_next_build_plans_with_it(cast):
    """The capacity step's write (and the health flag) moves no generation, so the kept rows stay kept; the build
    reads what was observed afresh (snapshot.OBSERVED) and plans with it."""
    build()
    generation = context.read_generation()
    now = timezone.now()
    Fabric.objects.filter(name="local").update(
        observed_gpus_milli=0, observed_cpus_milli=0, observed_memory_mib=0, observed_at=now, observed_detail="x"
    )
    Fabric.objects.filter(name="local").update(healthy=False, health_detail="down")
    assert context.read_generation() == generation
    snap = build(now)
    assert context.read_generation() == generation
    assert snap.fabrics[_local().pk].capacity.gpus_milli == 0
    assert not snap.fabrics[_local().pk].healthy


# Each change, and what the next build must show of it.
CHANGES: dict[str, tuple[Callable[[], Any], Callable[[Any], bool]]] = {
    "a quota's limit": (
        lambda: Quota.objects.filter(group__slug="vision").update(gpu_limit_milli=1000),
        lambda snap: snap.quota(_vision().pk, _local().pk).limit.gpus_milli == 1000,
    ),
    "a fabric disabled": (
        lambda: Fabric.objects.filter(name="local").update(enabled=False),
        lambda snap: _local().pk not in snap.fabrics,
    ),
    "a fabric's size": (
        lambda: Fabric.objects.filter(name="local").update(gpus_milli=2000),
        lambda snap: snap.fabrics[_local().pk].capacity.gpus_milli == 2000,
    ),
    "a queue's target removed": (
        lambda: QueueTarget.objects.filter(queue__slug="train").delete(),
        lambda snap: _train(snap).fabric_ids == (),
    ),
    "a queue made preemptible": (
        lambda: Queue.objects.filter(slug="train").update(preemptible=True),
        lambda snap: _train(snap).preemptible,
    ),
    "a tier's weight": (
        lambda: PriorityTier.objects.filter(slug="high").update(weight=999),
        lambda snap: snap.tiers["high"].weight == 999,
    ),
    "a team's member cap": (
        lambda: ResourceGroup.objects.filter(slug="vision").update(member_gpu_limit_milli=500),
        lambda snap: snap.member_limits.get(_vision().pk) == 500,
    ),
    "a budget's hold": (
        lambda: Budget.objects.create(team=_vision(), gpu_hours=1, held_reason="held: spent"),
        lambda snap: snap.held.get((_vision().pk, 0)) is not None,
    ),
    "an agent's cap": (
        lambda: ServiceIdentity.objects.update(gpu_limit_milli=750),
        lambda snap: set(snap.owner_limits.values()) == {750},
    ),
}


@pytest.mark.parametrize("change", CHANGES)
def test_a_change_to_what_it_configures_is_in_the_very_next_build(cast, agent, change):
    make, shows = CHANGES[change]
    build()
    assert not shows(build())  # kept: the second build read none of it
    make()
    assert shows(build())


def test_an_agents_expiry_needs_no_write_to_be_seen(cast, agent):
    now = timezone.now()
    before = build(now)
    assert agent.user_id in before.owner_reservations
    generation = context.read_generation()
    later = build(agent.expires_at + timedelta(seconds=1))
    assert context.read_generation() == generation  # nothing was written: the kept rows, read at a later time
    assert agent.user_id not in later.owner_reservations


def test_a_grant_counts_from_its_start_with_no_write_at_its_start(cast):
    now = timezone.now()
    QuotaGrant.objects.create(
        team=_vision(),
        fabric=_local(),
        gpus_milli=1000,
        state=QuotaGrant.State.APPROVED,
        starts_at=now + timedelta(hours=1),
        ends_at=now + timedelta(hours=2),
    )
    limit = build(now).quota(_vision().pk, _local().pk).limit.gpus_milli
    generation = context.read_generation()
    during = build(now + timedelta(hours=1, seconds=1)).quota(_vision().pk, _local().pk).limit.gpus_milli
    assert context.read_generation() == generation
    assert during == limit + 1000


def test_every_table_it_keeps_rows_of_moves_the_generation(cast, agent):
    """What a build leaves out when nothing changed is read from tables the generation watches (migration
    workloads 0013): else a change to one of them would go unseen."""
    watched = set(importlib.import_module("portal.workloads.migrations.0013_submit_generation").WATCHED)
    calibration.LEARNED.at(timezone.now())  # kept by time, not by generation: read before, so in neither build
    watched |= set(importlib.import_module("portal.budgets.migrations.0002_holds_move_the_generation").WATCHED_COLUMNS)
    with CaptureQueriesContext(connection) as first:
        build()
    with CaptureQueriesContext(connection) as again:
        build()

    def shapes(captured: Any) -> set[str]:  # a statement without its values (the grants' is read at each time)
        return {re.sub(r"'[^']*'", "?", q["sql"]) for q in captured.captured_queries}

    left_out = shapes(first) - shapes(again)
    assert len(left_out) == 8
    tables = {t for statement in left_out for t in re.findall(r'FROM "(\w+)"', statement)}
    assert len(tables) == 8  # fabrics, targets, queues, quotas, agents, teams, tiers, budget holds
    assert tables <= watched, tables - watched
