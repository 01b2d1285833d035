from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.accounts import scopes, tokens


class Command(BaseCommand):
    help = (
        "Issue a new API token for USERNAME; the token is the last line of the output. Tokens are kept under a key "
        "derived from the secret key: give the portal's GRIDLANE_SECRET_KEY, or GRIDLANE_DEMO=1 for the demo. "
        "Without scope flags the token has the user's full power."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", default="issued on the command line")
        parser.add_argument("--read-only", action="store_true", help="It may read, and nothing else.")
        parser.add_argument(
            "--action",
            action="append",
            choices=scopes.ACTIONS,
            dest="actions",
            help="An action it may take (repeat for more); none given: every action.",
        )
        parser.add_argument(
            "--queue",
            action="append",
            dest="queues",
            metavar="SLUG",
            help="A queue it may use, one the user may use (repeat for more); none given: all of the user's.",
        )
        parser.add_argument("--cap-gpu-hours", metavar="HOURS", help="GPU-hours the work it submits may spend in all.")
        parser.add_argument(
            "--cap-money", metavar="AMOUNT", help="What the work it submits may cost in all, in the site's currency."
        )

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
        try:
            scope_fields = tokens.check_scopes(
                user,
                read_only=options["read_only"],
                actions=options["actions"],
                queues=options["queues"],
                cap_gpu_hours=_cap(options["cap_gpu_hours"], "--cap-gpu-hours"),
                cap_money=_cap(options["cap_money"], "--cap-money"),
            )
        except tokens.ScopeErrors as refused:
            raise CommandError(
                " ".join(f"--{f.replace('_', '-')}: {' '.join(m)}" for f, m in refused.errors.items())
            ) from None
        token, plaintext = tokens.issue(user, name, expires_at=None, by=None, scope_fields=scope_fields)
        self.stdout.write(f"Token {token.hint}… for {username}, {token.scope_summary} (shown once; keep it safe):")
        self.stdout.write(plaintext)


def _cap(value: str | None, flag: str) -> Decimal | None:
    if value is None:
        return None
    try:
        number = Decimal(value)
    except InvalidOperation:
        raise CommandError(f"{flag}: {value!r} is not a number.") from None
    if not number.is_finite():
        raise CommandError(f"{flag}: {value!r} is not a number.")
    return number
