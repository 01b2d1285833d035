"""Hardening: CSRF on every form, security headers, secure cookies outside demo mode, sign-in only through
the provider outside demo mode, and user-given text always escaped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("url", "data"),
    [
        ("/accounts/tokens/", {"name": "x", "expires_in_days": "7"}),
        ("/workloads/new/", {"name": "x"}),
        ("/accounts/logout/", {}),
        ("/accounts/agents/new/", {"name": "x"}),
        ("/api/v1/workloads/", {"name": "x"}),
        ("/api/v1/tokens/", {"name": "x"}),
    ],
)
def test_every_form_and_session_api_call_needs_the_csrf_token(cast, url, data):
    client = Client(enforce_csrf_checks=True)
    client.force_login(cast["bob"])
    response = client.post(url, data)
    assert response.status_code == 403
    assert b"CSRF" in response.content


def test_pages_carry_security_headers(client, alice):
    client.force_login(alice)
    response = client.get("/accounts/")
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert "frame-ancestors 'none'" in response["Content-Security-Policy"]
    assert response["Cross-Origin-Opener-Policy"] == "same-origin"


def test_outside_demo_mode_cookies_are_secure_and_there_are_no_local_passwords(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRIDLANE_") and k != "DATABASE_URL"}
    env |= {
        "GRIDLANE_SECRET_KEY": "x" * 50,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "GRIDLANE_VAR_DIR": str(tmp_path),
    }
    names = [
        "SESSION_COOKIE_SECURE",
        "CSRF_COOKIE_SECURE",
        "SESSION_COOKIE_HTTPONLY",
        "SECURE_HSTS_SECONDS",
        "SESSION_COOKIE_AGE",
        "AUTHENTICATION_BACKENDS",
    ]
    script = (
        f"import json; from django.conf import settings as s; print(json.dumps({{n: getattr(s, n) for n in {names}}}))"
    )
    done = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    values = json.loads(done.stdout)
    assert values["SESSION_COOKIE_SECURE"] is True
    assert values["CSRF_COOKIE_SECURE"] is True
    assert values["SESSION_COOKIE_HTTPONLY"] is True
    assert values["SECURE_HSTS_SECONDS"] >= 180 * 24 * 3600
    assert values["SESSION_COOKIE_AGE"] == 12 * 3600
    assert values["AUTHENTICATION_BACKENDS"] == ["portal.accounts.oidc.Backend"]


@pytest.fixture
def production(settings):
    settings.DEMO = False
    settings.AUTHENTICATION_BACKENDS = ["portal.accounts.oidc.Backend"]


def test_outside_demo_mode_sign_in_goes_to_the_provider(client, cast, production):
    response = client.get("/accounts/login/", {"next": "/accounts/"})
    assert response.status_code == 302
    assert response["Location"] == "/oidc/authenticate/?next=%2Faccounts%2F"
    assert client.get("/admin/login/")["Location"] == "/oidc/authenticate/"
    client.post("/accounts/login/", {"username": "alice", "password": "gridlane-demo"})
    assert client.get("/accounts/").status_code == 302  # a password signs nobody in


def test_outside_demo_mode_a_person_who_is_not_it_meets_no_sign_in_loop_at_the_admin(client, alice, production):
    client.force_login(alice, backend="portal.accounts.oidc.Backend")
    response = client.get("/admin/", follow=True)
    assert response.status_code == 403
    assert b"for IT staff" in response.content


def test_outside_demo_mode_without_a_provider_nobody_signs_in(client, cast, production, settings):
    settings.OIDC_RP_CLIENT_ID = ""
    response = client.get("/accounts/login/")
    assert response.status_code == 403
    assert b"not configured" in response.content


def test_user_given_text_is_escaped_on_agent_pages(client, bob, agent):
    agent.description = "<img src=x onerror=alert(1)>"
    agent.save()
    client.force_login(bob)
    for url in ("/accounts/agents/", f"/accounts/agents/{agent.pk}/"):
        page = client.get(url).content.decode()
        assert "<img src=x" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page


def test_identity_templates_never_switch_escaping_off():
    for folder in ("templates/accounts", "templates/registration"):
        for template in (ROOT / folder).glob("*.html"):
            text = template.read_text()
            assert "|safe" not in text, template
            assert "autoescape off" not in text, template
