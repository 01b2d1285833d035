"""An idle notebook on the local fabric, with a real Jupyter server whose own status API says when it was last
used: warned first, the warning taken back when it is used, warned again, then stopped. And a kernel busy
computing in silence is use.

A "minute" lasts a second here (GRIDLANE_IDLE_MINUTE_S), so an 8-minute idle limit takes 8 seconds."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from jupyter_client.blocking.client import BlockingKernelClient

from fabrics.base import FabricConfig, JobSpec, Resources
from fabrics.jupyter import probe
from fabrics.local.fabric import LocalFabric
from fabrics.local.supervisor import GRACE_ENV
from portal.queues.models import Queue
from portal.worker import tasks
from portal.workloads import services
from portal.workloads.models import Workload, WorkloadEvent
from portal.workloads.states import State
from tests.conftest import wait_until
from tests.notebooks.test_local_notebook import get


def cycled(workload: Workload) -> Workload:
    tasks.cycle()
    return Workload.objects.get(pk=workload.pk)


def reasons(workload: Workload) -> list[str]:
    return list(WorkloadEvent.objects.filter(workload=workload).values_list("reason", flat=True))


@pytest.mark.django_db(transaction=True)
def test_an_idle_notebook_is_warned_then_stopped_and_use_takes_the_warning_back(cast, client, settings):
    settings.GRIDLANE_IDLE_MINUTE_S = 1.0
    settings.GRIDLANE_NOTEBOOK_IDLE_WARNING_MINUTES = 2  # at most a sixth of 8: warned 1.33 "minutes" ahead
    Queue.objects.filter(slug="notebooks").update(notebook_idle_minutes=8)
    alice = cast["alice"]
    request = services.SubmitRequest(
        queue="notebooks", kind="notebook", name="idle", cpus=Decimal(1), memory_gb=Decimal(2),
        lease_hours=Decimal(1), runtime_limit_minutes=60,
    )  # fmt: skip
    workload, _ = services.submit(alice, request)
    url = wait_until(lambda: cycled(workload).connect_url, timeout=60, every=0.3)
    base, token = url.split("/lab?token=")

    warned = wait_until(lambda: cycled(workload).idle_stop_at, timeout=30, every=0.3)
    assert reasons(workload)[-1].startswith("Idle for 6 min: this notebook stops at ")
    assert f"{warned:%H:%M} UTC unless it is used" in reasons(workload)[-1]
    client.force_login(alice)
    page = client.get(workload.get_absolute_url()).content.decode()
    assert 'id="idle-warning"' in page
    assert f"This notebook stops at {warned:%H:%M} UTC unless it is used" in page

    # Use: an API call with the token is activity to the server (its status API, which Gridlane asks, is not).
    assert get(f"{base}/api/contents", Authorization=f"token {token}")[0] == 200
    wait_until(lambda: cycled(workload).idle_stop_at is None, timeout=10, every=0.3)
    assert reasons(workload)[-1] == "in use again: it will not be stopped for being idle"
    assert 'id="idle-warning"' not in client.get(workload.get_absolute_url()).content.decode()

    wait_until(lambda: cycled(workload).state == State.CANCELLED, timeout=40, every=0.3)
    events = list(WorkloadEvent.objects.filter(workload=workload).values_list("to_state", "reason"))
    (warned_again, stopped, cancelled) = events[-3:]
    assert warned_again[1].startswith("Idle for 6 min: this notebook stops at ")
    assert stopped[0] == State.CANCELLING  # through the cancel path, with its own reason
    assert re.fullmatch(r"stopped: idle for [89] minutes \(the queue's limit is 8\)", stopped[1])
    assert cancelled[0] == State.CANCELLED
    with pytest.raises(urllib.error.URLError, match="refused"):  # the server is gone
        urllib.request.urlopen(f"{base}/api", timeout=1)


def test_a_kernel_busy_with_a_silent_computation_counts_as_use(tmp_path, monkeypatch):
    """The server hears nothing from a kernel that computes without output; asked, it says the kernel is busy."""
    monkeypatch.setenv(GRACE_ENV, "0.3")
    fabric = LocalFabric(FabricConfig("here", "local", Resources(1000, 8000, 16384), {"root": str(tmp_path)}))
    spec = JobSpec(workload_id=uuid.uuid4(), name="nb", kind="notebook", owner="alice", group="vision",
                   queue="notebooks", command="", per_node=Resources(0, 1000, 2048), runtime_limit_s=120)  # fmt: skip
    external_id = fabric.submit(spec)
    jobdir = tmp_path / external_id
    kernel = None
    try:
        record = jobdir / "notebook.json"
        server = wait_until(lambda: record.exists() and json.loads(record.read_text()), timeout=30, every=0.2)
        port, token = server["port"], server["token"]
        wait_until(lambda: probe("127.0.0.1", port, token, 2)[0], timeout=60, every=0.3)
        started = urllib.request.Request(f"http://127.0.0.1:{port}/api/kernels", data=b"{}", method="POST",
                                         headers={"Authorization": f"token {token}"})  # fmt: skip
        with urllib.request.urlopen(started, timeout=30) as answer:
            kernel_id = json.loads(answer.read())["id"]
        # A client of our own on the kernel's channels, as a notebook's page would be through the server.
        kernel = BlockingKernelClient(connection_file=str(jobdir / "jupyter-runtime" / f"kernel-{kernel_id}.json"))
        kernel.load_connection_file()
        kernel.start_channels()
        kernel.wait_for_ready(timeout=30)
        kernel.execute("import time; time.sleep(60)")

        def busy() -> bool:
            status, body = get(f"http://127.0.0.1:{port}/api/kernels/{kernel_id}?no_track_activity=1",
                               Authorization=f"token {token}")  # fmt: skip
            return status == 200 and json.loads(body)["execution_state"] == "busy"

        wait_until(busy, timeout=30, every=0.2)
        time.sleep(2)  # quiet: the kernel computes and says nothing
        _, heard = probe("127.0.0.1", port, token, 2, busy_check_after_s=3600)
        _, asked = probe("127.0.0.1", port, token, 2, busy_check_after_s=1)
        now = datetime.now(UTC)
        assert heard is not None
        assert asked is not None
        assert now - heard >= timedelta(seconds=1.5)  # what the status API says on its own
        assert now - asked < timedelta(seconds=1)  # busy is use now
    finally:
        if kernel is not None:
            kernel.stop_channels()
        fabric.cancel(external_id)
        wait_until(lambda: fabric.poll([external_id])[external_id].state.finished, timeout=30, every=0.2)
