"""A notebook's or VM's page: its lease's end, the Extend control (htmx, or a plain form post), and the idle
warning while it applies."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from portal.workloads.models import Workload
from portal.workloads.states import State

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def alice_client(client, alice):
    client.force_login(alice)
    return client


def notebook(submit, user):
    return submit(user, queue="notebooks", kind="notebook", name="nb", command="", lease_hours=Decimal(1),
                  runtime_limit_minutes=60)  # fmt: skip


def test_the_owner_sees_a_labelled_extend_control_and_a_teammate_does_not(client, alice, bob, submit):
    mine = notebook(submit, alice)
    client.force_login(alice)
    page = client.get(mine.get_absolute_url()).content.decode()
    assert '<label for="extend-hours">Extend the lease by (hours)</label>' in page
    assert 'id="extend-hours" name="hours" type="number"' in page
    assert '<button id="extend-button" type="submit">Extend</button>' in page
    assert "Extend</button>" not in client.get(notebook(submit, bob).get_absolute_url()).content.decode()


def test_finished_work_and_training_runs_have_no_extend_control(alice_client, alice, submit):
    training = submit(alice)
    assert "extend-hours" not in alice_client.get(training.get_absolute_url()).content.decode()
    done = notebook(submit, alice)
    Workload.objects.filter(pk=done.pk).update(state=State.SUCCEEDED)
    assert "extend-hours" not in alice_client.get(done.get_absolute_url()).content.decode()


def test_extend_with_htmx_answers_the_outcome_in_a_line(alice_client, alice, submit):
    w = notebook(submit, alice)
    response = alice_client.post(f"{w.get_absolute_url()}extend/", {"hours": "2"}, **HTMX)
    assert response.status_code == 200
    assert "Extended: the lease is now 3 hours, counted from when it starts." in response.content.decode()
    assert Workload.objects.get(pk=w.pk).lease_s == 3 * 3600


@pytest.mark.parametrize(
    ("hours", "message"),
    [("many", "Enter a number."), ("30", "allows leases of at most 24 hours: it can grow by 23 hours more")],
)
def test_a_refused_extension_says_why_with_422(alice_client, alice, submit, hours, message):
    w = notebook(submit, alice)
    response = alice_client.post(f"{w.get_absolute_url()}extend/", {"hours": hours}, **HTMX)
    assert response.status_code == 422
    assert 'role="alert">Not extended: ' in response.content.decode()
    assert message in response.content.decode()


def test_a_fabric_that_cannot_extend_is_named_on_the_page(alice_client, alice, submit):
    from portal.queues.models import Fabric

    fabric = Fabric.objects.create(name="cluster", kind="slurm")
    w = notebook(submit, alice)
    Workload.objects.filter(pk=w.pk).update(state=State.RUNNING, fabric=fabric, started_at=timezone.now())
    response = alice_client.post(f"{w.get_absolute_url()}extend/", {"hours": "1"}, **HTMX)
    assert response.status_code == 422
    assert "The fabric cluster (slurm) cannot extend a lease" in response.content.decode()


def test_without_htmx_extend_goes_back_to_the_page_with_a_message(alice_client, alice, submit):
    w = notebook(submit, alice)
    response = alice_client.post(f"{w.get_absolute_url()}extend/", {"hours": "1"}, follow=True)
    assert response.redirect_chain == [(w.get_absolute_url(), 302)]
    assert "Extended the lease of nb." in response.content.decode()
    response = alice_client.post(f"{w.get_absolute_url()}extend/", {"hours": "0"}, follow=True)
    assert 'class="flash error"' in response.content.decode()


def test_only_who_may_manage_it_extends_and_another_teams_work_is_404(client, alice, bob, charlie, submit):
    w = notebook(submit, bob)
    client.force_login(alice)
    assert client.post(f"{w.get_absolute_url()}extend/", {"hours": "1"}, **HTMX).status_code == 403
    client.force_login(charlie)
    assert client.post(f"{w.get_absolute_url()}extend/", {"hours": "1"}, **HTMX).status_code == 404
    assert Workload.objects.get(pk=w.pk).lease_s == 3600


def test_a_running_lease_shows_its_end_and_an_idle_warning_while_it_applies(alice_client, alice, submit):
    w = notebook(submit, alice)
    started = timezone.now().replace(microsecond=0)
    stop_at = started + timedelta(minutes=50)
    Workload.objects.filter(pk=w.pk).update(
        state=State.RUNNING, started_at=started, lease_ends_at=started + timedelta(hours=1), idle_stop_at=stop_at
    )
    page = alice_client.get(w.get_absolute_url(), **HTMX).content.decode()
    assert f"it ends at {started + timedelta(hours=1):%Y-%m-%d %H:%M} UTC" in page
    assert f"This notebook stops at {stop_at:%H:%M} UTC unless it is used" in page
    Workload.objects.filter(pk=w.pk).update(idle_stop_at=None)
    assert "idle-warning" not in alice_client.get(w.get_absolute_url(), **HTMX).content.decode()


def test_the_workload_page_takes_a_fixed_number_of_queries(alice_client, alice, submit, django_assert_num_queries):
    w = notebook(submit, alice)
    alice_client.get(w.get_absolute_url())
    # session, user, workload with its relations, events; and, while it waits, where it would start: its
    # targets with their fabrics, and what those were last seen to have free (portal/worker/whereto.py)
    with django_assert_num_queries(6):
        alice_client.get(w.get_absolute_url(), **HTMX)


def test_the_lease_form_offers_only_the_sizes_a_fabric_behind_its_queues_can_hold(alice_client):
    from portal.accounts.models import ResourceGroup
    from portal.queues.models import Fabric, Queue, QueueTarget

    boxes = Queue.objects.create(slug="boxes", name="Boxes", kinds=["vm"])
    boxes.allowed_groups.add(*ResourceGroup.objects.all())
    QueueTarget.objects.create(queue=boxes, fabric=Fabric.objects.get(name="local"))  # 8 GPUs, 16 CPUs, 64 GB
    page = alice_client.get("/leases/new/").content.decode()
    start = page.index('name="size"')
    sizes = page[start : page.index("</select>", start)]
    assert 'value="small"' in sizes
    for too_big in ("medium", "large", "full"):
        assert f'value="{too_big}"' not in sizes
