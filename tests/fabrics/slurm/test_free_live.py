"""What the real Slurm test cluster has free now, with another POSIX user (not Gridlane) filling its GPUs with
plain sbatch jobs (fabrics/slurm/free.py through SlurmFabric.capacity)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from fabrics.base import Resources
from fabrics.slurm.fabric import SlurmFabric
from tests.fabrics.slurm.conftest import wait_for

OTHER = "gl-charlie"  # a person with a cluster account of their own (tests/services/slurm/people.sh)


def _as_other(*argv: str) -> str:
    return subprocess.run(
        ["runuser", "-u", OTHER, "--", *argv], capture_output=True, text=True, check=True, cwd="/tmp", timeout=60
    ).stdout.strip()


@pytest.fixture
def filler(people: None) -> Iterator[list[str]]:
    """Jobs of the other user, cancelled at the end whatever happened."""
    ids: list[str] = []
    yield ids
    if ids:
        subprocess.run(["scancel", *ids], check=False, timeout=60)


def _running(job_id: str) -> bool:
    out = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True, check=False)
    return out.stdout.strip() == "RUNNING"


def test_gpus_another_user_holds_are_not_free_and_come_back_when_they_end(slurm: SlurmFabric, filler: list[str]):
    before = slurm.capacity().free
    assert before is not None
    assert {p.name for p in before.pools} <= {"cpu", "gpu"}  # only the fabric's partitions
    assert before.types() == {"a100", "h100"}
    job_id = _as_other(
        "sbatch", "--parsable", "-A", "gl-fraud", "-p", "gpu", "--gres=gpu:h100:4", "-t", "5", "-o", "/dev/null",
        "--wrap", "sleep 300",
    )  # fmt: skip
    filler.append(job_id.split(";")[0])
    wait_for(lambda: _running(filler[0]), "the other user's job to run", timeout=120)
    busy = slurm.capacity().free
    assert busy is not None
    assert busy.gpus_free("h100") == 0
    assert not busy.room_for(Resources(1000, 1000, 256), gpu_type="h100")
    subprocess.run(["scancel", filler[0]], check=True, timeout=60)

    def h100_free_again() -> bool:
        again = slurm.capacity().free
        return again is not None and again.gpus_free("h100") > 0

    wait_for(h100_free_again, "the h100s to be free again", timeout=120)
