"""The skeleton policy: admit by capacity and group limit, in priority then age order, with named reasons."""

from __future__ import annotations

import ast
import pathlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from fabrics.base import Resources
from scheduler import FabricState, Job, QueueState, Quota, Snapshot, decide
from scheduler import reasons as r
from scheduler.model import NO_LIMIT

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
TEAM_A, TEAM_B = 1, 2
BIG, SMALL = 10, 11


def gpus(n: float) -> Resources:
    return Resources(int(n * 1000), 1000, 1024)


def gpu_jobs(
    group: int, n: int, each: float = 1, *, queue: int = 1, priority: str = "normal", prefix: str = "", age_s: int = 0
) -> list[Job]:
    return [
        Job(
            f"{prefix or group}-{i}",
            group,
            queue,
            gpus(each),
            priority=priority,
            submitted_at=NOW - timedelta(seconds=age_s + n - i),
        )
        for i in range(n)
    ]


def running_on(fabric: int, jobs: list[Job]) -> list[Job]:
    return [Job(j.id, j.group_id, j.queue_id, j.per_node, fabric_id=fabric, started_at=NOW) for j in jobs]


def fabric(fid: int, n_gpus: int, healthy: bool = True) -> FabricState:
    return FabricState(fid, f"fabric{fid}", Resources(n_gpus * 1000, 10**6, 10**7), healthy)


@dataclass
class Case:
    name: str
    fabrics: list[FabricState]
    pending: list[Job]
    running: list[Job] = field(default_factory=list)
    quotas: list[Quota] = field(default_factory=list)
    targets: tuple[int, ...] = (BIG,)
    want_admitted: set[str] = field(default_factory=set)
    want_on: dict[str, int] = field(default_factory=dict)
    want_reasons: dict[str, str] = field(default_factory=dict)


CASES = [
    Case(
        "33 one-GPU jobs on a 32-GPU fabric: the last one waits for capacity",
        fabrics=[fabric(BIG, 32)],
        pending=gpu_jobs(TEAM_A, 33),
        want_admitted={f"1-{i}" for i in range(32)},
        want_reasons={"1-32": r.NO_CAPACITY},
    ),
    Case(
        "a team at its limit waits even with free GPUs, and the other team is admitted",
        fabrics=[fabric(BIG, 8)],
        pending=gpu_jobs(TEAM_A, 3, 2) + gpu_jobs(TEAM_B, 1, 2),
        quotas=[Quota(TEAM_A, BIG, limit=Resources(4000, NO_LIMIT.cpus_milli, NO_LIMIT.memory_mib))],
        want_admitted={"1-0", "1-1", "2-0"},
        want_reasons={"1-2": r.GROUP_AT_LIMIT},
    ),
    Case(
        "four quarter-GPU jobs fit on one GPU exactly; a fifth waits",
        fabrics=[fabric(BIG, 1)],
        pending=gpu_jobs(TEAM_A, 5, 0.25),
        want_admitted={"1-0", "1-1", "1-2", "1-3"},
        want_reasons={"1-4": r.NO_CAPACITY},
    ),
    Case(
        "high priority goes first when only one fits",
        fabrics=[fabric(BIG, 1)],
        pending=gpu_jobs(TEAM_A, 1, priority="low", prefix="low", age_s=100)
        + gpu_jobs(TEAM_B, 1, priority="high", prefix="high"),
        want_admitted={"high-0"},
        want_reasons={"low-0": r.NO_CAPACITY},
    ),
    Case(
        "running work holds its capacity",
        fabrics=[fabric(BIG, 4)],
        running=running_on(BIG, gpu_jobs(TEAM_B, 3, prefix="old")),
        pending=gpu_jobs(TEAM_A, 2),
        want_admitted={"1-0"},
        want_reasons={"1-1": r.NO_CAPACITY},
    ),
    Case(
        "a full first target routes the work to the second",
        fabrics=[fabric(BIG, 1), fabric(SMALL, 2)],
        targets=(BIG, SMALL),
        pending=gpu_jobs(TEAM_A, 3),
        want_on={"1-0": BIG, "1-1": SMALL, "1-2": SMALL},
    ),
    Case(
        "an unhealthy fabric admits nothing and says so",
        fabrics=[fabric(BIG, 8, healthy=False)],
        pending=gpu_jobs(TEAM_A, 1),
        want_reasons={"1-0": r.FABRIC_UNAVAILABLE},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_decide(case: Case) -> None:
    snapshot = Snapshot(
        now=NOW,
        fabrics={f.id: f for f in case.fabrics},
        queues={1: QueueState(1, "train", case.targets)},
        pending=tuple(case.pending),
        running=tuple(case.running),
        quotas={(q.group_id, q.fabric_id): q for q in case.quotas},
    )
    decisions = decide(snapshot)
    admitted = {a.job_id: a.fabric_id for a in decisions.admit}
    if case.want_admitted:
        assert set(admitted) == case.want_admitted
    for job_id, fabric_id in case.want_on.items():
        assert admitted[job_id] == fabric_id
    waiting = {w.job_id: w.reason for w in decisions.waiting}
    for job_id, code in case.want_reasons.items():
        assert waiting[job_id].code == code
    assert set(admitted).isdisjoint(waiting)
    assert set(admitted) | set(waiting) == {j.id for j in case.pending}


def test_a_limit_reason_gives_the_numbers() -> None:
    limit = Resources(4000, NO_LIMIT.cpus_milli, NO_LIMIT.memory_mib)
    reason = r.group_at_limit("dgx", used=gpus(4), limit=limit, need=gpus(2))
    assert reason.message == "Your team is at its limit on dgx: 4 GPUs of its limit of 4 in use, this needs 2 more."


def test_the_scheduler_imports_no_django_and_reads_no_clock() -> None:
    root = pathlib.Path(__file__).resolve().parents[2] / "scheduler"
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                if isinstance(node, ast.Attribute) and node.attr in {"now", "utcnow", "time"}:
                    base = node.value
                    assert not (isinstance(base, ast.Name) and base.id in {"datetime", "time"}), (
                        f"{path.name} reads the clock: `now` must come from the snapshot"
                    )
                continue
            for name in names:
                assert not name.startswith(("django", "portal")), f"{path.name} imports {name}"
