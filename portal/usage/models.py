from __future__ import annotations

from typing import Any, ClassVar

from django.conf import settings
from django.db import models


class UsageSample(models.Model):
    """One measurement of a running workload: what it holds and, where the fabric reports it, how busy its GPUs are."""

    class Source(models.TextChoices):
        ALLOCATION = "allocation", "the portal (what it holds, no utilisation)"
        JOB = "job", "the job's sampler"
        AGENT = "agent", "the host's agent"
        FABRIC = "fabric", "the fabric's own metrics (Kubernetes: DCGM through Prometheus)"

    workload = models.ForeignKey("workloads.Workload", on_delete=models.CASCADE, related_name="usage_samples")
    at = models.DateTimeField(db_index=True)
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.ALLOCATION)
    gpus_milli = models.PositiveIntegerField(help_text="GPUs allocated to the workload, in milli-GPUs.")
    gpu_utilisation = models.FloatField(null=True, blank=True, help_text="0-100, averaged over its GPUs.")
    gpu_memory_mib = models.PositiveBigIntegerField(null=True, blank=True)
    cpu_utilisation = models.FloatField(null=True, blank=True, help_text="0-100 of its allocated CPUs.")
    memory_mib = models.PositiveBigIntegerField(null=True, blank=True)
    node = models.CharField(
        max_length=64, blank=True, default="", db_default="", help_text="The node it was read on, if said."
    )
    gpus_read = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="GPUs the reading covered (its UsageGpuSample rows); None: not per GPU."
    )
    gpus_idle = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="Of those, GPUs below the idle threshold (IDLE_BELOW) in this reading."
    )

    class Meta:
        indexes: ClassVar[list[Any]] = [models.Index(fields=["workload", "at"])]

    def __str__(self) -> str:
        return f"{self.workload_id} at {self.at:%Y-%m-%d %H:%M}"


class UsageGpuSample(models.Model):
    """One GPU of one node at one reading: what its owner's efficiency page draws, GPU by GPU. Written beside the
    reading's UsageSample (same workload, time and node), never read by the rollups."""

    workload = models.ForeignKey("workloads.Workload", on_delete=models.CASCADE, related_name="+")
    at = models.DateTimeField()
    node = models.CharField(max_length=64, blank=True, default="")
    gpu = models.PositiveSmallIntegerField(help_text="The GPU's index on its node, as nvidia-smi numbers it.")
    utilisation = models.FloatField(null=True, blank=True, help_text="0-100; None where the device says none (MIG).")
    memory_mib = models.PositiveBigIntegerField(null=True, blank=True)

    class Meta:
        indexes: ClassVar[list[Any]] = [models.Index(fields=["workload", "at"], name="usage_gpu_workload_at")]

    def __str__(self) -> str:
        return f"{self.workload_id} {self.node}/{self.gpu} at {self.at:%Y-%m-%d %H:%M}"


class UsageGpuWindow(models.Model):
    """One GPU of one node over five minutes (BUCKET_S in portal.usage.gpu_windows): how many readings gave its
    utilisation, their sum, and its peak memory, added to at ingest beside the UsageGpuSample rows. The efficiency
    page groups these into its windows instead of scanning every reading (a week of 8 GPUs: 16,128 rows, not
    161,280)."""

    workload = models.ForeignKey("workloads.Workload", on_delete=models.CASCADE, related_name="+")
    node = models.CharField(max_length=64, blank=True, default="")
    gpu = models.PositiveSmallIntegerField()
    start = models.DateTimeField(help_text="The start of its five minutes, counted from the epoch.")
    readings = models.PositiveIntegerField(default=0, help_text="Readings that gave a utilisation (MIG: maybe none).")
    utilisation_sum = models.FloatField(default=0.0)
    memory_peak_mib = models.PositiveBigIntegerField(null=True, blank=True)

    class Meta:
        constraints: ClassVar[list[Any]] = [
            models.UniqueConstraint(fields=["workload", "start", "node", "gpu"], name="one_gpu_window")
        ]

    def __str__(self) -> str:
        return f"{self.workload_id} {self.node}/{self.gpu} from {self.start:%Y-%m-%d %H:%M}"


class UsageTurn(models.Model):
    """The last reading kept per workload and node: each node's sampler has its own turn, so that the nodes of
    one job, reading at the same moment, never crowd each other out (portal.usage.samples.do_sample)."""

    workload = models.ForeignKey("workloads.Workload", on_delete=models.CASCADE, related_name="+")
    node = models.CharField(max_length=64, blank=True, default="")
    last_at = models.DateTimeField()
    cpu_seconds = models.FloatField(null=True, blank=True, help_text="The job's CPU time on the node at the last.")

    class Meta:
        constraints: ClassVar[list[Any]] = [
            models.UniqueConstraint(fields=["workload", "node"], name="one_usage_turn_per_workload_node")
        ]

    def __str__(self) -> str:
        return f"{self.workload_id} {self.node}: {self.last_at:%Y-%m-%d %H:%M:%S}"


