"""`Authorization: Bearer <token>` for scripts, the CLI and AI agents."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from portal.accounts.models import ApiToken

# Recording every use would write on every request; once a minute says enough about "last used".
LAST_USED_RESOLUTION = timedelta(minutes=1)


class BearerTokenAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Any, ApiToken] | None:
        """None when the request carries no bearer token (another authenticator may apply)."""
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() != b"bearer":
            return None
        if len(parts) != 2:
            raise AuthenticationFailed("Send the header as 'Authorization: Bearer <token>'.")
        token = ApiToken.lookup(parts[1].decode("ascii", errors="replace"))
        if token is None or not token.user.is_active:
            raise AuthenticationFailed("The token is unknown, revoked or expired.")
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        return token.user, token

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="gridlane"'
