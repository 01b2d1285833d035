"""Issuing scoped tokens: the account page's form, an agent's page, the tokens API and `manage.py issue_token`;
each checks the scopes field by field and never gives a token more power than its user; scopes are shown where
tokens are listed."""

from __future__ import annotations

import io
import re
from decimal import Decimal

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.test import override_settings

from portal.accounts import scopes
from portal.accounts.models import ApiToken, AuditEvent
from portal.queues.models import Queue

TOKEN_RE = re.compile(r"glt_[A-Za-z0-9_-]{43}")


@pytest.fixture
def private_queue(cast):
    """A queue no team of alice's may use."""
    return Queue.objects.create(slug="private", name="Private", kinds=["training"])


@pytest.fixture
def alice_client(client, alice):
    client.force_login(alice)
    return client


def test_the_account_page_issues_a_scoped_token_and_lists_its_scopes(alice_client, alice):
    page = alice_client.get("/accounts/").content.decode()
    assert 'name="actions"' in page
    assert 'name="queues"' in page
    assert 'name="cap_gpu_hours"' in page
    assert 'name="cap_money"' in page
    assert '<option value="train">' in page
    assert '<option value="notebooks">' in page
    form = {"name": "agent", "expires_in_days": "30", "actions": ["submit", "read"], "queues": ["train"]}
    with override_settings(GRIDLANE_CURRENCY="EUR"):
        response = alice_client.post("/accounts/tokens/", form | {"cap_gpu_hours": "10.5", "cap_money": "1250"})
    assert response.status_code == 200, response.content.decode()[:2000]
    (plaintext,) = set(TOKEN_RE.findall(response.content.decode()))
    token = ApiToken.objects.get(user=alice)
    assert scopes.unpack(token.scope_actions) == ("read", "submit")
    assert (token.scope_queues, token.cap_gpu_hours, token.cap_money) == (["train"], Decimal("10.5"), Decimal(1250))
    with override_settings(GRIDLANE_CURRENCY="EUR"):
        assert token.scope_summary == "read, submit; queues train; cap 10.5 GPU-hours; money cap 1,250.00 EUR"
        assert token.scope_summary in response.content.decode()
        assert AuditEvent.objects.get(action="token.issued").detail["scopes"] == token.scope_summary
    assert plaintext.startswith("glt_")


def test_the_account_page_issues_a_read_only_token_and_one_without_scopes(alice_client, alice):
    assert (
        alice_client.post("/accounts/tokens/", {"name": "ro", "expires_in_days": "7", "read_only": "on"}).status_code
        == 200
    )
    assert alice_client.post("/accounts/tokens/", {"name": "all", "expires_in_days": "7"}).status_code == 200
    read_only, full = ApiToken.objects.get(name="ro"), ApiToken.objects.get(name="all")
    assert read_only.scope_summary == "read-only"
    assert not full.scoped
    assert full.scope_summary == "full access"
    page = alice_client.get("/accounts/").content.decode()
    assert "read-only" in page
    assert "full access" in page


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"queues": ["private"]}, "queues"),  # not offered: a queue alice may not use
        ({"actions": ["delete"]}, "actions"),
        ({"read_only": "on", "actions": ["cancel"]}, "read_only"),
        ({"cap_gpu_hours": "0"}, "cap_gpu_hours"),
        ({"cap_gpu_hours": "lots"}, "cap_gpu_hours"),
        ({"cap_money": "-5"}, "cap_money"),
        ({"cap_money": "0.001"}, "cap_money"),  # to the cent
    ],
)
def test_the_account_pages_token_form_refuses_scopes_by_field(alice_client, private_queue, extra, field):
    response = alice_client.post("/accounts/tokens/", {"name": "x", "expires_in_days": "7"} | extra)
    assert response.status_code == 422
    form = response.context["form"]
    assert list(form.errors) == [field], form.errors
    assert f'id="id_{field}_error1"' in response.content.decode()
    assert ApiToken.objects.count() == 0


