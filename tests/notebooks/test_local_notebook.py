"""A notebook on the local fabric, end to end without a browser: the worker starts a real Jupyter server under
the workload's connect path, its /api answering is the readiness signal, the workload keeps the server (with its
token) and shows only the portal's link, and cancelling stops it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from decimal import Decimal
from pathlib import Path

import pytest

from fabrics.base import FabricConfig, JobSpec, Resources
from fabrics.local.fabric import LocalFabric
from portal.worker import tasks
from portal.workloads import notebook_endpoint, services
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


@pytest.mark.django_db(transaction=True)
def test_a_notebook_runs_a_real_jupyter_server_and_stops_when_cancelled(cast, settings):
    alice = cast["alice"]
    request = services.SubmitRequest(
        queue="notebooks", kind="notebook", name="explore", gpus=Decimal("0.25"), cpus=Decimal(1),
        memory_gb=Decimal(2), lease_hours=Decimal(1), runtime_limit_minutes=60,
    )  # fmt: skip
    workload, _ = services.submit(alice, request)

    def server():
        tasks.cycle()
        return notebook_endpoint.stored(Workload.objects.get(pk=workload.pk))

    found = wait_until(server, timeout=60, every=0.3)
    assert (
        Workload.objects.get(pk=workload.pk).connect_url == f"{settings.GRIDLANE_PUBLIC_URL}/connect/{workload.pk}/lab"
    )
    assert found.path == f"/connect/{workload.pk}/"  # Jupyter serves under the connect path
    base = f"http://127.0.0.1:{found.port}{found.path}"
    assert json.loads(get(f"{base}api")[1])["version"]
    assert get(f"{base}api/contents")[0] == 403  # the token is required
    assert get(f"{base}api/contents", Authorization=f"token {found.token}")[0] == 200
    # Its own JupyterLab settings, in the job's folder, with Jupyter's news pop-up off.
    status, answer = get(f"{base}lab/api/settings/@jupyterlab/apputils-extension:notification",
                         Authorization=f"token {found.token}")  # fmt: skip
    assert status == 200
    assert json.loads(answer)["settings"]["fetchNews"] == "false"
    jobdir = Path(settings.GRIDLANE_LOCAL_FABRIC_ROOT) / "local" / str(workload.run_id)
    assert (jobdir / "jupyterlab-settings" / "@jupyterlab" / "apputils-extension").is_dir()
    assert (jobdir / "jupyterlab-workspaces").is_dir()

    w = Workload.objects.get(pk=workload.pk)
    services.do_cancel(alice, w)
    wait_until(lambda: (tasks.cycle(), Workload.objects.get(pk=w.pk).state == State.CANCELLED)[1], timeout=30)

    def refused():
        try:
            urllib.request.urlopen(f"{base}api", timeout=1)
        except OSError:
            return True
        return False

    wait_until(refused, timeout=60)
