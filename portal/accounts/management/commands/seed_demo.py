"""The demo cast: vision (alice member, bob lead), fraud (charlie), IT admin `it`, the claim mappings for
them (vision, vision-leads, fraud, it-admins), a local fabric and three queues (one takes sbatch scripts as
written, run on the local fabric)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from portal.accounts.models import ClaimMapping, Membership, ResourceGroup
from portal.queues import tiers
from portal.queues.models import Fabric, Queue, QueueTarget, Quota

DEMO_PASSWORD = "gridlane-demo"  # noqa: S105 (the demo's published password)


class Command(BaseCommand):
    help = "Create (or bring back) the demo teams, users, local fabric, queues and quotas. Safe to run again."

    @transaction.atomic
    def handle(self, *args: Any, **options: Any) -> None:
        users = get_user_model().objects
        people = {}
        for username, is_it in (("alice", False), ("bob", False), ("charlie", False), ("it", True)):
            user, created = users.get_or_create(
                username=username,
                defaults={"email": f"{username}@example.test", "first_name": username.title()},
            )
            if created:
                user.set_password(DEMO_PASSWORD)
            user.is_staff = user.is_superuser = is_it
            user.save()
            people[username] = user
        vision, _ = ResourceGroup.objects.get_or_create(slug="vision", defaults={"name": "Vision"})
        fraud, _ = ResourceGroup.objects.get_or_create(slug="fraud", defaults={"name": "Fraud detection"})
        for username, group, role in (
            ("alice", vision, Membership.Role.MEMBER),
            ("bob", vision, Membership.Role.LEAD),
            ("charlie", fraud, Membership.Role.MEMBER),
        ):
            Membership.objects.update_or_create(user=people[username], group=group, defaults={"role": role})
        # What the identity provider's groups claim means here, for sign-in through a provider.
        for claim, group, role in (
            ("vision", vision, Membership.Role.MEMBER),
            ("vision-leads", vision, Membership.Role.LEAD),
            ("fraud", fraud, Membership.Role.MEMBER),
        ):
            ClaimMapping.objects.get_or_create(claim_value=claim, group=group, defaults={"role": role})
        ClaimMapping.objects.get_or_create(claim_value="it-admins", group=None, defaults={"makes_it_staff": True})

        tiers.ensure_starting_tiers()
        local, _ = Fabric.objects.get_or_create(
            name="local",
            defaults={
                "kind": "local",
                "gpu_flavor": "demo",
                "gpus_milli": 8000,
                "cpus_milli": 16000,
                "memory_mib": 64 * 1024,
                "settings": {"simulated_gpus": True},  # stand-in GPU readings, demo mode only (marked as such)
            },
        )
        if "simulated_gpus" not in local.settings:
            local.settings = {**local.settings, "simulated_gpus": True}
            local.save(update_fields=["settings"])
        queues = (  # slug, name, kinds, default and maximum runtime, idle notebooks stopped after (minutes)
            ("train", "Training and batch", ["training", "batch"], 60, 24 * 60, None),
            ("notebooks", "Notebooks", ["notebook"], 8 * 60, 24 * 60, 120),
            ("scripts", "Batch scripts", ["batch", "training"], 10, 4 * 60, None),
        )
        for slug, name, kinds, default_minutes, max_minutes, idle_minutes in queues:
            queue, _ = Queue.objects.get_or_create(
                slug=slug,
                defaults={
                    "name": name,
                    "kinds": kinds,
                    "default_runtime_minutes": default_minutes,
                    "max_runtime_minutes": max_minutes,
                    "notebook_idle_minutes": idle_minutes,
                },
            )
            queue.allowed_groups.add(vision, fraud)
            target, _ = QueueTarget.objects.get_or_create(queue=queue, fabric=local, defaults={"order": 0})
            if slug == "scripts" and not target.runs_scripts:  # sbatch scripts as written, as one host runs them
                target.runs_scripts = True
                target.save(update_fields=["runs_scripts"])
        Quota.objects.get_or_create(
            group=vision, fabric=local, defaults={"gpu_reservation_milli": 4000, "gpu_limit_milli": 6000}
        )
        Quota.objects.get_or_create(
            group=fraud, fabric=local, defaults={"gpu_reservation_milli": 2000, "gpu_limit_milli": 4000}
        )
        self.stdout.write("Demo ready: alice and bob (vision), charlie (fraud), it (IT admin); local fabric, 8 GPUs.")
