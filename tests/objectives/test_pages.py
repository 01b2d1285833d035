"""IT's wait objective pages: bounded queries whatever the work, IT only, and a remedy's predicted effect."""

from __future__ import annotations

from datetime import timedelta

from django.urls import reverse
from django.utils import timezone

from portal.objectives.models import WaitObjective
from portal.queues.models import Queue
from portal.whatif import services as whatif
from portal.whatif.models import WhatIfRun
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.objectives.test_evaluate import starts


def goal(**fields):
    values = {"slug": "train-p95", "name": "Training starts", "kind": "queue", "queue": Queue.objects.get(slug="train"),
              "threshold_minutes": 60, "percent": 95.0, "days": 7}  # fmt: skip
    return WaitObjective.objects.create(**(values | fields))


def test_the_pages_read_a_fixed_number_of_queries_whatever_the_slices(
    client, it_admin, vision, django_assert_max_num_queries
):
    g = goal()
    client.force_login(it_admin)
    now = timezone.now()
    counts = []
    for n in (3, 60):
        for i in range(n):
            starts(vision, now - timedelta(minutes=5 * i + 1), 2, 90 if i % 3 else 0)
        with django_assert_max_num_queries(14) as captured:
            page = client.get(reverse("it:objective", args=[g.slug]))
        assert page.status_code == 200
        counts.append(len(captured))
        assert b"Burn rate per window" in page.content
        assert b"Try a remedy" in page.content
    assert counts[0] == counts[1]
    with django_assert_max_num_queries(6):
        listing = client.get(reverse("it:objectives"))
    assert g.name.encode() in listing.content
    assert reverse("it:objectives").encode() in client.get(reverse("it:queues")).content  # linked from Queues


def test_a_lead_of_a_team_it_covers_reads_the_objective_and_no_one_else_does(client, bob, alice, vision):
    g = goal(kind="team", queue=None, team=vision)
    client.force_login(bob)  # leads vision: told when it burns, so the message's link opens for him
    assert client.get(reverse("it:objectives")).status_code == 404
    page = client.get(reverse("it:objective", args=[g.slug]))
    assert page.status_code == 200
    assert b"Burn rate per window" in page.content
    assert b"Replay with this remedy" not in page.content
    assert client.post(reverse("it:objective", args=[g.slug]), {"days": 2, "kind": "none"}).status_code == 404
    client.force_login(alice)  # a member, not a lead
    assert client.get(reverse("it:objective", args=[g.slug])).status_code == 404


def test_a_remedy_is_replayed_and_shows_its_predicted_wait(
    client, it_admin, alice, submit, django_capture_on_commit_callbacks
):
    g = goal()
    now = timezone.now()
    work = [submit(alice, name=f"w{i}", gpus=1) for i in range(6)]
    for i, w in enumerate(work):  # a day ago, each waited i hours for a GPU and ran an hour
        submitted = now - timedelta(days=1)
        Workload.objects.filter(pk=w.pk).update(
            state=State.SUCCEEDED, submitted_at=submitted, admitted_at=submitted + timedelta(hours=i),
            started_at=submitted + timedelta(hours=i), finished_at=submitted + timedelta(hours=i + 1),
        )  # fmt: skip
    client.force_login(it_admin)
    refused = client.post(reverse("it:objective", args=[g.slug]), {"days": 2, "kind": "quota"})
    assert refused.status_code == 400  # a quota change names its team
    with django_capture_on_commit_callbacks() as queued:
        asked = client.post(
            reverse("it:objective", args=[g.slug]),
            {"days": 2, "kind": "capacity", "fabric": "local", "gpus": "64"},
        )
    assert asked.status_code == 302
    assert len(queued) == 1  # the replay's task, queued once the request commits
    run = WhatIfRun.objects.get(objective=g)
    whatif.do_replay(run.pk)  # what the task does
    run.refresh_from_db()
    assert run.state == WhatIfRun.State.DONE, run.error
    assert run.result is not None
    predicted = run.result["objective"]
    assert predicted["actual"]["workloads"] == 6
    assert predicted["actual"]["wait_s"] >= 4 * 3600  # what happened: the p95 waited hours
    assert predicted["proposed"]["wait_s"] < predicted["actual"]["wait_s"]
    assert "selected_waits" not in run.result["proposed"]  # the waits themselves are not kept
    page = client.get(reverse("it:objective", args=[g.slug]))
    assert b"With the remedy" in page.content
    assert b"budget left" in page.content
