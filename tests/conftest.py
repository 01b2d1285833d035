"""The cast (healthchecks-style): alice is on team vision, bob leads vision, charlie is on fraud
and must never see vision's work; `it` is IT staff. All of it comes from `seed_demo` itself."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

# The portal as production serves it, for tests of the connect path wherever they live (asgi_portal).
pytest_plugins = ["tests.connect.serving"]

# The new-training-run page's form, filled in as alice would (queue `train` of the demo).
TRAINING_FORM = {
    "queue": "train",
    "kind": "training",
    "name": "resnet",
    "command": "python train.py",
    "gpus": "1",
    "cpus": "4",
    "memory_gb": "16",
    "nodes": "1",
    "runtime_limit_minutes": "60",
    "priority": "normal",
    "group": "",
}


@pytest.fixture
def cast(db: Any, settings: Any, tmp_path: Any) -> dict[str, Any]:
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    settings.GRIDLANE_LOCAL_FABRIC_ROOT = tmp_path / "local-fabric"
    call_command("seed_demo", stdout=open("/dev/null", "w"))  # noqa: SIM115
    users = get_user_model().objects
    return {name: users.get(username=name) for name in ("alice", "bob", "charlie", "it")}


@pytest.fixture
def alice(cast: dict[str, Any]) -> Any:
    return cast["alice"]


@pytest.fixture
def bob(cast: dict[str, Any]) -> Any:
    return cast["bob"]


@pytest.fixture
def charlie(cast: dict[str, Any]) -> Any:
    return cast["charlie"]


@pytest.fixture
def it_admin(cast: dict[str, Any]) -> Any:
    return cast["it"]


@pytest.fixture
def vision(cast: dict[str, Any]) -> Any:
    """alice's team in the demo cast."""
    from portal.accounts.models import ResourceGroup

    return ResourceGroup.objects.get(slug="vision")


@pytest.fixture
def api_as(cast: dict[str, Any]) -> Callable[[Any], Any]:
    """An API client carrying a fresh bearer token of the given user."""
    from rest_framework.test import APIClient

    from portal.accounts.models import ApiToken

    def client_for(user: Any) -> APIClient:
        _, plaintext = ApiToken.issue(user, "tests")
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
        return client

    return client_for


@pytest.fixture
def submit(cast: dict[str, Any]) -> Callable[..., Any]:
    """Submit through the service, as a user would; keyword arguments override the request."""
    from decimal import Decimal

    from portal.workloads import services

    def do(user: Any, **fields: Any) -> Any:
        values: dict[str, Any] = {"queue": "train", "kind": "training", "name": "job", "command": "true"}
        values |= fields
        for key in ("gpus", "cpus", "memory_gb"):
            if key in values:
                values[key] = Decimal(str(values[key]))
        workload, _ = services.submit(user, services.SubmitRequest(**values))
        return workload

    return do


def row_updates(model: Any) -> int:
    """The row versions UPDATEs of the model's table have written so far in this transaction (PostgreSQL's own
    count, pg_stat_xact_user_tables): how many times rows were written, whatever the statements."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT n_tup_upd FROM pg_stat_xact_user_tables WHERE relname = %s", [model._meta.db_table])
        return int(cursor.fetchone()[0])


def wait_until(predicate: Callable[[], Any], timeout: float = 60.0, every: float = 0.05) -> Any:
    """Poll until predicate() is truthy; fail the test with a clear message at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout} s")
        time.sleep(every)


@pytest.fixture
def agent(cast: dict[str, Any]) -> Any:
    """An AI agent of team vision, created by its lead bob: queue `train` only, 1 GPU reserved, 2 at most."""
    from datetime import timedelta

    from django.utils import timezone

    from portal.accounts import agents
    from portal.accounts.models import ResourceGroup, ServiceIdentity
    from portal.queues.models import Queue

    service = ServiceIdentity(
        group=ResourceGroup.objects.get(slug="vision"),
        description="nightly evaluations",
        expires_at=timezone.now() + timedelta(days=30),
        gpu_reservation_milli=1000,
        gpu_limit_milli=2000,
    )
    service, _ = agents.create(service, "vision-bot", [Queue.objects.get(slug="train")], by=cast["bob"])
    return service


@pytest.fixture(autouse=True)
def _fresh_cache() -> None:
    """Each test starts with empty caches: a lookup cached in one test must not answer in the next (nor a submit's
    context or the worker's settled rows kept in one, though their generation would not match in the next: see
    tests/api/test_submit_context.py)."""
    from django.core.cache import cache

    from portal.worker import dryrun, snapshot
    from portal.workloads import calibration, context

    cache.clear()
    context.forget()
    snapshot.SETTLED.forget()
    calibration.LEARNED.forget()
    calibration.forget_bands()
    dryrun.SNAPSHOTS.forget()  # (a dry run's kept snapshot: a rolled-back test's generation may come again)


@pytest.fixture
def local_jobs(cast: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    """Jobs of the local fabric in the test's own folder; whatever a test leaves running is killed at the end."""
    from pathlib import Path

    from django.conf import settings as django_settings

    from portal.worker import connections

    monkeypatch.setenv("GRIDLANE_LOCAL_KILL_GRACE_S", "0.5")
    connections.forget_all()
    yield
    kill_groups_named_in(Path(django_settings.GRIDLANE_LOCAL_FABRIC_ROOT).glob("*/*/child.pid"))
    connections.forget_all()


def kill_groups_named_in(pidfiles: Any) -> None:
    """SIGKILL the process group whose id is the first word of each file: jobs a test left behind. Never the
    test's own group (a file naming a process that shares it), nor a group that is gone or not ours to kill."""
    import contextlib
    import os
    import signal

    own = os.getpgrp()
    for pidfile in pidfiles:
        with contextlib.suppress(ProcessLookupError, ValueError, PermissionError, IndexError, OSError):
            pgid = int(pidfile.read_text().split()[0])
            if pgid > 1 and pgid != own and os.getpgid(pgid) == pgid:  # a group leader, so a group of its own
                os.killpg(pgid, signal.SIGKILL)
