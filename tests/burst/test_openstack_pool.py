"""A burst pool on OpenStack: the autoscaler's step through the OpenStack provider against Keystone and Nova
doubles (real HTTP), a worker killed between Nova's create and its record, and the admin's checks on the pool."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
from typing import Any

import pytest
from django.db import connection

from portal.burst.models import BurstPool, Decision, Instance
from tests.burst.conftest import ROOT
from tests.burst.test_autoscaler import messages, waiting_for_capacity
from tests.cloud.conftest import APP_CREDENTIAL, OS_IMAGE
from tests.cloud.openstack_double import Rule

pytestmark = pytest.mark.django_db(transaction=True)


def test_waiting_work_launches_a_nova_server_tagged_with_the_pool_and_carrying_its_enrollment(
    alice, submit, openstack_pool, nova, step
):
    (work,) = waiting_for_capacity(alice, submit)
    step()
    inst = Instance.objects.get(pool=openstack_pool)
    assert (inst.state, inst.instance_type, inst.zone) == ("booting", "gpu.a10-1", "az1")
    (sent,) = nova.bodies
    assert (sent["flavorRef"], sent["imageRef"], sent["availability_zone"], sent["name"]) == (
        "101", OS_IMAGE, "az1", inst.host_name,
    )  # fmt: skip
    assert sent["metadata"] == {"gridlane:pool": openstack_pool.name, "gridlane:launch-id": str(inst.launch_id)}
    script = base64.b64decode(sent["user_data"]).decode()
    assert "agent --enroll" in script
    assert f"--name {inst.host_name}" in script
    assert list(nova.states(openstack_pool.name)) == [inst.provider_id]
    (launched,) = messages(openstack_pool, "launch")
    assert launched.startswith("launched gpu.a10-1 for 1 waiting workload of team vision")
    assert inst.demand == [str(work.pk)]
    step()
    assert len(nova.calls("POST", r"/servers$")) == 1  # the next step launches nothing more


def test_no_valid_host_for_the_cheapest_flavor_in_any_zone_falls_back_to_the_next(
    alice, submit, openstack_pool, nova, step
):
    nova.no_host.add(("gpu.a10-1", ""))
    waiting_for_capacity(alice, submit)
    step()
    inst = Instance.objects.get(pool=openstack_pool, state="booting")
    assert (inst.instance_type, inst.zone) == ("gpu.a10-1-large", "az1")
    (launched,) = messages(openstack_pool, "launch")
    assert "(after no capacity for gpu.a10-1 in az1 (NoValidHost), gpu.a10-1 in az2 (NoValidHost))" in launched
    assert list(nova.states(openstack_pool.name).values()) == ["ACTIVE"]  # the two in ERROR are being deleted


def test_a_flavor_the_project_does_not_have_is_skipped_with_its_reason(alice, submit, openstack_pool, nova, step):
    openstack_pool.instance_types.filter(name="gpu.a10-1").update(name="gpu.h100-1")
    waiting_for_capacity(alice, submit)
    step()
    assert Instance.objects.get(pool=openstack_pool, state="booting").instance_type == "gpu.a10-1-large"
    assert "(after no capacity for gpu.h100-1 (FlavorNotFound))" in messages(openstack_pool, "launch")[0]


def test_throttling_keeps_the_intent_and_the_next_step_launches_it_once(alice, submit, openstack_pool, nova, step):
    nova.rules.append(Rule("POST", r"^/servers$", status=429, body={"message": "slow down"},
                           headers={"Retry-After": "5"}, times=1))  # fmt: skip
    waiting_for_capacity(alice, submit)
    step()
    inst = Instance.objects.get(pool=openstack_pool)
    assert (inst.state, inst.provider_id) == ("pending", "")
    assert (
        "trying again at the next step: Nova 429 TooManyRequests: slow down (retry after 5 s)"
        in (messages(openstack_pool, "fail")[0])
    )
    step()
    inst.refresh_from_db()
    assert inst.state == "booting"
    assert list(nova.states(openstack_pool.name)) == [inst.provider_id]


def test_a_worker_killed_between_novas_create_and_recording_it_does_not_launch_twice(
    alice, submit, openstack_pool, nova, step, tmp_path
):
    waiting_for_capacity(alice, submit)
    nova.rules.append(Rule("POST", r"^/servers$", hold=True))  # Nova creates the server; the answer waits
    db = connection.settings_dict
    env = {**os.environ, "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}",
           "DJANGO_SETTINGS_MODULE": "tests.settings"}  # fmt: skip
    with (tmp_path / "worker.log").open("w") as out:
        worker = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "burst_step"], env=env, stdout=out,
                                  stderr=out, start_new_session=True)  # fmt: skip
    try:
        assert nova.held.wait(120), (tmp_path / "worker.log").read_text()
        os.killpg(worker.pid, signal.SIGKILL)  # Nova has the server; the worker never hears so
    finally:
        worker.wait(timeout=30)
        nova.release.set()
    (server_id,) = nova.states(openstack_pool.name)
    inst = Instance.objects.get(pool=openstack_pool)
    assert (inst.state, inst.provider_id) == ("pending", "")  # the intent, recorded first

    step()
    inst.refresh_from_db()
    assert (inst.state, inst.provider_id) == ("booting", server_id)
    assert messages(openstack_pool, "launch")[-1].startswith(f"found {server_id} (gpu.a10-1) by its launch tag")
    step()
    assert len(nova.calls("POST", r"/servers$")) == 1
    assert list(nova.states(openstack_pool.name)) == [server_id]


def test_a_server_nobody_recorded_is_reported_with_its_flavor(openstack_pool, nova, step):
    stray = nova.add_server("stray", "gpu.a10-4", {"gridlane:pool": openstack_pool.name})
    step()
    assert messages(openstack_pool, "orphan") == [
        f"found {stray} (gpu.a10-4) tagged with this pool and no Gridlane record: terminating it in 15 min unless "
        "one turns up"
    ]


def test_credentials_that_are_missing_or_refused_say_so_and_launch_nothing(
    alice, submit, openstack_pool, nova, step, monkeypatch
):
    waiting_for_capacity(alice, submit)
    monkeypatch.delenv("GLOS_APPLICATION_CREDENTIAL_SECRET")
    step()
    assert messages(openstack_pool, "fail") == [
        "openstack could not be asked about the pool's instances: GLOS_APPLICATION_CREDENTIAL_ID and "
        "GLOS_APPLICATION_CREDENTIAL_SECRET are not both set in the worker's environment"
    ]
    monkeypatch.setenv("GLOS_APPLICATION_CREDENTIAL_SECRET", "revoked-secret")
    step()
    assert messages(openstack_pool, "fail")[-1] == (
        "openstack could not be asked about the pool's instances: Keystone 401 Unauthorized: The request you have "
        "made requires authentication."
    )
    assert nova.servers == {}
    words = " ".join(Decision.objects.values_list("message", flat=True))
    assert APP_CREDENTIAL.secret not in words
    assert "revoked-secret" not in words


# -- the admin -------------------------------------------------------------------------------------------------
def pool_form(pool: BurstPool, **change: Any) -> dict[str, Any]:
    """The admin's add form for a pool like `pool`, on a fabric of its own, with one flavor."""
    from portal.queues.models import Fabric

    fabric = Fabric.objects.create(name=f"{pool.name}-2", kind="agent")
    form = {
        "fabric": fabric.pk, "provider": "openstack", "credentials": "env:GLOS", "region": "RegionOne",
        "zones": '["az1"]', "endpoint_url": pool.endpoint_url, "image": OS_IMAGE, "boot_script": pool.boot_script,
        "server_url": "https://gridlane.example", "agent_group": pool.agent_group_id, "min_instances": "0",
        "max_instances": "2", "max_idle_minutes": "10", "boot_timeout_minutes": "15", "burst_after_minutes": "10",
        "orphan_grace_minutes": "15", "budget_per_hour": "10", "budget_per_month": "1000", "enabled": "on",
        "instance_types-TOTAL_FORMS": "1", "instance_types-INITIAL_FORMS": "0",
        "instance_types-MIN_NUM_FORMS": "0", "instance_types-MAX_NUM_FORMS": "1000",
        "instance_types-0-name": "GPU_A10.x1", "instance_types-0-gpu_model": "a10", "instance_types-0-gpus": "1",
        "instance_types-0-cpus": "4", "instance_types-0-memory_gib": "16", "instance_types-0-price_on_demand": "0.8",
    }  # fmt: skip
    return form | change


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"endpoint_url": "https://keystone.example:5000/v2.0"}, "Keystone&#x27;s v2.0 API is gone"),
        ({"endpoint_url": "https://admin:pw@keystone.example/v3"}, "must not carry a user or password"),
        ({"endpoint_url": ""}, "OpenStack needs Keystone&#x27;s auth URL"),
        ({"image": "ubuntu-24.04"}, "Give the image&#x27;s id"),
        ({"spot": "on"}, "OpenStack has no spot market"),
        ({"provider": "ec2"}, "EC2 regions are lower case"),
    ],
)
def test_the_admin_refuses_a_pool_its_provider_cannot_take_with_a_clear_error(
    client, it_admin, openstack_pool, change, words
):
    client.force_login(it_admin)
    response = client.post("/admin/burst/burstpool/add/", pool_form(openstack_pool, **change))
    assert response.status_code == 200
    assert words in response.content.decode()
    assert BurstPool.objects.count() == 1


def test_the_admin_takes_an_openstack_pool_with_a_freely_named_flavor(client, it_admin, openstack_pool):
    client.force_login(it_admin)
    response = client.post("/admin/burst/burstpool/add/", pool_form(openstack_pool))
    assert response.status_code == 302, response.content.decode()[-3000:]
    added = BurstPool.objects.get(provider="openstack", fabric__name=f"{openstack_pool.name}-2")
    assert (added.region, list(added.instance_types.values_list("name", flat=True))) == ("RegionOne", ["GPU_A10.x1"])
