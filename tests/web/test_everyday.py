"""The everyday experience, through the test client: refusals of work that could never run (form and API
alike), the form's guide, Clone and Relaunch, session cards, words, and the pages for dead ends."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from portal.agents.models import LeaseKey
from portal.queues.models import Fabric, Queue, QueueTarget, Quota
from portal.workloads import services
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.conftest import TRAINING_FORM

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def alice_client(client, alice):
    client.force_login(alice)
    return client


# --- Work that can never run is refused at submit, in the form and the API alike -------------------------


@pytest.mark.parametrize(
    ("fields", "api", "field", "says"),
    [
        ({"gpus": "7"}, {"resources": {"gpus": 7}}, "resources",
         "Your team Vision may hold at most that much on local: this asks for 7 GPUs, where the limit is 6"),
        ({"nodes": "2", "gpus": "1"}, {"resources": {"gpus": 1, "nodes": 2}}, "resources.nodes",
         "The queue Training and batch runs on local, which has 1 node: ask for at most 1"),
        ({"runtime_limit_minutes": "0"}, {"runtime_limit_minutes": 0}, "runtime_limit_minutes",
         "The queue Training and batch allows runtimes of 1 minute to 1 d"),
        ({"command": "   \n\t "}, {"command": "   \n "}, "command", "The command is only spaces"),
    ],
)  # fmt: skip
def test_work_that_could_never_run_is_refused_with_the_reason_in_form_and_api(
    alice_client, alice, api_as, fields, api, field, says
):
    response = alice_client.post("/workloads/new/", TRAINING_FORM | fields, **HTMX)
    assert response.status_code == 422
    assert says in response.content.decode()
    body = {"queue": "train", "kind": "training", "name": "never", "command": "python train.py"} | api
    answer = api_as(alice).post("/api/v1/workloads/", body, format="json")
    assert answer.status_code == 400
    assert any(says in message for message in answer.json()["errors"][field]), answer.json()
    assert not Workload.objects.exists()


def test_a_team_wide_limit_counts_on_every_fabric(alice, cast):
    vision = alice.memberships.get().group
    Quota.objects.create(group=vision, fabric=None, gpu_limit_milli=2000)
    with pytest.raises(services.SubmitRejected) as rejected:
        services.submit(alice, services.SubmitRequest(queue="train", kind="training", name="j", command="true",
                                                      gpus=Decimal(3)))  # fmt: skip
    assert "this asks for 3 GPUs, where the limit is 2" in rejected.value.errors["resources"][0]
    # Within the limit it is taken, and waits for room if need be.
    workload, _ = services.submit(
        alice, services.SubmitRequest(queue="train", kind="training", name="j", command="true", gpus=Decimal(2))
    )
    assert workload.state == State.PENDING


def test_one_target_with_room_under_the_limit_is_enough(alice, cast):
    """A queue with two fabrics: the team's limit on one does not refuse what fits on the other."""
    big = Fabric.objects.create(name="big", kind="local", gpus_milli=16000, cpus_milli=64000, memory_mib=256 * 1024)
    QueueTarget.objects.create(queue=Queue.objects.get(slug="train"), fabric=big, order=1)
    workload, _ = services.submit(
        alice, services.SubmitRequest(queue="train", kind="training", name="j", command="true", gpus=Decimal(7))
    )
    assert workload.gpus_milli == 7000


def test_an_omitted_runtime_takes_the_queues_default(api_as, alice):
    answer = api_as(alice).post(
        "/api/v1/workloads/", {"queue": "train", "kind": "training", "name": "d", "command": "true"}, format="json"
    )
    assert answer.status_code == 201
    assert Workload.objects.get().runtime_limit_s == 3600


# --- The form shows the rules ------------------------------------------------------------------------------


def test_the_form_shows_each_queues_limits_free_capacity_and_the_teams_headroom(
    alice_client, alice, submit, django_assert_max_num_queries
):
    submit(alice, name="running", gpus=2)
    Workload.objects.update(state=State.RUNNING, fabric=Fabric.objects.get(name="local"))
    with django_assert_max_num_queries(14):  # 12, the GPU types the fabrics were last seen to have, estimate errors
        page = alice_client.get("/workloads/new/").content.decode()
    guide = page[page.index('<aside class="guide"') :]
    assert "Training and batch" in guide
    assert "training run, batch job" in guide
    assert "default 1 h, at most 1 d" in guide
    assert "8 GPUs, 16 CPUs, 64 GB on one node" in guide
    assert "6 of 8 GPUs free now, with 15 CPUs and 60 GB memory" in guide  # CPUs and memory beside GPUs
    assert "Vision: 2 GPUs in use, limit 6 GPUs: room for 4 GPUs more" in guide
    assert "Notebooks" not in guide  # the training form offers the queues for training and batch work


