"""The pages people use, through the test client: sign in, submit, watch, cancel."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
import time_machine

from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.conftest import TRAINING_FORM

FORM = TRAINING_FORM
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def alice_client(client, alice):
    client.force_login(alice)
    return client


def test_pages_need_a_sign_in(client, cast):
    response = client.get("/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_demo_sign_in_with_a_local_account(client, cast):
    response = client.post("/accounts/login/", {"username": "alice", "password": "gridlane-demo"})
    assert response.status_code == 302
    assert "alice" in client.get("/").content.decode()


def test_the_form_offers_only_queues_for_the_users_teams(alice_client):
    from portal.queues.models import Queue

    Queue.objects.create(slug="secret", name="Secret queue", kinds=["training"])
    page = alice_client.get("/workloads/new/").content.decode()
    assert "Training and batch" in page
    assert "Secret queue" not in page
    assert "htmx-2" in page  # htmx served locally, no CDN


def test_a_valid_form_submits_and_htmx_is_sent_to_the_workload(alice_client):
    response = alice_client.post("/workloads/new/", FORM, **HTMX)
    workload = Workload.objects.get()
    assert response.status_code == 200
    assert response["HX-Redirect"] == f"/workloads/{workload.pk}/"
    assert (workload.name, workload.gpus_milli, workload.owner.username) == ("resnet", 1000, "alice")


def test_without_htmx_the_form_redirects(alice_client):
    response = alice_client.post("/workloads/new/", FORM)
    assert response.status_code == 302
    assert response["Location"] == f"/workloads/{Workload.objects.get().pk}/"


def test_an_invalid_form_comes_back_with_errors_and_the_input_kept(alice_client):
    response = alice_client.post("/workloads/new/", FORM | {"gpus": "-2", "name": "bad name!"}, **HTMX)
    page = response.content.decode()
    assert response.status_code == 422
    assert 'id="submit-form"' in page
    assert "<html" not in page
    assert "python train.py" in page
    assert "Use 1-100 letters" in page
    assert not Workload.objects.exists()


def test_a_request_no_fabric_can_hold_gets_a_clear_error(alice_client):
    response = alice_client.post("/workloads/new/", FORM | {"gpus": "64"})
    assert response.status_code == 422
    assert "No fabric behind" in response.content.decode()


def test_my_workloads_lists_mine_and_stays_live(alice_client, alice, bob, submit):
    submit(alice, name="mine")
    submit(bob, name="teammates")
    page = alice_client.get("/").content.decode()
    assert "mine" in page
    assert "teammates" not in page
    assert 'hx-trigger="every 3s"' in page
    team = alice_client.get("/?scope=team").content.decode()
    assert "teammates" in team


def test_the_live_part_is_served_to_htmx(alice_client, alice, submit):
    submit(alice, name="mine")
    response = alice_client.get("/", **HTMX)
    body = response.content.decode()
    assert body.lstrip().startswith('<div id="workloads-live"')
    assert "mine" in body
    assert "<html" not in body


@time_machine.travel(datetime(2026, 3, 2, 9, 0, 5, tzinfo=UTC), tick=False)
def test_the_list_stays_live_once_everything_finished(alice_client, alice, submit, api_as):
    """The list polls even when every row has finished, so work from the API or CLI shows up."""
    workload = submit(alice, name="done")
    Workload.objects.filter(pk=workload.pk).update(state=State.SUCCEEDED)
    page = alice_client.get("/").content.decode()
    assert 'hx-trigger="every 3s"' in page
    assert "every 2s" not in alice_client.get(workload.get_absolute_url()).content.decode()
    version = re.search(r'v=([^"&]+)"', page)
    assert version is not None
    # Nothing changed: an empty 204 (htmx keeps what it shows)...
    assert alice_client.get(f"/?scope=mine&v={version[1]}", **HTMX).status_code == 204
    # ...until something is submitted from elsewhere.
    created = api_as(alice).post(
        "/api/v1/workloads/",
        {"queue": "train", "kind": "training", "name": "from-the-cli", "command": "true"},
        format="json",
    )
    assert created.status_code == 201
    response = alice_client.get(f"/?scope=mine&v={version[1]}", **HTMX)
    assert response.status_code == 200
    assert "from-the-cli" in response.content.decode()


@time_machine.travel(datetime(2026, 3, 2, 9, 0, 5, tzinfo=UTC), tick=False)
def test_an_unchanged_poll_costs_one_query_beyond_the_sign_in(alice_client, alice, submit, django_assert_num_queries):
    for i in range(5):
        submit(alice, name=f"j{i}")
    page = alice_client.get("/").content.decode()
    version = re.search(r'v=([^"&]+)"', page)
    assert version is not None
    with django_assert_num_queries(3):  # session, user, the version
        assert alice_client.get(f"/?v={version[1]}", **HTMX).status_code == 204


def test_the_workload_page_shows_state_reason_events_and_output(alice_client, alice, submit):
    workload = submit(alice)
    Workload.objects.filter(pk=workload.pk).update(
        pending_reason="Waiting for capacity on local", log_tail="epoch 1 loss 0.3"
    )
    page = alice_client.get(workload.get_absolute_url()).content.decode()
    assert "Waiting for capacity on local" in page
    assert "epoch 1 loss 0.3" in page
    assert "submitted" in page
    assert 'hx-get="' in page


def test_output_is_escaped(alice_client, alice, submit):
    workload = submit(alice)
    Workload.objects.filter(pk=workload.pk).update(log_tail="<script>alert(1)</script>")
    page = alice_client.get(workload.get_absolute_url()).content.decode()
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;" in page


def test_cancel_from_the_page(alice_client, alice, submit):
    workload = submit(alice)
    response = alice_client.post(f"/workloads/{workload.pk}/cancel/", **HTMX)
    assert response.status_code == 200
    assert "Cancelled" in response.content.decode()
    assert Workload.objects.get().state == State.CANCELLED


def test_another_teams_workload_page_is_404(client, alice, charlie, submit):
    workload = submit(alice)
    client.force_login(charlie)
    assert client.get(workload.get_absolute_url()).status_code == 404
    assert client.post(f"/workloads/{workload.pk}/cancel/").status_code == 404
    assert Workload.objects.get().state == State.PENDING


def test_the_list_page_takes_the_same_queries_for_1_or_30_workloads(
    alice_client, alice, submit, django_assert_max_num_queries
):
    submit(alice)
    with django_assert_max_num_queries(6) as one:
        alice_client.get("/")
    for i in range(29):
        submit(alice, name=f"j{i}")
    with django_assert_max_num_queries(len(one.captured_queries)):
        alice_client.get("/")


def test_it_chooses_the_team_it_submits_for(client, it_admin):
    client.force_login(it_admin)
    page = client.get("/workloads/new/").content.decode()
    assert 'value="vision"' in page
    assert 'value="fraud"' in page
    response = client.post("/workloads/new/", FORM | {"group": "fraud"})
    assert response.status_code == 302
    assert Workload.objects.get().group.slug == "fraud"
