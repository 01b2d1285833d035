"""Agents on VMs and bare metal: who may speak for a fabric, the hosts they run on, and the work they claim."""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import models
from django.utils import timezone


class AgentAccess(models.Model):
    """A service identity allowed to act as an agent of one agent fabric, and of no other."""

    service = models.OneToOneField("accounts.ServiceIdentity", on_delete=models.CASCADE, related_name="agent_access")
    fabric = models.ForeignKey("queues.Fabric", on_delete=models.CASCADE, related_name="agent_accesses")

    class Meta:
        verbose_name = "agent access"
        verbose_name_plural = "agent access"  # not Django's "agent accesss"

    def __str__(self) -> str:
        return f"{self.service} -> {self.fabric}"


class AgentHost(models.Model):
    """One host running `gridlane agent`, with the capacity it declared when it registered."""

    class HostState(models.TextChoices):
        ONLINE = "online"
        LOST = "lost"  # missed its heartbeats: its capacity is no longer offered

    fabric = models.ForeignKey("queues.Fabric", on_delete=models.CASCADE, related_name="agent_hosts")
    name = models.CharField(max_length=200)
    queues = models.JSONField(default=list, help_text="The queues it serves, in the order it serves them.")
    gpus = models.PositiveIntegerField(default=0)
    gpu_model = models.CharField(max_length=100, blank=True)
    gpu_memory_mib = models.PositiveBigIntegerField(default=0)
    cpus = models.PositiveIntegerField(default=0)
    memory_mib = models.PositiveBigIntegerField(default=0)
    state = models.CharField(max_length=10, choices=HostState.choices, default=HostState.ONLINE)
    registered_at = models.DateTimeField(default=timezone.now)
    last_heartbeat = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["fabric", "name"]
        constraints: ClassVar[list[Any]] = [
            models.UniqueConstraint(fields=["fabric", "name"], name="one_agent_host_per_name")
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.state})"


class Claim(models.Model):
    """A workload made claimable on an agent fabric, and what became of it on the host that claimed it."""

    class ClaimState(models.TextChoices):
        CLAIMABLE = "claimable"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        CANCELLED = "cancelled"
        TIMED_OUT = "timed_out"
        LOST = "lost"  # its host stopped heartbeating

    run_id = models.UUIDField(unique=True, help_text="The workload's run id: the tag the job carries.")
    workload = models.ForeignKey("workloads.Workload", on_delete=models.CASCADE, related_name="agent_claims")
    fabric = models.ForeignKey("queues.Fabric", on_delete=models.CASCADE, related_name="agent_claims")
    queue = models.CharField(max_length=50)
    spec = models.JSONField(default=dict, help_text="What the agent needs to run it: command, limits, env.")
    gpus_milli = models.PositiveIntegerField(default=0)
    state = models.CharField(max_length=10, choices=ClaimState.choices, default=ClaimState.CLAIMABLE)
    host = models.ForeignKey(AgentHost, null=True, blank=True, on_delete=models.SET_NULL, related_name="claims")
    cancel_requested = models.BooleanField(default=False)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    reason = models.CharField(max_length=300, blank=True)
    log = models.TextField(blank=True, help_text="The end of the job's output, as the agent streamed it.")
    lease_ends_at = models.DateTimeField(null=True, blank=True)
    lease_warned_at = models.DateTimeField(null=True, blank=True, help_text="When the expiry warning was recorded.")

    class Meta:
        ordering = ["created_at", "pk"]
        indexes: ClassVar[list[Any]] = [models.Index(fields=["fabric", "state", "queue", "created_at"])]

    def __str__(self) -> str:
        return f"{self.run_id} ({self.state})"


class LeaseKey(models.Model):
    """The SSH public key a VM lease grants access to, and where logins may come from."""

    workload = models.OneToOneField("workloads.Workload", on_delete=models.CASCADE, related_name="lease_key")
    public_key = models.TextField()
    from_addresses = models.CharField(max_length=300, blank=True, help_text='e.g. "10.0.0.0/8,192.168.1.5"')

    def __str__(self) -> str:
        return f"key for {self.workload_id}"
