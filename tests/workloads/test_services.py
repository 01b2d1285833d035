"""Submit and cancel through the services: validation, access, idempotency, and the worker kick."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied
from django_q.models import OrmQ

from portal.workloads import services
from portal.workloads.models import Workload, WorkloadEvent
from portal.workloads.states import State
from tests.conftest import row_updates


def request(**fields):
    values = {"queue": "train", "kind": "training", "name": "job", "command": "true"} | fields
    return services.SubmitRequest(**values)


def test_a_submission_is_recorded_pending_with_its_event_in_milli_units(alice):
    workload, created = services.submit(
        alice, request(gpus=Decimal("0.25"), cpus=Decimal("2.5"), memory_gb=Decimal("1.5"))
    )
    assert created
    assert (workload.state, workload.group.slug, workload.owner) == (State.PENDING, "vision", alice)
    assert (workload.gpus_milli, workload.cpus_milli, workload.memory_mib) == (250, 2500, 1536)
    assert workload.runtime_limit_s == 60 * 60  # the queue's default
    event = WorkloadEvent.objects.get(workload=workload)
    assert (event.from_state, event.to_state, event.actor) == ("", State.PENDING, alice)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"gpus": Decimal(-1)}, "resources.gpus"),
        ({"gpus": Decimal("1.5")}, "resources.gpus"),
        ({"gpus": Decimal(100000)}, "resources.gpus"),
        ({"cpus": Decimal(0)}, "resources.cpus"),
        ({"memory_gb": Decimal("1e9")}, "resources.memory_gb"),
        ({"nodes": 0}, "resources.nodes"),
        ({"gpus": Decimal(8), "nodes": 2}, "resources"),
        ({"runtime_limit_minutes": 100000}, "runtime_limit_minutes"),
        ({"name": ""}, "name"),
        ({"name": "a;rm -rf /"}, "name"),
        ({"command": ""}, "command"),
        ({"command": "x" * (64 * 1024 + 1)}, "command"),
        ({"command": "echo \x00"}, "command"),
        ({"command": "echo \udcff"}, "command"),
        ({"kind": "notebook"}, "kind"),
        ({"kind": "spaceship"}, "kind"),
        ({"priority": "urgent"}, "priority"),
        ({"priority": "high"}, "priority"),
        ({"lease_hours": Decimal(2)}, "lease_hours"),
        ({"image": "not an image!"}, "image"),
        ({"queue": "nope"}, "queue"),
    ],
)
def test_bad_input_is_refused_with_a_message_on_its_field_and_nothing_is_recorded(alice, fields, field):
    with pytest.raises(services.SubmitRejected) as rejected:
        services.submit(alice, request(**fields))
    assert field in rejected.value.errors
    assert all(rejected.value.errors[field])
    assert not Workload.objects.exists()


def test_every_error_is_reported_at_once(alice):
    with pytest.raises(services.SubmitRejected) as rejected:
        services.submit(alice, request(name="", command="", gpus=Decimal(-1)))
    assert {"name", "command", "resources.gpus"} <= set(rejected.value.errors)


def test_a_lead_may_submit_at_high_priority(bob):
    workload, _ = services.submit(bob, request(priority="high"))
    assert workload.priority == "high"


def test_a_queue_not_open_to_the_users_team_is_forbidden(alice):
    from portal.queues.models import Queue

    Queue.objects.get(slug="train").allowed_groups.remove(alice.memberships.get().group)
    with pytest.raises(services.QueueForbidden):
        services.submit(alice, request())


def test_a_repeated_idempotency_key_returns_the_first_workload(alice):
    first, created = services.submit(alice, request(), idempotency_key="k-1")
    again, created_again = services.submit(alice, request(), idempotency_key="k-1")
    assert (created, created_again) == (True, False)
    assert again.pk == first.pk
    assert Workload.objects.count() == 1


def test_the_same_idempotency_key_for_another_request_is_a_conflict(alice):
    services.submit(alice, request(), idempotency_key="k-1")
    with pytest.raises(services.IdempotencyConflict):
        services.submit(alice, request(name="other"), idempotency_key="k-1")


def test_idempotency_keys_belong_to_their_owner(alice, charlie):
    mine, _ = services.submit(alice, request(), idempotency_key="shared")
    theirs, created = services.submit(charlie, request(), idempotency_key="shared")
    assert created
    assert theirs.pk != mine.pk


def test_cancel_of_pending_work_is_immediate(alice, submit):
    workload = submit(alice)
    services.do_cancel(alice, workload)
    workload.refresh_from_db()
    assert workload.state == State.CANCELLED
    assert workload.finished_at is not None


def test_cancel_of_running_work_asks_the_worker(alice, submit):
    workload = submit(alice)
    Workload.objects.filter(pk=workload.pk).update(state=State.RUNNING)
    workload.refresh_from_db()
    services.do_cancel(alice, workload)
    assert Workload.objects.get(pk=workload.pk).state == State.CANCELLING


def test_cancel_twice_is_harmless(alice, submit):
    workload = submit(alice)
    services.do_cancel(alice, workload)
    services.do_cancel(alice, workload)
    assert WorkloadEvent.objects.filter(workload=workload, to_state=State.CANCELLED).count() == 1


def test_who_may_cancel(alice, bob, charlie, it_admin, submit):
    workload = submit(alice)
    for allowed in (alice, bob, it_admin):
        services.check_cancel(allowed, workload)
    other = submit(bob)
    with pytest.raises(PermissionDenied):
        services.check_cancel(alice, other)  # a member may not cancel a teammate's work
    with pytest.raises(PermissionDenied):
        services.check_cancel(charlie, workload)


def test_submit_and_cancel_wake_the_worker_when_they_commit(transactional_db, alice, submit, settings):
    """On PostgreSQL the kick is a NOTIFY in the same transaction (tests/worker/test_kicks.py hears the worker
    act on it); the embedded SQLite default enqueues a django-q2 task instead. A submit's kick asks only for
    admission and dispatch; a cancel's for a sync too (where its job is stopped)."""
    import psycopg
    from django.db import connection

    from portal.worker import wake

    settings.GRIDLANE_KICK_WORKER = True
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as listener:
        listener.execute(f"LISTEN {wake.CHANNEL}")
        workload = submit(alice)
        assert [n.payload for n in listener.notifies(timeout=5, stop_after=1)] == [wake.ADMIT]
        services.do_cancel(alice, workload)
        assert [n.payload for n in listener.notifies(timeout=5, stop_after=1)] == [wake.EVERYTHING]
    assert OrmQ.objects.count() == 0  # nothing went through the task queue


