"""A notebook on the local fabric, end to end without a browser: the worker starts a real Jupyter server,
its /api answering is the readiness signal, the connect URL carries the token, and cancelling stops it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from decimal import Decimal

import pytest

from fabrics.base import FabricConfig, JobSpec, Resources
from fabrics.local.fabric import LocalFabric
from portal.worker import tasks
from portal.workloads import services
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.conftest import wait_until


def get(url: str, **headers: str) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, ""


def test_the_notebook_script_keeps_its_token_out_of_the_stored_script(tmp_path):
    fabric = LocalFabric(FabricConfig("local", "local", Resources(8000, 8000, 8192), {"root": str(tmp_path)}))
    job = JobSpec(
        workload_id=__import__("uuid").uuid4(), name="nb", kind="notebook", owner="alice", group="vision",
        queue="notebooks", command="", per_node=Resources(250, 2000, 8192),
    )  # fmt: skip
    script = fabric.render(job)
    assert "jupyter_server" in script
    assert "--allow-root" in script
    assert "JUPYTER_TOKEN" in script
    assert "token_urlsafe" in script  # chosen when the job starts, not written here


def test_a_bad_connect_url_template_is_refused(tmp_path):
    with pytest.raises(ValueError, match="connect_url_template"):
        LocalFabric.check_settings({"root": str(tmp_path), "connect_url_template": "http://{host}:{nope}/"})


@pytest.mark.django_db(transaction=True)
def test_a_notebook_runs_a_real_jupyter_server_and_stops_when_cancelled(cast):
    alice = cast["alice"]
    request = services.SubmitRequest(
        queue="notebooks", kind="notebook", name="explore", gpus=Decimal("0.25"), cpus=Decimal(1),
        memory_gb=Decimal(2), lease_hours=Decimal(1), runtime_limit_minutes=60,
    )  # fmt: skip
    workload, _ = services.submit(alice, request)

    def connect_url():
        tasks.cycle()
        return Workload.objects.get(pk=workload.pk).connect_url

    url = wait_until(connect_url, timeout=60, every=0.3)
    assert url.startswith("http://127.0.0.1:")
    assert "/lab?token=" in url
    base, token = url.split("/lab?token=")
    assert json.loads(get(f"{base}/api")[1])["version"]
    assert get(f"{base}/api/contents")[0] == 403  # the token is required
    assert get(f"{base}/api/contents", Authorization=f"token {token}")[0] == 200
    status, page = get(url)
    assert status == 200
    assert "JupyterLab" in page

    w = Workload.objects.get(pk=workload.pk)
    services.do_cancel(alice, w)
    wait_until(lambda: (tasks.cycle(), Workload.objects.get(pk=w.pk).state == State.CANCELLED)[1], timeout=30)

    def refused():
        try:
            urllib.request.urlopen(f"{base}/api", timeout=1)
        except OSError:
            return True
        return False

    wait_until(refused, timeout=60)
