"""A job reports its web server (a notebook's Jupyter, or an app): POST /api/v1/workloads/<id>/endpoint/ with the
workload's secret. What anyone is shown is the portal's own link (/connect/<id>/), never the server's address."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from fabrics.base import JobState, JobStatus
from fabrics.ssh.notebook import ENDPOINT_SECRET_ENV, ENDPOINT_URL_ENV
from portal.accounts.models import ResourceGroup
from portal.queues.models import Fabric, Queue, QueueTarget
from portal.worker import pods, sync
from portal.workloads import notebook_endpoint
from portal.workloads.models import Workload
from portal.workloads.states import State

TOKEN = "Zm9vYmFyYmF6cXV4cXV1eHF1dXpxdXV6cXV1enF1dXo"
GOOD = {"host": "node17.hpc.example.org", "port": 8888, "token": TOKEN}


@pytest.fixture
def hpc(cast: dict[str, Any]) -> Fabric:
    """A Slurm fabric (never reached here) behind a notebook queue both teams may use, whose nodes the portal
    reaches through its login node (their names resolve there, not here)."""
    fabric = Fabric.objects.create(
        name="hpc",
        kind="slurm",
        gpus_milli=8000,
        cpus_milli=32000,
        memory_mib=64000,
        settings={"host": "login.hpc.example.org", "connect_via": "ssh"},
    )
    queue = Queue.objects.create(slug="hpc-nb", name="HPC notebooks", kinds=["notebook", "training"])
    queue.allowed_groups.add(*ResourceGroup.objects.all())
    QueueTarget.objects.create(queue=queue, fabric=fabric)
    return fabric


@pytest.fixture
def notebook(alice: Any, submit: Any, hpc: Fabric) -> Workload:
    """alice's notebook, dispatched to the Slurm fabric, which says it runs on node17.hpc.example.org."""
    workload = submit(alice, queue="hpc-nb", kind="notebook", command="")
    Workload.objects.filter(pk=workload.pk).update(
        state=State.DISPATCHING, fabric=hpc, external_id="42", host="node17.hpc.example.org"
    )
    workload.refresh_from_db()
    return workload


def report(workload_id: Any, secret: str | None, body: Any = GOOD, **headers: Any) -> Any:
    if secret is not None:
        headers.setdefault("HTTP_AUTHORIZATION", f"Bearer {secret}")
    return APIClient().post(f"/api/v1/workloads/{workload_id}/endpoint/", body, format="json", **headers)


def secret_of(w: Workload) -> str:
    return notebook_endpoint.secret(w.run_id)


def test_the_job_reports_its_server_and_the_owner_sees_the_portals_link(notebook, api_as, alice, bob, settings):
    answer = report(notebook.pk, secret_of(notebook))
    assert answer.status_code == 204
    notebook.refresh_from_db()
    assert notebook.connect_url == f"{settings.GRIDLANE_PUBLIC_URL}/connect/{notebook.pk}/lab"
    assert api_as(alice).get(f"/api/v1/workloads/{notebook.pk}/").json()["connect_url"] == notebook.connect_url
    assert api_as(bob).get(f"/api/v1/workloads/{notebook.pk}/").json()["connect_url"] == ""  # not shared with him
    Workload.objects.filter(pk=notebook.pk).update(shared_with_team=True)
    assert api_as(bob).get(f"/api/v1/workloads/{notebook.pk}/").json()["connect_url"] == notebook.connect_url
    assert api_as(bob).get("/api/v1/workloads/").json()["results"][0]["connect_url"] == notebook.connect_url


def test_a_running_notebook_may_report_again_and_an_ipv6_host_is_kept(notebook, settings):
    settings.GRIDLANE_CONNECT_NETWORKS = ["fd00::/8"]  # IT's compute network
    Workload.objects.filter(pk=notebook.pk).update(state=State.RUNNING)
    assert report(notebook.pk, secret_of(notebook), GOOD | {"host": "FD00::17"}).status_code == 204
    notebook.refresh_from_db()
    assert notebook_endpoint.stored(notebook).host == "fd00::17"


def test_a_wrong_secret_and_an_unknown_workload_get_the_same_answer(notebook, cast, submit):
    other = submit(cast["charlie"], queue="hpc-nb", kind="notebook", command="")
    answers = [
        report(notebook.pk, "0" * 64),  # a wrong secret
        report(notebook.pk, secret_of(other)),  # another workload's
        report(notebook.pk, secret_of(notebook).upper()),  # close is not enough
        report(notebook.pk, None),  # none at all
        report(notebook.pk, None, HTTP_AUTHORIZATION=f"Token {secret_of(notebook)}"),  # not as a bearer
        report(uuid.uuid4(), "0" * 64),  # no such workload
        report(uuid.uuid4(), None),
    ]
    assert {(a.status_code, a.content) for a in answers} == {(404, answers[0].content)}
    notebook.refresh_from_db()
    assert notebook.connect_url == ""


