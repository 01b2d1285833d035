"""Calibrated estimates in the portal: every estimate shown is recorded with its workload, the error is kept when
the work starts, each queue shows how good its estimates were (pages and API, in a bounded number of queries),
and the worker learns runtimes from finished work (portal.workloads.calibration)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from portal.queues.models import Fabric, Queue, QueueTarget
from portal.worker import snapshot
from portal.workloads import calibration, services, store
from portal.workloads.models import Workload
from portal.workloads.states import State

ERRORS = [-60, 0, 120, 300, 600, 900]  # median |error| 210 s, p90 750 s; band (p5, p95) = (-45, 825)


@pytest.fixture
def alice_client(client, alice):
    client.force_login(alice)
    return client


def shown(w: Workload, *estimates: Any) -> None:
    """The worker shows these estimates one cycle after another (the statement it writes them with)."""
    for estimate in estimates:
        store.write_waiting_reasons([(str(w.pk), "no_capacity", "waiting for capacity", estimate, 1)])


def to_dispatching(w: Workload) -> Workload:
    assert services.transition(w, State.ADMITTED, reason="admitted")
    assert services.transition(w, State.DISPATCHING, reason="dispatching")
    return Workload.objects.get(pk=w.pk)


@pytest.mark.parametrize("bulk", [True, False], ids=["a sync's starts", "one start"])
def test_the_first_and_latest_estimate_are_kept_and_the_error_at_the_start(alice, submit, bulk):
    w = submit(alice)
    now = timezone.now().replace(microsecond=0)
    first, latest = now + timedelta(minutes=30), now + timedelta(minutes=20)
    shown(w, first, None, latest)  # a cycle that gave no estimate keeps the latest one shown
    w.refresh_from_db()
    assert (w.first_estimated_start, w.last_estimated_start, w.estimated_start) == (first, latest, latest)
    w = to_dispatching(w)
    assert w.estimated_start is None  # what a waiting workload shows goes when it is admitted...
    assert w.last_estimated_start == latest  # ...what it was shown stays
    started = latest + timedelta(seconds=300)
    if bulk:
        services.start_many([(w, started, "node-1")], reason="running")
    else:
        assert services.transition(w, State.RUNNING, reason="running", started_at=started)
    w = Workload.objects.get(pk=w.pk)
    assert (w.state, w.started_at, w.estimate_error_s) == (State.RUNNING, started, 300)
    assert w.first_estimated_start == first


def test_work_never_shown_an_estimate_has_no_error(alice, submit):
    w = to_dispatching(submit(alice))
    services.start_many([(w, None, "node-1")], reason="running")
    w = Workload.objects.get(pk=w.pk)
    assert w.state == State.RUNNING
    assert w.first_estimated_start is None
    assert w.estimate_error_s is None


def started_with_errors(alice: Any, submit: Any, errors: list[int], queue: str = "train") -> list[Workload]:
    """Workloads of the queue that started an hour ago, each off its latest estimate by one of `errors`."""
    at = timezone.now() - timedelta(hours=1)
    out = []
    for i, error in enumerate(errors):
        w = submit(alice, name=f"done{i}", queue=queue)
        Workload.objects.filter(pk=w.pk).update(
            state=State.SUCCEEDED, started_at=at, finished_at=at, last_estimated_start=at, estimate_error_s=error
        )
        out.append(w)
    return out


def test_a_queue_shows_its_estimate_error_and_band_in_the_api(api_as, alice, submit, django_assert_num_queries):
    started_with_errors(alice, submit, ERRORS)
    Queue.objects.get(slug="notebooks").allowed_groups.clear()
    client = api_as(alice)
    client.get("/api/v1/queues/")
    with django_assert_num_queries(4):  # token, queues, counts, waits (the errors come with the waits)
        response = client.get("/api/v1/queues/")
    train = next(q for q in response.json() if q["slug"] == "train")
    assert train["estimates"] == {
        "starts": 6,
        "median_abs_error_seconds": 210,
        "p90_abs_error_seconds": 750,
        "band_low_seconds": -45,
        "band_high_seconds": 825,
    }
    assert calibration.band_for(Queue.objects.get(slug="train").pk) == (-45, 825)


def test_a_queue_without_estimated_starts_has_none(api_as, alice, submit):
    submit(alice)
    train = next(q for q in api_as(alice).get("/api/v1/queues/").json() if q["slug"] == "train")
    assert train["estimates"] is None
    assert calibration.band_for(Queue.objects.get(slug="train").pk) is None


def test_too_few_starts_give_errors_but_no_band(alice, submit):
    started_with_errors(alice, submit, ERRORS[:4])
    train = Queue.objects.get(slug="train")
    assert calibration.band_for(train.pk) is None
    found = calibration.queue_calibrations([train.pk])[train.pk]
    assert (found.starts, found.band) == (4, None)


def test_the_workload_shows_its_estimate_with_the_band_and_later_its_error(
    api_as, alice_client, alice, submit, django_assert_max_num_queries
):
    started_with_errors(alice, submit, ERRORS)
    w = submit(alice, name="waiting")
    shown(w, timezone.now() + timedelta(minutes=20))
    body = api_as(alice).get(f"/api/v1/workloads/{w.pk}/").json()
    assert body["estimate_band"] == {"low_seconds": -45, "high_seconds": 825}
    assert body["first_estimated_start"] == body["last_estimated_start"] == body["estimated_start"]
    with django_assert_max_num_queries(20) as waiting:
        page = alice_client.get(f"/workloads/{w.pk}/").content.decode()
    assert "usually within \u22121/+14 min" in page
    done = started_with_errors(alice, submit, [300])[0]
    with django_assert_max_num_queries(len(waiting.captured_queries)):
        page = alice_client.get(f"/workloads/{done.pk}/").content.decode()
    assert "started 5 min later than estimated" in page
    assert api_as(alice).get(f"/api/v1/workloads/{done.pk}/").json()["estimate_error_seconds"] == 300


def test_the_it_queue_page_and_the_form_show_how_good_estimates_were(
    client, it_admin, alice_client, alice, submit, django_assert_max_num_queries
):
    client.force_login(it_admin)
    with django_assert_max_num_queries(30) as before:
        client.get("/it/queues/")
    started_with_errors(alice, submit, ERRORS)
    more = Queue.objects.create(slug="more", name="More", kinds=["training"])
    more.allowed_groups.add(alice.memberships.get().group)
    QueueTarget.objects.create(queue=more, fabric=Fabric.objects.get(name="local"))
    started_with_errors(alice, submit, ERRORS, queue="more")
    with django_assert_max_num_queries(len(before.captured_queries)):
        page = client.get("/it/queues/").content.decode()
    said = "off by 3 min 30 s (median), 12 min 30 s (p90) over 7 days, 6 starts; usually within \u22121/+14 min"
    assert said in page
    guide = alice_client.get("/workloads/new/").content.decode()
    assert said in guide[guide.index('<aside class="guide"') :]


def test_the_worker_learns_runtimes_from_enough_finished_work_of_one_shape(alice, submit):
    now = timezone.now()
    for i, runtime in enumerate([100, 200, 300, 400, 500, 7000]):
        w = submit(alice, name=f"r{i}", gpus=1 if i < 5 else 2)
        ended = now - timedelta(hours=i + 1)
        Workload.objects.filter(pk=w.pk).update(
            state=State.SUCCEEDED, started_at=ended - timedelta(seconds=runtime), finished_at=ended
        )
    old = submit(alice, name="long ago", gpus=1)  # outside the window: not counted
    Workload.objects.filter(pk=old.pk).update(
        state=State.SUCCEEDED, started_at=now - timedelta(days=40), finished_at=now - timedelta(days=40) + timedelta(1)
    )
    w = Workload.objects.get(pk=old.pk)
    shape = (w.group_id, w.queue_id, w.gpus_milli, w.nodes, w.runtime_limit_s)
    assert calibration.learned_runtimes(now) == {shape: 400}  # the 75th percentile; the 2-GPU run is alone
    snap, _ = snapshot.build(now)
    assert snap.expected_runtimes == {shape: 400}
