"""IT-defined profiles on the submit forms, as JupyterHub's profile list: the first choice, preselected, with
free numbers ("Custom") as the second; the server takes a profile's own numbers, whatever the fields say."""

from __future__ import annotations

from decimal import Decimal

import pytest

from portal.queues.admin import ProfileForm
from portal.queues.models import Profile, Queue
from portal.workloads.models import Workload
from tests.conftest import TRAINING_FORM

HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def alice_client(client, alice):
    client.force_login(alice)
    return client


@pytest.fixture
def profiles(cast):
    small = Profile.objects.create(name="Small GPU", kinds=["training", "batch"], gpus_milli=1000, cpus_milli=8000,
                                   memory_mib=64 * 1024, hours=Decimal(8), order=1)  # fmt: skip
    quarter = Profile.objects.create(name="Quarter GPU", kinds=["notebook"], gpus_milli=250, cpus_milli=2000,
                                     memory_mib=8 * 1024, hours=Decimal(4), description="for exploring")  # fmt: skip
    return {"small": small, "quarter": quarter}


def test_the_training_form_offers_profiles_first_with_the_first_chosen_and_custom_last(alice_client, profiles):
    page = alice_client.get("/workloads/new/").content.decode()
    form = page[page.index('id="submit-form"') :]
    assert form.index('name="profile"') < form.index('name="queue"')  # the first choice, shown first
    assert "Small GPU (1 GPU, 8 CPUs, 64 GB, 8 hours)" in form
    assert "Custom: the numbers below" in form
    assert f'value="{profiles["small"].pk}"' in form.split("checked")[0].rsplit("<input", 1)[1]
    assert 'data-runtime-limit-minutes="480"' in form  # what the page's script copies into the field
    assert "Quarter GPU" not in form  # a notebook profile is the notebook form's


def test_a_chosen_profile_sets_the_request_whatever_the_number_fields_say(alice_client, alice, profiles):
    typed = TRAINING_FORM | {"profile": str(profiles["small"].pk), "gpus": "garbage", "cpus": "99",
                             "runtime_limit_minutes": ""}  # fmt: skip
    response = alice_client.post("/workloads/new/", typed, **HTMX)
    assert response.status_code == 200, response.content.decode()
    w = Workload.objects.get()
    assert (w.gpus_milli, w.cpus_milli, w.memory_mib, w.nodes) == (1000, 8000, 64 * 1024, 1)
    assert w.runtime_limit_s == 8 * 3600


def test_custom_asks_for_the_numbers(alice_client, profiles):
    response = alice_client.post("/workloads/new/", TRAINING_FORM | {"profile": "custom", "gpus": ""}, **HTMX)
    assert response.status_code == 422
    assert "Give a number, or pick a profile above." in response.content.decode()
    assert not Workload.objects.exists()


def test_a_post_without_a_profile_is_custom(alice_client, profiles):
    response = alice_client.post("/workloads/new/", TRAINING_FORM | {"gpus": "2"}, **HTMX)
    assert response.status_code == 200
    assert Workload.objects.get().gpus_milli == 2000


def test_a_profile_is_refused_on_a_queue_it_is_not_offered_on(alice_client, alice, profiles):
    other = Queue.objects.create(slug="other", name="Other queue", kinds=["training"])
    other.allowed_groups.add(alice.memberships.get().group)
    profiles["small"].queues.add(other)
    response = alice_client.post("/workloads/new/", TRAINING_FORM | {"profile": str(profiles["small"].pk)}, **HTMX)
    assert response.status_code == 422
    assert "Small GPU is not offered on Training and batch; pick another or Custom." in response.content.decode()
    assert not Workload.objects.exists()


def test_a_profile_for_no_queue_of_the_form_is_not_offered(alice_client, alice, profiles):
    hidden = Queue.objects.create(slug="hidden", name="Hidden", kinds=["training"])  # open to no team of alice's
    profiles["small"].queues.add(hidden)
    assert 'name="profile"' not in alice_client.get("/workloads/new/").content.decode()


def test_a_disabled_profile_is_not_offered(alice_client, profiles):
    Profile.objects.update(enabled=False)
    assert 'name="profile"' not in alice_client.get("/workloads/new/").content.decode()


