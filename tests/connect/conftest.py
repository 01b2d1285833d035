"""The connect path against real servers: the portal under uvicorn (tests.connect.serving) and real Jupyter
servers (or a small app) as the jobs' servers."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from portal.accounts.models import ResourceGroup
from portal.queues.models import Fabric, Queue, QueueTarget
from portal.workloads import notebook_endpoint
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.conftest import wait_until
from tests.connect.serving import answers, stop
from tests.deploy.helpers import free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def hpc(cast: dict[str, Any]) -> Fabric:
    """A Slurm fabric (never asked here: the servers are started by the tests) behind a queue for both teams."""
    fabric = Fabric.objects.create(
        name="hpc", kind="slurm", gpus_milli=8000, cpus_milli=32000, memory_mib=64000, settings={}
    )
    queue = Queue.objects.create(slug="hpc-nb", name="HPC notebooks", kinds=["notebook", "training"])
    queue.allowed_groups.add(*ResourceGroup.objects.all())
    QueueTarget.objects.create(queue=queue, fabric=fabric)
    return fabric


@pytest.fixture
def running(submit: Any, hpc: Fabric) -> Callable[..., Workload]:
    """running(owner, kind="notebook"): a workload of the owner's, running on the fabric (no server yet)."""

    def make(owner: Any, kind: str = "notebook") -> Workload:
        w = submit(owner, queue="hpc-nb", kind=kind, command="" if kind == "notebook" else "python train.py")
        # Slurm says it runs on this host: its server (on loopback here) is on a node of the fabric
        Workload.objects.filter(pk=w.pk).update(state=State.RUNNING, fabric=hpc, external_id="42", host="localhost")
        w.refresh_from_db()
        return w

    return make


class Jupyter:
    def __init__(self, process: subprocess.Popen[bytes], port: int, token: str, root: Path) -> None:
        self.process, self.port, self.token, self.root = process, port, token, root


@pytest.fixture
def jupyter(tmp_path: Path) -> Iterator[Callable[[Workload], Jupyter]]:
    """jupyter(workload): a real Jupyter server (JupyterLab included) serving under the workload's connect
    path, as a job's launcher starts it, and recorded as the workload's server."""
    started: list[subprocess.Popen[bytes]] = []

    def start(w: Workload) -> Jupyter:
        port, token = free_port(), secrets.token_urlsafe(32)
        root = tmp_path / f"home-{w.pk}"
        root.mkdir()
        prefix = notebook_endpoint.connect_path(w.pk)
        env = dict(os.environ) | {"JUPYTER_TOKEN": token, "JUPYTER_RUNTIME_DIR": str(tmp_path / f"rt-{w.pk}"),
                                  "JUPYTER_CONFIG_DIR": str(tmp_path / f"cfg-{w.pk}")}  # fmt: skip
        process = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
             "--ServerApp.port_retries=0", f"--ServerApp.base_url={prefix}", f"--ServerApp.root_dir={root}",
             "--ServerApp.allow_remote_access=True", "--allow-root"],
            env=env, stdout=subprocess.DEVNULL, stderr=(tmp_path / f"jupyter-{w.pk}.log").open("wb"),
            start_new_session=True,
        )  # fmt: skip
        started.append(process)
        base = f"http://127.0.0.1:{port}{prefix}"
        wait_until(lambda: process.poll() is not None or answers(f"{base}api"), timeout=120, every=0.2)
        assert process.poll() is None, (tmp_path / f"jupyter-{w.pk}.log").read_text()[-2000:]
        from fabrics.base import Endpoint

        assert notebook_endpoint.record(w, Endpoint("127.0.0.1", port, token, prefix))
        return Jupyter(process, port, token, root)

    yield start
    for process in started:
        stop(process)
