"""IT's admin API for policy objects: who may use it, versions, unknown fields, and the audit log."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from portal.accounts.models import AuditEvent, ResourceGroup
from portal.queues.models import Fabric, Quota

URL = "/api/v1/admin/"


@pytest.fixture
def it_api(api_as: Any, it_admin: Any) -> APIClient:
    return api_as(it_admin)


@pytest.mark.parametrize("who", ["it", "lead", "member", "agent", "other team", "anonymous"])
@pytest.mark.django_db
def test_only_it_reads_or_changes_policy(who, cast, agent, api_as):
    callers = {"it": "it", "lead": "bob", "member": "alice", "other team": "charlie"}
    if who == "anonymous":
        client = APIClient()
    elif who == "agent":
        client = api_as(agent.user)
    else:
        client = api_as(cast[callers[who]])
    listed = client.get(f"{URL}teams/")
    read = client.get(f"{URL}teams/vision/")
    created = client.post(f"{URL}teams/", {"slug": "new", "name": "New"}, format="json")
    version = read.json().get("version", "x") if read.status_code == 200 else "x"
    changed = client.patch(f"{URL}teams/vision/", {"name": "Renamed", "version": version}, format="json")
    deleted = client.delete(f"{URL}teams/fraud/", HTTP_IF_MATCH="x")
    codes = [r.status_code for r in (listed, read, created, changed, deleted)]
    want = {"it": [200, 200, 201, 200, 409], "anonymous": [401] * 5}.get(who, [403] * 5)
    assert codes == want
    assert ResourceGroup.objects.filter(slug="new").exists() == (who == "it")
    assert ResourceGroup.objects.get(slug="vision").name == ("Renamed" if who == "it" else "Vision")


def test_a_change_names_the_version_it_read_and_a_stale_one_is_a_conflict(it_api):
    read = it_api.get(f"{URL}fabrics/local/")
    assert read.status_code == 200
    assert read["ETag"] == f'"{read.json()["version"]}"'
    unversioned = it_api.patch(f"{URL}fabrics/local/", {"gpus_milli": 4000}, format="json")
    assert unversioned.status_code == 428
    assert "version" in unversioned.json()["errors"]
    first = it_api.patch(f"{URL}fabrics/local/", {"gpus_milli": 4000}, format="json", HTTP_IF_MATCH=read["ETag"])
    assert first.status_code == 200, first.json()
    second = it_api.patch(
        f"{URL}fabrics/local/", {"gpus_milli": 2000, "version": read.json()["version"]}, format="json"
    )
    assert second.status_code == 409
    assert Fabric.objects.get(name="local").gpus_milli == 4000


def test_unknown_fields_are_refused_by_name_and_nothing_changes(it_api):
    version = it_api.get(f"{URL}teams/vision/").json()["version"]
    answer = it_api.patch(f"{URL}teams/vision/", {"name": "X", "colour": "red", "is_staff": True, "version": version},
                          format="json")  # fmt: skip
    assert answer.status_code == 400
    assert set(answer.json()["errors"]) == {"colour", "is_staff"}
    assert ResourceGroup.objects.get(slug="vision").name == "Vision"


def test_quotas_take_the_admin_forms_units_and_rules(it_api, vision):
    fabric = it_api.post(f"{URL}fabrics/", {"name": "spare", "kind": "local", "gpus_milli": 8000}, format="json")
    assert fabric.status_code == 201, fabric.json()
    made = it_api.post(f"{URL}quotas/", {"group": "vision", "fabric": "spare", "gpu_reservation": 2, "gpu_limit": 4},
                       format="json")  # fmt: skip
    assert made.status_code == 201, made.json()
    assert made.json()["key"] == "vision.spare"
    quota = Quota.objects.get(group=vision, fabric__name="spare")
    assert (quota.gpu_reservation_milli, quota.gpu_limit_milli) == (2000, 4000)
    below = it_api.patch(f"{URL}quotas/vision.spare/", {"gpu_limit": 1, "version": made.json()["version"]},
                         format="json")  # fmt: skip
    assert below.status_code == 400
    assert "gpu_limit" in below.json()["errors"]


def test_every_change_is_audited_with_who_and_what(it_api, it_admin):
    version = it_api.get(f"{URL}queues/train/").json()["version"]
    answer = it_api.patch(f"{URL}queues/train/", {"max_runtime_minutes": 600, "version": version}, format="json")
    assert answer.status_code == 200, answer.json()
    event = AuditEvent.objects.filter(action="queue.changed").latest("pk")
    assert event.actor == it_admin
    assert event.detail["before"] == {"max_runtime_minutes": 1440}
    assert event.detail["after"] == {"max_runtime_minutes": 600}
    assert event.detail["via"] == "PATCH /api/v1/admin/queues/train/"


def test_a_fabric_that_queues_still_target_is_not_deleted(it_api):
    version = it_api.get(f"{URL}fabrics/local/").json()["version"]
    answer = it_api.delete(f"{URL}fabrics/local/", HTTP_IF_MATCH=version)
    assert answer.status_code == 400
    assert "Still needed by" in answer.json()["errors"]["detail"][0]
    assert Fabric.objects.filter(name="local").exists()


def test_every_kind_lists_and_reads_back(it_api):
    for kind in ("fabrics", "teams", "queues", "targets", "quotas", "tiers", "profiles", "burst-pools",
                 "instance-types"):  # fmt: skip
        answer = it_api.get(f"{URL}{kind}/")
        assert answer.status_code == 200, kind
        for item in answer.json()["items"]:
            assert it_api.get(f"{URL}{kind}/{item['key']}/").json() == item
    assert it_api.get(f"{URL}nothing/").status_code == 404


def test_a_team_with_people_is_not_deleted_but_an_empty_one_is(it_api):
    version = it_api.get(f"{URL}teams/vision/").json()["version"]
    refused = it_api.delete(f"{URL}teams/vision/", HTTP_IF_MATCH=version)
    assert refused.status_code == 400
    assert refused.json()["errors"] == {"detail": ["vision still has members: remove them in the admin first."]}
    made = it_api.post(f"{URL}teams/", {"slug": "empty", "name": "Empty"}, format="json").json()
    assert it_api.delete(f"{URL}teams/empty/", HTTP_IF_MATCH=made["version"]).status_code == 204
    assert not ResourceGroup.objects.filter(slug="empty").exists()
    assert AuditEvent.objects.filter(action="resourcegroup.deleted", target="Empty").exists()
