"""The submit form's Check button: where the filled-in form would land, shown inline, nothing submitted."""

from __future__ import annotations

from portal.worker import dryrun, tasks
from portal.workloads.models import Workload
from tests.conftest import TRAINING_FORM


def test_check_shows_where_it_would_start_and_submits_nothing(client, alice):
    client.force_login(alice)
    response = client.post("/workloads/new/", TRAINING_FORM | {"check": "1"}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    page = response.content.decode()
    assert 'id="check-answer"' in page
    assert "It would start now</strong>" not in page  # (the words run on to the target)
    assert "It would start now on local." in page
    assert "Nothing was submitted." in page
    assert Workload.objects.count() == 0


def test_check_shows_a_wait_with_its_place(client, alice, submit):
    submit(alice, gpus=6)
    tasks.admit()
    dryrun.SNAPSHOTS.forget()
    client.force_login(alice)
    response = client.post("/workloads/new/", TRAINING_FORM | {"check": "1"})  # a full page, without htmx
    page = response.content.decode()
    assert response.status_code == 200
    assert "It would wait on local." in page
    assert "Place in line: 1." in page
    assert Workload.objects.count() == 1


def test_check_shows_a_refusal_on_its_field_as_a_submit_would(client, alice):
    client.force_login(alice)
    form = TRAINING_FORM | {"runtime_limit_minutes": "100000"}
    checked = client.post("/workloads/new/", form | {"check": "1"}, HTTP_HX_REQUEST="true")
    submitted = client.post("/workloads/new/", form, HTTP_HX_REQUEST="true")
    assert checked.status_code == 422
    assert 'id="check-answer"' not in checked.content.decode()
    assert "allows runtimes of 1 minute to" in checked.content.decode()
    assert submitted.status_code == 422
    assert "allows runtimes of 1 minute to" in submitted.content.decode()
    assert Workload.objects.count() == 0
