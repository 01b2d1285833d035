from __future__ import annotations

from typing import Any, ClassVar

from django.conf import settings
from django.db import models
from django.utils import timezone

from portal.accounts.models import ResourceGroup


class Bundle(models.Model):
    """A team's code bundle: a .tar.gz named by its sha256, its bytes on disk under GRIDLANE_CODE_DIR
    (portal.code.store). The same bytes uploaded by two teams are one file and two rows: a team owns a bundle
    only by uploading it, so knowing a digest never lets one team use, or learn of, another's code."""

    digest = models.CharField(max_length=64)
    group = models.ForeignKey(ResourceGroup, on_delete=models.CASCADE, related_name="+")
    size = models.PositiveBigIntegerField(help_text="Bytes of the .tar.gz.")
    unpacked = models.PositiveBigIntegerField(help_text="Bytes of its files once unpacked.")
    uploaded_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    uploaded_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints: ClassVar[list[Any]] = [
            models.UniqueConstraint(fields=["digest", "group"], name="one_bundle_row_per_team"),
        ]

    def __str__(self) -> str:
        return f"{self.digest[:12]} ({self.group})"
