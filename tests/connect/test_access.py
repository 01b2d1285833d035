"""Who passes the connect path: the owner; a teammate only once the owner shares; no one else (the same 404 as
a workload that does not exist); a signed-out browser is sent to sign in and back."""

from __future__ import annotations

import uuid

import pytest

from portal.workloads.models import Workload
from tests.connect.client import call
from tests.connect.serving import session_cookie

HTML = "text/html,application/xhtml+xml"


@pytest.fixture
def notebook(alice, running, jupyter):
    w = running(alice)
    server = jupyter(w)
    return w, server


def test_the_owner_reaches_her_notebooks_api_through_the_portal(asgi_portal, notebook, alice):
    w, _ = notebook
    answer = call(asgi_portal, "GET", f"/connect/{w.pk}/api/contents", Cookie=session_cookie(alice))
    assert answer.status == 200
    assert answer.json()["type"] == "directory"


def test_someone_on_another_team_gets_the_same_404_as_a_workload_that_does_not_exist(asgi_portal, notebook, charlie):
    w, _ = notebook
    theirs = call(asgi_portal, "GET", f"/connect/{w.pk}/api/contents", Cookie=session_cookie(charlie))
    nothing = call(asgi_portal, "GET", f"/connect/{uuid.uuid4()}/api/contents", Cookie=session_cookie(charlie))
    assert theirs.status == nothing.status == 404
    assert theirs.body == nothing.body


def test_a_teammate_passes_only_once_the_owner_shares_it_with_the_team(asgi_portal, notebook, bob, charlie):
    w, _ = notebook
    path = f"/connect/{w.pk}/api/contents"
    assert call(asgi_portal, "GET", path, Cookie=session_cookie(bob)).status == 404
    Workload.objects.filter(pk=w.pk).update(shared_with_team=True)
    assert call(asgi_portal, "GET", path, Cookie=session_cookie(bob)).status == 200
    assert call(asgi_portal, "GET", path, Cookie=session_cookie(charlie)).status == 404


def test_a_signed_out_browser_is_sent_to_sign_in_and_back(asgi_portal, notebook):
    w, _ = notebook
    answer = call(asgi_portal, "GET", f"/connect/{w.pk}/lab?reset", Accept=HTML)
    assert answer.status == 302
    assert answer.headers["Location"] == f"/accounts/login/?next=%2Fconnect%2F{w.pk}%2Flab%3Freset"
    assert call(asgi_portal, "GET", f"/connect/{w.pk}/api/contents").status == 401  # a script is told, not sent


def test_an_api_token_passes_for_its_owner_and_the_portals_credentials_never_reach_the_server(
    asgi_portal, notebook, alice, charlie
):
    from portal.accounts.tokens import issue

    w, _ = notebook
    _, mine = issue(alice, "connect", None, alice)
    _, theirs = issue(charlie, "connect", None, charlie)
    path = f"/connect/{w.pk}/api/contents"
    assert call(asgi_portal, "GET", path, Authorization=f"Bearer {mine}").status == 200
    assert call(asgi_portal, "GET", path, Authorization=f"Bearer {theirs}").status == 404
    assert call(asgi_portal, "GET", path, Authorization="Bearer glt_not-a-token").status == 401


def test_IT_staff_do_not_pass_a_notebook_runs_as_its_owner(asgi_portal, notebook, it_admin):
    w, _ = notebook
    assert call(asgi_portal, "GET", f"/connect/{w.pk}/api/contents", Cookie=session_cookie(it_admin)).status == 404
