"""Management commands: the demo seed and token issuing."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from portal.accounts.models import Membership, ResourceGroup
from portal.queues.models import Fabric, Queue, QueueTarget, Quota


def counts():
    return [m.objects.count() for m in (ResourceGroup, Membership, Fabric, Queue, QueueTarget, Quota)]


def test_seed_demo_is_idempotent(cast):
    before = counts()
    call_command("seed_demo", stdout=io.StringIO())
    assert counts() == before == [2, 3, 1, 3, 3, 2]  # the demo's queues: training, notebooks, batch scripts
    assert cast["it"].is_staff
    assert not cast["alice"].is_staff
    assert cast["alice"].check_password("gridlane-demo")


def test_issue_token_prints_a_working_token_last(cast):
    out = io.StringIO()
    call_command("issue_token", "alice", stdout=out)
    token = out.getvalue().strip().splitlines()[-1]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert client.get("/api/v1/workloads/").status_code == 200


def test_issue_token_for_an_unknown_user_fails_clearly(cast):
    with pytest.raises(CommandError, match="No user called 'nobody'"):
        call_command("issue_token", "nobody", stdout=io.StringIO())


def test_issue_token_without_a_secret_key_says_how_to_give_one(cast, settings):
    settings.SECRET_KEY = ""  # outside demo mode with no GRIDLANE_SECRET_KEY
    out = io.StringIO()
    with pytest.raises(CommandError, match=r"GRIDLANE_SECRET_KEY.*GRIDLANE_DEMO=1 \.venv/bin/python manage\.py"):
        call_command("issue_token", "alice", stdout=out)
    assert out.getvalue() == ""


def test_run_portal_derives_the_public_url_from_the_port_unless_it_is_set():
    from portal.worker.management.commands.run_portal import child_env

    assert child_env({"PATH": "/bin"}, "127.0.0.1", 8631) == {
        "PATH": "/bin",
        "GRIDLANE_PUBLIC_URL": "http://127.0.0.1:8631",
    }
    assert child_env({}, "0.0.0.0", 9000)["GRIDLANE_PUBLIC_URL"] == "http://127.0.0.1:9000"  # noqa: S104
    assert child_env({}, "::1", 9000)["GRIDLANE_PUBLIC_URL"] == "http://[::1]:9000"
    it_set = {"GRIDLANE_PUBLIC_URL": "https://gpu.example.org"}
    assert child_env(it_set, "127.0.0.1", 8631)["GRIDLANE_PUBLIC_URL"] == "https://gpu.example.org"


def test_stopping_the_portal_says_what_keeps_running_and_how_to_stop_it(cast, submit):
    from portal.worker.management.commands.run_portal import still_running

    assert still_running() == "Stopped. No work was running or waiting.\n"
    w = submit(cast["alice"], name="long-training")
    said = still_running()
    assert "This work keeps running (or waiting)" in said
    assert f"{w.pk}  training  pending     alice/long-training" in said
    assert "gridlane cancel ID" in said
