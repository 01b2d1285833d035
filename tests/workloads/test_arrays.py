"""Arrays: one parent, one workload per index counted by policy, at most the % limit running, and every
element sees its index. Through the API and on the local fabric with the real worker."""

from __future__ import annotations

import json

import pytest

from portal.worker import tasks
from portal.workloads import services
from portal.workloads.models import Workload
from portal.workloads.states import ACTIVE, State
from tests.conftest import wait_until

URL = "/api/v1/workloads/"


def post(client, **body):
    data = {"queue": "train", "kind": "batch", "name": "sweep", "command": "true"} | body
    return client.post(URL, json.dumps(data), content_type="application/json")


def test_an_array_is_one_parent_with_an_element_per_index(api_as, alice):
    client = api_as(alice)
    response = post(client, array="0-9:3,20%2")
    assert response.status_code == 201, response.content
    parent = response.json()
    assert (parent["array"], parent["array_index"], parent["elements"]) == ("0-9:3,20%2", None, {"pending": 5})
    elements = Workload.objects.filter(array_parent_id=parent["id"]).order_by("array_index")
    assert [(e.array_index, e.name, e.array_throttle) for e in elements] == [
        (i, f"sweep[{i}]", 2) for i in (0, 3, 6, 9, 20)
    ]
    listed = client.get(URL).json()["results"]
    assert [w["id"] for w in listed] == [parent["id"]]  # the list shows the parent, with its counts
    assert listed[0]["elements"] == {"pending": 5}
    inside = client.get(URL, {"array": parent["id"]}).json()["results"]
    assert [w["array_index"] for w in inside] == [0, 3, 6, 9, 20]
    assert {w["array_parent"] for w in inside} == {parent["id"]}


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"array": "0-5000"}, "array", "at most 1000 elements"),
        ({"array": "0-9%0"}, "array", "at least 1"),
        ({"array": "ten"}, "array", "is no array"),
        ({"array": "0-3", "kind": "notebook", "queue": "notebooks"}, "array", "training or batch"),
    ],
)
def test_a_bad_array_answers_400_and_creates_nothing(api_as, alice, body, field, words):
    response = post(api_as(alice), **body)
    assert response.status_code == 400, response.content
    assert any(words in m for m in response.json()["errors"][field]), response.json()
    assert not Workload.objects.exists()


def test_cancel_the_parent_cancels_every_element_and_one_element_alone(api_as, alice):
    client = api_as(alice)
    first = post(client, array="0-3").json()
    one = Workload.objects.get(array_parent_id=first["id"], array_index=2)
    assert client.post(f"{URL}{one.pk}/cancel/").json()["state"] == "cancelled"
    assert Workload.objects.get(pk=first["id"]).state == State.PENDING
    assert client.post(f"{URL}{first['id']}/cancel/").json()["state"] == "cancelled"
    assert set(Workload.objects.filter(array_parent_id=first["id"]).values_list("state", flat=True)) == {"cancelled"}


def test_the_parent_settles_when_its_last_element_ends(alice, submit):
    parent = submit(alice, array="0-1", command="true")
    a, b = Workload.objects.filter(array_parent=parent).order_by("array_index")
    for element in (a, b):
        for state in (State.ADMITTED, State.DISPATCHING):
            services.transition(element, state)
    services.transition(a, State.SUCCEEDED)
    parent.refresh_from_db()
    assert parent.state == State.PENDING
    services.transition(b, State.FAILED)
    parent.refresh_from_db()
    assert parent.state == State.FAILED
    assert "1 failed, 1 succeeded" in parent.events.last().reason


def test_twenty_elements_with_a_limit_of_five_never_run_more_than_five_and_each_sees_its_index(
    alice, submit, local_jobs
):
    parent = submit(alice, array="0-19%5", command='echo "index=$GRIDLANE_ARRAY_INDEX"; sleep 0.3', memory_gb=1)
    elements = Workload.objects.filter(array_parent=parent)
    most = 0

    def all_done() -> bool:
        nonlocal most
        tasks.cycle()
        most = max(most, elements.filter(state__in=ACTIVE).count())
        return not elements.exclude(state=State.SUCCEEDED).exists()

    wait_until(all_done, timeout=120, every=0.1)
    assert 1 <= most <= 5
    for element in elements:
        assert f"index={element.array_index}" in element.log_tail
    parent.refresh_from_db()
    assert parent.state == State.SUCCEEDED


def test_the_pages_list_the_parent_and_its_page_counts_the_elements_by_state(client, alice, submit):
    parent = submit(alice, array="0-2", command="true")
    one = Workload.objects.get(array_parent=parent, array_index=1)
    services.do_cancel(alice, one)
    client.force_login(alice)
    listed = client.get("/").content.decode()
    assert str(parent.pk) in listed
    assert str(one.pk) not in listed
    page = client.get(f"/workloads/{parent.pk}/").content.decode()
    assert "0-2: 1 cancelled, 2 pending" in page
    assert f'href="/workloads/{parent.pk}/"' in client.get(f"/workloads/{one.pk}/").content.decode()
