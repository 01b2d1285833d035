"""The two halves of the upgrade test, each run in a process of its own against the database being upgraded:
`at_release()` migrates an empty database to the previous release's migrations and writes live data with that
release's models; `after_upgrade()` reads it back with today's. `python -c "from tests.deploy import upgrade;
upgrade.at_release()"` with DJANGO_SETTINGS_MODULE and DATABASE_URL set."""

from __future__ import annotations

import hashlib
import json
import sys
from datetime import timedelta
from typing import Any

import django

# The leaf migration of each of Gridlane's apps in the previous release (the tip of main when this was written).
RELEASE = {
    "accounts": "0002_claim_mappings_service_identities_audit",
    "agents": "0001_initial",
    "queues": "0004_fabric_observed_capacity",
    "usage": "0002_member_rollups",
    "worker": "0002_usage_and_metrics",
    "workloads": "0004_workload_notebook_endpoint",
}
THIRD_PARTY = ("admin", "auth", "contenttypes", "sessions", "django_q")
TOKEN = "glt_" + "u" * 43  # the release's tokens: glt_ and 43 characters, stored as their SHA-256


def at_release() -> None:
    django.setup()
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor
    from django.utils import timezone

    executor = MigrationExecutor(connection)
    graph = executor.loader.graph
    targets = [node for node in graph.leaf_nodes() if node[0] in THIRD_PARTY] + list(RELEASE.items())
    executor.migrate(targets)
    apps = executor.loader.project_state(targets).apps

    def model(label: str) -> Any:
        return apps.get_model(label)

    now = timezone.now()
    alice = model("auth.User").objects.create(username="alice", email="alice@example.org")
    vision = model("accounts.ResourceGroup").objects.create(slug="vision", name="Vision")
    model("accounts.Membership").objects.create(user=alice, group=vision, role="member")
    fabric = model("queues.Fabric").objects.create(name="hpc", kind="local", gpus_milli=8000, cpus_milli=16000,
                                                   memory_mib=65536)  # fmt: skip
    queue = model("queues.Queue").objects.create(slug="train", name="Training", kinds=["training", "batch"],
                                                 default_runtime_minutes=60, max_runtime_minutes=600)  # fmt: skip
    queue.allowed_groups.add(vision)
    model("queues.QueueTarget").objects.create(queue=queue, fabric=fabric, order=0)
    model("queues.Quota").objects.create(group=vision, fabric=fabric, gpu_reservation_milli=2000, gpu_limit_milli=4000)
    model("accounts.ApiToken").objects.create(user=alice, name="laptop", hint=TOKEN[:12],
                                              digest=hashlib.sha256(TOKEN.encode()).hexdigest())  # fmt: skip
    workload = model("workloads.Workload")
    event = model("workloads.WorkloadEvent")
    made = {}
    for state in ("pending", "running", "succeeded"):
        w = workload.objects.create(owner=alice, group=vision, queue=queue, kind="training", name=f"job-{state}",
                                    command="python train.py", gpus_milli=1000, runtime_limit_s=3600, state=state,
                                    fabric=fabric if state != "pending" else None,
                                    submitted_at=now - timedelta(hours=2))  # fmt: skip
        event.objects.create(workload=w, to_state="pending", reason="submitted")
        if state != "pending":
            event.objects.create(workload=w, from_state="pending", to_state=state, reason="at release")
        made[state] = str(w.pk)
    model("usage.UsageSample").objects.create(workload_id=made["running"], at=now, gpus_milli=1000)
    model("accounts.AuditEvent").objects.create(action="signin", actor=alice, actor_name="alice")
    json.dump(made, sys.stdout)


def after_upgrade() -> None:
    django.setup()
    from django.core.management import call_command

    from portal.accounts.models import ApiToken, AuditEvent
    from portal.usage.models import UsageSample
    from portal.workloads.models import Workload

    token = ApiToken.lookup(TOKEN)
    found = {
        "token_user": token.user.username if token is not None else None,
        "workloads": {
            w.name: [w.state, w.group.slug, w.queue.slug, w.gpus_milli, w.events.count()]
            for w in Workload.objects.select_related("group", "queue")
        },
        "samples": UsageSample.objects.count(),
        "audit": list(AuditEvent.objects.filter(action="signin").values_list("actor_name", flat=True)),
    }
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)  # nothing left to migrate
    json.dump(found, sys.stdout)
