"""`Authorization: Bearer <token>` for scripts, the CLI and AI agents."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import connection
from django.utils import timezone
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from portal import access
from portal.accounts import scopes, tokens
from portal.accounts.models import ApiToken, current_digest
from portal.workloads import context


def live_token(plaintext: str) -> ApiToken | None:
    """The token for this plaintext when it may be used now: known, not revoked or expired, its user active and,
    for an agent's, the agent enabled. None otherwise (the connect path's check; the API says which)."""
    token = ApiToken.lookup(plaintext)
    if token is None or not token.user.is_active or not agent_active(token):
        return None
    return token


def agent_active(token: ApiToken) -> bool:
    """A person's token, or an agent's whose agent is enabled and not expired."""
    service = access.service_of(token.user)
    return service is None or service.is_active()


def bearer(request: Request) -> str | None:
    """The request's bearer token, or None when it carries none (another authenticator may apply)."""
    parts = get_authorization_header(request).split()
    if not parts or parts[0].lower() != b"bearer":
        return None
    if len(parts) != 2:
        raise AuthenticationFailed("Send the header as 'Authorization: Bearer <token>'.")
    return parts[1].decode("ascii", errors="replace")


def usable(token: ApiToken | None) -> ApiToken:
    """The token, when it may be used now; else AuthenticationFailed, saying why."""
    if token is None or not token.user.is_active:
        raise AuthenticationFailed("The token is unknown, revoked or expired.")
    if not agent_active(token):
        raise AuthenticationFailed("The agent this token belongs to is disabled or expired.")
    return token


class BearerTokenAuthentication(BaseAuthentication):
    """`keep`: the API's single submit's, which takes the token from what this process keeps (see `kept`)."""

    def __init__(self, keep: bool = False) -> None:
        self.keep = keep

    def authenticate(self, request: Request) -> tuple[Any, ApiToken] | None:
        """None when the request carries no bearer token (another authenticator may apply).

        One query finds the token, its user and the user's service identity; its use is recorded
        at most once a minute (last_used_at and a `token.used` audit event).
        """
        plaintext = bearer(request)
        if plaintext is None:
            return None
        if self.keep and connection.vendor == "postgresql":
            user, token = kept(request, plaintext)
        else:
            token = usable(ApiToken.lookup(plaintext))
            tokens.note_use(token, request._request)
            user = token.user
        in_scope(request, token)
        return user, token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="gridlane"'


def in_scope(request: Request, token: ApiToken) -> None:
    """scopes.ScopeRefused (403, naming the missing scope) when a scoped token may not send this request to this
    endpoint; the scopes came with the token's own row, so this reads nothing."""
    if not token.scoped:
        return
    match = request._request.resolver_match
    scopes.check_endpoint(token, match.view_name if match is not None else None, request.method or "")


# --- The single submit's token, kept ----------------------------------------------------------------------

UNCONFIRMED = "gridlane_unconfirmed"  # on the request: the generation its token was kept under, until confirmed


def kept(request: Request, plaintext: str) -> tuple[Any, ApiToken]:
    """The API's single submit's token, kept by this process for a moment (PostgreSQL).

    The token is looked up with the generation of what a submit reads (portal.workloads.context), in one
    statement, and kept under that generation for context.KEEP_S. The next submits with the same token take it,
    its user and its agent from there, **unconfirmed**: with no statement of their own. Every write that could end
    a token's use moves the generation: its revocation, expiry or digest, its user's deactivation, rights or
    name, any change of its agent (migration workloads 0014). So an unconfirmed token is confirmed by the very
    statement that records the submit, which writes only while the generation is still the one the token was kept
    under (services.submit(..., unconfirmed=...)). Whatever else a submit would answer or write first confirms
    the token (confirm(): the lookup, again), so that nothing is told to, or counted for, a token that may no
    longer be used.

    What changes with the clock alone (the token's expiry, its agent's) is checked at each use; a use to be
    recorded (tokens.note_use, once a minute) looks the token up.
    """
    now = timezone.now()
    found = context.latest(_kept_under(plaintext), now)
    if found is not None:
        generation, token = found
        if token.live and agent_active(token) and not tokens.use_due(token, now):
            setattr(request._request, UNCONFIRMED, generation)
            return token.user, token
    return look_up(request, plaintext, now)


def _kept_under(plaintext: str) -> tuple[str, str, str]:
    return (connection.alias, "token", current_digest(plaintext))


def look_up(request: Request, plaintext: str, now: datetime | None = None) -> tuple[Any, ApiToken]:
    """The token looked up (and its use recorded), with the generation in the same statement; kept under it."""
    now = now or timezone.now()  # before the read: what is kept is at least this new
    token = usable(ApiToken.lookup(plaintext, read_with=("generation", context.GENERATION_SQL)))
    tokens.note_use(token, request._request)
    context.keep(_kept_under(plaintext), token.generation, token, now)  # type: ignore[attr-defined]
    setattr(request._request, UNCONFIRMED, None)
    return token.user, token


def unconfirmed(request: Request) -> int | None:
    """The generation the request's token was kept under, while it is unconfirmed (`kept`);
    None when it was looked up for this request, or confirmed since."""
    return getattr(request._request, UNCONFIRMED, None)


def confirmed_generation(request: Request) -> int | None:
    """The generation now (one statement), the request's token confirmed by it: a token kept unconfirmed under
    this very generation may still be used (every write that could end its use moves it: see `kept`); one kept
    under another is looked up again (confirm()). For a request that records nothing and reads the generation
    anyway (the dry run), before it tells anything."""
    generation = context.read_generation()
    kept_under = unconfirmed(request)
    if kept_under is not None and kept_under == generation:
        setattr(request._request, UNCONFIRMED, None)
    elif kept_under is not None:
        confirm(request)
    return generation


def confirm(request: Request) -> None:
    """Look up again a token taken unconfirmed from what this process keeps: AuthenticationFailed (401) when it
    may no longer be used; else the request's user and token are the ones read now."""
    if unconfirmed(request) is None:
        return
    plaintext = bearer(request)
    if plaintext is None:  # it carried one a moment ago
        raise AuthenticationFailed("The token is unknown, revoked or expired.")
    request.user, request.auth = look_up(request, plaintext)
