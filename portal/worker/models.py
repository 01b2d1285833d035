from typing import Any, ClassVar

from django.db import models

from portal.counters.models import Counter

# The worker's counters are the counters app's rows (portal.counters): the name stays for its readers.
WorkerStats = Counter


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


class FabricFree(models.Model):
    """What a fabric had free at its last observation, in its own terms (fabrics/live.py), kept with its age:
    one row per fabric, replaced at each answer; planning reads it only while it is fresh (capacity.fresh)."""

    fabric = models.OneToOneField("queues.Fabric", on_delete=models.CASCADE, primary_key=True, related_name="+")
    observed_at = models.DateTimeField()
    data = models.JSONField(default=dict)

    def __str__(self) -> str:
        return f"{self.fabric_id} at {self.observed_at:%H:%M:%S}"


class Move(models.Model):
    """A move of waiting work from one fabric's queue to another target, recorded before anything is done
    (portal/worker/pullback.py): while the row exists the move is under way, and the worker finishes it (or
    drops it, where the job started meanwhile) before it reads any fabric's status."""

    workload = models.OneToOneField("workloads.Workload", on_delete=models.CASCADE, primary_key=True, related_name="+")
    from_fabric = models.ForeignKey("queues.Fabric", on_delete=models.CASCADE, related_name="+")
    external_id = models.CharField(max_length=100)
    to_fabric = models.ForeignKey("queues.Fabric", on_delete=models.CASCADE, related_name="+")
    at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.workload_id}: {self.from_fabric_id} -> {self.to_fabric_id}"


class PodAddresses(models.Model):
    """The IPs of a Kubernetes workload's running pods as its fabric's last poll reported them
    (portal/worker/pods.py): the only addresses its web server may be reached on, beside IT's networks
    (portal.connect.server_reach)."""

    workload = models.OneToOneField("workloads.Workload", on_delete=models.CASCADE, primary_key=True, related_name="+")
    addresses = models.JSONField(default=list)
    seen_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.workload_id}: {', '.join(self.addresses)}"
