"""The dry run (POST /api/v1/workloads/dry-run/ and its bulk): a submit's body, a submit's refusals, an answer
of where it would land, and nothing recorded."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
import time_machine
from hypothesis import HealthCheck, given
from hypothesis import settings as examples
from hypothesis import strategies as st
from rest_framework.test import APIClient

from portal.accounts.models import RateLimitWindow
from portal.queues.models import Fabric
from portal.worker import dryrun, tasks
from portal.worker.models import GroupUsage
from portal.workloads.models import Workload, WorkloadEvent
from portal.workloads.states import State
from tests.api.test_workloads_api import BODY

URL = "/api/v1/workloads/dry-run/"
BULK = "/api/v1/workloads/bulk/dry-run/"


def post(client: APIClient, url: str, body: Any, **extra: Any) -> Any:
    return client.post(url, json.dumps(body), content_type="application/json", **extra)


def recorded() -> tuple[Any, ...]:
    return (
        Workload.objects.count(),
        WorkloadEvent.objects.count(),
        list(RateLimitWindow.objects.values_list("count", flat=True)),
    )


def test_a_body_that_fits_would_start_now_on_the_local_fabric(api_as, alice):
    Fabric.objects.filter(name="local").update(gpu_hour_price=Decimal("2.5"))
    response = post(api_as(alice), URL, BODY)
    assert response.status_code == 200, response.content
    answer = response.json()
    assert (answer["outcome"], answer["target"], answer["position"], answer["reason_code"]) == (
        "admit", "local", None, "",
    )  # fmt: skip
    assert answer["borrowing"] is False  # 2 GPUs within vision's reservation of 4
    assert answer["estimated_cost"]["amount"] == "20.00"  # 2 GPUs x 4 hours x 2.5
    assert answer["estimate_band"] is None


def test_a_body_beyond_the_teams_reservation_borrows(api_as, alice):
    answer = post(api_as(alice), URL, BODY | {"resources": {"gpus": 5}}).json()
    assert (answer["outcome"], answer["borrowing"]) == ("admit", True)


def test_work_behind_a_full_fabric_waits_with_its_place_reason_and_estimate(api_as, alice, submit):
    submit(alice, gpus=6, runtime_limit_minutes=60)
    tasks.admit()
    dryrun.SNAPSHOTS.forget()
    answer = post(api_as(alice), URL, BODY | {"resources": {"gpus": 4}}).json()
    assert answer["outcome"] == "wait"
    assert answer["position"] == 1
    assert answer["reason_code"] in {"group_at_limit", "no_capacity"}
    assert answer["reason"]
    assert answer["estimated_start"] is not None


def test_a_waiting_answer_carries_the_queues_measured_band(api_as, alice, submit):
    """Where the queue's recent starts were estimated (workloads.calibration), the estimate comes with the band
    its errors put around it (always holding the estimate): here starts came 2 to 10 minutes late."""
    running = submit(alice, gpus=6, runtime_limit_minutes=60)
    tasks.admit()
    now = datetime.now(UTC)
    for minutes in (2, 4, 6, 8, 10):
        twin = submit(alice, gpus=1, runtime_limit_minutes=60)
        Workload.objects.filter(pk=twin.pk).update(started_at=now, estimate_error_s=minutes * 60)
    assert Workload.objects.get(pk=running.pk).queue_id == twin.queue_id
    dryrun.SNAPSHOTS.forget()
    answer = post(api_as(alice), URL, BODY | {"resources": {"gpus": 4}}).json()
    assert answer["outcome"] == "wait"
    low, high = (datetime.fromisoformat(t) for t in answer["estimate_band"])
    estimated = datetime.fromisoformat(answer["estimated_start"])
    assert low == estimated < high  # every start came late: the band holds the estimate and runs after it
    assert timedelta(minutes=9) <= high - estimated <= timedelta(minutes=10)


@pytest.mark.parametrize(
    "body",
    [
        BODY | {"resources": {"gpus": -1}},
        BODY | {"name": ""},
        BODY | {"runtime_limit_minutes": 10**6},
        BODY | {"colour": "blue"},  # an unknown field
        BODY | {"queue": "no-such-queue"},
        {"queue": "train"},
    ],
)
def test_a_refused_body_is_refused_as_a_submit_refuses_it(api_as, alice, body):
    client = api_as(alice)
    before = recorded()
    dry = post(client, URL, body)
    assert recorded() == before
    real = post(client, "/api/v1/workloads/", body)
    assert dry.status_code == real.status_code
    assert dry.status_code in (400, 403, 404)
    assert dry.json() == real.json()


def test_a_queue_the_team_may_not_use_is_refused_as_a_submit_refuses_it(api_as, charlie):
    from portal.queues.models import Queue

    Queue.objects.get(slug="train").allowed_groups.clear()
    client = api_as(charlie)
    dry, real = post(client, URL, BODY), post(client, "/api/v1/workloads/", BODY)
    assert (dry.status_code, dry.json()) == (real.status_code, real.json())
    assert dry.status_code in (400, 403)


def test_a_dry_run_records_nothing(api_as, alice):
    client = api_as(alice)
    before = recorded(), GroupUsage.objects.count()
    for _ in range(3):
        assert post(client, URL, BODY, HTTP_IDEMPOTENCY_KEY="same-key").status_code == 200
    assert (recorded(), GroupUsage.objects.count()) == before
    assert post(client, "/api/v1/workloads/", BODY, HTTP_IDEMPOTENCY_KEY="same-key").status_code == 201  # unused


def test_a_bad_idempotency_key_is_refused_by_its_name(api_as, alice):
    response = post(api_as(alice), URL, BODY, HTTP_IDEMPOTENCY_KEY="two words")
    assert response.status_code == 400
    assert "Idempotency-Key" in response.json()["errors"]


def test_a_dry_run_needs_a_caller():
    assert post(APIClient(), URL, BODY).status_code in (401, 403)
    assert post(APIClient(), BULK, {"items": [BODY]}).status_code in (401, 403)


def test_another_teams_work_shows_only_as_a_place_in_line(api_as, alice, charlie, submit):
    ahead = submit(alice, name="secret-vision-run", gpus=6)
    tasks.admit()
    submit(alice, name="secret-vision-wait", gpus=4)
    dryrun.SNAPSHOTS.forget()
    response = post(api_as(charlie), URL, BODY | {"resources": {"gpus": 4}})
    assert response.status_code == 200
    text = response.content.decode()
    for secret in ("secret-vision", str(ahead.pk), "vision", "alice"):
        assert secret not in text
    assert set(response.json()) == {
        "outcome", "target", "estimated_start", "estimate_band", "position", "reason_code", "reason", "borrowing",
        "preemptible", "estimated_cost", "snapshot_at",
    }  # fmt: skip


def test_the_bulk_dry_run_places_its_items_together(api_as, alice):
    items = [BODY | {"name": f"part-{i}", "resources": {"gpus": 2}} for i in range(4)]
    before = recorded()
    response = post(api_as(alice), BULK, {"items": items})
    assert response.status_code == 200, response.content
    outcomes = [item["outcome"] for item in response.json()["items"]]
    assert outcomes == ["admit", "admit", "admit", "wait"]  # vision's limit is 6 GPUs
    assert recorded() == before


def test_the_bulk_dry_run_refuses_as_the_bulk_submit_does(api_as, alice):
    client = api_as(alice)
    body = {"items": [BODY, BODY | {"resources": {"gpus": -1}}, BODY | {"colour": 1}]}
    dry, real = post(client, BULK, body), post(client, "/api/v1/workloads/bulk/", body)
    assert (dry.status_code, dry.json()) == (real.status_code, real.json())
    assert dry.status_code == 400
    assert set(dry.json()["errors"]["items"]) == {"1", "2"}
    assert post(client, BULK, {"items": [], "extra": 1}).status_code == 400


def test_a_dry_run_reads_a_bounded_number_of_statements(api_as, alice, django_assert_max_num_queries):
    client = api_as(alice)
    post(client, URL, BODY)  # the snapshot is built and kept
    with django_assert_max_num_queries(12):
        assert post(client, URL, BODY).status_code == 200


# -- dry run, then submit, then the worker's admission: the same outcome --------------------------------------
REQUESTS = st.fixed_dictionaries(
    {
        "user": st.sampled_from(["alice", "charlie"]),
        "gpus": st.sampled_from([0.25, 0.5, 1, 1, 2, 3, 4]),
        "runtime": st.sampled_from([10, 60, 240]),
        "priority": st.sampled_from(["normal", "low"]),
        "finish": st.booleans(),  # admitted work that ran out before the next request
    }
)


@examples(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(asks=st.lists(REQUESTS, min_size=6, max_size=14))
def test_a_dry_run_and_the_submit_after_it_land_alike(cast, api_as, asks):
    Workload.objects.all().delete()
    clients = {name: api_as(cast[name]) for name in ("alice", "charlie")}
    start = datetime(2026, 12, 1, 9, tzinfo=UTC)
    with time_machine.travel(start, tick=False) as clock:
        for ask in asks:
            clock.shift(timedelta(seconds=61))
            client = clients[ask["user"]]
            body = BODY | {"resources": {"gpus": ask["gpus"]}, "runtime_limit_minutes": ask["runtime"],
                           "priority": ask["priority"]}  # fmt: skip
            dryrun.SNAPSHOTS.forget()  # the dry run reads the state as it is now (the last admission's included)
            answer = post(client, URL, body)
            assert answer.status_code == 200, answer.content
            created = post(client, "/api/v1/workloads/", body)
            assert created.status_code == 201, created.content
            tasks.admit()
            workload = Workload.objects.select_related("fabric").get(pk=created.json()["id"])
            want = answer.json()
            if want["outcome"] == "admit":
                assert workload.state == State.ADMITTED, (want, workload.pending_reason)
                assert workload.fabric.name == want["target"]
            else:
                assert workload.state == State.PENDING, want
                assert workload.pending_reason_code == want["reason_code"]
                assert workload.queue_position == want["position"]
            if ask["finish"]:
                Workload.objects.filter(state=State.ADMITTED).update(state=State.SUCCEEDED)


def test_a_kept_snapshot_is_used_again_until_it_ages_or_the_generation_moves(cast):
    from django.conf import settings

    from portal.workloads import context

    now = [100.0]
    rebuilds: list[Any] = []
    kept = dryrun.Snapshots(clock=lambda: now[0], spawn=rebuilds.append)
    generation = context.read_generation()
    first = kept.latest(generation)  # the first is built in the request
    assert kept.latest(generation) is first
    assert rebuilds == []
    now[0] += max(settings.GRIDLANE_DRY_RUN_SNAPSHOT_SECONDS, dryrun.BUILDS_APART * first.took) + 1
    assert kept.latest(generation) is first  # aged: still served, while one rebuild runs beside
    assert kept.latest(generation) is first
    assert len(rebuilds) == 1  # at most one under way
    rebuilds.pop()()
    second = kept.latest(generation)
    assert second is not first
    assert second.snapshot.now >= first.snapshot.now
    assert kept.latest(generation) is second
    third = kept.latest((generation or 0) + 1)  # a policy change: built in the request
    assert third is not second
    assert rebuilds == []


def test_a_snapshot_too_old_is_built_in_the_request_and_a_forgotten_rebuild_is_not_kept(cast):
    from django.conf import settings

    from portal.workloads import context

    now = [100.0]
    rebuilds: list[Any] = []
    kept = dryrun.Snapshots(clock=lambda: now[0], spawn=rebuilds.append)
    generation = context.read_generation()
    first = kept.latest(generation)
    now[0] += dryrun.STALEST_S * 100  # (a rebuild beside that never came back)
    second = kept.latest(generation)
    assert second is not first
    assert rebuilds == []
    now[0] += max(settings.GRIDLANE_DRY_RUN_SNAPSHOT_SECONDS, dryrun.BUILDS_APART * second.took) + 1
    assert kept.latest(generation) is second  # aged: a rebuild starts beside
    kept.forget()
    rebuilds.pop()()  # began before forget(): not kept
    third = kept.latest(generation)
    assert third is not second
    assert third.built == now[0]


def test_a_rebuild_beside_the_requests_runs_at_a_lower_cpu_priority_than_they_do():
    import os
    import threading

    seen: list[int] = []
    done = threading.Event()

    def rebuild() -> None:
        seen.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        done.set()

    ours = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    dryrun._in_thread(rebuild)
    assert done.wait(60)
    assert seen == [min(19, ours + dryrun.REBUILD_NICE)]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == ours  # the requests' own: unchanged
