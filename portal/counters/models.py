from __future__ import annotations

from django.db import models


class Counter(models.Model):
    """One named number: a counter (added to), a gauge or a cursor (set), or a request between processes (set to
    1, taken back to 0 by the one that acts on it)."""

    name = models.CharField(max_length=50, primary_key=True)
    value = models.FloatField(default=0.0)

    class Meta:
        db_table = "worker_workerstats"  # the table these rows have always lived in

    def __str__(self) -> str:
        return f"{self.name}={self.value}"
