"""An agent pool is as big as the agents online in it: with none, work waits for capacity instead of being
admitted to nowhere; once one registers, the next observation lets the work through."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone
from rest_framework.test import APIClient

from fabrics.base import Resources
from portal.queues.models import Fabric
from portal.worker import capacity, connections, tasks
from portal.workloads.states import State
from scheduler import reasons


@pytest.fixture(autouse=True)
def fresh_connections(settings):
    settings.GRIDLANE_CAPACITY_SECONDS = 30
    connections.forget_all()
    capacity._asked.clear()
    yield
    connections.forget_all()
    capacity._asked.clear()


def register(token: str, host: str, **facts: int) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    answer = client.post("/api/v1/agent/register/", {"host": host, "queues": ["gpu-a"], **facts}, format="json")
    assert answer.status_code == 200


def test_an_agent_pool_with_no_agent_online_admits_nothing_until_one_comes_online(alice, submit, hosts):
    work = submit(alice, queue="gpu-a", gpus=1, command="true")
    tasks.cycle()

    pool = Fabric.objects.get(name="hosts")
    assert (pool.observed, pool.healthy) == (Resources(0, 0, 0), True)
    assert pool.observed_detail == "online agent hosts: none"
    work.refresh_from_db()
    assert (work.state, work.pending_reason_code) == (State.PENDING, reasons.NO_CAPACITY)
    assert "needs 1 GPU, 1 CPU, 4 GB; free now 0 GPUs, 0 CPUs, 0 GB" in work.pending_reason

    with time_machine.travel(timezone.now() + timedelta(seconds=31), tick=True):
        register(hosts["token"], "host-1", gpus=2, cpus=16, memory_mib=64 * 1024)
        tasks.cycle()

    pool.refresh_from_db()
    assert pool.observed == Resources(2000, 16000, 64 * 1024)
    assert pool.observed_detail == "online agent hosts: host-1"
    work.refresh_from_db()
    assert work.state in (State.ADMITTED, State.DISPATCHING)
    assert work.fabric == pool


def test_an_agent_coming_online_counts_only_from_the_next_observation(alice, submit, hosts):
    work = submit(alice, queue="gpu-a", gpus=1, command="true")
    tasks.cycle()
    register(hosts["token"], "host-1", gpus=2, cpus=16, memory_mib=64 * 1024)
    tasks.cycle()  # the pool was asked moments ago: still planned as empty
    work.refresh_from_db()
    assert work.state == State.PENDING
