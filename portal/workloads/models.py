from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any, ClassVar

from django.conf import settings
from django.db import models
from django.urls import reverse
from django.utils import timezone

from fabrics.base import Resources
from portal.accounts.models import ResourceGroup
from portal.queues.models import DEFAULT_TIER, Fabric, Queue, QueueTarget, WorkloadKind, from_milli, in_gb
from portal.workloads.states import FINISHED, State

# Fabrics hand back the last 16 KiB of output (fabrics.base.Fabric.tail): a tail about that long was cut.
LOG_TAIL_CUT_BYTES = 16_000


def run_id_of(pk: uuid.UUID, attempt: int) -> uuid.UUID:
    """Workload.run_id from its two columns, for a path that reads only those."""
    return pk if not attempt else uuid.uuid5(pk, f"attempt-{attempt}")


class Workload(models.Model):
    """One thing a user asked to run, from submission to its end. State changes go through services."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # No index of their own for owner, group and array_parent: Meta.indexes' composite indexes lead with each, and
    # serve the same look-ups. Every index is written on each insert and on each change of state (state is
    # indexed, so such an update is never HOT), so each one less is that much less of every submit and transition.
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="workloads", db_index=False
    )
    group = models.ForeignKey(ResourceGroup, on_delete=models.PROTECT, related_name="workloads", db_index=False)
    queue = models.ForeignKey(Queue, on_delete=models.PROTECT, related_name="workloads")
    kind = models.CharField(max_length=10, choices=WorkloadKind.choices)
    name = models.CharField(max_length=100)
    command = models.TextField(blank=True)
    script = models.TextField(blank=True)  # a user's own sbatch/qsub script, submitted byte for byte
    # Native work runs only on fabrics of its kind (slurm, pbs); empty: any fabric behind the queue.
    native_kind = models.CharField(max_length=12, blank=True)
    # Arrays: a parent (array_size > 0, never scheduled itself: it settles from its elements) and one element
    # per index, each an ordinary workload counted by policy, at most array_throttle of them active at once.
    array = models.CharField(max_length=200, blank=True, help_text="An array's indexes, e.g. 0-99%10.")
    array_size = models.PositiveIntegerField(default=0)
    array_parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="elements", editable=False, db_index=False
    )
    array_index = models.PositiveIntegerField(null=True, blank=True)
    array_throttle = models.PositiveIntegerField(null=True, blank=True)
    image = models.CharField(max_length=300, blank=True)
    # Code that travels with it (portal.code): {"digest": sha256} of its team's bundle, or {"git": url, "commit": sha};
    # {} for none. And a requirements file's text, built into a virtual environment on the node.
    code = models.JSONField(default=dict, blank=True)
    requirements = models.TextField(blank=True)
    # The request, per node, in integer units (milli-GPUs, milli-CPUs, MiB) so sums never drift.
    gpus_milli = models.PositiveIntegerField(default=0)
    cpus_milli = models.PositiveIntegerField(default=1000)
    memory_mib = models.PositiveBigIntegerField(default=1024)
    nodes = models.PositiveIntegerField(default=1)
    gpu_type = models.CharField(max_length=40, blank=True, help_text="A GPU type its queue's targets have; empty: any.")
    runtime_limit_s = models.PositiveIntegerField()
    # A priority tier's slug (queues.PriorityTier): IT defines the tiers, so the values are not choices here.
    priority = models.CharField(max_length=20, default=DEFAULT_TIER)
    lease_s = models.PositiveIntegerField(null=True, blank=True, help_text="Notebooks and VMs: the lease length.")
    lease_ends_at = models.DateTimeField(null=True, blank=True)
    # Notebooks: when an idle one is stopped, once it has been warned; cleared when it is used again.
    idle_stop_at = models.DateTimeField(null=True, blank=True)
    # GPUs below 80 % over the idle window (portal.worker.gpu_idle): when the owner was warned of this idle
    # spell; cleared when they are busy again (or their use is no longer known).
    gpu_idle_warned_at = models.DateTimeField(null=True, blank=True)
    # When the portal last took a sample from the job's own sampler (portal.usage.samples): the rate limit,
    # kept on the row so that one conditional update both checks and takes it.
    last_sample_at = models.DateTimeField(null=True, blank=True, editable=False)

    state = models.CharField(max_length=12, choices=State.choices, default=State.PENDING)
    pending_reason_code = models.CharField(max_length=40, blank=True)
    pending_reason = models.CharField(max_length=300, blank=True)
    estimated_start = models.DateTimeField(null=True, blank=True)
    # Every estimate shown, as it stands (portal.workloads.calibration): the first one, and the latest one before
    # it started (kept past its admission, unlike estimated_start); and once it started, how far off that was
    # (actual start minus the latest estimate, in seconds: late is positive).
    first_estimated_start = models.DateTimeField(null=True, blank=True, editable=False)
    last_estimated_start = models.DateTimeField(null=True, blank=True, editable=False)
    estimate_error_s = models.IntegerField(null=True, blank=True, editable=False)
    # Its place among the waiting work of its queue, in the scheduler's order (1: next); 0 when not waiting.
    queue_position = models.PositiveIntegerField(default=0)

    # Placement: where it ran. To the submitter an implementation detail, kept for support and audit.
    fabric = models.ForeignKey(Fabric, null=True, blank=True, on_delete=models.PROTECT, related_name="workloads")
    target = models.ForeignKey(QueueTarget, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    attempt = models.PositiveIntegerField(default=0, help_text="Times it went back to pending after preemption.")
    external_id = models.CharField(max_length=200, blank=True)
    rendered = models.TextField(blank=True, help_text="The script or manifest sent to the fabric.")
    host = models.CharField(max_length=200, blank=True)
    # The portal's own link to its web server (/connect/<id>/...), once it has one; never the server's address.
    connect_url = models.URLField(max_length=500, blank=True)
    # Its web server (a notebook's Jupyter, or an app it publishes): {"host", "port", "token", "path", "label"},
    # as its job reported it or its fabric found it, for the connect proxy and the idle check. The token is a
    # secret: never shown (not editable, so not in the admin).
    notebook_endpoint = models.JSONField(null=True, blank=True, editable=False)
    shared_with_team = models.BooleanField(
        default=False, help_text="Its team's members may open its web server too (the owner's choice; off by default)."
    )
    exit_code = models.IntegerField(null=True, blank=True)
    log_tail = models.TextField(blank=True)

    submitted_at = models.DateTimeField(default=timezone.now)
    admitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    # NULL, not "", for "no key": the unique constraint then ignores keyless workloads.
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    request_fingerprint = models.CharField(max_length=64, blank=True)
    # The API token it was submitted with (None: the web pages, or a token since deleted): what a token's spending
    # cap counts (portal.workloads.services.token_cap). Indexed only where set.
    token = models.ForeignKey(
        "accounts.ApiToken", null=True, blank=True, on_delete=models.SET_NULL, related_name="workloads",
        db_index=False, editable=False,
    )  # fmt: skip

    class Meta:
        ordering = ["-submitted_at"]
        constraints: ClassVar[list[Any]] = [
            models.UniqueConstraint(
                fields=["owner", "idempotency_key"],
                condition=models.Q(idempotency_key__isnull=False),
                name="one_workload_per_idempotency_key",
            ),
        ]
        indexes: ClassVar[list[Any]] = [
            models.Index(fields=["state", "submitted_at"]),
            models.Index(fields=["group", "state"]),
            models.Index(fields=["owner", "-submitted_at"]),
            models.Index(fields=["array_parent", "state"]),
            models.Index(fields=["token"], condition=models.Q(token__isnull=False), name="workload_token"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.state})"

    def get_absolute_url(self) -> str:
        return reverse("workloads:detail", args=[self.pk])

    def clone_url(self) -> str:
        """The new-workload form of its kind, filled in from this one."""
        page = {"notebook": "workloads:new_notebook", "vm": "workloads:new_vm"}.get(self.kind, "workloads:new")
        return f"{reverse(page)}?from={self.pk}"

    @property
    def log_lines(self) -> str:
        """The stored end of its output from its first whole line (the tail is cut by bytes, often mid-line)."""
        tail = self.log_tail
        if len(tail.encode("utf-8", "replace")) >= LOG_TAIL_CUT_BYTES and "\n" in tail:
            return "\u2026 (earlier output: see the full output)\n" + tail[tail.index("\n") + 1 :]
        return tail

    @property
    def code_label(self) -> str:
        """The code that travels with it in a few words, for its page; "" for none."""
        code = self.code if isinstance(self.code, dict) else {}
        if code.get("digest"):
            return f"bundle sha256:{code['digest']}"
        if code.get("git"):
            return f"{code['git']} at commit {code.get('commit', '')}"
        return ""

    @property
    def interactive(self) -> bool:
        """A session someone connects to: a notebook or a VM lease."""
        return self.kind in (WorkloadKind.NOTEBOOK, WorkloadKind.VM)

    @property
    def run_id(self) -> uuid.UUID:
        """The tag its fabric job carries: the workload id, or a fresh one per attempt after a preemption,
        so that the job of an earlier attempt is never mistaken for the current one."""
        return run_id_of(self.id, self.attempt)

    @property
    def is_array(self) -> bool:
        """An array's parent: its elements run, it does not."""
        return self.array_size > 0

    @property
    def per_node(self) -> Resources:
        return Resources(self.gpus_milli, self.cpus_milli, self.memory_mib)

    @property
    def total(self) -> Resources:
        return self.per_node.times(self.nodes)

    @property
    def finished(self) -> bool:
        return self.state in FINISHED

    @property
    def lease_hours(self) -> Decimal | None:
        """The lease in hours (2 places); None for work without one."""
        return (Decimal(self.lease_s) / 3600).quantize(Decimal("0.01")).normalize() if self.lease_s else None

    @property
    def extendable(self) -> bool:
        """Whether its lease may be extended now: a notebook or VM that waits or runs (see services.check_extend)."""
        return self.kind in (WorkloadKind.NOTEBOOK, WorkloadKind.VM) and self.state in (State.PENDING, State.RUNNING)

    @property
    def gpus(self) -> Decimal:
        return from_milli(self.gpus_milli)

    @property
    def cpus(self) -> Decimal:
        return from_milli(self.cpus_milli)

    @property
    def memory_gb(self) -> Decimal:
        return in_gb(self.memory_mib)


class WorkloadEvent(models.Model):
    """Every state change of a workload, with who did it and why: its own audit trail."""

    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(default=timezone.now)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    from_state = models.CharField(max_length=12, blank=True)
    to_state = models.CharField(max_length=12)
    reason = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["at", "pk"]

    def __str__(self) -> str:
        return f"{self.from_state or '-'} -> {self.to_state}"
