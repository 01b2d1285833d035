"""Code and packages in a real Slurm job on the test cluster: the job fetches its workload's bundle from the live
portal with its own secret, builds its requirements (a wheel built here, readable by the cluster's account: no
network) and runs its exact argv in ~/.gridlane/work/<run id> with the venv first on PATH."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from fabrics.base import JobState
from portal.accounts.models import ApiToken, ResourceGroup
from portal.code import services as code_travel
from portal.queues.models import Fabric, Queue, QueueTarget
from portal.workloads import notebook_endpoint
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.fabrics.slurm.conftest import finished, job
from tests.fabrics.travel.helpers import archive, tiny_wheel


@pytest.fixture
def shared() -> Iterator[Path]:
    """A folder the cluster's account can read (the wheel lies there)."""
    path = Path(tempfile.mkdtemp(prefix="gridlane-travel-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_real_slurm_job_runs_in_its_fetched_code_with_its_packages(
    slurm, alice, submit, live_server, settings, shared, tmp_path
):
    settings.GRIDLANE_PUBLIC_URL = live_server.url  # where the job fetches its bundle
    settings.GRIDLANE_CODE_DIR = tmp_path / "bundles"
    body = archive([("helpers", "dir", ""), ("helpers/__init__.py", "file", "VALUE = 7\n")])
    digest = hashlib.sha256(body).hexdigest()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue(alice, 'live')[1]}")
    # Django's test client sends bytes as they are (its stubs ask for str).
    uploaded = client.generic("PUT", f"/api/v1/code/{digest}/", body, content_type="application/gzip")  # type: ignore[arg-type]
    assert uploaded.status_code == 201
    wheel = tiny_wheel(shared / "wheels")
    for path in (shared / "wheels", wheel):
        path.chmod(0o755 if path.is_dir() else 0o644)
    fabric = Fabric.objects.create(name="hpc-live", kind="slurm", gpus_milli=0, cpus_milli=32000, memory_mib=64000)
    queue = Queue.objects.create(slug="hpc-live", name="HPC", kinds=["training"])
    queue.allowed_groups.add(*ResourceGroup.objects.all())
    QueueTarget.objects.create(queue=queue, fabric=fabric)
    command = """python -c 'import helpers, sys, tinypkg; print(helpers.VALUE, tinypkg.VALUE, sys.argv[1:])' 'a  b'"""
    w = submit(alice, queue="hpc-live", kind="training", command=command, code={"digest": digest},
               requirements=f"--no-index\n{wheel}\n")  # fmt: skip
    Workload.objects.filter(pk=w.pk).update(state=State.RUNNING, fabric=fabric)
    w = Workload.objects.get(pk=w.pk)
    env: dict[str, Any] = code_travel.job_env(w) | notebook_endpoint.job_env(w)
    spec = job(command, workload_id=w.run_id, env=env)

    external_id = slurm.submit(spec)
    status = finished(slurm, external_id, timeout=180)

    tail = slurm.tail(external_id)
    assert (status.state, status.exit_code) == (JobState.SUCCEEDED, 0), tail
    assert tail.startswith("7 42 ['a  b']\n")
