"""A notebook on the real Slurm cluster: submit, sbatch, Jupyter on the node, its report, and it opens through
the portal's connect path, carried to the node through the login node's SSH (`connect_via: ssh`); and, idle, it
is warned and stopped: the worker asks the server the job reported how it is used, through the same tunnel.

The portal is uvicorn serving portal.asgi (tests.connect.serving), which the job reaches over loopback
(GRIDLANE_PUBLIC_URL). The node's Jupyter is Debian's jupyter-server, which tests/services/slurm/up.sh
installs: the job runs as the cluster account, which cannot read the portal's own virtualenv, just as a
real cluster's nodes have their own Jupyter.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from fabrics.base import JobState
from portal.accounts.models import ResourceGroup
from portal.queues.models import Fabric, Queue
from portal.worker import connections, tasks
from portal.workloads import notebook_endpoint, services
from portal.workloads.models import Workload, WorkloadEvent
from portal.workloads.states import State
from tests.conftest import wait_until
from tests.connect.client import call
from tests.connect.serving import session_cookie
from tests.fabrics.slurm.conftest import fabric_behind_queue
from tests.fabrics.slurm.test_worker import adapter, run_until

# IT's template for this queue: the node's Jupyter.
TEMPLATE = "#!/bin/bash\n# The node's own Jupyter server.\ngridlane_notebook jupyter-server\n"


@pytest.fixture
def notebooks(cast: dict[str, Any], cluster_lock: None, slurm_settings: dict[str, Any]) -> Iterator[Fabric]:
    connections.forget_all()
    fabric = fabric_behind_queue(
        slurm_settings | {"connect_via": "ssh"}, groups=ResourceGroup.objects.all(), template=TEMPLATE,
        slug="hpc-nb", name="HPC notebooks", kinds=["notebook"], default_runtime_minutes=10, max_runtime_minutes=60,
    )  # fmt: skip
    yield fabric
    connections.forget_all()


def test_a_notebook_on_slurm_reports_its_server_and_opens_through_the_portal_via_the_login_node(
    alice, charlie, submit, notebooks, asgi_portal, settings
):
    settings.GRIDLANE_PUBLIC_URL = asgi_portal  # where the job reports
    workload: Workload = submit(alice, queue="hpc-nb", kind="notebook", name="explore", command="", memory_gb=1)
    try:

        def linked() -> str:
            tasks.cycle()
            workload.refresh_from_db()
            return workload.connect_url

        wait_until(linked, timeout=120, every=0.5)
        assert workload.state in (State.DISPATCHING, State.RUNNING)
        assert workload.external_id.isdigit()
        assert notebook_endpoint.secret(workload.run_id) not in workload.rendered  # the stored copy masks it
        assert "gridlane_notebook jupyter-server" in workload.rendered

        assert workload.connect_url == f"{asgi_portal}/connect/{workload.pk}/lab"
        status = call(asgi_portal, "GET", f"/connect/{workload.pk}/api/status", Cookie=session_cookie(alice))
        assert status.status == 200, status.text
        assert "started" in status.json()
        theirs = call(asgi_portal, "GET", f"/connect/{workload.pk}/api/status", Cookie=session_cookie(charlie))
        assert theirs.status == 404
        server = notebook_endpoint.stored(workload)
        assert server is not None
        assert server.token not in status.text

        run_until(workload, State.RUNNING)  # the sync that follows leaves the link alone
        assert workload.connect_url
    finally:
        services.do_cancel(alice, workload)
    run_until(workload, State.CANCELLED)
    assert adapter(notebooks).poll([workload.external_id])[workload.external_id].state is JobState.CANCELLED


def test_an_idle_notebook_on_slurm_is_warned_then_stopped_as_its_own_server_says(
    alice, submit, notebooks, asgi_portal, settings
):
    settings.GRIDLANE_PUBLIC_URL = asgi_portal
    settings.GRIDLANE_IDLE_MINUTE_S = 0.5  # an 8-minute limit takes 4 s
    settings.GRIDLANE_NOTEBOOK_IDLE_WARNING_MINUTES = 2  # at most a sixth of 8: warned 1.33 "minutes" ahead
    Queue.objects.filter(slug="hpc-nb").update(notebook_idle_minutes=8)
    workload: Workload = submit(alice, queue="hpc-nb", kind="notebook", name="idle", command="", memory_gb=1)
    try:
        run_until(workload, State.CANCELLING, State.CANCELLED, timeout=120)
    finally:
        services.do_cancel(alice, workload)  # a no-op once it is cancelling
    run_until(workload, State.CANCELLED)

    events = list(WorkloadEvent.objects.filter(workload=workload).values_list("to_state", "reason"))
    warned, stopped, cancelled = events[-3:]
    assert warned[0] == State.RUNNING
    assert re.fullmatch(r"Idle for \d+ min: this notebook stops at \d\d:\d\d UTC unless it is used", warned[1])
    assert stopped[0] == State.CANCELLING
    assert re.fullmatch(r"stopped: idle for \d+ minutes \(the queue's limit is 8\)", stopped[1])
    assert cancelled[0] == State.CANCELLED
    assert workload.notebook_endpoint is None  # its server and its token are gone
    slurm = adapter(notebooks)
    assert slurm.poll([workload.external_id])[workload.external_id].state is JobState.CANCELLED
    alive = slurm.ssh.run(["squeue", "--noheader", "--states=pending,running", "--jobs", workload.external_id])
    assert alive.stdout.strip() == ""
