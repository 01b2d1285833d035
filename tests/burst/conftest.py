"""A burst pool against moto's EC2 on loopback (or Keystone and Nova doubles in process), and a harness that
makes its instances real: each instance that reaches `running` (ACTIVE) boots a real `gridlane agent` process
from its own user data (its enrollment token), and one the provider terminates has its agent stopped, as the
machine going away would."""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import boto3
import pytest

from fabrics.cloud import openstack
from tests.agents.conftest import (
    cycling,  # noqa: F401 (the worker's cycle in a thread)
    let_requests_finish,
)
from tests.cloud.conftest import (  # noqa: F401 (moto on loopback; Keystone and Nova in process)
    APP_CREDENTIAL,
    KEYS,
    OS_IMAGE,
    REGION,
    ec2,
    moto_url,
    nova,
    pool_name,
)
from tests.cloud.ec2_double import Proxy
from tests.cloud.openstack_double import REGION as OS_REGION
from tests.cloud.openstack_double import Cloud
from tests.conftest import kill_groups_named_in

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin"
# What a site's template does after installing the agent; here the agent is already installed.
BOOT_SCRIPT = """#!/bin/bash
set -euo pipefail
exec gridlane --server {{server}} agent --enroll {{token}} --name {{name}} --gpus {{gpus}} --slots 4 \\
    --kill-grace 0.5 --sample-every 0.2 {{queue_args}}
"""


@pytest.fixture
def burst_pool(cast: dict[str, Any], ec2: Proxy, pool_name: str, live_server: Any, monkeypatch: Any) -> Any:  # noqa: F811
    """Queue `burstable` (preemptible: reclaimed work goes back in line) targets `onprem` first, an agent fabric
    declared with one GPU and no agent online, and the burst pool last; vision may use it."""
    from portal.accounts.models import ResourceGroup
    from portal.burst.admin import set_burst_queues
    from portal.burst.models import BurstPool, InstanceType
    from portal.queues.models import Fabric, Queue, QueueTarget

    monkeypatch.setenv("GLTEST_ACCESS_KEY_ID", KEYS.key_id)
    monkeypatch.setenv("GLTEST_SECRET_ACCESS_KEY", KEYS.secret)
    vision = ResourceGroup.objects.get(slug="vision")
    onprem = Fabric.objects.create(name="onprem", kind="agent", gpus_milli=1000, cpus_milli=64_000,
                                   memory_mib=256 * 1024)  # fmt: skip
    fabric = Fabric.objects.create(name=pool_name, kind="agent", settings={"heartbeat_s": 0.3, "lost_after_s": 3})
    queue = Queue.objects.create(slug="burstable", name="Burstable", kinds=["training", "batch"], preemptible=True,
                                 default_runtime_minutes=60, max_runtime_minutes=600)  # fmt: skip
    queue.allowed_groups.add(vision)
    QueueTarget.objects.create(queue=queue, fabric=onprem, order=0)
    pool = BurstPool.objects.create(
        fabric=fabric, provider="ec2", credentials="env:GLTEST", region=REGION, zones=[f"{REGION}a", f"{REGION}b"],
        endpoint_url=ec2.url, image="ami-0a1b2c3d4e5f60718", boot_script=BOOT_SCRIPT, server_url=live_server.url,
        agent_group=ResourceGroup.objects.create(slug="platform", name="Platform"), min_instances=0, max_instances=3,
        max_idle_minutes=10, boot_timeout_minutes=15, orphan_grace_minutes=15, budget_per_hour=Decimal("20"),
        budget_per_month=Decimal("5000"),
    )  # fmt: skip
    for name, gpus, cpus, memory, price in (
        ("g5.xlarge", 1, 4, 16, "1.006"),
        ("g5.2xlarge", 1, 8, 32, "1.212"),
        ("g5.12xlarge", 4, 48, 192, "5.672"),
    ):
        cost = Decimal(price)
        InstanceType.objects.create(pool=pool, name=name, gpu_model="a10g", gpus=gpus, cpus=cpus, memory_gib=memory,
                                    price_on_demand=cost, price_spot=cost * Decimal("0.4"))  # fmt: skip
    set_burst_queues(pool, [queue])
    return pool


