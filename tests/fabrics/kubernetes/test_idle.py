"""Idle notebooks on Kubernetes are found and stopped as everywhere else: the worker asks the server the pod
reported how it is used, warns, then stops it, and the Job goes from the cluster.

The pod's Jupyter is a loopback stand-in that answers Jupyter's status API (tests/notebooks/test_asking_the_server),
reported through the same endpoint API the launcher in the pod uses; the double runs no processes.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from rest_framework.test import APIClient

from portal.queues.models import Queue
from portal.workloads.models import WorkloadEvent
from portal.workloads.states import State
from tests.conftest import wait_until
from tests.fabrics.kubernetes import test_worker
from tests.fabrics.kubernetes.conftest import NAMESPACE
from tests.k8s_double import ApiDouble
from tests.notebooks.test_asking_the_server import TOKEN, Jupyter

k8s = test_worker.k8s


@pytest.fixture
def server() -> Iterator[Jupyter]:
    jupyter_server = Jupyter()  # last used long ago: idle past any limit
    thread = threading.Thread(target=jupyter_server.serve_forever, daemon=True)
    thread.start()
    yield jupyter_server
    jupyter_server.shutdown()
    jupyter_server.server_close()


def test_an_idle_notebook_on_kubernetes_is_warned_then_stopped_and_its_job_deleted(
    alice: Any, submit: Any, k8s: Any, double: ApiDouble, server: Jupyter, settings: Any
) -> None:
    settings.GRIDLANE_IDLE_MINUTE_S = 0.5  # an 8-minute limit takes 4 s
    settings.GRIDLANE_NOTEBOOK_IDLE_WARNING_MINUTES = 2
    # The stand-in for the pod's Jupyter listens on loopback, not on the pod's IP: a network IT lists lets it through.
    settings.GRIDLANE_CONNECT_NETWORKS = ["127.0.0.1/32"]
    Queue.objects.filter(slug="k8s-notebooks").update(notebook_idle_minutes=8)
    workload = submit(alice, queue="k8s-notebooks", kind="notebook", command="", gpus=1)
    test_worker.run_until(workload, State.RUNNING)
    (created,) = double.objects("jobs", NAMESPACE)
    env = {e["name"]: e.get("value") for e in created["spec"]["template"]["spec"]["containers"][0]["env"]}
    body = {"host": "127.0.0.1", "port": server.port, "token": TOKEN, "path": "/"}
    answer = APIClient().post(f"/api/v1/workloads/{workload.pk}/endpoint/", body, format="json",
                              HTTP_AUTHORIZATION=f"Bearer {env['GRIDLANE_ENDPOINT_SECRET']}")  # fmt: skip
    assert answer.status_code == 204
    test_worker.run_until(workload, State.CANCELLING, State.CANCELLED, timeout=60)
    test_worker.run_until(workload, State.CANCELLED, timeout=60)
    reasons = list(WorkloadEvent.objects.filter(workload=workload).values_list("to_state", "reason"))
    warned, stopped = reasons[-3], reasons[-2]
    assert warned[0] == State.RUNNING
    assert re.fullmatch(r"Idle for \d+ min: this notebook stops at \d\d:\d\d UTC unless it is used", warned[1])
    assert re.fullmatch(r"stopped: idle for \d+ minutes \(the queue's limit is 8\)", stopped[1])
    assert server.asked
    assert all(a == f"token {TOKEN}" for a in server.asked)
    assert double.objects("jobs", NAMESPACE) == []
    wait_until(lambda: not double.objects("pods", NAMESPACE), timeout=60)