def test_the_form_warns_of_a_queue_with_no_fabric(alice_client, alice):
    queue = Queue.objects.create(slug="empty", name="Empty queue", kinds=["training"])
    queue.allowed_groups.add(alice.memberships.get().group)
    page = alice_client.get("/workloads/new/").content.decode()
    assert "No fabric serves this queue yet" in page


def test_the_form_page_takes_the_same_queries_for_one_queue_or_five(alice_client, alice, django_assert_max_num_queries):
    with django_assert_max_num_queries(
        14
    ) as one:  # 12, the GPU types the fabrics were last seen to have, estimate errors
        alice_client.get("/workloads/new/")
    local = Fabric.objects.get(name="local")
    for i in range(4):
        queue = Queue.objects.create(slug=f"q{i}", name=f"Queue {i}", kinds=["training"])
        queue.allowed_groups.add(alice.memberships.get().group)
        QueueTarget.objects.create(queue=queue, fabric=local)
    with django_assert_max_num_queries(len(one.captured_queries)):
        alice_client.get("/workloads/new/")


# --- Clone, Relaunch, session cards --------------------------------------------------------------------------


def test_clone_fills_the_form_from_a_workload_and_the_queue_stays_changeable(alice_client, alice, submit):
    source = submit(alice, name="resnet-a", command="python train.py --lr 3e-4", gpus="0.5", cpus=3, nodes=1)
    page = alice_client.get(source.clone_url()).content.decode()
    assert 'value="resnet-a"' in page
    assert "python train.py --lr 3e-4" in page
    assert re.search(r'name="gpus"[^>]*value="0.5"', page)
    assert re.search(r'name="cpus"[^>]*value="3"', page)
    assert '<select name="queue"' in page  # still a choice


def test_clone_of_a_notebook_opens_the_notebook_form(alice_client, alice, submit):
    source = submit(alice, queue="notebooks", kind="notebook", name="explore", command="", lease_hours=Decimal(3),
                    gpus="0.25")  # fmt: skip
    assert source.clone_url().startswith("/notebooks/new/?from=")
    page = alice_client.get(source.clone_url()).content.decode()
    assert 'value="explore"' in page
    assert re.search(r'name="lease_hours"[^>]*value="3"', page)


def test_another_teams_workload_cannot_be_cloned_or_relaunched(client, charlie, alice, submit):
    source = submit(alice)
    Workload.objects.update(state=State.SUCCEEDED)
    client.force_login(charlie)
    assert client.get(source.clone_url()).status_code == 404
    assert client.post(f"/workloads/{source.pk}/relaunch/").status_code == 404
    assert Workload.objects.count() == 1


def test_relaunch_submits_a_finished_workload_again_as_it_was(alice_client, alice, submit):
    source = submit(alice, name="nightly", command="python eval.py", gpus=1, cpus=2)
    Workload.objects.filter(pk=source.pk).update(state=State.FAILED)
    assert "Relaunch" in alice_client.get("/").content.decode()
    response = alice_client.post(f"/workloads/{source.pk}/relaunch/")
    again = Workload.objects.exclude(pk=source.pk).get()
    assert response.status_code == 302
    assert response["Location"] == again.get_absolute_url()
    assert (again.name, again.command, again.gpus_milli, again.cpus_milli, again.state) == (
        "nightly", "python eval.py", 1000, 2000, State.PENDING)  # fmt: skip


def test_relaunch_of_a_lease_takes_the_persons_own_key(alice_client, alice, submit):
    source = submit(alice, queue="notebooks", kind="notebook", name="nb", command="", lease_hours=Decimal(2))
    Workload.objects.filter(pk=source.pk).update(state=State.CANCELLED)
    alice_client.post(f"/workloads/{source.pk}/relaunch/")
    again = Workload.objects.exclude(pk=source.pk).get()
    assert (again.kind, again.lease_s) == ("notebook", 7200)
    assert not LeaseKey.objects.exists()


