from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.accounts import tokens


class Command(BaseCommand):
    help = "Issue a new API token for USERNAME; the token is the last line of the output."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="issued on the command line")

    def handle(self, *args: Any, username: str, name: str, **options: Any) -> None:
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user called {username!r}.")
        token, plaintext = tokens.issue(user, name, expires_at=None, by=None)
        self.stdout.write(f"Token {token.hint}… for {username} (shown once; keep it safe):")
        self.stdout.write(plaintext)
