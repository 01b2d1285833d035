"""Kicks are coalesced: a burst of submits wakes one admission, an admission wakes one dispatch, and a dispatch
asked for while another process dispatches is run by that one. Whatever the interleaving of submits and worker
steps, every submitted workload reaches its fabric without waiting for the periodic cycle."""

from __future__ import annotations

import zlib
from typing import Any

import psycopg
import pytest
from django.db import connection
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from portal.agents.models import Claim
from portal.worker import dispatch as dispatching
from portal.worker import stats, tasks
from portal.worker.models import WorkerStats
from portal.workloads import services
from portal.workloads.models import Workload, WorkloadEvent
from portal.workloads.states import State
from tests.conftest import row_updates

STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.integers(1, 3)),
        st.tuples(st.just("bulk"), st.integers(2, 40)),
        st.tuples(st.sampled_from(["listen", "follow", "other takes dispatch", "other lets go", "cycle"])),
    ),
    max_size=25,
)


@pytest.fixture
def hosts(cast: dict[str, Any]) -> None:
    """A queue `hosts` on an agent fabric as big as the test needs: dispatch there only makes work claimable."""
    from django.utils import timezone

    from portal.accounts.models import ResourceGroup
    from portal.queues.models import Fabric, Queue, QueueTarget

    big = {"gpus_milli": 0, "cpus_milli": 10**9, "memory_mib": 10**10}
    fabric = Fabric.objects.create(name="hosts", kind="agent", **big)
    Fabric.objects.filter(pk=fabric.pk).update(
        observed_gpus_milli=0, observed_cpus_milli=10**9, observed_memory_mib=10**10, observed_at=timezone.now()
    )
    queue = Queue.objects.create(slug="hosts", name="Hosts", kinds=["batch"], default_runtime_minutes=10)
    queue.allowed_groups.add(ResourceGroup.objects.get(slug="vision"))
    QueueTarget.objects.create(queue=queue, fabric=fabric)


class Worker:
    """The worker as gridlane_worker runs it, one step at a time: the listener admits once per burst of kicks
    (wake._drain takes them all), then wakes the follow-up thread, which dispatches once however often it was
    woken. Another process may hold the dispatch lock meanwhile (a periodic cycle), on a connection of its own."""

    def __init__(self, user: Any) -> None:
        self.user = user
        self.kicks = 0  # NOTIFYs waiting in the listener's connection
        self.woken = False  # the follow-up thread's event
        self.other = psycopg.connect(**connection.get_connection_params(), autocommit=True)
        self.other_holds = False
        self.submitted: list[Any] = []

    def step(self, name: str, n: int = 0) -> None:
        if name == "submit":
            for _ in range(n):
                req = services.SubmitRequest(queue="hosts", kind="batch", name="one", command="true")
                self.submitted.append(services.submit(self.user, req)[0].pk)
                self.kicks += 1
        elif name == "bulk":
            req = services.SubmitRequest(queue="hosts", kind="batch", name="many", command="true")
            self.submitted += [w.pk for w, _ in services.submit_many(self.user, [(req, None)] * n)]
            self.kicks += 1
        elif name == "listen" and self.kicks:
            self.kicks = 0
            tasks.admit()
            self.woken = True
        elif name == "follow" and self.woken:
            self.woken = False
            tasks.dispatch()
        elif name == "other takes dispatch" and not self.other_holds:
            # Another process takes the lock and reads (and dispatches) what is admitted now; it lets go later.
            self.other_holds = self.try_lock()
            if self.other_holds:
                dispatching.dispatch_all()
        elif name == "other lets go" and self.other_holds:
            self.other_lets_go()
        elif name == "cycle":  # the periodic cycle's admit and dispatch (it syncs and rolls up too)
            tasks.admit()
            tasks.dispatch()

    def other_lets_go(self) -> None:
        """The other process lets go, then goes round again for whoever asked meanwhile, as tasks.dispatch does:
        what was admitted after it read is dispatched only if someone asked."""
        while True:
            self.other.execute("SELECT pg_advisory_unlock(%s)", [KEY])
            self.other_holds = False
            if not stats.take_request("dispatch_requested"):
                return
            self.other_holds = self.try_lock()
            if self.other_holds:
                dispatching.dispatch_all()

    def try_lock(self) -> bool:
        row = self.other.execute("SELECT pg_try_advisory_lock(%s)", [KEY]).fetchone()
        return bool(row and row[0])

    def settle(self) -> None:
        """Let every pending wake-up run (no periodic cycle)."""
        if self.other_holds:
            self.other_lets_go()
        while self.kicks or self.woken:
            self.step("listen")
            self.step("follow")