def test_unfinished_work_is_cloned_not_relaunched(alice_client, alice, submit):
    source = submit(alice)
    assert alice_client.post(f"/workloads/{source.pk}/relaunch/").status_code == 409


def test_a_refused_relaunch_comes_back_as_the_form_with_the_reason(alice_client, alice, submit):
    source = submit(alice, gpus=4)
    Workload.objects.filter(pk=source.pk).update(state=State.SUCCEEDED)
    Quota.objects.filter(group__slug="vision").update(gpu_limit_milli=2000, gpu_reservation_milli=1000)
    response = alice_client.post(f"/workloads/{source.pk}/relaunch/")
    assert response.status_code == 422
    assert "this asks for 4 GPUs, where the limit is 2" in response.content.decode()
    assert Workload.objects.count() == 1


def test_running_notebooks_are_session_cards_with_host_time_left_connect_and_extend(alice_client, alice, submit):
    nb = submit(alice, queue="notebooks", kind="notebook", name="explore", command="", lease_hours=Decimal(8))
    now = timezone.now()
    Workload.objects.filter(pk=nb.pk).update(
        state=State.RUNNING, host="gpu-node-3", started_at=now, lease_ends_at=now + timedelta(hours=2, minutes=30),
        connect_url=f"http://testserver/connect/{nb.pk}/lab",
    )  # fmt: skip
    submit(alice, name="a-training-run")
    page = alice_client.get("/").content.decode()
    cards = page[page.index('<ul class="sessions">') : page.index("</ul>", page.index('<ul class="sessions">'))]
    assert "explore" in cards
    assert "a-training-run" not in cards
    assert "gpu-node-3" in cards
    assert re.search(r"2 h (29|30) min left", cards)
    assert f'href="http://testserver/connect/{nb.pk}/lab"' in cards
    assert f'hx-post="/workloads/{nb.pk}/extend/"' in cards


# --- Words -------------------------------------------------------------------------------------------------


def test_pages_speak_plainly(alice_client, alice, submit):
    w = submit(alice, gpus="0.25")
    services.do_cancel(alice, w)
    page = alice_client.get("/").content.decode()
    assert "0.25 GPU<" in page
    assert "0.250" not in page
    assert "just now" in page
    assert "0 minutes ago" not in page
    detail = alice_client.get(w.get_absolute_url()).content.decode()
    assert "0.25 GPU, 1 CPU, 4 GB" in detail
    assert "cancelled: cancelled by alice" not in detail
    assert re.search(r">cancelled</span>: cancelled by alice", detail)
    assert re.search(r">pending</span>: submitted by alice", detail)
    vm_like = submit(alice, name="one", gpus=1)
    assert "1 GPU," in alice_client.get(vm_like.get_absolute_url()).content.decode()


def test_an_extension_reads_in_hours_said_right(alice, submit):
    nb = submit(alice, queue="notebooks", kind="notebook", name="nb", command="", lease_hours=Decimal(1))
    services.extend(alice, nb, Decimal(1))
    assert nb.events.last().reason == "lease extended by 1 hour, to 2 hours in all"


# --- Dead ends -----------------------------------------------------------------------------------------------


def test_a_missing_page_is_branded_with_navigation(alice_client, settings):
    settings.DEBUG = False
    response = alice_client.get("/no/such/page/")
    page = response.content.decode()
    assert response.status_code == 404
    assert "Nothing here" in page
    assert 'aria-label="Main"' in page
    assert "New notebook" in page


def test_a_server_error_is_branded_and_needs_nothing_from_the_request(rf):
    from django.views.defaults import server_error

    page = server_error(rf.get("/")).content.decode()
    assert "Something went wrong" in page
    assert 'aria-label="Main"' in page
    assert 'href="/"' in page


def test_a_signed_in_person_who_is_not_it_sees_it_only_at_admin(alice_client):
    response = alice_client.get("/admin/", follow=True)
    page = response.content.decode()
    assert response.status_code == 403
    assert "IT only" in page
    assert 'name="password"' not in page  # no sign-in form that leads back here


def test_it_reaches_the_admin(client, it_admin):
    client.force_login(it_admin)
    assert client.get("/admin/").status_code == 200