def test_the_notebook_form_takes_its_profile_with_the_lease(alice_client, profiles):
    form = {"queue": "notebooks", "name": "explore", "profile": str(profiles["quarter"].pk), "lease_hours": "1"}
    response = alice_client.post("/notebooks/new/", form, **HTMX)
    assert response.status_code == 200, response.content.decode()
    w = Workload.objects.get()
    assert (w.gpus_milli, w.cpus_milli, w.memory_mib, w.lease_s) == (250, 2000, 8 * 1024, 4 * 3600)
    assert "for exploring" in alice_client.get("/notebooks/new/").content.decode()


def test_a_clone_keeps_its_own_numbers(alice_client, alice, submit, profiles):
    source = submit(alice, gpus=3, cpus=2)
    page = alice_client.get(f"/workloads/new/?from={source.pk}").content.decode()
    checked = page.split("checked")[0].rsplit("<input", 1)[1]
    assert 'value="custom"' in checked


def test_the_vm_form_offers_its_profiles_as_the_sizes(client, alice, profiles):
    queue = Queue.objects.get(slug="train")
    queue.kinds = ["training", "batch", "vm"]
    queue.save()
    box = Profile.objects.create(name="Box", kinds=["vm"], gpus_milli=2000, cpus_milli=4000, memory_mib=32 * 1024)
    client.force_login(alice)
    page = client.get("/leases/new/").content.decode()
    assert "Box (2 GPUs, 4 CPUs, 32 GB)" in page
    assert "8 GPUs, 64 CPUs, 512 GB" not in page  # the built-in sizes give way to IT's
    form = {"queue": "train", "name": "box", "size": str(box.pk), "lease_hours": "1",
            "public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGridlane you@laptop"}  # fmt: skip
    response = client.post("/leases/new/", form, **HTMX)
    assert response.status_code == 200, response.content.decode()
    w = Workload.objects.get()
    assert (w.kind, w.gpus_milli, w.cpus_milli, w.memory_mib) == ("vm", 2000, 4000, 32 * 1024)


def test_the_form_page_costs_two_queries_more_with_profiles(alice_client, django_assert_max_num_queries, profiles):
    with django_assert_max_num_queries(15):  # the profiles (two reads) and the queues' estimate errors (one) in it
        alice_client.get("/workloads/new/")


# --- IT's editor -------------------------------------------------------------------------------------------


def test_it_defines_a_profile_in_gpus_cpus_and_gb(cast):
    form = ProfileForm({"name": "Half", "kinds": ["notebook"], "gpus": "0.5", "cpus": "4", "memory_gb": "16",
                        "hours": "2", "order": "0", "enabled": "on"})  # fmt: skip
    assert form.is_valid(), form.errors
    profile = form.save()
    assert (profile.gpus_milli, profile.cpus_milli, profile.memory_mib) == (500, 4000, 16 * 1024)
    assert profile.summary() == "0.5 GPU, 4 CPUs, 16 GB, 2 hours"


@pytest.mark.parametrize(
    ("fields", "field", "says"),
    [
        ({"gpus": "-1"}, "gpus", "greater than or equal to 0"),
        ({"cpus": "0"}, "cpus", "greater than or equal to 0.001"),
        ({"kinds": []}, "kinds", "This field is required."),
        ({"kinds": ["spaceship"]}, "kinds", "Select a valid choice"),
        ({"hours": "0"}, "hours", "greater than or equal to 0.01"),
        ({"name": ""}, "name", "This field is required."),
    ],
)
def test_a_bad_profile_is_a_clear_error_and_nothing_is_saved(cast, fields, field, says):
    data = {"name": "P", "kinds": ["training"], "gpus": "1", "cpus": "4", "memory_gb": "16", "order": "0"} | fields
    form = ProfileForm(data)
    assert not form.is_valid()
    assert any(says in e for e in form.errors[field]), form.errors
    assert not Profile.objects.exists()


def test_a_profile_on_queues_that_take_none_of_its_kinds_is_refused(cast):
    notebooks = Queue.objects.get(slug="notebooks")
    form = ProfileForm({"name": "P", "kinds": ["vm"], "gpus": "1", "cpus": "4", "memory_gb": "16", "order": "0",
                        "queues": [notebooks.pk]})  # fmt: skip
    assert not form.is_valid()
    assert "None of these queues takes these kinds of work" in form.errors["queues"][0]
