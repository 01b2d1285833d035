from typing import Any, ClassVar

from django.db import models


class CycleLock(models.Model):
    """A lease that lets one scheduling cycle run at a time where advisory locks do not exist (SQLite)."""

    name = models.CharField(max_length=50, primary_key=True)
    holder = models.CharField(max_length=64, blank=True)
    expires_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} held by {self.holder or 'nobody'}"


class GroupUsage(models.Model):
    """A team's GPU use, decayed over the fair-share half-life: the U in the priority formula."""

    group = models.OneToOneField("accounts.ResourceGroup", on_delete=models.CASCADE, related_name="+")
    decayed_gpu_seconds = models.FloatField(default=0.0)
    updated_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.group_id}: {self.decayed_gpu_seconds:.0f} GPU-s"


class WorkerStats(models.Model):
    """Counters the worker keeps for /metrics (the web process serves them; the worker counts them)."""

    name = models.CharField(max_length=50, primary_key=True)
    value = models.FloatField(default=0.0)

    def __str__(self) -> str:
        return f"{self.name}={self.value}"


class WaitBucket(models.Model):
    """The queue-wait histogram per team: starts whose wait fell in this bucket (the collector cumulates)."""

    group = models.ForeignKey("accounts.ResourceGroup", on_delete=models.CASCADE, related_name="+")
    le = models.FloatField(help_text="Upper bound in seconds (inf for the last bucket).")
    count = models.PositiveBigIntegerField(default=0)
    total_seconds = models.FloatField(default=0.0, help_text="The sum of the waits counted here.")

    class Meta:
        constraints: ClassVar[list[Any]] = [models.UniqueConstraint(fields=["group", "le"], name="one_bucket")]

    def __str__(self) -> str:
        return f"{self.group_id} <= {self.le}: {self.count}"


class PodAddresses(models.Model):
    """The IPs of a Kubernetes workload's running pods as its fabric's last poll reported them
    (portal/worker/pods.py): the only addresses its web server may be reached on, beside IT's networks
    (portal.workloads.server_reach)."""

    workload = models.OneToOneField("workloads.Workload", on_delete=models.CASCADE, primary_key=True, related_name="+")
    addresses = models.JSONField(default=list)
    seen_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.workload_id}: {', '.join(self.addresses)}"
