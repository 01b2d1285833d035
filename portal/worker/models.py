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
