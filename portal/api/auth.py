"""`Authorization: Bearer <token>` for scripts, the CLI and AI agents."""

from __future__ import annotations

from typing import Any

from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from portal import access
from portal.accounts import tokens
from portal.accounts.models import ApiToken


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


class BearerTokenAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Any, ApiToken] | None:
        """None when the request carries no bearer token (another authenticator may apply).

        One query finds the token, its user and the user's service identity; its use is recorded
        at most once a minute (last_used_at and a `token.used` audit event).
        """
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != b"bearer":
            return None
        if len(parts) != 2:
            raise AuthenticationFailed("Send the header as 'Authorization: Bearer <token>'.")
        token = ApiToken.lookup(parts[1].decode("ascii", errors="replace"))
        if token is None or not token.user.is_active:
            raise AuthenticationFailed("The token is unknown, revoked or expired.")
        if not agent_active(token):
            raise AuthenticationFailed("The agent this token belongs to is disabled or expired.")
        tokens.note_use(token, request._request)
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="gridlane"'
