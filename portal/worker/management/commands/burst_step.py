"""`manage.py burst_step`: run the autoscaler's step once, under its lock, and print what it did."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from portal.worker import tasks


class Command(BaseCommand):
    help = "Run the burst autoscaler once: reconcile instances with the provider, launch and terminate."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(str(tasks.autoscale()))
