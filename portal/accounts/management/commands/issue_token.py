from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.accounts import tokens


class Command(BaseCommand):
    help = (
        "Issue a new API token for USERNAME; the token is the last line of the output. Tokens are kept under a key "
        "derived from the secret key: give the portal's GRIDLANE_SECRET_KEY, or GRIDLANE_DEMO=1 for the demo."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="issued on the command line")

    def handle(self, *args: Any, username: str, name: str, **options: Any) -> None:
        try:
            settings.SECRET_KEY  # noqa: B018 (Django refuses to read an empty key)
        except ImproperlyConfigured:
            # A token made under another key than the portal's would never be accepted by it.
            raise CommandError(
                "No secret key: run this with the portal's GRIDLANE_SECRET_KEY in the environment, or, for the "
                "demo `make run` serves, as `GRIDLANE_DEMO=1 .venv/bin/python manage.py issue_token USERNAME`."
            ) from None
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user called {username!r}.")
        token, plaintext = tokens.issue(user, name, expires_at=None, by=None)
        self.stdout.write(f"Token {token.hint}… for {username} (shown once; keep it safe):")
        self.stdout.write(plaintext)
