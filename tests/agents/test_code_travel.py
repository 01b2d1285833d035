"""Code and packages travel to an agent's host: a real agent process fetches the workload's bundle from a live portal
with the workload's secret, builds its requirements (a wheel built here: no network) and runs the command in both."""

from __future__ import annotations

import hashlib

import pytest

from portal.agents import services as agents
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.conftest import wait_until
from tests.fabrics.travel.helpers import archive, tiny_wheel

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_agent_runs_the_command_in_its_uploaded_tree_with_its_packages(
    alice, api_as, submit, hosts, cycling, start_agent, live_server, settings, tmp_path, monkeypatch
):
    settings.GRIDLANE_PUBLIC_URL = live_server.url
    settings.GRIDLANE_CODE_DIR = tmp_path / "bundles"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "host-cache"))  # the agent's jobs inherit it
    body = archive([("helpers", "dir", ""), ("helpers/__init__.py", "file", "VALUE = 7\n")])
    digest = hashlib.sha256(body).hexdigest()
    put = api_as(alice).generic("PUT", f"/api/v1/code/{digest}/", body, content_type="application/gzip")
    assert put.status_code == 201
    wheel = tiny_wheel(tmp_path / "wheels")
    agents.register(hosts["fabric"], "host-1", {"queues": ["gpu-a"], "cpus": 16, "memory_mib": 64 * 1024})
    w = submit(alice, queue="gpu-a", command='python -c "import helpers, tinypkg; print(helpers.VALUE, tinypkg.VALUE)"',
               code={"digest": digest}, requirements=f"--no-index\n{wheel}\n")  # fmt: skip
    start_agent("host-1", "gpu-a")

    def ended() -> bool:
        w.refresh_from_db()
        return w.state in (State.SUCCEEDED, State.FAILED)

    wait_until(ended, timeout=180, every=0.2)
    assert w.state == State.SUCCEEDED, w.log_tail
    assert "7 42\n" in Workload.objects.get(pk=w.pk).log_tail
