"""An idle notebook on the local fabric, with a real Jupyter server whose own status API says when it was last
used: warned first, the warning taken back when it is used, warned again, then stopped. And a kernel busy
computing in silence is use.

The worker's clock is moved by the test (time-machine) to fixed spans after the last use the server reports,
so nothing depends on how fast a busy machine runs the cycle."""

from __future__ import annotations

import json
import queue
import time
import urllib.error
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from jupyter_client.blocking.client import BlockingKernelClient

from fabrics import jupyter
from fabrics.base import Endpoint, FabricConfig, JobSpec, Resources
from fabrics.jupyter import probe
from fabrics.local.fabric import LocalFabric
from fabrics.local.supervisor import GRACE_ENV
from portal.queues.models import Queue
from portal.worker import tasks
from portal.workloads import notebook_endpoint, services
from portal.workloads.models import Workload, WorkloadEvent
from portal.workloads.states import State
from tests.conftest import wait_until
from tests.notebooks.test_local_notebook import get

LIMIT = timedelta(minutes=8)
WARN_AFTER = LIMIT - timedelta(seconds=80)


def cycled(workload: Workload) -> Workload:
    tasks.cycle()
    return Workload.objects.get(pk=workload.pk)


def reasons(workload: Workload) -> list[str]:
    return list(WorkloadEvent.objects.filter(workload=workload).values_list("reason", flat=True))


def last_activity(base: str, token: str) -> datetime:
    """When the notebook's server says it was last used (its status API does not count as use)."""
    status, body = get(f"{base}/api/status", Authorization=f"token {token}")
    assert status == 200
    used = jupyter.parse_time(json.loads(body)["last_activity"])
    assert used is not None
    return used


@pytest.mark.django_db(transaction=True)
def test_an_idle_notebook_is_warned_then_stopped_and_use_takes_the_warning_back(cast, client, settings):
    """The worker's clock is set by the test, a fixed span after the last use the server reports: no minute can
    tick over under a slow machine. An 8-minute limit with a 2-minute warning (at most a sixth of 8: 80 s)
    warns at 6 min 40 s of quiet and stops at 8 minutes."""
    settings.GRIDLANE_IDLE_MINUTE_S = 60.0
    settings.GRIDLANE_NOTEBOOK_IDLE_WARNING_MINUTES = 2
    Queue.objects.filter(slug="notebooks").update(notebook_idle_minutes=8)
    alice = cast["alice"]
    request = services.SubmitRequest(
        queue="notebooks", kind="notebook", name="idle", cpus=Decimal(1), memory_gb=Decimal(2),
        lease_hours=Decimal(1), runtime_limit_minutes=60,
    )  # fmt: skip
    workload, _ = services.submit(alice, request)
    server = wait_until(lambda: notebook_endpoint.stored(cycled(workload)), timeout=120, every=0.3)
    base, token = f"http://127.0.0.1:{server.port}{server.path.rstrip('/')}", server.token
    used = last_activity(base, token)

    with time_machine.travel(used + WARN_AFTER - timedelta(seconds=1), tick=False):
        assert cycled(workload).idle_stop_at is None  # a second before the warning is due
    with time_machine.travel(used + WARN_AFTER, tick=False):
        warned = cycled(workload).idle_stop_at
        assert warned == used + LIMIT
        assert reasons(workload)[-1] == f"Idle for 6 min: this notebook stops at {warned:%H:%M} UTC unless it is used"
        client.force_login(alice)
        page = client.get(workload.get_absolute_url()).content.decode()
        assert 'id="idle-warning"' in page
        assert f"This notebook stops at {warned:%H:%M} UTC unless it is used" in page

    # Use: an API call with the token is activity to the server (its status API, which Gridlane asks, is not).
    assert get(f"{base}/api/contents", Authorization=f"token {token}")[0] == 200
    used_again = last_activity(base, token)
    assert used_again > used
    with time_machine.travel(used + WARN_AFTER, tick=False):
        assert cycled(workload).idle_stop_at is None
        assert reasons(workload)[-1] == "in use again: it will not be stopped for being idle"
        assert 'id="idle-warning"' not in client.get(workload.get_absolute_url()).content.decode()

    with time_machine.travel(used_again + WARN_AFTER, tick=False):
        assert cycled(workload).idle_stop_at == used_again + LIMIT
    with time_machine.travel(used_again + LIMIT, tick=False):
        wait_until(lambda: cycled(workload).state == State.CANCELLED, timeout=120, every=0.3)
    events = list(WorkloadEvent.objects.filter(workload=workload).values_list("to_state", "reason"))
    (warned_again, stopped, cancelled) = events[-3:]
    assert warned_again[1].startswith("Idle for 6 min: this notebook stops at ")
    assert stopped == (State.CANCELLING, "stopped: idle for 8 minutes (the queue's limit is 8)")  # the cancel path
    assert cancelled[0] == State.CANCELLED
    with pytest.raises(urllib.error.URLError, match="refused"):  # the server is gone
        urllib.request.urlopen(f"{base}/api", timeout=10)