def test_many_move_in_one_statement_and_one_that_moved_on_meanwhile_is_left_alone(alice, django_assert_num_queries):
    waiting = [services.submit(alice, request(name=f"w{i}"))[0] for i in range(3)]
    services.transition(waiting[1], State.CANCELLED, reason="cancelled")  # before the admission lands
    with django_assert_num_queries(1):  # the compare-and-swap update and its events, in one round trip
        moved = services.transition_many(
            [w.pk for w in waiting], State.PENDING, State.ADMITTED, reason="admitted", actor=alice
        )
    assert sorted(moved) == sorted([waiting[0].pk, waiting[2].pk])
    states = dict(Workload.objects.values_list("name", "state"))
    assert states == {"w0": State.ADMITTED, "w1": State.CANCELLED, "w2": State.ADMITTED}
    admitted = Workload.objects.get(pk=waiting[0].pk)
    assert admitted.admitted_at is not None
    assert admitted.pending_reason == ""
    events = WorkloadEvent.objects.filter(to_state=State.ADMITTED)
    assert sorted(e.workload_id for e in events) == sorted(moved)
    assert {(e.from_state, e.actor, e.reason, e.at) for e in events} == {
        (State.PENDING, alice, "admitted", admitted.admitted_at)
    }


def test_a_kept_context_answers_whether_each_shape_fits_once_and_each_time_alike(alice):
    """Whether some fabric behind the queue could ever hold a request depends only on what the context came with
    (the queue's fabrics, the team's caps) and on the request's shape: worked out once per team and shape while the
    context is kept, and answered alike every time, each refusal with errors of its own."""
    ctx = services.submit_context(alice, "train")
    too_many = (
        "Your team Vision may hold at most that much on local: this asks for 7 GPUs, where the limit is 6. "
        "Ask for less, or ask IT or your team lead to raise the limit."
    )
    refusals: list[dict[str, list[str]] | None] = []
    for gpus, nodes in [(1, 1), (7, 1), (7, 1), (1, 2), (1, 1), (7, 1)]:
        try:
            services.check_submit(alice, request(gpus=Decimal(gpus), nodes=nodes), ctx)
            refusals.append(None)
        except services.SubmitRejected as rejected:
            refusals.append(rejected.errors)
    assert refusals[0] is None
    assert refusals[4] is None
    assert refusals[1] == refusals[2] == refusals[5] == {"resources": [too_many]}
    assert list(refusals[3] or {}) == ["resources.nodes"]
    assert len(ctx.fits) == 3  # (1 GPU, 1 node), (7 GPUs, 1 node), (1 GPU, 2 nodes)
    (refusals[1] or {})["resources"].append("changed by a caller")
    with pytest.raises(services.SubmitRejected) as again:
        services.check_submit(alice, request(gpus=Decimal(7)), ctx)
    assert again.value.errors == {"resources": [too_many]}


