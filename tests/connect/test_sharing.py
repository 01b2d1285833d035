"""The owner shares a workload's server with the team from its page, and stops; no one else may switch it,
each switch is an event on the workload and an audit record, and the page says who can open it."""

from __future__ import annotations

import pytest
from django.test import Client

from portal.accounts.models import AuditEvent
from portal.workloads.models import Workload, WorkloadEvent


@pytest.fixture
def notebook(alice, running):
    w = running(alice)
    Workload.objects.filter(pk=w.pk).update(connect_url=f"http://testserver/connect/{w.pk}/lab",
                                            notebook_endpoint={"host": "n1", "port": 8888, "token": "t" * 32,
                                                               "path": f"/connect/{w.pk}/"})  # fmt: skip
    return w


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_owner_shares_with_the_team_and_stops_and_each_switch_is_recorded(notebook, alice, bob):
    owner, teammate = signed_in(alice), signed_in(bob)
    page = owner.get(f"/workloads/{notebook.pk}/").content.decode()
    assert "Only you can open its server." in page
    assert 'id="open-notebook"' not in teammate.get(f"/workloads/{notebook.pk}/").content.decode()

    shared = owner.post(f"/workloads/{notebook.pk}/share/", {"shared": "1"}, HTTP_HX_REQUEST="true")
    assert shared.status_code == 200
    assert "Shared: members of" in shared.content.decode()
    assert Workload.objects.get(pk=notebook.pk).shared_with_team
    assert 'id="open-notebook"' in teammate.get(f"/workloads/{notebook.pk}/").content.decode()

    owner.post(f"/workloads/{notebook.pk}/share/", {"shared": "0"})
    assert not Workload.objects.get(pk=notebook.pk).shared_with_team
    reasons = list(WorkloadEvent.objects.filter(workload=notebook).values_list("reason", flat=True))
    assert reasons[-2].startswith("Its server is shared with ")
    assert reasons[-1] == "Its server is no longer shared with the team"
    audited = AuditEvent.objects.filter(action__startswith="workload.").order_by("at", "pk")
    assert list(audited.values_list("action", flat=True)) == ["workload.shared", "workload.unshared"]


def test_only_the_owner_may_share_and_another_team_sees_nothing(notebook, bob, charlie, it_admin):
    assert signed_in(bob).post(f"/workloads/{notebook.pk}/share/", {"shared": "1"}).status_code == 403  # a lead
    assert signed_in(it_admin).post(f"/workloads/{notebook.pk}/share/", {"shared": "1"}).status_code == 403
    assert signed_in(charlie).post(f"/workloads/{notebook.pk}/share/", {"shared": "1"}).status_code == 404
    assert not Workload.objects.get(pk=notebook.pk).shared_with_team


@pytest.mark.parametrize("value", ["", "yes", "2", "true"])
def test_a_switch_that_is_neither_on_nor_off_is_refused(notebook, alice, value):
    answer = signed_in(alice).post(f"/workloads/{notebook.pk}/share/", {"shared": value})
    assert answer.status_code == 400
    assert not Workload.objects.get(pk=notebook.pk).shared_with_team


def test_a_run_without_a_server_does_not_speak_of_one(alice, running):
    run = running(alice, kind="training")
    page = signed_in(alice).get(f"/workloads/{run.pk}/").content.decode()
    assert "its server" not in page
    assert "Share with" not in page
    Workload.objects.filter(pk=run.pk).update(connect_url=f"http://testserver/connect/{run.pk}/")  # it publishes one
    assert "Only you can open its server." in signed_in(alice).get(f"/workloads/{run.pk}/").content.decode()
