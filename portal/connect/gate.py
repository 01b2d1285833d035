"""Who may pass through the connect path, and to where: decided per request, from the portal's own session
cookie or an API token, before a byte goes to the job's server. Synchronous (Django's ORM): the proxy calls
it in a worker thread.

Answers, in the order they are decided:
- SIGN_IN: no session and no token (a browser is sent to sign in and back);
- ABSENT: not the owner, nor a teammate it is shared with: the same 404 as a workload that does not exist;
- STOPPED: it is not starting or running (404, saying so);
- STARTING: it runs (or starts) but its server has not reported yet (503, try again shortly);
- UNREACHABLE: its server is at an address the portal does not connect to (portal.connect.server_reach);
- PASS: the server, the address checked for it (connected to in place of its name), and the fabric row
  whose route reaches it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import import_module
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user
from django.db import close_old_connections
from django.http import HttpRequest
from django.http.cookie import parse_cookie

from fabrics.base import Endpoint
from portal import access, outbound
from portal.api.auth import live_token
from portal.connect import server_reach
from portal.workloads import notebook_endpoint
from portal.workloads.models import Workload
from portal.workloads.states import State


class Verdict(enum.Enum):
    SIGN_IN = "sign in"
    ABSENT = "absent"
    STOPPED = "stopped"
    STARTING = "starting"
    UNREACHABLE = "unreachable"
    PASS = "pass"  # noqa: S105 (a verdict, not a password)


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    server: Endpoint | None = None
    fabric_id: int | None = None
    fabric_settings: Mapping[str, Any] | None = None
    words: str = ""  # the workload's kind and name, for the pages of STOPPED and STARTING; why, for UNREACHABLE
    address: Endpoint | None = None  # the server with its host checked and pinned: where to connect


STARTED = (State.DISPATCHING, State.RUNNING)


def decide(workload_id: str, cookies: str, authorization: str) -> Decision:
    """The decision for one request through /connect/<workload_id>/, from its Cookie and Authorization headers."""
    close_old_connections()  # this runs in a thread of its own: drop a connection that died since
    try:
        user = _bearer_user(authorization) if authorization else _session_user(cookies)
        if user is None:
            return Decision(Verdict.SIGN_IN)
        w = access.connectable_workload(user, workload_id)
        if w is None:
            return Decision(Verdict.ABSENT)
        return _decision_for(w)
    finally:
        close_old_connections()


def _decision_for(w: Workload) -> Decision:
    words = f"{w.get_kind_display().lower()} {w.name}"
    if w.state not in STARTED:
        return Decision(Verdict.STOPPED, words=words)
    server = notebook_endpoint.stored(w)
    if server is None or w.fabric is None:
        return Decision(Verdict.STARTING, words=words)
    try:
        address = server_reach.reach(w, server)
    except outbound.Refused as refused:
        return Decision(Verdict.UNREACHABLE, words=str(refused))
    return Decision(Verdict.PASS, server, w.fabric_id, dict(w.fabric.settings or {}), words, address)


def _session_user(cookies: str) -> Any:
    """The signed-in user of the portal's session cookie; None when there is none, or it has expired."""
    key = parse_cookie(cookies).get(settings.SESSION_COOKIE_NAME, "")
    if not key:
        return None
    engine = import_module(settings.SESSION_ENGINE)
    request = HttpRequest()
    request.session = engine.SessionStore(session_key=key)
    user = get_user(request)  # checks the session's auth hash: a changed password or a sign-out ends it
    return user if user.is_authenticated and user.is_active else None


def _bearer_user(authorization: str) -> Any:
    """The user of `Authorization: Bearer <API token>`; None for any other header or a dead token."""
    scheme, _, value = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    token = live_token(value.strip())
    return None if token is None else token.user
