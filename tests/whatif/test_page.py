"""IT's what-if page: the history loader, a request queued for django-q2 and replayed by its task, the page's
progress and results, bad input refused with nothing queued, and the page absent for everyone but IT."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from django.utils import timezone
from django_q.models import OrmQ

from portal.accounts.models import ResourceGroup
from portal.queues.models import Queue
from portal.whatif import history, services, tasks
from portal.whatif.models import WhatIfRun
from portal.workloads.models import Workload
from portal.workloads.states import State

GOOD = {"days": "7", "kind": "capacity", "fabric": "local", "gpus": "16"}


def workload(who, minutes_ago, state, ran_minutes=None, waited_minutes=1, gpus=1, **kw):
    now = timezone.now()
    submitted = now - timedelta(minutes=minutes_ago)
    started = submitted + timedelta(minutes=waited_minutes) if ran_minutes is not None else None
    finished = started + timedelta(minutes=ran_minutes) if started and state in ("succeeded", "failed") else None
    finished = kw.pop("finished_at", finished)
    return Workload.objects.create(
        id=uuid.uuid4(), owner=who, group=ResourceGroup.objects.get(slug="vision" if who.username != "charlie"
                                                                    else "fraud"),
        queue=Queue.objects.get(slug="train"), kind="training", name="w", runtime_limit_s=7200, gpus_milli=gpus * 1000,
        state=state, submitted_at=submitted, admitted_at=started, started_at=started, finished_at=finished, **kw,
    )  # fmt: skip


def test_the_loader_reads_the_window_in_a_fixed_number_of_queries(alice, charlie, django_assert_num_queries):
    done = workload(alice, 120, State.SUCCEEDED, ran_minutes=30)
    running = workload(charlie, 60, State.RUNNING, ran_minutes=0, waited_minutes=10)
    waiting = workload(alice, 30, State.PENDING)
    cancelled = workload(alice, 50, State.CANCELLED, finished_at=timezone.now() - timedelta(minutes=45))
    workload(alice, 60 * 24 * 8, State.SUCCEEDED, ran_minutes=5)  # before the window
    for _ in range(20):
        workload(charlie, 20, State.SUCCEEDED, ran_minutes=3)
    end = timezone.now()
    with django_assert_num_queries(7):
        site, work, start, _ = history.load(7, end)
    assert start == end - timedelta(days=7)
    by_id = {w.job.id: w for w in work}
    assert len(work) == 24
    assert by_id[str(done.pk)].runtime_s == pytest.approx(1800)
    assert by_id[str(running.pk)].runtime_s == pytest.approx(50 * 60, abs=2)  # until now
    assert by_id[str(waiting.pk)].runtime_s is None
    assert by_id[str(cancelled.pk)].runtime_s is None
    assert by_id[str(cancelled.pk)].finished_at is not None
    assert {t.slug for t in site.teams.values()} == {"vision", "fraud"}
    assert [f.name for f in site.fabrics.values()] == ["local"]


def test_it_asks_for_a_what_if_the_task_replays_it_and_the_page_compares(
    client, it_admin, alice, charlie, django_capture_on_commit_callbacks
):
    for i in range(12):
        workload(alice if i % 2 else charlie, 300 - i * 10, State.SUCCEEDED, ran_minutes=60, waited_minutes=i)
    client.force_login(it_admin)
    assert "Priority tiers are not modelled in the replay yet." in client.get("/it/what-if/").content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/it/what-if/", GOOD)
    run = WhatIfRun.objects.get()
    assert response.status_code == 302
    assert response["Location"] == f"/it/what-if/{run.pk}/"
    assert (run.state, run.days, run.change, run.requested_by) == (
        "queued",
        7,
        {"capacity": {"fabric": "local", "gpus": 16.0}},
        it_admin,
    )
    (queued,) = OrmQ.objects.all()
    assert queued.task["func"] == "portal.whatif.tasks.replay"
    assert queued.task["args"] == (run.pk,)

    page = client.get(f"/it/what-if/{run.pk}/", HTTP_HX_REQUEST="true").content.decode()
    assert 'hx-trigger="every 1s"' in page
    assert "<progress" in page

    tasks.replay(run.pk)  # what the django-q2 cluster runs
    run.refresh_from_db()
    assert (run.state, run.progress) == ("done", 100)
    result = run.result
    assert result is not None
    assert set(result["actual"]["teams"]) == {"vision", "fraud"}
    assert result["proposed"]["capacity_gpus"] == 16
    assert result["current"]["capacity_gpus"] == 8
    assert result["actual"]["teams"]["vision"]["workloads"] == 6
    page = client.get(f"/it/what-if/{run.pk}/").content.decode()
    assert "every 1s" not in page  # no more polling once it is done
    assert "local with 16 GPUs" in page
    for chart in ("p95", "in-use", "pending"):
        assert f'id="figure-{chart}"' in page
    assert "vendor/plotly.min.js" in page
    assert "All teams" in page
    tasks.replay(run.pk)  # a second delivery of the same task leaves the run alone
    run.refresh_from_db()
    assert run.state == "done"


def test_a_run_whose_replay_fails_says_so(client, it_admin, monkeypatch):
    run = WhatIfRun.objects.create(requested_by=it_admin, days=3, change={})

    def broken(*args, **kwargs):
        raise RuntimeError("the database went away")

    monkeypatch.setattr(history, "load", broken)
    tasks.replay(run.pk)
    run.refresh_from_db()
    assert (run.state, run.error) == ("failed", "the database went away")
    client.force_login(it_admin)
    assert "The replay failed: the database went away" in client.get(f"/it/what-if/{run.pk}/").content.decode()


@pytest.mark.parametrize(
    ("form", "error"),
    [
        (GOOD | {"days": "0"}, "greater than or equal to 1"),
        (GOOD | {"days": "91"}, "less than or equal to 90"),
        (GOOD | {"days": "many"}, "Enter a whole number."),
        (GOOD | {"fabric": "nowhere"}, "Select a valid choice. nowhere is not one of the available choices."),
        (GOOD | {"gpus": "-4"}, "A number of GPUs, 0 or more."),
        (GOOD | {"gpus": ""}, "Needed for this change."),
        ({"days": "7", "kind": "quota", "team": "nobody", "fabric": "local"}, "Select a valid choice."),
        ({"days": "7", "kind": "quota", "team": "vision", "fabric": "local", "gpu_reservation": "-1"}, "0 or more"),
        ({"days": "7", "kind": "quota", "team": "vision", "fabric": "local", "gpu_reservation": "4",
          "gpu_limit": "2"}, "The limit is below the reservation"),
        ({"days": "7", "kind": "quota", "team": "vision", "fabric": "", "gpu_reservation": "4"},
         "A reservation is per fabric"),
        ({"days": "7", "kind": "weight", "team": "vision", "fair_share_weight": "0"}, "greater than or equal to 1"),
        ({"days": "7", "kind": "department"}, "Needed for this change."),
        ({"days": "7", "kind": "tier_weight"}, "tier_weight is not one of the available choices."),
    ],
)  # fmt: skip
def test_bad_input_is_refused_with_a_clear_error_and_nothing_queued(
    client, it_admin, form, error, django_capture_on_commit_callbacks
):
    client.force_login(it_admin)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/it/what-if/", form)
    assert response.status_code == 400
    assert error in response.content.decode()
    assert not WhatIfRun.objects.exists()
    assert not OrmQ.objects.exists()


@pytest.mark.parametrize("who", ["alice", "bob", "charlie"])
def test_the_what_if_pages_are_absent_for_everyone_but_it(client, cast, it_admin, who):
    run = WhatIfRun.objects.create(requested_by=it_admin, days=3, change={})
    client.force_login(cast[who])
    assert client.get("/it/what-if/").status_code == 404
    assert client.get(f"/it/what-if/{run.pk}/").status_code == 404
    assert client.post("/it/what-if/", GOOD).status_code == 404
    assert WhatIfRun.objects.count() == 1


def test_the_it_navigation_links_the_what_if_page(client, it_admin):
    client.force_login(it_admin)
    assert 'href="/it/what-if/"' in client.get("/it/queues/").content.decode()


def test_the_current_policy_alone_replays_once(it_admin, alice):
    workload(alice, 100, State.SUCCEEDED, ran_minutes=10)
    run = WhatIfRun.objects.create(requested_by=it_admin, days=1, change={})
    services.do_replay(run.pk)
    run.refresh_from_db()
    result = run.result
    assert result is not None
    assert result["proposed"] is None
    assert result["current"]["teams"]["vision"]["workloads"] == 1