class Machines:
    """Watches the pool's instances in moto and plays the machines: boots each running one from its user data."""

    RUNNING: str = "running"
    GONE: tuple[str, ...] = ("shutting-down", "terminated")

    def __init__(self, moto: str, pool: str, tmp: Path) -> None:
        self.client = boto3.client("ec2", region_name=REGION, endpoint_url=moto, aws_access_key_id=KEYS.key_id,
                                   aws_secret_access_key=KEYS.secret)  # fmt: skip
        self.pool, self.tmp = pool, tmp
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.stop = threading.Event()
        self.paused = threading.Event()  # set: no new machine boots (an instance that never enrolls)
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def instances(self) -> list[dict[str, Any]]:
        answer = self.client.describe_instances(Filters=[{"Name": "tag:gridlane:pool", "Values": [self.pool]}])
        return [i for r in answer["Reservations"] for i in r["Instances"]]

    def states(self) -> dict[str, str]:
        return {i["InstanceId"]: i["State"]["Name"] for i in self.instances()}

    def log(self, instance_id: str) -> str:
        path = self.tmp / instance_id / "agent.log"
        return path.read_text() if path.exists() else ""

    def _boot(self, instance_id: str) -> None:
        script = self.script(instance_id)
        home = self.tmp / instance_id
        home.mkdir(parents=True, exist_ok=True)
        (home / "user-data").write_text(script)
        env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "HOME": str(home), "PYTHONPATH": str(ROOT),
               "PYTHONUNBUFFERED": "1"}  # fmt: skip
        with open(home / "agent.log", "w") as out:
            self.procs[instance_id] = subprocess.Popen(
                ["bash", str(home / "user-data")], stdout=out, stderr=subprocess.STDOUT, text=True, env=env, cwd=home,
                start_new_session=True,
            )  # fmt: skip

    def script(self, instance_id: str) -> str:
        raw = self.client.describe_instance_attribute(InstanceId=instance_id, Attribute="userData")
        return base64.b64decode(raw["UserData"]["Value"]).decode()

    def _loop(self) -> None:
        try:
            while not self.stop.wait(0.2):
                states = self.states()
                for iid, state in states.items():
                    if state == self.RUNNING and iid not in self.procs and not self.paused.is_set():
                        self._boot(iid)
                    elif state in self.GONE and iid in self.procs:
                        self.kill(iid, signal.SIGKILL)  # the machine is gone: no goodbye from its agent
                for iid in set(self.procs) - set(states):  # no longer listed at all
                    self.kill(iid, signal.SIGKILL)
        except BaseException as error:
            self.errors.append(error)

    def kill(self, instance_id: str, sig: int = signal.SIGKILL) -> None:
        proc = self.procs.get(instance_id)
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            proc.wait(timeout=10)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        for iid in list(self.procs):
            self.kill(iid)
        kill_groups_named_in(self.tmp.glob("**/*.pid"))  # jobs a killed agent left behind


class NovaMachines(Machines):
    """The same machines for servers in the OpenStack double: an ACTIVE server boots, a deleted one is gone."""

    RUNNING = "ACTIVE"
    GONE = ("DELETING", "DELETED", "ERROR")

    def __init__(self, cloud: Cloud, pool: str, tmp: Path) -> None:
        self.cloud, self.pool, self.tmp = cloud, pool, tmp
        self.procs = {}
        self.stop, self.paused = threading.Event(), threading.Event()
        self.errors = []
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def states(self) -> dict[str, str]:
        with self.cloud.lock:
            return {sid: "DELETING" if s["OS-EXT-STS:task_state"] == "deleting" else s["status"]
                    for sid, s in self.cloud.servers.items()
                    if s["metadata"].get("gridlane:pool") == self.pool and not s.get("_gone")}  # fmt: skip

    def script(self, instance_id: str) -> str:
        return self.cloud.user_data[instance_id]


@pytest.fixture
def machines(moto_url: str, burst_pool: Any, tmp_path: Path) -> Iterator[Machines]:  # noqa: F811
    m = Machines(moto_url, burst_pool.name, tmp_path / "machines")
    m.thread.start()
    yield m
    m.close()
    let_requests_finish(burst_pool.fabric)
    if m.errors:
        raise m.errors[0]


