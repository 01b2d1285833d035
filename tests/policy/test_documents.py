"""Policy as code: export, plan and apply on a site with departments, tiers, grants and burst pools."""

from __future__ import annotations

from typing import Any

import yaml

from portal.accounts.models import AuditEvent
from portal.queues.models import Fabric, Quota

URL = "/api/v1/policy/"


def export(client: Any) -> str:
    answer = client.get(URL)
    assert answer.status_code == 200, answer.json()
    return str(answer.json()["document"])


def test_export_then_apply_unchanged_changes_nothing(site, api_as):
    client = api_as(site["it"])
    text = export(client)
    events = AuditEvent.objects.exclude(action="token.used").count()
    planned = client.post(f"{URL}plan/", {"document": text}, format="json")
    assert planned.status_code == 200, planned.json()
    assert planned.json()["changes"] == []
    assert planned.json()["whatif"] is None
    applied = client.post(f"{URL}apply/", {"document": text}, format="json")
    assert applied.status_code == 200, applied.json()
    assert applied.json()["changes"] == []
    assert applied.json()["after"] == applied.json()["version"]
    assert AuditEvent.objects.exclude(action="token.used").count() == events
    assert export(client) == text


def test_the_document_is_stable_commented_and_names_credentials_only(site, api_as):
    Fabric.objects.filter(name="h100").update(settings={"api_token": "s3cret", "partition": "gpu"})
    text = export(api_as(site["it"]))
    assert "s3cret" not in text
    assert "api_token" not in text
    assert "gpu_reservation: 1.5  # GPUs" in text
    assert "credentials: env:AWS  # a reference" in text
    data = yaml.safe_load(text)
    assert data["teams"][0]["slug"] == "research"  # the department before its teams
    assert data["grants"][0]["team"] == "vision"
    assert export(api_as(site["it"])) == text


def test_a_change_is_planned_with_its_prediction_then_applied_and_audited(site, api_as):
    client = api_as(site["it"])
    text = export(client).replace("gpu_reservation: 1.5  # GPUs", "gpu_reservation: 2.5  # GPUs")
    planned = client.post(f"{URL}plan/", {"document": text, "whatif_days": 30}, format="json").json()
    assert planned["changes"] == [
        {"kind": "quotas", "key": "fraud.h100", "action": "change", "fields": {"gpu_reservation": [1.5, 2.5]}}
    ]
    assert set(planned["whatif"]["overall"]) >= {"p95_wait_s", "utilisation"}
    assert Quota.objects.get(group__slug="fraud", fabric__name="h100").gpu_reservation_milli == 1500
    applied = client.post(f"{URL}apply/", {"document": text}, format="json")
    assert applied.status_code == 200, applied.json()
    assert Quota.objects.get(group__slug="fraud", fabric__name="h100").gpu_reservation_milli == 2500
    event = AuditEvent.objects.filter(action="quota.changed").latest("pk")
    assert event.actor == site["it"]
    assert event.detail["after"] == {"gpu_reservation_milli": 2500}
    assert AuditEvent.objects.filter(action="policy.applied").exists()


def test_one_bad_entry_changes_nothing(site, api_as):
    client = api_as(site["it"])
    text = export(client)
    text = text.replace("gpu_reservation: 1.5  # GPUs", "gpu_reservation: 2.5  # GPUs")  # fits
    text = text.replace("name: Urgent", "name: Most urgent")  # fits
    text = text.replace("gpu_reservation: 3  # GPUs", "gpu_reservation: 6  # GPUs")  # past the department's 8
    answer = client.post(f"{URL}apply/", {"document": text}, format="json")
    assert answer.status_code == 400
    assert list(answer.json()["errors"]) == ["quotas[vision.h100].gpu_reservation"]
    assert Quota.objects.get(group__slug="fraud", fabric__name="h100").gpu_reservation_milli == 1500
    assert site["tier"].__class__.objects.get(slug="urgent").name == "Urgent"


def test_an_admin_edit_after_the_export_makes_the_apply_a_conflict(site, api_as):
    client = api_as(site["it"])
    text = export(client).replace("name: Urgent", "name: Most urgent")
    read = client.get("/api/v1/admin/tiers/urgent/").json()
    edited = client.patch("/api/v1/admin/tiers/urgent/", {"weight": 4, "version": read["version"]}, format="json")
    assert edited.status_code == 200
    answer = client.post(f"{URL}apply/", {"document": text}, format="json")
    assert answer.status_code == 409
    assert "version" in answer.json()["errors"]
    assert site["tier"].__class__.objects.get(slug="urgent").name == "Urgent"


def test_a_section_left_out_is_left_alone_and_unknown_ones_are_refused(site, api_as):
    client = api_as(site["it"])
    answer = client.post(f"{URL}apply/", {"document": "tiers: []\nrules: []\n"}, format="json")
    assert answer.status_code == 400
    assert list(answer.json()["errors"]) == ["rules"]
    answer = client.post(f"{URL}plan/", {"document": "profiles: []\n", "whatif_days": 0}, format="json")
    assert answer.json()["changes"] == [
        {"kind": "profiles", "key": "Small GPU", "action": "delete", "fields": answer.json()["changes"][0]["fields"]}
    ]


def test_only_it_reads_or_applies_policy(site, api_as):
    for name in ("alice", "bob", "charlie"):
        client = api_as(site[name])
        assert client.get(URL).status_code == 403
        assert client.post(f"{URL}apply/", {"document": "tiers: []"}, format="json").status_code == 403


def test_a_document_that_cannot_be_read_is_refused_naming_what(site, api_as):
    client = api_as(site["it"])
    cases = {
        "tiers: [": "document",
        "- a list": "document",
        "tiers: {slug: x}": "tiers",
        "format: other/v9": "format",
        "tiers:\n  - slug: urgent\n    colour: red": "tiers[urgent].colour",
        "teams:\n  - slug: [1, 2]\n    name: odd": "teams[[1, 2]].slug",
    }
    before = export(client)
    for text, field in cases.items():
        answer = client.post(f"{URL}apply/", {"document": text}, format="json")
        assert answer.status_code == 400, text
        assert field in answer.json()["errors"], (text, answer.json())
    assert client.post(f"{URL}plan/", {"document": "tiers: []", "whatif_days": -1}, format="json").json() == {
        "errors": {"whatif_days": ["A whole number of days from 0 (no prediction) to 90."]}
    }
    assert client.post(f"{URL}plan/", {"document": "tiers: []", "extra": 1}, format="json").status_code == 400
    assert export(client) == before
