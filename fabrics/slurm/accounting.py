"""GPU time as Slurm's own accounting (sacct, slurmdbd) records it per account, for a window. Pure.

`argv` asks for every user's jobs charged to some accounts that ran in the window, one line per job
(allocation only, -X), with the GPUs it held:

    4|gl-<workload id>|gl-vision|gl-alice|cpu=1,gres/gpu=2,mem=256M,node=1|2026-12-01T15:34:01|2026-12-01T15:35:02

`charges` reads them: each job's GPUs times its run time clipped to the window (a job still running
counts to the window's end; one that never started counts nothing).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

FIELDS = ("JobID", "JobName", "Account", "User", "AllocTRES", "Start", "End")
SEPARATOR = "|"
GPUS = re.compile(r"(?:^|,)gres/gpu=(\d+)(?:,|$)")


@dataclass(frozen=True)
class Charge:
    job_id: str
    name: str
    account: str
    user: str
    gpus: int
    seconds: float  # run time within the window

    @property
    def gpu_hours(self) -> float:
        return self.gpus * self.seconds / 3600


def argv(sacct: str, accounts: Iterable[str], start: datetime, end: datetime) -> list[str]:
    return [
        "env", "TZ=UTC", "SLURM_TIME_FORMAT=standard", sacct, "--allusers", "-X", "-n", "-P",
        f"--accounts={','.join(sorted(accounts))}", f"--starttime={_time(start)}", f"--endtime={_time(end)}",
        "-o", ",".join(FIELDS),
    ]  # fmt: skip


def charges(output: str, start: datetime, end: datetime) -> list[Charge]:
    """The jobs in sacct's output with their GPU time inside [start, end); lines that do not parse are skipped."""
    found = []
    for line in output.splitlines():
        parts = line.split(SEPARATOR)
        if len(parts) != len(FIELDS):
            continue
        job_id, name, account, user, tres, began, ended = parts
        began_at, ended_at = _parse(began), _parse(ended) or end
        if began_at is None:
            continue  # never started
        match = GPUS.search(tres)
        seconds = max(0.0, (min(ended_at, end) - max(began_at, start)).total_seconds())
        found.append(Charge(job_id, name, account, user, int(match.group(1)) if match else 0, seconds))
    return found


def gpu_hours_by_account(found: Sequence[Charge]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for charge in found:
        totals[charge.account] = totals.get(charge.account, 0.0) + charge.gpu_hours
    return totals


def _time(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def _parse(text: str) -> datetime | None:
    """sacct's time (UTC, as asked) or None for "Unknown", "None" and the like."""
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=UTC)
    except ValueError:
        return None