def test_waiting_work_shows_its_place_in_line_and_an_estimated_start(alice_client, alice, submit):
    """The worker's decisions reach the pages: a quota-blocked workload says where it stands and when."""
    from portal.worker import tasks

    running = [submit(alice, name=f"r{i}", command="sleep 600", gpus=3) for i in range(2)]  # vision's limit: 6
    tasks.admit()
    Workload.objects.filter(pk__in=[w.pk for w in running]).update(
        state=State.RUNNING, started_at=timezone.now(), fabric=Fabric.objects.get(name="local")
    )
    blocked = [submit(alice, name=f"b{i}", command="true", gpus=1) for i in range(2)]
    tasks.admit()
    first, second = (Workload.objects.get(pk=w.pk) for w in blocked)
    assert (first.state, first.queue_position, second.queue_position) == (State.PENDING, 1, 2)
    assert first.estimated_start is not None  # from the team's running work's runtime limits
    page = alice_client.get(first.get_absolute_url()).content.decode()
    assert "Next in line on Training and batch; expected to start around" in page
    listing = alice_client.get("/").content.decode()
    assert "2nd in line on Training and batch, around" in listing


def test_my_workloads_filters_by_state_and_queue_and_cancels_in_a_row_or_several_at_once(
    alice_client, alice, bob, submit
):
    waiting = submit(alice, name="waiting-one")
    other = submit(alice, name="waiting-two")
    done = submit(alice, name="done-one")
    Workload.objects.filter(pk=done.pk).update(state=State.SUCCEEDED)
    teammate = submit(bob, name="bobs")
    page = alice_client.get("/?show=active").content.decode()
    assert "waiting-one" in page
    assert "done-one" not in page
    assert 'form="cancel-many"' in page
    assert "done-one" in alice_client.get("/?show=finished").content.decode()
    assert "waiting-one" not in alice_client.get("/?show=finished").content.decode()
    assert "waiting-one" not in alice_client.get("/?queue=notebooks").content.decode()
    assert "waiting-one" in alice_client.get("/?show=nonsense&queue=nonsense").content.decode()  # ignored
    # One row's Cancel, then two at once; a teammate's work she may not cancel is left as it is.
    response = alice_client.post("/workloads/cancel/", {"ids": [str(waiting.pk)], "back": "scope=mine&show=active"})
    assert response.status_code == 302
    assert response["Location"] == "/?scope=mine&show=active"
    ids = [str(other.pk), str(teammate.pk), str(done.pk), "not-a-uuid"]
    alice_client.post("/workloads/cancel/", {"ids": ids, "back": ""})
    states = dict(Workload.objects.values_list("name", "state"))
    assert states == {
        "waiting-one": "cancelled",
        "waiting-two": "cancelled",
        "done-one": "succeeded",
        "bobs": "pending",
    }
    said = [str(m) for m in alice_client.get("/").context["messages"]]
    assert "Cancelled 1 workload. 1 you may not cancel (another member's) were left as they are." in said


def test_the_workload_page_says_how_long_it_waited_and_ran_and_offers_clone_and_relaunch(alice_client, alice, submit):
    from datetime import timedelta

    from django.utils import timezone

    w = submit(alice, name="timed")
    start = timezone.now() - timedelta(hours=2)
    Workload.objects.filter(pk=w.pk).update(
        state=State.SUCCEEDED, submitted_at=start - timedelta(minutes=3), started_at=start,
        finished_at=start + timedelta(minutes=90), exit_code=0,
    )  # fmt: skip
    page = alice_client.get(f"/workloads/{w.pk}/").content.decode()
    assert '<dd id="waited-for">3 min</dd>' in page
    assert '<dt>Ran for</dt><dd id="ran-for">1 h 30 min</dd>' in page
    assert f'id="clone" href="/workloads/new/?from={w.pk}"' in page
    assert f'action="/workloads/{w.pk}/relaunch/"' in page


def test_a_utc_time_is_written_for_the_viewers_time_zone():
    from datetime import UTC, datetime

    from portal.workloads.templatetags.words import local

    at = datetime(2026, 12, 6, 3, 5, tzinfo=UTC)
    assert local(at) == (
        '<time class="local" data-form="short" datetime="2026-12-06T03:05:00+00:00" '
        'title="2026-12-06 03:05 UTC">03:05 UTC</time>'
    )
    assert ">2026-12-06 03:05 UTC</time>" in local(at, "long")
    assert local(None) == ""
