"""One-time enrollment tokens: minted per instance, single-use, expiring, for that host only; what they buy is an
agent identity for the pool's fabric."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone
from rest_framework.test import APIClient

from portal.accounts.models import ServiceIdentity
from portal.burst import enrollment
from portal.burst.models import Instance

pytestmark = pytest.mark.django_db(transaction=True)


def booting(pool, name: str = "burst-host-1") -> Instance:
    return Instance.objects.create(pool=pool, launch_id=uuid.uuid4(), instance_type="g5.xlarge", host_name=name,
                                   state=Instance.State.BOOTING, gpus=1, cpus=4, memory_gib=16)  # fmt: skip


def enroll(token: str, host: str = "burst-host-1"):
    return APIClient().post("/api/v1/agent/enroll/", {"token": token, "host": host}, format="json")


def test_a_token_enrolls_its_host_once_and_the_identity_serves_that_fabric_only(burst_pool):
    inst = booting(burst_pool)
    token = enrollment.mint(inst, timezone.now(), timedelta(minutes=15))
    answer = enroll(token)
    assert answer.status_code == 200, answer.content
    assert answer.json()["fabric"] == burst_pool.name
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Bearer {answer.json()['token']}")
    registered = agent.post("/api/v1/agent/register/", {"host": "burst-host-1", "queues": ["burstable"], "gpus": 1},
                            format="json")  # fmt: skip
    assert registered.status_code == 200
    assert registered.json()["fabric"] == burst_pool.name

    again = enroll(token)
    assert (again.status_code, again.json()) == (
        403,
        {"errors": {"token": ["This enrollment token was used already."]}},
    )


def test_a_token_expires_and_belongs_to_its_own_host(burst_pool):
    inst = booting(burst_pool)
    token = enrollment.mint(inst, timezone.now(), timedelta(minutes=15))
    assert enroll(token, host="someone-else").json() == {
        "errors": {"token": ["This enrollment token belongs to another host."]}
    }
    with time_machine.travel(timezone.now() + timedelta(minutes=16)):
        late = enroll(token)
    assert (late.status_code, late.json()) == (403, {"errors": {"token": ["This enrollment token has expired."]}})
    assert enroll("glenroll_made-up").json() == {"errors": {"token": ["This enrollment token is not known."]}}
    assert enroll("").status_code == 400


def test_a_new_launch_attempt_replaces_the_token_and_an_ended_instance_enrolls_nothing(burst_pool):
    inst = booting(burst_pool)
    first = enrollment.mint(inst, timezone.now(), timedelta(minutes=15))
    second = enrollment.mint(inst, timezone.now(), timedelta(minutes=15))
    assert enroll(first).status_code == 403
    Instance.objects.filter(pk=inst.pk).update(state=Instance.State.TERMINATING)
    assert enroll(second).json() == {"errors": {"token": ["This instance is no longer expected to enroll."]}}


def test_the_identity_of_an_ended_instance_is_disabled(burst_pool):
    inst = booting(burst_pool)
    assert enroll(enrollment.mint(inst, timezone.now(), timedelta(minutes=15))).status_code == 200
    enrollment.retire(inst)
    service = ServiceIdentity.objects.get(user__username__endswith=f"burst-{inst.launch_id}")
    assert service.disabled_at is not None
    assert not service.user.api_tokens.filter(revoked_at__isnull=True).exists()
