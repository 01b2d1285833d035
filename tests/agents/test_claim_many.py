"""An agent with free slots takes a burst's work in one round trip, and the worker records those starts at once."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from portal.agents.models import Claim
from portal.worker import tasks
from portal.worker.models import WaitBucket
from portal.workloads.models import Workload, WorkloadEvent


@pytest.fixture
def agent(hosts):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {hosts['token']}")
    host = {"host": "host-1", "queues": ["gpu-a"], "gpus": 2, "cpus": 8, "memory_mib": 65536}
    assert client.post("/api/v1/agent/register/", host, format="json").status_code == 200
    return client


def claim(client, **body):
    return client.post("/api/v1/agent/claim/", {"host": "host-1", "wait": 0, **body}, format="json")


def test_five_claimable_taken_three_then_two_oldest_first_then_none(alice, submit, agent):
    names = [f"job-{i}" for i in range(5)]
    for name in names:
        submit(alice, queue="gpu-a", kind="batch", name=name, gpus=0)
    tasks.cycle()
    first, second = claim(agent, max=3), claim(agent, max=3)
    assert [c["name"] for c in first.json()["claims"]] == names[:3]
    assert [c["name"] for c in second.json()["claims"]] == names[3:]
    assert claim(agent, max=3).status_code == 204
    assert set(Claim.objects.values_list("state", "host__name")) == {("running", "host-1")}


def test_a_burst_claimed_at_once_starts_in_one_sync_with_an_event_and_a_wait_each(alice, submit, agent):
    for i in range(6):
        submit(alice, queue="gpu-a", kind="batch", name=f"job-{i}", gpus=0)
    tasks.cycle()
    assert len(claim(agent, max=10).json()["claims"]) == 6
    with CaptureQueriesContext(connection) as queries:
        tasks.sync_fabrics()
    starts = [q for q in queries.captured_queries if q["sql"].startswith("WITH v AS (SELECT * FROM unnest(")]
    assert len(starts) == 1  # one statement for the six starts
    assert set(Workload.objects.values_list("state", "host")) == {("running", "host-1")}
    assert WorkloadEvent.objects.filter(to_state="running", reason="running on hosts").count() == 6
    assert sum(WaitBucket.objects.values_list("count", flat=True)) == 6


def test_a_workload_cancelled_meanwhile_is_not_started_by_the_batch(alice, submit, agent):
    kept, cancelled = (submit(alice, queue="gpu-a", kind="batch", name=n, gpus=0) for n in ("kept", "gone"))
    tasks.cycle()
    claim(agent, max=2)
    Workload.objects.filter(pk=cancelled.pk).update(state="cancelling")
    tasks.sync_fabrics()
    assert Workload.objects.get(pk=kept.pk).state == "running"
    assert not WorkloadEvent.objects.filter(workload_id=cancelled.pk, to_state="running").exists()


def test_only_what_fits_the_hosts_free_gpus_is_taken(alice, submit, agent):
    for i in range(3):
        submit(alice, queue="gpu-a", kind="batch", name=f"gpu-{i}", gpus=1)
    tasks.cycle()
    assert [c["name"] for c in claim(agent, max=3).json()["claims"]] == ["gpu-0", "gpu-1"]  # the host has two
    assert claim(agent, max=3).status_code == 204


def test_without_max_the_answer_is_one_claim_as_before(alice, submit, agent):
    for i in range(2):
        submit(alice, queue="gpu-a", kind="batch", name=f"job-{i}", gpus=0)
    tasks.cycle()
    answer = claim(agent).json()
    assert answer["name"] == "job-0"
    assert "claims" not in answer
    assert Claim.objects.filter(state="claimable").count() == 1


@pytest.mark.parametrize("bad", [0, -1, 257, "3", 2.5, True])
def test_max_must_be_a_whole_number_from_1_to_256(agent, bad):
    answer = claim(agent, max=bad)
    assert answer.status_code == 400
    assert "max" in answer.json()["errors"]


def test_a_poll_reads_waiting_claims_as_values_and_taken_ones_as_they_are_now(alice, submit, agent, hosts):
    """A burst leaves thousands of claims waiting for an agent, polled every cycle: those come as plain values in
    one statement, whatever their number; only claims an agent took are read as objects, in one more."""
    from portal.worker.connections import fabric_for

    for i in range(12):
        submit(alice, queue="gpu-a", kind="batch", name=f"job-{i}", gpus=0, cpus=0.1)
    tasks.cycle()
    assert Claim.objects.count() == 12
    Claim.objects.filter(workload__name="job-11").update(reason="the host is draining")
    taken = claim(agent, max=2).json()["claims"]  # job-0 and job-1
    ids = [str(w.external_id) for w in Workload.objects.order_by("name")] + ["3c5d1c2e-0000-4000-8000-000000000000"]
    fabric = fabric_for(hosts["fabric"])
    with CaptureQueriesContext(connection) as polled:
        statuses = fabric.poll(ids)
    claims = [q["sql"] for q in polled.captured_queries if '"agents_claim"' in q["sql"] and "SELECT" in q["sql"]]
    assert len(claims) == 2  # the waiting ones' values, the taken ones' rows
    by_name = {w.name: statuses[str(w.external_id)] for w in Workload.objects.all()}
    assert {c["name"] for c in taken} == {"job-0", "job-1"}
    for name in ("job-0", "job-1"):
        assert (by_name[name].state.value, by_name[name].host) == ("running", "host-1")
    for i in range(2, 11):
        assert (by_name[f"job-{i}"].state.value, by_name[f"job-{i}"].reason) == ("queued", "waiting for an agent")
    assert (by_name["job-11"].state.value, by_name["job-11"].reason) == ("queued", "the host is draining")
    assert statuses["3c5d1c2e-0000-4000-8000-000000000000"].state.value == "missing"


def test_a_sync_says_why_each_waits_with_one_statement_per_reason(alice, submit, agent):
    from portal.worker import sync

    for i in range(12):
        submit(alice, queue="gpu-a", kind="batch", name=f"job-{i}", gpus=0, cpus=0.1)
    tasks.cycle()
    Claim.objects.filter(workload__name__in=["job-10", "job-11"]).update(reason="the host is draining")
    Workload.objects.update(pending_reason="")
    with CaptureQueriesContext(connection) as synced:
        sync.sync_all()
    said = [q["sql"] for q in synced.captured_queries if q["sql"].startswith('UPDATE "workloads_workload"')]
    assert len(said) == 2  # ten waiting for an agent, two for the draining host
    reasons = dict(Workload.objects.values_list("name", "pending_reason"))
    assert reasons == {f"job-{i}": "the host is draining" if i >= 10 else "waiting for an agent" for i in range(12)}
    with CaptureQueriesContext(connection) as again:
        sync.sync_all()
    assert not [q for q in again.captured_queries if q["sql"].startswith('UPDATE "workloads_workload"')]


@pytest.mark.django_db(transaction=True)  # another connection holds a row: it must see the rows committed
def test_saying_why_work_waits_never_waits_for_a_row_another_transaction_holds(alice, submit):
    import threading

    from django.db import connections, transaction

    from portal.worker import sync

    workloads = [submit(alice, queue="train", name=f"w{i}") for i in range(4)]
    held, done = threading.Event(), threading.Event()

    def hold_one() -> None:  # a cancel, say, in the middle of its transaction
        try:
            with transaction.atomic():
                Workload.objects.select_for_update().get(pk=workloads[0].pk)
                held.set()
                done.wait(timeout=30)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold_one)
    holder.start()
    try:
        assert held.wait(timeout=30)
        said = sync._say_why([w.pk for w in workloads], "waiting for nodes", None)  # returns without waiting
    finally:
        done.set()
        holder.join(timeout=30)
    assert said == {w.pk for w in workloads[1:]}
    reasons = dict(Workload.objects.values_list("name", "pending_reason"))
    assert [reasons[f"w{i}"] for i in range(1, 4)] == ["waiting for nodes"] * 3
    assert reasons["w0"] != "waiting for nodes"


def whole_reads(queries) -> list[str]:
    """The sync's reads of whole workloads (every column: the output's tail among them)."""
    whole = re.compile(
        r'SELECT "workloads_workload"\."id".*"workloads_workload"\."log_tail".* FROM "workloads_workload"'
    )
    return [q["sql"] for q in queries if whole.match(q["sql"])]


def test_a_sync_reads_no_whole_workload_while_the_fabric_holds_them_all(alice, submit, agent):
    from portal.worker import sync

    for i in range(8):
        submit(alice, queue="gpu-a", kind="batch", name=f"job-{i}", gpus=0, cpus=0.1)
    tasks.cycle()
    Workload.objects.update(pending_reason="")
    with CaptureQueriesContext(connection) as synced:
        sync.sync_all()
    assert whole_reads(synced.captured_queries) == []  # eight held: their ids, states and reasons only
    assert set(Workload.objects.values_list("state", "pending_reason")) == {("dispatching", "waiting for an agent")}


def test_in_one_sync_the_held_wait_the_taken_start_and_the_cancelled_stop(alice, submit, agent):
    """Held work is said to wait from its light read; work that started, and work cancelled meanwhile, are read
    whole (only they) and taken as ever."""
    from portal.worker import sync

    for i in range(6):
        submit(alice, queue="gpu-a", kind="batch", name=f"job-{i}", gpus=0, cpus=0.1)
    tasks.cycle()
    assert [c["name"] for c in claim(agent, max=2).json()["claims"]] == ["job-0", "job-1"]
    Workload.objects.filter(name="job-5").update(state="cancelling")
    with CaptureQueriesContext(connection) as synced:
        sync.sync_all()
    read = whole_reads(synced.captured_queries)
    assert len(read) == 2  # the one cancelling (before the poll), the two started (after it)
    states = dict(Workload.objects.values_list("name", "state"))
    assert [states[f"job-{i}"] for i in range(5)] == ["running"] * 2 + ["dispatching"] * 3
    assert states["job-5"] == "cancelled"  # no agent had it: its claim withdrawn, stopped at once
    assert set(Workload.objects.filter(state="dispatching").values_list("pending_reason", flat=True)) == {
        "waiting for an agent"
    }
    assert not Claim.objects.filter(workload__name="job-5", state="claimable").exists()


def test_a_bursts_claims_go_in_by_one_copy_and_a_retried_dispatch_keeps_those_there(alice, submit, hosts, monkeypatch):
    from portal import sql
    from portal.agents.fabric import AgentFabric, _spec
    from portal.queues.models import Fabric
    from portal.worker.connections import fabric_for
    from portal.worker.dispatch import job_spec

    burst = [submit(alice, queue="gpu-a", kind="batch", name=f"job-{i}", gpus=0) for i in range(3)]
    tasks.cycle()
    specs = [job_spec(Workload.objects.get(pk=w.pk)) for w in burst]
    Claim.objects.all().delete()  # as if the burst were dispatched now, together
    copied: list[int] = []
    real = sql.copy_insert

    def copy_insert(objs):
        copied.append(len(objs))
        real(objs)

    monkeypatch.setattr(sql, "copy_insert", copy_insert)
    fabric = fabric_for(Fabric.objects.get(name="hosts"))
    assert isinstance(fabric, AgentFabric)
    placed = {s.workload_id: str(s.workload_id) for s in specs}
    assert fabric.submit_many(specs) == placed
    assert copied == [3]
    claims = {c.run_id: c for c in Claim.objects.all()}
    assert set(claims) == set(placed)
    for spec in specs:  # as the INSERT wrote them
        made = claims[spec.workload_id]
        assert (made.queue, made.state, made.gpus_milli, made.host) == ("gpu-a", Claim.ClaimState.CLAIMABLE, 0, None)
        assert made.spec == {**json_of(_spec(spec)), "lease_s": 0}
    # A dispatch retried after a crash: two claims made already, one lost. The COPY fails whole (and its
    # savepoint undoes it); the INSERT that skips what exists makes the lost one and leaves the others be.
    Claim.objects.filter(run_id=specs[0].workload_id).delete()
    Claim.objects.filter(run_id=specs[1].workload_id).update(reason="taken by hand")
    assert fabric.submit_many(specs) == placed
    assert copied == [3, 3]
    assert Claim.objects.count() == 3
    assert Claim.objects.get(run_id=specs[1].workload_id).reason == "taken by hand"
    assert Claim.objects.get(run_id=specs[0].workload_id).state == Claim.ClaimState.CLAIMABLE


def json_of(value):
    import json

    return json.loads(json.dumps(value))


def test_a_batch_of_ends_is_recorded_one_update_for_each_distinct_end(alice, submit, agent):
    """Six jobs end in one report: four alike, one failed, one named twice (its first end counts), and one that
    had ended already keeps its end. The ends take one UPDATE for each distinct end, not one per job."""
    for i in range(7):
        submit(alice, queue="gpu-a", kind="batch", name=f"job-{i}", gpus=0)
    tasks.cycle()
    runs = [c["run_id"] for c in claim(agent, max=10).json()["claims"]]
    assert len(runs) == 7
    Claim.objects.filter(run_id=runs[6]).update(state="cancelled", reason="cancelled before")
    ends = [{"run_id": r, "state": "succeeded", "exit_code": 0} for r in runs[:4]]
    ends += [
        {"run_id": runs[4], "state": "failed", "exit_code": 3, "reason": "boom"},
        {"run_id": runs[5], "state": "timed_out", "exit_code": 143, "reason": "limit"},
        {"run_id": runs[5], "state": "succeeded", "exit_code": 0},  # named twice: the first end counts
        {"run_id": runs[6], "state": "failed", "exit_code": 1, "reason": "too late"},  # it had ended already
    ]
    with CaptureQueriesContext(connection) as queries:
        answer = agent.post("/api/v1/agent/ends/", {"host": "host-1", "runs": ends}, format="json")
    assert answer.json() == {"recorded": 8, "unknown": []}
    updates = [q for q in queries.captured_queries if q["sql"].startswith('UPDATE "agents_claim"')]
    assert len(updates) == 4  # succeeded/0, failed/3, timed_out/143, failed/1
    got = {str(c.run_id): (c.state, c.exit_code, c.reason) for c in Claim.objects.all()}
    assert [got[r] for r in runs] == [("succeeded", 0, "")] * 4 + [
        ("failed", 3, "boom"), ("timed_out", 143, "limit"), ("cancelled", None, "cancelled before"),
    ]  # fmt: skip
    assert all(c.finished_at is not None for c in Claim.objects.exclude(run_id=runs[6]))


def test_claims_and_ends_wake_the_worker_and_a_poll_that_takes_nothing_does_not(alice, submit, agent, settings):
    """The worker records a claim's start and a job's end at once (a kick in the same transaction), not at its
    next tick; the long poll's empty looks send nothing."""
    submit(alice, queue="gpu-a", kind="batch", name="job", gpus=0)
    tasks.cycle()
    settings.GRIDLANE_KICK_WORKER = True

    def kicks(queries: CaptureQueriesContext) -> list[str]:
        return [q["sql"] for q in queries.captured_queries if "pg_notify" in q["sql"]]

    with CaptureQueriesContext(connection) as taking:
        runs = [c["run_id"] for c in claim(agent, max=2).json()["claims"]]
    assert len(runs) == 1
    assert len(kicks(taking)) == 1
    assert "'admit'" not in kicks(taking)[0]  # everything: admit, dispatch and sync
    with CaptureQueriesContext(connection) as empty:
        assert claim(agent, max=2).status_code == 204
    assert kicks(empty) == []
    with CaptureQueriesContext(connection) as ending:
        ended = agent.post("/api/v1/agent/ends/", {"runs": [{"run_id": runs[0], "state": "succeeded"}]}, format="json")
    assert ended.json()["recorded"] == 1
    assert len(kicks(ending)) == 1