def test_the_secret_of_an_earlier_attempt_speaks_no_more(notebook):
    earlier = secret_of(notebook)
    Workload.objects.filter(pk=notebook.pk).update(attempt=1)  # preempted and dispatched again
    assert report(notebook.pk, earlier).status_code == 404
    notebook.refresh_from_db()
    assert report(notebook.pk, secret_of(notebook)).status_code == 204


@pytest.mark.parametrize("state", [State.PENDING, State.ADMITTED, State.CANCELLING, State.SUCCEEDED, State.FAILED])
def test_only_a_notebook_that_is_starting_or_running_takes_a_report(notebook, state):
    Workload.objects.filter(pk=notebook.pk).update(state=state)
    answer = report(notebook.pk, secret_of(notebook))
    assert answer.status_code == 409
    assert "takes a report only while it starts or runs" in answer.json()["errors"]["detail"][0]
    notebook.refresh_from_db()
    assert notebook.connect_url == ""


def test_a_training_run_publishes_an_app_with_a_label_and_a_notebook_must_send_its_token(notebook, alice, submit, hpc):
    training = submit(alice, queue="hpc-nb", kind="training", command="tensorboard --logdir runs")
    Workload.objects.filter(pk=training.pk).update(state=State.RUNNING, fabric=hpc, host="node17")
    app = {"host": "node17", "port": 6006, "label": "TensorBoard"}  # an app may have no token of its own
    assert report(training.pk, secret_of(training), app).status_code == 204
    training.refresh_from_db()
    assert notebook_endpoint.label(training) == "TensorBoard"
    assert training.connect_url.endswith(f"/connect/{training.pk}/")
    answer = report(notebook.pk, secret_of(notebook), {"host": "node17", "port": 8888})
    assert answer.status_code == 409
    assert "token" in answer.json()["errors"]["detail"][0]


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        (GOOD | {"host": "node 17"}, {"host"}),
        (GOOD | {"host": "0.0.0.0"}, {"host"}),  # noqa: S104 (what a server listens on, not where it is)
        (GOOD | {"host": "::"}, {"host"}),
        (GOOD | {"host": "-node.example.org"}, {"host"}),
        (GOOD | {"host": "node..example.org"}, {"host"}),
        (GOOD | {"host": "fe80::1%eth0"}, {"host"}),
        (GOOD | {"host": "evil.example.org/path?x="}, {"host"}),
        (GOOD | {"host": "user@evil.example.org"}, {"host"}),
        (GOOD | {"host": "a" * 64 + ".org"}, {"host"}),
        (GOOD | {"host": 17}, {"host"}),
        (GOOD | {"port": 0}, {"port"}),
        (GOOD | {"port": 65536}, {"port"}),
        (GOOD | {"port": "8888"}, {"port"}),
        (GOOD | {"port": True}, {"port"}),
        (GOOD | {"port": 8888.5}, {"port"}),
        (GOOD | {"token": "short"}, {"token"}),
        (GOOD | {"token": TOKEN + "/../x"}, {"token"}),
        (GOOD | {"token": TOKEN + "&next=evil"}, {"token"}),
        (GOOD | {"token": TOKEN + "\n"}, {"token"}),
        (GOOD | {"token": None}, {"token"}),
        (GOOD | {"label": "<script>"}, {"label"}),
        (GOOD | {"label": "x" * 41}, {"label"}),
        (GOOD | {"label": 7}, {"label"}),
        (GOOD | {"path": "/other/"}, {"path"}),
        (GOOD | {"path": "/connect/00000000-0000-0000-0000-000000000000/"}, {"path"}),  # another workload's
        (GOOD | {"user": "root"}, {"user"}),
        ([GOOD], {"detail"}),
        ("node17:8888", {"detail"}),
    ],
)
def test_a_malformed_report_is_refused_field_by_field(notebook, body, fields):
    answer = report(notebook.pk, secret_of(notebook), body)
    assert answer.status_code == 400
    assert set(answer.json()["errors"]) == fields
    notebook.refresh_from_db()
    assert notebook.connect_url == ""


def test_a_report_must_be_json(notebook):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret_of(notebook)}")
    answer = client.post(f"/api/v1/workloads/{notebook.pk}/endpoint/", GOOD)  # a form, not JSON
    assert answer.status_code == 415
    assert client.get(f"/api/v1/workloads/{notebook.pk}/endpoint/").status_code == 405


