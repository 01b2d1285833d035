"""Acting on idle GPUs per queue: nothing, warn the owner once per idle spell, or stop an idle notebook or lease
after the grace; never on work whose use is unknown."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from portal.notify.models import Notification, Preference
from portal.queues.models import Queue
from portal.usage.models import UsageSample
from portal.worker import gpu_idle
from portal.worker.gpu_idle import Act, decide
from portal.workloads.models import Workload, WorkloadEvent
from portal.workloads.states import State

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
GRACE = timedelta(minutes=30)


@pytest.mark.parametrize(
    ("name", "idle", "warned_at", "action", "kind", "want"),
    [
        ("busy: nothing", False, None, "warn", "training", Act.NOTHING),
        ("idle, the queue does nothing: nothing", True, None, "nothing", "notebook", Act.NOTHING),
        ("idle, not warned yet: warn", True, None, "warn", "training", Act.WARN),
        ("idle, warned, the queue only warns: nothing more", True, T0 - 2 * GRACE, "warn", "notebook", Act.NOTHING),
        ("idle, warned, within the grace: wait", True, T0 - GRACE / 2, "stop", "notebook", Act.NOTHING),
        ("idle past the grace, a notebook: stop", True, T0 - GRACE, "stop", "notebook", Act.STOP),
        ("idle past the grace, a VM lease: stop", True, T0 - GRACE, "stop", "vm", Act.STOP),
        ("idle past the grace, a training run: only warned", True, T0 - 2 * GRACE, "stop", "training", Act.NOTHING),
        ("busy again after a warning: take it back", False, T0 - GRACE, "stop", "notebook", Act.CLEAR),
        ("the queue stopped acting after a warning: take it back", True, T0 - GRACE, "nothing", "notebook", Act.CLEAR),
    ],
)
def test_decide(name, idle, warned_at, action, kind, want):
    assert decide(T0, idle, warned_at, action, kind, GRACE) == want, name


@pytest.fixture
def queues(cast):
    Queue.objects.filter(slug="train").update(gpu_idle_action="warn")
    Queue.objects.filter(slug="notebooks").update(gpu_idle_action="stop", gpu_idle_grace_minutes=30)


def running(submit, user, utilisation, **fields):
    w = submit(user, gpus=1, **fields)
    Workload.objects.filter(pk=w.pk).update(state=State.RUNNING, started_at=T0 - timedelta(hours=3))
    if utilisation is not None:
        UsageSample.objects.bulk_create(
            UsageSample(workload=w, at=T0 - timedelta(hours=3) + timedelta(minutes=m), gpus_milli=1000,
                        gpu_utilisation=utilisation, source="job")
            for m in range(0, 6 * 60, 5)
        )  # fmt: skip
    return w


def events(w):
    return list(WorkloadEvent.objects.filter(workload=w, reason__contains="idle").values_list("reason", flat=True))


def test_an_idle_training_run_s_owner_is_warned_once_and_the_warning_is_taken_back_when_busy(alice, submit, queues):
    Preference.objects.create(user=alice, webhook_url="https://hooks.example.org/x")
    lazy = running(submit, alice, 4, name="lazy")
    assert gpu_idle.step(T0) == {"warn": 1}
    lazy.refresh_from_db()
    assert lazy.gpu_idle_warned_at == T0
    assert events(lazy) == ["GPUs idle: 4 % utilisation, below 80 % for 180 min"]
    note = Notification.objects.get(workload=lazy)
    assert note.event == "idle"
    assert "idle for 180 min" in note.text
    assert "stops" not in note.text  # the queue only warns
    assert gpu_idle.step(T0 + timedelta(minutes=40)) == {}  # once per spell
    assert len(events(lazy)) == 1
    UsageSample.objects.filter(workload=lazy, at__gte=T0).update(gpu_utilisation=95)
    assert gpu_idle.step(T0 + timedelta(minutes=40)) == {"clear": 1}  # 10:00-10:30 averaged 95 %
    lazy.refresh_from_db()
    assert lazy.gpu_idle_warned_at is None
    assert lazy.state == State.RUNNING


def test_an_idle_notebook_is_stopped_after_the_grace_and_a_busy_or_unknown_one_never(alice, bob, submit, queues):
    idle_nb = running(submit, alice, 0, name="idle-nb", queue="notebooks", kind="notebook", command="")
    busy_nb = running(submit, bob, 99, name="busy-nb", queue="notebooks", kind="notebook", command="")
    unknown_nb = running(submit, bob, None, name="no-sampler", queue="notebooks", kind="notebook", command="")
    assert gpu_idle.step(T0) == {"warn": 1}
    assert "stops at 10:30 UTC unless they are used" in events(idle_nb)[0]
    assert gpu_idle.step(T0 + timedelta(minutes=29)) == {}  # within the grace
    assert gpu_idle.step(T0 + timedelta(minutes=30)) == {"stop": 1}
    idle_nb.refresh_from_db()
    assert idle_nb.state in (State.CANCELLING, State.CANCELLED)
    for w in (busy_nb, unknown_nb):
        w.refresh_from_db()
        assert (w.state, w.gpu_idle_warned_at) == (State.RUNNING, None)


def test_a_queue_that_does_nothing_leaves_idle_work_alone(alice, submit, cast):
    lazy = running(submit, alice, 0, name="lazy")
    assert gpu_idle.step(T0) == {}
    lazy.refresh_from_db()
    assert lazy.gpu_idle_warned_at is None
    assert events(lazy) == []


def test_the_step_never_breaks_the_cycle(monkeypatch, db):
    def boom(now):
        raise RuntimeError("database went away")

    monkeypatch.setattr(gpu_idle, "_step", boom)
    assert gpu_idle.step(T0) == {}


def test_a_queue_that_marks_idle_work_preemptible_says_so_and_the_scheduler_sees_the_mark(alice, submit, cast):
    from portal.worker import snapshot, sync

    Queue.objects.filter(slug="train").update(gpu_idle_action="preemptible")
    lazy = running(submit, alice, 4, name="lazy")
    busy = running(submit, alice, 97, name="busy")
    assert gpu_idle.step(T0) == {"warn": 1}
    assert "a team owed its reserved GPUs may preempt it first" in events(lazy)[0]
    fabric = Queue.objects.get(slug="train").targets.get().fabric
    Workload.objects.filter(pk__in=[lazy.pk, busy.pk]).update(fabric=fabric)
    seen, _ = snapshot.build(T0)
    jobs = {j.id: j for j in seen.running}
    assert (jobs[str(lazy.pk)].gpus_idle, jobs[str(busy.pk)].gpus_idle) == (True, False)
    assert seen.queues[lazy.queue_id].idle_preemptible
    Workload.objects.filter(pk=lazy.pk).update(state=State.PREEMPTED)
    lazy.refresh_from_db()
    sync._requeue(lazy)  # preempted: it waits in line again, no longer idle and with no samples of its own yet
    lazy.refresh_from_db()
    assert (lazy.state, lazy.gpu_idle_warned_at, lazy.last_sample_at) == (State.PENDING, None, None)


def test_the_team_s_leads_hear_of_idle_gpus_too_where_they_asked_to(alice, bob, charlie, submit, queues):
    Preference.objects.create(user=bob, email=True)  # vision's lead: every event, the new ones included
    Preference.objects.create(user=charlie, email=True)  # another team's member: not his team's GPUs
    lazy = running(submit, alice, 4, name="lazy")
    assert gpu_idle.step(T0) == {"warn": 1}
    (told,) = Notification.objects.filter(event="team_idle")
    assert (told.user, told.subject) == (bob, "Idle GPUs: lazy")
    assert told.text == "alice's lazy holds 1 GPU of your team's, idle for 180 min (4 % utilisation)."
    assert told.url.endswith(lazy.get_absolute_url())
    assert gpu_idle.step(T0 + timedelta(minutes=40)) == {}  # once per spell, for the lead too
    assert Notification.objects.filter(event="team_idle").count() == 1
