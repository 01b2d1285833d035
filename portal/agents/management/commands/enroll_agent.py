"""`manage.py enroll_agent FABRIC NAME --group SLUG`: a token for `gridlane agent` on the hosts of one agent fabric."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.accounts.models import ResourceGroup
from portal.agents import services
from portal.queues.models import Fabric


class Command(BaseCommand):
    help = "Create a service identity that may act as an agent of one agent fabric, and print its token once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("fabric", help="the agent fabric's name")
        parser.add_argument("name", help="the agent identity's name, e.g. lab-hosts")
        parser.add_argument("--group", required=True, help="the team the identity belongs to (e.g. IT's own)")
        parser.add_argument("--days", type=int, default=365, help="how long its token lives")

    def handle(self, *args: Any, **options: Any) -> None:
        fabric = Fabric.objects.filter(name=options["fabric"], kind="agent").first()
        if fabric is None:
            raise CommandError(f"there is no agent fabric called {options['fabric']!r}")
        group = ResourceGroup.objects.filter(slug=options["group"]).first()
        if group is None:
            raise CommandError(f"there is no team called {options['group']!r}")
        _, token = services.enroll(fabric, options["name"], group, by=None, days=options["days"])
        self.stdout.write(token)
