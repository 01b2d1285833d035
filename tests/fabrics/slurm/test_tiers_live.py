"""A priority tier on the real Slurm cluster: sbatch gets the tier's QOS and nice, and a queued job that moves to
another tier is given the new ones by scontrol update (fabrics/slurm/fabric.py, reprioritise)."""

from __future__ import annotations

from fabrics.base import JobState, TierHints, reprioritise
from fabrics.slurm.fabric import SlurmFabric
from tests.fabrics.slurm.conftest import job

HELD = "#!/bin/bash\n#SBATCH --hold\nexec /bin/bash -c $command\n"


def qos_and_nice(slurm: SlurmFabric, external_id: str) -> tuple[str, str]:
    """As squeue prints them, read independently of the fabric's own code: `normal 50`."""
    qos, nice = slurm.ssh.run(["squeue", "-h", "-j", external_id, "-o", "%q %y"], retry=True).stdout.split()
    return qos, nice


def test_a_queued_job_carries_its_tier_and_takes_the_new_one_when_moved(slurm):
    spec = job("echo moved", template=HELD, tier=TierHints("low", slurm_qos="normal", slurm_nice=50))
    external_id = slurm.submit(spec)
    try:
        assert slurm.poll([external_id])[external_id].state is JobState.QUEUED
        assert qos_and_nice(slurm, external_id) == ("normal", "50")
        assert reprioritise(slurm, external_id, TierHints("gold", slurm_qos="gl-gpu2", slurm_nice=200)) is True
        assert qos_and_nice(slurm, external_id) == ("gl-gpu2", "200")
    finally:
        slurm.cancel(external_id)
