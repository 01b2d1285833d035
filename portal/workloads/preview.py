"""The seam between the workloads layer and the worker for a dry run (the submit form's Check button): the
workloads layer owns it and imports nothing from the worker, which registers its dry run when its app is ready
(portal.worker.apps: portal.worker.dryrun.dry_run). With none registered, `ask` answers None."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from portal.workloads.services.request import SubmitRequest

DryRun = Callable[[Any, SubmitRequest], dict[str, Any]]

_dry_run: DryRun | None = None


def register(dry_run: DryRun | None) -> None:
    global _dry_run
    _dry_run = dry_run


def ask(user: Any, req: SubmitRequest) -> dict[str, Any] | None:
    """Where the submission would land (the worker's dry run), or None where no dry run is registered. Raises what
    a submit's checks raise."""
    return None if _dry_run is None else _dry_run(user, req)