def test_the_job_environment_carries_the_callback_a_secret_that_works_and_the_connect_path(notebook, settings):
    settings.GRIDLANE_PUBLIC_URL = "https://gridlane.example.org"
    env = notebook_endpoint.job_env(notebook)
    assert env == {
        ENDPOINT_URL_ENV: f"https://gridlane.example.org/api/v1/workloads/{notebook.pk}/endpoint/",
        ENDPOINT_SECRET_ENV: secret_of(notebook),
        "GRIDLANE_CONNECT_PREFIX": f"/connect/{notebook.pk}/",
    }
    assert report(notebook.pk, env[ENDPOINT_SECRET_ENV], GOOD | {"path": f"/connect/{notebook.pk}/"}).status_code == 204
    assert notebook_endpoint.stored(Workload.objects.get(pk=notebook.pk)).path == f"/connect/{notebook.pk}/"
    settings.SECRET_KEY = "another portal's key"
    assert notebook_endpoint.job_env(notebook)[ENDPOINT_SECRET_ENV] != env[ENDPOINT_SECRET_ENV]


def test_sync_keeps_the_reported_link_when_the_fabric_knows_none(notebook):
    assert report(notebook.pk, secret_of(notebook)).status_code == 204
    notebook.refresh_from_db()
    link = notebook.connect_url
    assert notebook.fabric is not None
    sync._follow(notebook.fabric, notebook, JobStatus(JobState.RUNNING, host="node17"))  # Slurm's poll: no URL
    notebook.refresh_from_db()
    assert (notebook.state, notebook.connect_url) == (State.RUNNING, link)


def test_the_reported_server_is_kept_for_the_worker_and_shown_to_no_one(notebook, api_as, alice, bob, client, cast):
    assert report(notebook.pk, secret_of(notebook)).status_code == 204
    notebook.refresh_from_db()
    assert notebook.notebook_endpoint == {"host": "node17.hpc.example.org", "port": 8888, "token": TOKEN, "path": "/"}

    mine = api_as(alice).get(f"/api/v1/workloads/{notebook.pk}/").json()
    assert "notebook_endpoint" not in mine
    assert TOKEN not in str(mine)
    assert "node17" not in mine["connect_url"]  # the portal's own link, not the server's address
    assert TOKEN not in api_as(bob).get(f"/api/v1/workloads/{notebook.pk}/").content.decode()
    client.force_login(cast["it"])
    listed = client.get("/admin/workloads/workload/")
    assert listed.status_code == 200
    assert TOKEN not in listed.content.decode()
    shown = client.get(f"/admin/workloads/workload/{notebook.pk}/change/")
    assert shown.status_code == 200
    assert notebook.connect_url  # it has a link, and IT's page shows no token either
    assert TOKEN not in shown.content.decode()


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "2130706433", "0x7f.1", "127.1", "::ffff:127.0.0.1", "localhost", "169.254.169.254",
     "0251.0376.0251.0376", "fe80::1", "10.9.9.9", "fd00::99", "8.8.8.8", "node18.hpc.example.org"],
)  # fmt: skip
def test_a_server_off_the_fabrics_nodes_is_refused_naming_the_host(notebook, host):
    answer = report(notebook.pk, secret_of(notebook), GOOD | {"host": host})
    assert answer.status_code == 400, answer.content
    assert set(answer.json()["errors"]) == {"host"}
    assert notebook_endpoint.stored(Workload.objects.get(pk=notebook.pk)) is None


def test_it_widens_where_servers_may_be_with_a_network(notebook, settings):
    assert report(notebook.pk, secret_of(notebook), GOOD | {"host": "10.9.9.9"}).status_code == 400
    settings.GRIDLANE_CONNECT_NETWORKS = ["10.9.0.0/16"]
    assert report(notebook.pk, secret_of(notebook), GOOD | {"host": "10.9.9.9"}).status_code == 204
    assert report(notebook.pk, secret_of(notebook), GOOD | {"host": "169.254.169.254"}).status_code == 400


def test_a_kubernetes_notebook_reports_one_of_its_own_pods_addresses(notebook, hpc):
    hpc.kind, hpc.settings = "kubernetes", {}
    hpc.save(update_fields=["kind", "settings"])
    Workload.objects.filter(pk=notebook.pk).update(host="")
    pod = GOOD | {"host": "10.244.1.17"}
    # Before the poll has seen its pods: a private address is kept, and the gate checks it on every connection.
    assert report(notebook.pk, secret_of(notebook), pod).status_code == 204
    assert report(notebook.pk, secret_of(notebook), GOOD | {"host": "169.254.169.254"}).status_code == 400
    Workload.objects.filter(pk=notebook.pk).update(host="gpu-node-1")
    assert pods.record([notebook], {"42": JobStatus(JobState.RUNNING, addresses=("10.244.1.17",))}, timezone.now())
    assert report(notebook.pk, secret_of(notebook), pod).status_code == 204
    for elsewhere in ("10.244.1.18", "gpu-node-1", "192.168.1.1"):  # another pod, its node, the rest of the network
        answer = report(notebook.pk, secret_of(notebook), GOOD | {"host": elsewhere})
        assert answer.status_code == 400, answer.content
        assert set(answer.json()["errors"]) == {"host"}
    assert notebook_endpoint.stored(Workload.objects.get(pk=notebook.pk)).host == "10.244.1.17"
