"""1,000 submits at once from 50 clients while the worker admits: nothing lost, nothing twice, no limit exceeded."""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from datetime import UTC, datetime

import pytest
import time_machine
from django.db import connection
from rest_framework.test import APIClient

from portal.accounts.models import ApiToken, Membership, ResourceGroup
from portal.worker import tasks
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)
CLIENTS = 50
EACH = 20
KEYS = 12  # each client sends 20 requests over 12 idempotency keys: 8 are repeats, some of them concurrent
LIMIT = 16  # submissions per identity per window: each client's last 4 are refused
VISION_GPU_LIMIT_MILLI = 6000  # the demo's quota of team vision on the local fabric
JOB = {"queue": "train", "kind": "batch", "command": "true", "resources": {"gpus": 1, "cpus": 1, "memory_gb": 1}}


def free_connections() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int"
            " - (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')"
        )
        return int(cursor.fetchone()[0])


def test_a_thousand_concurrent_submits_from_fifty_clients(cast, settings):
    from django.contrib.auth import get_user_model

    settings.GRIDLANE_SUBMIT_RATE_LIMIT = LIMIT
    settings.GRIDLANE_SUBMIT_RATE_WINDOW_SECONDS = 3600
    vision = ResourceGroup.objects.get(slug="vision")
    tokens = []
    for i in range(CLIENTS):
        user = get_user_model().objects.create(username=f"client{i}")
        Membership.objects.create(user=user, group=vision)
        tokens.append(ApiToken.issue(user, "load")[1])
    answers: dict[int, list[tuple[str, int, str]]] = defaultdict(list)
    worst_gpus = [0]
    start = threading.Barrier(CLIENTS + 1)
    done = threading.Event()

    def client(i: int) -> None:
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Bearer {tokens[i]}")
        try:
            start.wait(60)
            for j in range(EACH):
                key = f"c{i}-k{j % KEYS}"
                response = api.post("/api/v1/workloads/", JOB | {"name": key}, format="json", HTTP_IDEMPOTENCY_KEY=key)
                answers[i].append((key, response.status_code, response.json().get("id", "")))
        finally:
            connection.close()

    def worker() -> None:
        """Admission rounds while the submits arrive; what the team holds is read after each."""
        try:
            start.wait(60)
            while not done.is_set():
                tasks.admit()
                held = Workload.objects.filter(group=vision, state__in=[State.ADMITTED, State.DISPATCHING])
                worst_gpus[0] = max(worst_gpus[0], sum(held.values_list("gpus_milli", flat=True)))
        finally:
            connection.close()

    # Each client holds a database connection of its own: start once the server has room for them all (another
    # test run beside this one may be using many of its connections for a while).
    wait_until(lambda: free_connections() >= CLIENTS + 10, timeout=600, every=0.5)
    with time_machine.travel(datetime(2026, 12, 1, 9, 0, 30, tzinfo=UTC), tick=False):  # one rate window
        threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
        admitting = threading.Thread(target=worker)
        for thread in [*threads, admitting]:
            thread.start()
        for thread in threads:
            thread.join(300)
        done.set()
        admitting.join(60)

    assert sum(len(a) for a in answers.values()) == CLIENTS * EACH
    stored = {str(w.pk): w for w in Workload.objects.filter(owner__username__startswith="client")}
    for i in range(CLIENTS):
        codes = Counter(code for _, code, _ in answers[i])
        assert codes[429] == EACH - LIMIT, (i, codes)  # the limit holds exactly, under contention too
        assert set(codes) <= {200, 201, 429}, (i, codes)
        by_key = defaultdict(set)
        for key, code, wid in answers[i]:
            if code in (200, 201):
                by_key[key].add(wid)
        assert all(len(ids) == 1 for ids in by_key.values()), i  # a key always answers with one workload
        mine = [w for w in stored.values() if w.owner.username == f"client{i}"]
        assert sorted(str(w.idempotency_key) for w in mine) == sorted(by_key), i  # one workload per key, none lost
        assert codes[201] == len(mine), (i, codes)  # each created exactly once
        assert all(next(iter(ids)) in stored for ids in by_key.values())
    assert 0 < worst_gpus[0] <= VISION_GPU_LIMIT_MILLI
    tasks.admit()
    held = Workload.objects.filter(group=vision, state__in=[State.ADMITTED, State.DISPATCHING])
    assert sum(held.values_list("gpus_milli", flat=True)) == VISION_GPU_LIMIT_MILLI
    assert Workload.objects.filter(events__isnull=True).count() == 0  # every workload has its first event