KEY = zlib.crc32(b"dispatch")


# A dispatch asked for while another process holds the lock, after that process read what to do.
ASKED_WHILE_HELD = [("submit", 1), ("other takes dispatch",), ("listen",), ("follow",), ("other lets go",)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
@example(steps=ASKED_WHILE_HELD)
def test_no_interleaving_of_submits_and_worker_steps_loses_a_workload(hosts, alice, steps):
    worker = Worker(alice)
    try:
        for step in steps:
            worker.step(*step)
        worker.settle()
        on_fabric = Workload.objects.filter(pk__in=worker.submitted, state=State.DISPATCHING).exclude(external_id="")
        assert on_fabric.count() == len(worker.submitted)
        assert len(set(worker.submitted)) == len(worker.submitted)
    finally:
        worker.other.close()
        Workload.objects.all().delete()
        WorkerStats.objects.all().delete()


def test_a_burst_larger_than_a_cycles_slice_is_admitted_by_one_kick(hosts, alice, settings):
    settings.GRIDLANE_CANDIDATES_PER_QUEUE = 10
    req = services.SubmitRequest(queue="hosts", kind="batch", name="many", command="true")
    services.submit_many(alice, [(req, None)] * 35)
    assert tasks.admit()["admitted"] == 35
    assert tasks.dispatch() == 35
    assert Workload.objects.filter(state=State.DISPATCHING).exclude(external_id="").count() == 35


def test_a_thousand_are_admitted_in_two_rounds_in_a_fixed_number_of_statements(
    hosts, alice, settings, django_assert_num_queries
):
    """The slice grows after a round that admitted all of it (256, then 1,024): the statements of an
    admission depend on the rounds, not on how many workloads each admits."""
    settings.GRIDLANE_CANDIDATES_PER_QUEUE = 256
    req = services.SubmitRequest(queue="hosts", kind="batch", name="many", command="true")
    services.submit_many(alice, [(req, None)] * 1000)
    WorkerStats.objects.filter(name="cycles").delete()
    # The lock and its release; per round the generation of what IT configures and 16 reads for the snapshot
    # (the usage brought forward among them, the active rows' versions, the pending candidates' versions and then
    # whole those not read before, and what the fabrics have free now), eight
    # of them of what IT configures (the budgets' holds among them), read in the first round only (the second finds
    # the generation as it was: snapshot.Settled, and reads only what was observed of the kept fabrics, one
    # statement); one more in the
    # second for the active rows the first changed (its 256, read whole); and 4 to apply each round (a savepoint,
    # the targets, the compare-and-swap update with its events, the release); the counters with the gauge. The
    # learned runtimes are read in the first round only (calibration.LEARNED keeps them ten minutes).
    with django_assert_num_queries(2 + (1 + 16 + 1 + 4) + (1 + 16 - 8 + 1 + 1 + 4) + 1):
        assert tasks.admit()["admitted"] == 1000
    assert WorkerStats.objects.get(name="cycles").value == 2
    assert Workload.objects.filter(state=State.ADMITTED).count() == 1000


@pytest.mark.parametrize("n", [10, 1000])
def test_a_dispatch_takes_the_same_statements_for_ten_or_a_thousand_and_writes_each_row_once(
    hosts, alice, n, django_assert_num_queries
):
    """Its lock and its release; what to dispatch, the tiers, whom they run as (the POSIX policies); the owners,
    teams, queues, fabrics and queue targets of the batch, each read once; then one transaction (here a savepoint
    and its release): the intent with each one's job id and why it waits (each one's state, rendered script,
    external id and pending reason, and its event, in one UPDATE), the fabric's row and the leases, the claims (a
    savepoint around their COPY); the counter. An agent's jobs are rows of the portal's own database, so each
    workload's row gets one new version, where a fabric elsewhere takes two (the intent, then the job's id), and
    the sync that follows has nothing to say of why they wait: it writes no row."""
    from portal.worker import sync

    req = services.SubmitRequest(queue="hosts", kind="batch", name="many", command="true")
    services.submit_many(alice, [(req, None)] * n)
    tasks.admit()
    before = row_updates(Workload)
    with django_assert_num_queries(2 + 3 + 5 + 1 + 1 + 2 + 3 + 1 + 1):
        assert tasks.dispatch() == n
    if connection.vendor == "postgresql":
        assert row_updates(Workload) - before == n
    rows = Workload.objects.filter(state=State.DISPATCHING, pending_reason="waiting for an agent")
    assert sorted(rows.values_list("external_id", flat=True)) == sorted(
        str(pk) for pk in rows.values_list("pk", flat=True)
    )
    assert rows.exclude(rendered="").count() == n
    assert Claim.objects.filter(state="claimable").count() == n
    before = row_updates(Workload)
    sync.sync_all()
    if connection.vendor == "postgresql":
        assert row_updates(Workload) == before


def _agent_batch(alice: Any, n: int) -> list[Workload]:
    req = services.SubmitRequest(queue="hosts", kind="batch", name="batch", command="true")
    services.submit_many(alice, [(req, None)] * n)
    tasks.admit()
    return list(Workload.objects.filter(name="batch"))


def _untouched_since_admission(workloads: list[Workload]) -> None:
    rows = Workload.objects.filter(pk__in=[w.pk for w in workloads])
    assert set(rows.values_list("state", "external_id", "rendered", "pending_reason")) == {("admitted", "", "", "")}
    assert not Claim.objects.exists()
    assert not WorkloadEvent.objects.filter(to_state=State.DISPATCHING).exists()


def test_an_agent_dispatch_that_dies_after_its_intent_leaves_nothing_and_is_done_again_whole(hosts, alice, monkeypatch):
    """The intent, the claims and the job ids are one transaction: a dispatch that dies between them (here the
    claims' insert fails after the intent's UPDATE ran) leaves every workload as its admission left it, and the
    next dispatch places each once."""
    from portal.agents import fabric as agent_fabric

    workloads = _agent_batch(alice, 3)

    def dies(claims: list[Any]) -> None:
        assert Workload.objects.filter(state=State.DISPATCHING).count() == 3  # the intent is written by now
        raise psycopg.OperationalError("the database went away")

    monkeypatch.setattr(agent_fabric, "_insert_claims", dies)
    with pytest.raises(psycopg.OperationalError):
        tasks.dispatch()
    _untouched_since_admission(workloads)
    monkeypatch.undo()
    assert tasks.dispatch() == 3
    claims = dict(Claim.objects.values_list("workload_id", "run_id"))
    assert set(Workload.objects.values_list("pk", "external_id")) == {(pk, str(run)) for pk, run in claims.items()}
    assert WorkloadEvent.objects.filter(to_state=State.DISPATCHING).count() == 3


def test_a_retryable_error_leaves_the_whole_agent_batch_to_the_next_dispatch(hosts, alice, monkeypatch):
    from fabrics.base import FabricError
    from portal.agents.fabric import AgentFabric

    workloads = _agent_batch(alice, 3)
    busy = workloads[1].run_id

    def refuses_one(self: Any, jobs: list[Any]) -> dict[Any, Any]:
        return {j.workload_id: FabricError("busy", retryable=True) if j.workload_id == busy else str(j.workload_id)
                for j in jobs}  # fmt: skip

    monkeypatch.setattr(AgentFabric, "submit_many", refuses_one)
    assert tasks.dispatch() == 0
    _untouched_since_admission(workloads)
    monkeypatch.undo()
    assert tasks.dispatch() == 3


def test_an_agent_workload_cancelled_while_its_batch_is_rendered_gets_no_claim(hosts, alice, monkeypatch):
    """The batch moves to dispatching by compare-and-swap: one cancelled after the dispatch read it is left as the
    cancel left it, and only the others get claims and job ids."""
    workloads = _agent_batch(alice, 3)
    gone = workloads[1]
    render = dispatching._render

    def cancelled_meanwhile(*args: Any) -> Any:
        rendered = render(*args)
        services.do_cancel(alice, Workload.objects.get(pk=gone.pk))
        return rendered

    monkeypatch.setattr(dispatching, "_render", cancelled_meanwhile)
    assert tasks.dispatch() == 2
    assert Workload.objects.get(pk=gone.pk).state == State.CANCELLED
    assert Workload.objects.get(pk=gone.pk).external_id == ""
    assert set(Claim.objects.values_list("workload_id", flat=True)) == {w.pk for w in workloads} - {gone.pk}


def test_work_an_earlier_dispatch_left_dispatching_is_looked_up_before_it_is_placed(hosts, alice):
    """A workload a dispatch left halfway (dispatching, no job id: its worker died after the intent, before the
    claims were one transaction with it) goes the usual way: looked up by its tag first. The one whose claim was
    made already gets that claim's id and no second claim; the others are placed in one transaction."""
    from portal.agents.fabric import AgentFabric, _claim, _insert_claims
    from portal.queues.models import Fabric as FabricRow
    from portal.worker.connections import fabric_for

    workloads = _agent_batch(alice, 3)
    halfway, claimed = workloads[0], workloads[1]
    Workload.objects.filter(pk__in=[halfway.pk, claimed.pk]).update(state=State.DISPATCHING, rendered="{}")
    row = FabricRow.objects.get(name="hosts")
    claimed.refresh_from_db()
    spec = dispatching.job_spec(claimed)
    fabric = fabric_for(row)
    assert isinstance(fabric, AgentFabric)
    assert fabric.job_id(spec) == str(claimed.run_id)
    _insert_claims([_claim(row, claimed.pk, None, spec)])
    assert tasks.dispatch() == 3
    assert Claim.objects.filter(workload=claimed).count() == 1
    assert Claim.objects.count() == 3
    assert set(Workload.objects.values_list("state", flat=True)) == {State.DISPATCHING}
    assert all(w.external_id == str(w.run_id) for w in Workload.objects.all())


def test_work_still_queued_on_its_fabric_has_no_output_to_read(hosts, alice, monkeypatch):
    """A sync reads the output of running jobs only: a backlog waiting for an agent (or in Slurm's queue) has
    written nothing, and reading it cost a round trip per job per sync."""
    from portal.worker import sync

    read: list[str] = []
    real = sync.fabric_tail

    def tail(row, w, **kw):
        read.append(w.name)
        return real(row, w, **kw)

    monkeypatch.setattr(sync, "fabric_tail", tail)
    req = services.SubmitRequest(queue="hosts", kind="batch", name="queued", command="true")
    services.submit_many(alice, [(req, None)] * 5)
    tasks.admit()
    assert tasks.dispatch() == 5
    assert tasks.sync_fabrics() == 0
    assert read == []
    waiting = Workload.objects.filter(name="queued")
    assert [w.pending_reason for w in waiting] == ["waiting for an agent"] * 5  # the sync did follow them