def test_many_move_with_each_ones_own_texts_in_the_same_statement(alice, django_assert_max_num_queries):
    """A dispatch's intent: each moves to dispatching with its own rendered script and job id (an agent's, known
    before it is placed), one new version of its row (the same UPDATE), and one that moved on meanwhile keeps
    what it had."""
    from django.db import connection

    waiting = [services.submit(alice, request(name=f"w{i}"))[0] for i in range(3)]
    services.transition_many([w.pk for w in waiting], State.PENDING, State.ADMITTED, reason="admitted")
    waiting[2].refresh_from_db()
    assert services.transition(waiting[2], State.CANCELLED, reason="cancelled")
    scripts = {w.pk: f'#!/bin/sh\n# {w.name}: it\'s "quoted"\n' for w in waiting}
    job_ids = {w.pk: f"job-{w.name}" for w in waiting}
    updates = row_updates(Workload)
    with django_assert_max_num_queries(1 if connection.vendor == "postgresql" else 20):
        moved = services.transition_many(
            [w.pk for w in waiting], State.ADMITTED, State.DISPATCHING, reason="dispatching",
            each={"rendered": scripts, "external_id": job_ids}, pending_reason="waiting for an agent",
        )  # fmt: skip
    assert sorted(moved) == sorted([waiting[0].pk, waiting[1].pk])
    rows = {
        name: rest
        for name, *rest in Workload.objects.values_list("name", "state", "rendered", "external_id", "pending_reason")
    }
    assert rows == {
        "w0": [State.DISPATCHING, scripts[waiting[0].pk], "job-w0", "waiting for an agent"],
        "w1": [State.DISPATCHING, scripts[waiting[1].pk], "job-w1", "waiting for an agent"],
        "w2": [State.CANCELLED, "", "", ""],
    }
    assert WorkloadEvent.objects.filter(to_state=State.DISPATCHING).count() == 2
    if connection.vendor == "postgresql":
        assert row_updates(Workload) - updates == 2  # one version each, not one for the state and one for the script


def test_a_persons_teams_read_through_the_compiled_query_are_theirs_whoever_asked_first(alice, bob, charlie):
    """The submit's entitlement query is compiled once per shape and run again with each caller's ids: what
    it answers is what the query built afresh answers, for each person and queue, in any order."""
    from portal import access
    from portal.queues import tiers
    from portal.queues.models import Queue
    from portal.workloads import limits

    def columns(ref, now):
        return limits.cap_columns([], ref, now) | tiers.columns(ref)

    def seen(groups_and_leads):
        groups, leads = groups_and_leads
        return [(g.slug, getattr(g, tiers.COLUMN)) for g in groups], leads

    for queue in Queue.objects.order_by("slug"):
        for user in (alice, charlie, bob, alice):
            fresh = access.submit_entitlement(user, queue, columns)
            compiled = access.submit_entitlement(user, queue, columns, shape="test")
            assert seen(compiled) == seen(fresh)
    vision = Queue.objects.get(slug="train")
    assert [g.slug for g in access.submit_entitlement(charlie, vision, columns, shape="test")[0]] != ["vision"]


def test_many_end_in_one_statement_each_its_own_way_and_one_cancelled_meanwhile_is_left_alone(
    alice, django_assert_max_num_queries
):
    from django.db import connection

    running = []
    for i in range(3):
        w = services.submit(alice, request(name=f"r{i}"))[0]
        for state in (State.ADMITTED, State.DISPATCHING, State.RUNNING):
            assert services.transition(w, state, reason="on its way")
        running.append(w)
    stale = Workload.objects.get(pk=running[2].pk)
    services.transition(stale, State.CANCELLING, reason="cancel asked")  # after the sync read it as running
    ends = [
        services.End(running[0], State.SUCCEEDED, "succeeded (exit code 0)", 0, None, "all done\n", "node-1"),
        services.End(running[1], State.FAILED, "failed (exit code 3)", 3, None, "Traceback\n", "node-2"),
        services.End(running[2], State.SUCCEEDED, "succeeded (exit code 0)", 0, None, "", "node-3"),
    ]
    with django_assert_max_num_queries(1 if connection.vendor == "postgresql" else 20):
        moved = services.finish_many(ends)
    assert [w.pk for w in moved] == [running[0].pk, running[1].pk]
    stored = {w.name: w for w in Workload.objects.all()}
    assert (stored["r0"].state, stored["r0"].exit_code, stored["r0"].log_tail, stored["r0"].host) == (
        State.SUCCEEDED, 0, "all done\n", "node-1",
    )  # fmt: skip
    assert (stored["r1"].state, stored["r1"].exit_code, stored["r1"].host) == (State.FAILED, 3, "node-2")
    assert stored["r0"].finished_at is not None
    assert stored["r0"].finished_at == running[0].finished_at
    assert (stored["r2"].state, stored["r2"].exit_code) == (State.CANCELLING, None)
    last = {e.workload.name: e for e in WorkloadEvent.objects.select_related("workload").order_by("at", "pk")}
    assert (last["r0"].from_state, last["r0"].to_state, last["r0"].reason) == (
        State.RUNNING, State.SUCCEEDED, "succeeded (exit code 0)",
    )  # fmt: skip
    assert (last["r1"].to_state, last["r1"].reason) == (State.FAILED, "failed (exit code 3)")
    assert last["r2"].to_state == State.CANCELLING