def replied_to_kernel_info(kernel: BlockingKernelClient) -> bool:
    kernel.kernel_info()
    try:
        return bool(kernel.get_shell_msg(timeout=2)["msg_type"] == "kernel_info_reply")
    except queue.Empty:
        return False


def test_a_kernel_busy_with_a_silent_computation_counts_as_use(tmp_path, monkeypatch):
    """The server hears nothing from a kernel that computes without output; asked, it says the kernel is busy."""
    monkeypatch.setenv(GRACE_ENV, "0.3")
    fabric = LocalFabric(FabricConfig("here", "local", Resources(1000, 8000, 16384), {"root": str(tmp_path)}))
    spec = JobSpec(workload_id=uuid.uuid4(), name="nb", kind="notebook", owner="alice", group="vision",
                   queue="notebooks", command="", per_node=Resources(0, 1000, 2048), runtime_limit_s=3600)  # fmt: skip
    external_id = fabric.submit(spec)
    jobdir = tmp_path / external_id
    kernel = None
    try:
        record = jobdir / "notebook.json"
        server = wait_until(lambda: record.exists() and json.loads(record.read_text()), timeout=30, every=0.2)
        port, token = server["port"], server["token"]
        wait_until(lambda: probe(Endpoint("127.0.0.1", port, token), 2)[0], timeout=60, every=0.3)
        started = urllib.request.Request(f"http://127.0.0.1:{port}/api/kernels", data=b"{}", method="POST",
                                         headers={"Authorization": f"token {token}"})  # fmt: skip
        with urllib.request.urlopen(started, timeout=30) as answer:
            kernel_id = json.loads(answer.read())["id"]
        # A client of our own on the kernel's channels, as a notebook's page would be through the server.
        kernel = BlockingKernelClient(connection_file=str(jobdir / "jupyter-runtime" / f"kernel-{kernel_id}.json"))
        kernel.load_connection_file()
        # No heartbeat channel: on a busy machine a late heartbeat reads as a dead kernel (wait_for_ready's
        # check); the kernel's reply to kernel_info is what says it is ready.
        kernel.start_channels(hb=False)

        def server_says(state: str) -> bool:
            status, body = get(f"http://127.0.0.1:{port}/api/kernels/{kernel_id}?no_track_activity=1",
                               Authorization=f"token {token}")  # fmt: skip
            return status == 200 and json.loads(body)["execution_state"] == state

        # The kernel answers us, and the server hears its status: each kernel_info makes the kernel publish one,
        # and a server that subscribed late (a busy machine) hears the next. Only then does a busy kernel read
        # as busy to the server.
        wait_until(lambda: replied_to_kernel_info(kernel) and server_says("idle"), timeout=120, every=0)
        # Long enough to stay busy through the probes below however slow the machine; the job's cancel ends it.
        kernel.execute("import time; time.sleep(900)")
        wait_until(lambda: server_says("busy"), timeout=120, every=0.2)
        time.sleep(2)  # quiet: the kernel computes and says nothing
        _, heard = probe(Endpoint("127.0.0.1", port, token), 30, busy_check_after_s=3600)
        before = datetime.now(UTC)
        _, asked = probe(Endpoint("127.0.0.1", port, token), 30, busy_check_after_s=1)
        assert heard is not None
        assert asked is not None
        assert before - heard >= timedelta(seconds=2)  # what the status API says on its own: quiet since the sleep
        assert asked >= before  # busy is use now, the moment it is asked
    finally:
        if kernel is not None:
            kernel.stop_channels()
        fabric.cancel(external_id)
        wait_until(lambda: fabric.poll([external_id])[external_id].state.finished, timeout=30, every=0.2)
