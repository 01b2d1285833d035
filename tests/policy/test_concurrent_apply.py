"""An apply and an admin edit at the same moment: the edit waits for the apply, then finds its version stale."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection, connections

from portal.policy import apply, document
from portal.queues.models import PriorityTier
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def _blocked_on_a_lock(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return row is not None and row[0] == "Lock"


def test_an_admin_edit_made_while_an_apply_runs_is_a_conflict(site, api_as):
    client = api_as(site["it"])
    version = client.get("/api/v1/admin/tiers/urgent/").json()["version"]
    text = document.write(document.live()).replace("name: Urgent", "name: Most urgent")
    inside, go = threading.Event(), threading.Event()
    results: dict[str, Any] = {}

    def observe() -> None:
        inside.set()
        go.wait(60)

    def applying() -> None:
        try:
            results["apply"] = apply.run(text, commit=True, observe=observe)[0]
        finally:
            connections.close_all()

    def editing() -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                results["pid"] = cursor.fetchone()[0]
            results["edit"] = client.patch("/api/v1/admin/tiers/urgent/", {"weight": 5, "version": version},
                                           format="json")  # fmt: skip
        finally:
            connections.close_all()

    applier = threading.Thread(target=applying)
    applier.start()
    assert inside.wait(60)
    editor = threading.Thread(target=editing)
    editor.start()
    wait_until(lambda: "pid" in results and _blocked_on_a_lock(results["pid"]))
    go.set()
    applier.join(60)
    editor.join(60)
    assert [c["key"] for c in results["apply"]["changes"]] == ["urgent"]
    assert results["edit"].status_code == 409
    tier = PriorityTier.objects.get(slug="urgent")
    assert (tier.name, tier.weight) == ("Most urgent", 3)


def test_an_edit_read_before_an_apply_is_refused_after_it(site, api_as):
    client = api_as(site["it"])
    version = client.get("/api/v1/admin/tiers/urgent/").json()["version"]
    text = client.get("/api/v1/policy/").json()["document"].replace("weight: 3", "weight: 4")
    assert client.post("/api/v1/policy/apply/", {"document": text}, format="json").status_code == 200
    edit = client.patch("/api/v1/admin/tiers/urgent/", {"weight": 5, "version": version}, format="json")
    assert edit.status_code == 409
    assert PriorityTier.objects.get(slug="urgent").weight == 4