class SamplerStart(models.Model):
    """A native job's sampler, started by Gridlane inside its allocation (portal.usage.native): once per run, and
    why it could not start, for the owner to read (their use then stays "unknown")."""

    workload = models.OneToOneField("workloads.Workload", on_delete=models.CASCADE, primary_key=True, related_name="+")
    attempt = models.PositiveIntegerField(default=0, help_text="The run of the workload it was started for.")
    at = models.DateTimeField()
    started = models.BooleanField(default=False)
    reason = models.CharField(max_length=300, blank=True, help_text="Why it did not start; blank when it did.")
    tries = models.PositiveSmallIntegerField(default=1, help_text="Starts tried for this run (at most MAX_TRIES).")
    retry_at = models.DateTimeField(null=True, blank=True, help_text="When to try again; empty: no more tries.")

    def __str__(self) -> str:
        return f"{self.workload_id}: {'started' if self.started else self.reason}"


class UsageSummary(models.Model):
    """A finished workload's efficiency (portal.usage.efficiency.Efficiency.summary), kept when it ends: its page
    and `gridlane stats` still say how it used what it held once its raw samples are pruned."""

    workload = models.OneToOneField("workloads.Workload", on_delete=models.CASCADE, primary_key=True, related_name="+")
    at = models.DateTimeField()
    data = models.JSONField()

    def __str__(self) -> str:
        return f"{self.workload_id} summary at {self.at:%Y-%m-%d %H:%M}"


class UsageRollup(models.Model):
    """Per team, queue and hour: what dashboards read, so that they never scan raw samples."""

    group = models.ForeignKey("accounts.ResourceGroup", on_delete=models.CASCADE, related_name="+")
    queue = models.ForeignKey("queues.Queue", on_delete=models.CASCADE, related_name="+")
    hour = models.DateTimeField(help_text="The start of the hour, UTC.")
    gpu_hours = models.FloatField(default=0.0)
    idle_gpu_hours = models.FloatField(default=0.0, help_text="GPU-hours below 80 % average utilisation.")
    used_gpu_hours = models.FloatField(default=0.0, help_text="GPU-hours x their average utilisation, where known.")
    unknown_gpu_hours = models.FloatField(default=0.0, help_text="GPU-hours with no utilisation data.")
    cpu_hours = models.FloatField(default=0.0, help_text="CPUs held (x nodes) x the part of the hour they ran.")
    memory_gb_hours = models.FloatField(default=0.0, help_text="Memory GB held (x nodes) x the part of the hour.")
    cost = models.FloatField(
        default=0.0, help_text="GPU-, CPU- and memory GB-hours, each x their fabric's price per hour."
    )
    idle_cost = models.FloatField(default=0.0, help_text="Idle GPU-hours x their fabric's price per GPU-hour.")
    reserved_gpu_hours = models.FloatField(default=0.0)
    pending_gpu_hours = models.FloatField(default=0.0, help_text="Demand that waited: GPUs pending x hours.")
    started = models.PositiveIntegerField(default=0)
    wait_p50_s = models.FloatField(null=True, blank=True)
    wait_p95_s = models.FloatField(null=True, blank=True)

    class Meta:
        constraints: ClassVar[list[Any]] = [
            models.UniqueConstraint(fields=["group", "queue", "hour"], name="one_rollup_per_group_queue_hour")
        ]
        indexes: ClassVar[list[Any]] = [models.Index(fields=["group", "hour"])]

    def __str__(self) -> str:
        return f"{self.group_id}/{self.queue_id} {self.hour:%Y-%m-%d %H}:00"