def make_openstack_pool(cast: dict[str, Any], cloud: Cloud, name: str, server_url: str, monkeypatch: Any) -> Any:
    """The same queue and on-premises fabric as `burst_pool`, bursting to an OpenStack pool: three flavors in
    zones az1 and az2 of RegionOne, an application credential from the worker's environment (env:GLOS)."""
    from portal.accounts.models import ResourceGroup
    from portal.burst.admin import set_burst_queues
    from portal.burst.models import BurstPool, InstanceType
    from portal.queues.models import Fabric, Queue, QueueTarget

    monkeypatch.setenv("GLOS_APPLICATION_CREDENTIAL_ID", APP_CREDENTIAL.key_id)
    monkeypatch.setenv("GLOS_APPLICATION_CREDENTIAL_SECRET", APP_CREDENTIAL.secret)
    vision = ResourceGroup.objects.get(slug="vision")
    onprem = Fabric.objects.create(name="onprem", kind="agent", gpus_milli=1000, cpus_milli=64_000,
                                   memory_mib=256 * 1024)  # fmt: skip
    fabric = Fabric.objects.create(name=name, kind="agent", settings={"heartbeat_s": 0.3, "lost_after_s": 3})
    queue = Queue.objects.create(slug="burstable", name="Burstable", kinds=["training", "batch"], preemptible=True,
                                 default_runtime_minutes=60, max_runtime_minutes=600)  # fmt: skip
    queue.allowed_groups.add(vision)
    QueueTarget.objects.create(queue=queue, fabric=onprem, order=0)
    pool = BurstPool.objects.create(
        fabric=fabric, provider="openstack", credentials="env:GLOS", region=OS_REGION, zones=["az1", "az2"],
        endpoint_url=cloud.auth_url, image=OS_IMAGE, boot_script=BOOT_SCRIPT, server_url=server_url,
        agent_group=ResourceGroup.objects.create(slug="platform", name="Platform"), min_instances=0, max_instances=3,
        max_idle_minutes=10, boot_timeout_minutes=15, orphan_grace_minutes=15, budget_per_hour=Decimal("20"),
        budget_per_month=Decimal("5000"),
    )  # fmt: skip
    for flavor, gpus, cpus, memory, price in (
        ("gpu.a10-1", 1, 4, 16, "0.80"),
        ("gpu.a10-1-large", 1, 8, 32, "0.95"),
        ("gpu.a10-4", 4, 48, 192, "3.60"),
    ):
        InstanceType.objects.create(pool=pool, name=flavor, gpu_model="a10", gpus=gpus, cpus=cpus, memory_gib=memory,
                                    price_on_demand=Decimal(price))  # fmt: skip
    set_burst_queues(pool, [queue])
    return pool


@pytest.fixture
def openstack_pool(cast: dict[str, Any], nova: Cloud, pool_name: str, monkeypatch: Any) -> Any:  # noqa: F811
    monkeypatch.setattr(openstack, "SCHEDULE_POLL_S", 0.01)
    return make_openstack_pool(cast, nova, pool_name, "https://gridlane.example", monkeypatch)


@pytest.fixture(params=["ec2", "openstack"])
def road(request: Any, cast: dict[str, Any], pool_name: str, live_server: Any, tmp_path: Path,  # noqa: F811
         monkeypatch: Any) -> Iterator[tuple[Any, Machines]]:  # fmt: skip
    """A burst pool and its machines, on each provider: the end-to-end road runs once per provider."""
    if request.param == "ec2":
        pool = request.getfixturevalue("burst_pool")
        yield pool, request.getfixturevalue("machines")
        return
    monkeypatch.setattr(openstack, "SCHEDULE_POLL_S", 0.05)
    cloud = request.getfixturevalue("nova")
    pool = make_openstack_pool(cast, cloud, pool_name, live_server.url, monkeypatch)
    m = NovaMachines(cloud, pool.name, tmp_path / "machines")
    m.thread.start()
    yield pool, m
    m.close()
    let_requests_finish(pool.fabric)
    if m.errors:
        raise m.errors[0]


@pytest.fixture
def step() -> Callable[..., dict[str, int]]:
    """One autoscaler step under its lock (waiting for the cycle's), at `now` or a later time."""
    from django.utils import timezone

    from portal.burst import autoscale
    from portal.worker.lock import cycle_lock

    def run(later: Any = None) -> dict[str, int]:
        with cycle_lock("burst", wait_s=60) as held:
            assert held
            return autoscale.step(timezone.now() + later if later is not None else timezone.now())

    return run