def test_an_agents_token_is_scoped_within_the_agents_own_queues(client, bob, agent):
    client.force_login(bob)
    url = f"/accounts/agents/{agent.pk}/tokens/"
    refused = client.post(url, {"name": "ci", "expires_in_days": "7", "queues": ["notebooks"]})  # not the agent's
    assert refused.status_code == 422
    assert list(refused.context["token_form"].errors) == ["queues"]
    form = {"name": "ci", "expires_in_days": "7", "queues": ["train"], "actions": ["submit"], "cap_money": "80"}
    done = client.post(url, form)
    assert done.status_code == 200
    token = ApiToken.objects.get(user=agent.user, name="ci")
    assert token.cap_money == Decimal(80)
    assert token.scope_summary == "submit; queues train; money cap 80.00"
    assert "submit; queues train; money cap 80.00" in done.content.decode()


def test_the_tokens_api_issues_and_lists_scopes(api_as, alice, private_queue):
    client = api_as(alice)
    body = {"name": "bot", "read_only": True, "queues": ["notebooks"], "cap_gpu_hours": "4", "cap_money": "99.5"}
    created = client.post("/api/v1/tokens/", body, format="json")
    assert created.status_code == 201, created.content
    assert created.json()["scopes"] == {
        "scoped": True,
        "read_only": True,
        "actions": ["read"],
        "queues": ["notebooks"],
        "cap_gpu_hours": "4.000",
        "cap_money": "99.50",
        "currency": settings.GRIDLANE_CURRENCY,
    }
    listed = {t["name"]: t["scopes"] for t in client.get("/api/v1/tokens/").json()}
    assert listed["tests"]["scoped"] is False
    assert listed["tests"]["actions"] == list(scopes.ACTIONS)
    assert listed["bot"]["read_only"] is True
    refused = client.post("/api/v1/tokens/", {"name": "x", "queues": ["private"]}, format="json")
    assert refused.status_code == 400
    assert refused.json() == {"errors": {"queues": ["Not a queue alice may use: private."]}}
    assert client.post("/api/v1/tokens/", {"name": "x", "actions": ["fly"]}, format="json").json()["errors"].keys() == {
        "actions.0"
    }
    assert client.post("/api/v1/tokens/", {"name": "x", "scope": "all"}, format="json").status_code == 400
    refused = client.post("/api/v1/tokens/", {"name": "x", "cap_money": "0"}, format="json")
    assert refused.json() == {"errors": {"cap_money": ["Give a cap above 0 and at most 1,000,000,000,000."]}}


def test_the_admin_lists_scopes(client, it_admin, alice):
    ApiToken.issue(alice, "ro", scopes=scopes.fields_for([scopes.READ], None, None))
    client.force_login(it_admin)
    assert "read-only" in client.get("/admin/accounts/apitoken/").content.decode()


def test_issue_token_takes_scope_flags(cast):
    out = io.StringIO()
    call_command(
        "issue_token", "alice", "--action", "submit", "--action", "read", "--queue", "train",
        "--cap-gpu-hours", "12", "--cap-money", "300", stdout=out,
    )  # fmt: skip
    token = ApiToken.objects.get(user=cast["alice"])
    assert token.cap_money == Decimal(300)
    assert token.scope_summary == "read, submit; queues train; cap 12 GPU-hours; money cap 300.00"
    assert "read, submit; queues train; cap 12 GPU-hours; money cap 300.00" in out.getvalue()
    call_command("issue_token", "alice", "--read-only", "--name", "ro", stdout=io.StringIO())
    assert ApiToken.objects.get(name="ro").scope_summary == "read-only"
    call_command("issue_token", "alice", "--name", "all", stdout=io.StringIO())
    assert not ApiToken.objects.get(name="all").scoped


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--queue", "private"], r"--queues: Not a queue alice may use: private\."),
        (["--cap-gpu-hours", "x"], r"--cap-gpu-hours: 'x' is not a number\."),
        (["--cap-gpu-hours", "-1"], r"--cap-gpu-hours: Give a cap above 0"),
        (["--cap-money", "ten"], r"--cap-money: 'ten' is not a number\."),
        (["--cap-money", "NaN"], r"--cap-money: 'NaN' is not a number\."),
        (["--cap-money", "0"], r"--cap-money: Give a cap above 0"),
        (["--read-only", "--action", "cancel"], r"--read-only: A read-only token takes no other action"),
    ],
)
def test_issue_token_refuses_scopes_its_user_may_not_have(cast, private_queue, flags, message):
    with pytest.raises(CommandError, match=message):
        call_command("issue_token", "alice", *flags, stdout=io.StringIO())
    assert ApiToken.objects.count() == 0