class UsageMemberRollup(models.Model):
    """Per team, member and hour: GPU-hours by member, kept beside UsageRollup for the same reason."""

    group = models.ForeignKey("accounts.ResourceGroup", on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    hour = models.DateTimeField(help_text="The start of the hour, UTC.")
    gpu_hours = models.FloatField(default=0.0)
    idle_gpu_hours = models.FloatField(default=0.0)
    used_gpu_hours = models.FloatField(default=0.0)
    unknown_gpu_hours = models.FloatField(default=0.0)
    cpu_hours = models.FloatField(default=0.0)
    memory_gb_hours = models.FloatField(default=0.0)
    cost = models.FloatField(default=0.0)
    idle_cost = models.FloatField(default=0.0)

    class Meta:
        constraints: ClassVar[list[Any]] = [
            models.UniqueConstraint(fields=["group", "user", "hour"], name="one_member_rollup_per_group_user_hour")
        ]
        indexes: ClassVar[list[Any]] = [models.Index(fields=["group", "hour"], name="usage_member_group_hour")]

    def __str__(self) -> str:
        return f"{self.group_id}/{self.user_id} {self.hour:%Y-%m-%d %H}:00"


class UsageFabricRollup(models.Model):
    """Per team, fabric and hour: the same figures by where the work ran, for chargeback by fabric."""

    group = models.ForeignKey("accounts.ResourceGroup", on_delete=models.CASCADE, related_name="+")
    fabric = models.ForeignKey("queues.Fabric", on_delete=models.CASCADE, related_name="+")
    hour = models.DateTimeField(help_text="The start of the hour, UTC.")
    gpu_hours = models.FloatField(default=0.0)
    idle_gpu_hours = models.FloatField(default=0.0)
    used_gpu_hours = models.FloatField(default=0.0)
    unknown_gpu_hours = models.FloatField(default=0.0)
    cpu_hours = models.FloatField(default=0.0)
    memory_gb_hours = models.FloatField(default=0.0)
    cost = models.FloatField(default=0.0)
    idle_cost = models.FloatField(default=0.0)

    class Meta:
        constraints: ClassVar[list[Any]] = [
            models.UniqueConstraint(fields=["group", "fabric", "hour"], name="one_fabric_rollup_per_group_fabric_hour")
        ]
        indexes: ClassVar[list[Any]] = [models.Index(fields=["group", "hour"], name="usage_fabric_group_hour")]

    def __str__(self) -> str:
        return f"{self.group_id}/{self.fabric_id} {self.hour:%Y-%m-%d %H}:00"


class UsageTeamRollup(models.Model):
    """Per team and hour: its GPU reservation and the GPU-hours it held. UsageRollup rows exist only for a queue
    that had work in the hour, so an hour in which a team reserved GPUs and ran nothing, the most unused
    reservation of all, has none there; here every hour of a team with a reservation has a row."""

    group = models.ForeignKey("accounts.ResourceGroup", on_delete=models.CASCADE, related_name="+")
    hour = models.DateTimeField(help_text="The start of the hour, UTC.")
    reserved_gpu_hours = models.FloatField(default=0.0, help_text="The team's GPU reservation x the hour.")
    gpu_hours = models.FloatField(default=0.0, help_text="GPU-hours the team held, over all its queues.")
    unused_reservation_gpu_hours = models.FloatField(
        default=0.0, help_text="Reserved GPU-hours it did not hold: reserved - held, never below 0."
    )

    class Meta:
        constraints: ClassVar[list[Any]] = [
            models.UniqueConstraint(fields=["group", "hour"], name="one_team_rollup_per_group_hour")
        ]

    def __str__(self) -> str:
        return f"{self.group_id} {self.hour:%Y-%m-%d %H}:00"


class WaitSlice(models.Model):
    """Per team, queue, priority tier and five minutes: the workloads that started then and how many of them had
    waited longer than each of the fixed thresholds (portal.usage.waits.THRESHOLDS_MIN). Wait objectives read
    their windows, from five minutes to ninety days, as sums over these rows (portal.objectives)."""

    group = models.ForeignKey("accounts.ResourceGroup", on_delete=models.CASCADE, related_name="+")
    queue = models.ForeignKey("queues.Queue", on_delete=models.CASCADE, related_name="+")
    tier = models.CharField(max_length=20, help_text="The workloads' priority tier (its slug).")
    start = models.DateTimeField(help_text="The start of the five minutes, UTC.")
    started = models.PositiveIntegerField(default=0)
    over_1m = models.PositiveIntegerField(default=0)
    over_5m = models.PositiveIntegerField(default=0)
    over_10m = models.PositiveIntegerField(default=0)
    over_15m = models.PositiveIntegerField(default=0)
    over_30m = models.PositiveIntegerField(default=0)
    over_60m = models.PositiveIntegerField(default=0)
    over_120m = models.PositiveIntegerField(default=0)
    over_240m = models.PositiveIntegerField(default=0)
    over_480m = models.PositiveIntegerField(default=0)
    over_1440m = models.PositiveIntegerField(default=0)

    class Meta:
        constraints: ClassVar[list[Any]] = [
            models.UniqueConstraint(fields=["group", "queue", "tier", "start"], name="one_wait_slice")
        ]
        indexes: ClassVar[list[Any]] = [
            models.Index(fields=["queue", "start"], name="wait_slice_queue_start"),
            models.Index(fields=["start"], name="wait_slice_start"),
        ]

    def __str__(self) -> str:
        return f"{self.group_id}/{self.queue_id}/{self.tier} {self.start:%Y-%m-%d %H:%M}"
