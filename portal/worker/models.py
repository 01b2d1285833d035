from django.db import models


class CycleLock(models.Model):
    """A lease that lets one scheduling cycle run at a time where advisory locks do not exist (SQLite)."""

    name = models.CharField(max_length=50, primary_key=True)
    holder = models.CharField(max_length=64, blank=True)
    expires_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"{self.name} held by {self.holder or 'nobody'}"
