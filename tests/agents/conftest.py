"""Agents as real processes (`python -m gridlane_cli.main agent ...`) against a live test server,
with the worker's cycle running in a thread of the test process, as django-q2 would run it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import kill_groups_named_in, wait_until

ROOT = Path(__file__).resolve().parents[2]
RAN = re.compile(r"^agent \S+: running (\S+) from ", re.MULTILINE)


@pytest.fixture
def hosts(cast: dict[str, Any]) -> dict[str, Any]:
    """An agent fabric `hosts` behind three queues: `gpu-a` and `gpu-b` (not preemptible) and `spare` (preemptible),
    with vision's quota there, and a service token enrolled for it."""
    from portal.accounts.models import ResourceGroup
    from portal.agents import services
    from portal.queues.models import Fabric, Queue, QueueTarget, Quota

    vision = ResourceGroup.objects.get(slug="vision")
    fabric = Fabric.objects.create(
        name="hosts",
        kind="agent",
        gpus_milli=8000,
        cpus_milli=10_000_000,
        memory_mib=100_000_000,
        # No host is lost for being slow on a busy machine; the test about lost hosts shortens this itself.
        settings={"heartbeat_s": 0.3, "lost_after_s": 120},
    )
    for slug, preemptible in (("gpu-a", False), ("gpu-b", False), ("spare", True)):
        queue = Queue.objects.create(
            slug=slug, name=slug, kinds=["training", "batch", "vm"], preemptible=preemptible,
            default_runtime_minutes=60, max_runtime_minutes=600,
        )  # fmt: skip
        queue.allowed_groups.add(vision)
        QueueTarget.objects.create(queue=queue, fabric=fabric)
    Quota.objects.create(group=vision, fabric=fabric, gpu_reservation_milli=8000, gpu_limit_milli=8000)
    _, token = services.enroll(fabric, "hosts-agent", vision, by=cast["it"])
    return {"fabric": fabric, "token": token}


@pytest.fixture
def cycling(settings: Any) -> Iterator[None]:
    """The worker's cycle, over and over, in a thread (its own database connection); it asks the pool what
    agents are online about as often as they heartbeat."""
    from django.db import connection

    settings.GRIDLANE_CAPACITY_SECONDS = 0.3

    from portal.worker import connections, tasks

    stop = threading.Event()
    errors: list[BaseException] = []

    def loop() -> None:
        try:
            while not stop.wait(0.05):
                tasks.cycle()
        except BaseException as error:  # surfaced by the fixture
            errors.append(error)
        finally:
            connection.close()

    connections.forget_all()
    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield
    stop.set()
    thread.join(timeout=30)
    connections.forget_all()
    if errors:
        raise errors[0]


class AgentProcess:
    def __init__(self, proc: subprocess.Popen[str], log: Path) -> None:
        self.proc, self.log = proc, log

    def output(self) -> str:
        return self.log.read_text()

    def ran(self) -> list[str]:
        """Run ids this agent started, in order, from its "running <id> from <queue>" lines."""
        return RAN.findall(self.output())


@pytest.fixture
def start_agent(live_server: Any, hosts: dict[str, Any], tmp_path: Path) -> Iterator[Callable[..., AgentProcess]]:
    started: list[AgentProcess] = []

    def start(name: str, *queues: str, slots: int = 1, extra: tuple[str, ...] = ()) -> AgentProcess:
        log = tmp_path / f"{name}.log"
        argv = [sys.executable, "-m", "gridlane_cli.main", "--server", live_server.url, "--token", hosts["token"],
                "agent", "--name", name, "--slots", str(slots), "--workdir", str(tmp_path / name),
                "--kill-grace", "0.5", "--sample-every", "0.2", "--nvidia-smi", str(tmp_path / "no-nvidia-smi"),
                *[arg for q in queues for arg in ("--queue", q)], *extra]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
        with open(log, "w") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT,
                                    start_new_session=True)  # fmt: skip
        agent = AgentProcess(proc, log)
        started.append(agent)
        return agent

    yield start
    for agent in started:
        if agent.proc.poll() is None:
            agent.proc.send_signal(signal.SIGTERM)
    for agent in started:
        try:
            agent.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            agent.proc.kill()
            agent.proc.wait()
    # Whatever jobs a killed agent left behind: their process groups are named in pids files the tests write.
    kill_groups_named_in(tmp_path.glob("**/*.pid"))
    let_requests_finish(hosts["fabric"])


def let_requests_finish(fabric: Any) -> None:
    """Long polls that stopped agents left open on the live server end once their hosts are given up: wait for
    every request to finish, so that none claims while the test's database is flushed (a deadlock there)."""
    from portal.agents.models import AgentHost

    AgentHost.objects.filter(fabric=fabric).update(state=AgentHost.HostState.LOST)
    wait_until(lambda: not any("process_request_thread" in t.name for t in threading.enumerate()), timeout=60)


@pytest.fixture
def claimed(alice, submit, hosts):
    """One workload of gpu-a, dispatched and claimed by host-1 of `hosts` (online first: an empty pool admits none)."""
    from rest_framework.test import APIClient

    from portal.worker import tasks

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {hosts['token']}")
    host = {"host": "host-1", "queues": ["gpu-a"], "cpus": 8, "memory_mib": 65536}
    client.post("/api/v1/agent/register/", host, format="json")
    submit(alice, queue="gpu-a", command="echo hi")
    tasks.cycle()
    answer = client.post("/api/v1/agent/claim/", {"host": "host-1", "wait": 0}, format="json")
    assert answer.status_code == 200
    return client, answer.json()
