"""A priority tier carried to fabrics with priorities of their own, as command lines (no cluster needed): Slurm's
--qos and --nice on sbatch's command line, never in the script; PBS's -p; scontrol update and qalter -p for queued
work that was reprioritised; a Kubernetes PriorityClass, and Kueue's WorkloadPriorityClass label in Kueue mode."""

from __future__ import annotations

import shlex
import uuid
from typing import Any

import pytest

from fabrics.base import FabricConfig, FabricError, JobSpec, Resources, TierHints, reprioritise
from fabrics.kubernetes import render as kube_render
from fabrics.kubernetes.settings import KubeSettings
from fabrics.pbs.fabric import PbsFabric
from fabrics.slurm.fabric import SlurmFabric
from fabrics.ssh import batch
from fabrics.ssh.transport import Result
from portal.queues.tiers import moving

GOLD = TierHints("gold", slurm_qos="gold", slurm_nice=100, pbs_priority=500, kubernetes_priority_class="gold-pc")
# A well-formed host key line (a key of zeros): the transport reads it, and never connects in these tests.
HOST_KEY = "login.example.org ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"
SSH = {"host": "login.example.org", "user": "gridlane", "known_hosts": HOST_KEY, "key_file": "/dev/null"}
NATIVE = "#!/bin/bash\n#SBATCH --gpus-per-node=1\nsrun python train.py\n"  # a script never carries --qos


class Ssh:
    """Records what would run on the login node, and answers as told."""

    def __init__(self, answer: Result = Result(0, "", "")) -> None:  # noqa: B008 (frozen value)
        self.ran: list[list[str]] = []
        self.answer = answer

    def run(self, argv: list[str], *, retry: bool = False) -> Result:
        self.ran.append(list(argv))
        return self.answer


def job(**fields: Any) -> JobSpec:
    values: dict[str, Any] = {"workload_id": uuid.UUID(int=7), "name": "probe", "kind": "batch", "owner": "ada",
                              "group": "ml", "queue": "hpc", "command": "python train.py",
                              "per_node": Resources(1000, 1000, 1024), "tier": GOLD}  # fmt: skip
    return JobSpec(**(values | fields))


def slurm(**settings: Any) -> SlurmFabric:
    return SlurmFabric(FabricConfig("hpc", "slurm", Resources(8000, 32000, 64000), SSH | settings))


def pbs() -> PbsFabric:
    return PbsFabric(FabricConfig("pbs", "pbs", Resources(8000, 32000, 64000), SSH))


# --- Slurm --------------------------------------------------------------------------------------------------


def test_slurm_asks_for_the_tiers_qos_and_nice_on_sbatchs_command_line_not_in_the_script():
    step = slurm()._submit_step(job())
    assert list(step.argv) == ["sbatch", "--parsable", "--qos=gold", "--nice=100"]
    assert "gold" not in (step.stdin or "")
    text, _ = batch.script([step])
    assert "sbatch --parsable --qos=gold --nice=100" in text  # each word quoted where it needs to be


def test_slurm_without_hints_submits_as_before():
    assert list(slurm()._submit_step(job(tier=TierHints("normal"))).argv) == ["sbatch", "--parsable"]


def test_slurm_a_native_scripts_own_options_come_after_the_tiers_so_what_the_target_forces_wins():
    step = slurm()._submit_step(job(script=NATIVE, forced={"qos": "pinned"}))
    argv = list(step.argv)
    assert argv.index("--qos=gold") < argv.index("--qos=pinned")
    assert step.stdin == NATIVE  # byte for byte


def test_slurm_a_persons_job_carries_the_tier_behind_the_guard():
    argv = list(slurm()._submit_step(job(run_as="gl-alice")).argv)
    assert argv[:2] == ["sh", "-c"]
    assert argv[-4:] == ["sbatch", "--parsable", "--qos=gold", "--nice=100"]


def test_slurm_refuses_a_qos_that_is_no_qos_name_before_anything_runs():
    fabric = slurm()
    fabric.ssh = Ssh()  # type: ignore[assignment]
    placed = fabric._place([job(tier=TierHints("x", slurm_qos="gold; rm -rf ~"))], look_up=[])
    error = placed[uuid.UUID(int=7)]
    assert isinstance(error, FabricError)
    assert not error.retryable
    assert fabric.ssh.ran == []  # type: ignore[attr-defined]


def test_slurm_reorders_a_queued_job_with_scontrol_update_as_its_owner():
    fabric = slurm()
    fabric.ssh = ssh = Ssh()  # type: ignore[assignment]
    assert reprioritise(fabric, "42", GOLD) is True
    (argv,) = ssh.ran
    assert argv[:2] == ["bash", "-c"]
    assert "as-owner" in argv  # run as the job's owner, as scancel is
    assert argv[-5:] == ["scontrol", "update", "JobId=42", "QOS=gold", "Nice=100"]
    assert shlex.join(argv[-5:]) == "scontrol update JobId=42 QOS=gold Nice=100"


def test_slurm_has_nothing_to_reorder_for_a_tier_that_asks_nothing_of_it():
    fabric = slurm()
    fabric.ssh = ssh = Ssh()  # type: ignore[assignment]
    assert reprioritise(fabric, "42", TierHints("normal", pbs_priority=5)) is False
    assert ssh.ran == []


@pytest.mark.parametrize(
    ("external_id", "answer"), [("42;other", None), ("42", Result(1, "", "Access/permission denied"))]
)
def test_slurm_a_reorder_it_cannot_make_is_an_error_no_retry_helps(external_id, answer):
    fabric = slurm()
    fabric.ssh = Ssh(answer or Result(0, "", ""))  # type: ignore[assignment]
    with pytest.raises(FabricError) as refused:
        reprioritise(fabric, external_id, GOLD)
    assert not refused.value.retryable


def test_a_move_to_a_tier_without_a_nice_takes_the_old_nice_back_to_zero():
    assert moving(GOLD, TierHints("normal")) == TierHints("normal", slurm_nice=0, pbs_priority=0)
    assert moving(TierHints("normal"), GOLD) == GOLD


# --- PBS ----------------------------------------------------------------------------------------------------


def test_pbs_asks_for_the_tiers_priority_with_qsub_p():
    argv = list(pbs()._qsub_step(job()).argv)
    qsub = argv.index("qsub")
    assert argv[qsub : qsub + 3] == ["qsub", "-p", "500"]


def test_pbs_reorders_a_queued_job_with_qalter_p_as_its_owner():
    fabric = pbs()
    fabric.ssh = ssh = Ssh()  # type: ignore[assignment]
    assert reprioritise(fabric, "17.server", GOLD) is True
    assert ssh.ran[0][-4:] == ["qalter", "-p", "500", "17.server"]
    assert reprioritise(fabric, "17.server", TierHints("normal")) is False


# --- Kubernetes ---------------------------------------------------------------------------------------------

TEMPLATE = "spec:\n  containers:\n  - name: main\n    image: registry.example.org/pytorch:24\n"
KUEUE = "metadata:\n  labels:\n    kueue.x-k8s.io/queue-name: team-ml\n" + TEMPLATE


def test_kubernetes_pods_get_the_tiers_priority_class_and_no_kueue_label_outside_kueue():
    job_manifest = kube_render.render(job(template=TEMPLATE), KubeSettings(), "gridlane").job
    assert job_manifest["spec"]["template"]["spec"]["priorityClassName"] == "gold-pc"
    assert kube_render.KUEUE_PRIORITY_LABEL not in job_manifest["metadata"]["labels"]


def test_kubernetes_in_kueue_mode_the_job_names_the_tiers_workload_priority_class():
    job_manifest = kube_render.render(job(template=KUEUE), KubeSettings(), "gridlane").job
    assert job_manifest["metadata"]["labels"][kube_render.KUEUE_PRIORITY_LABEL] == "gold-pc"
    assert job_manifest["spec"]["template"]["spec"]["priorityClassName"] == "gold-pc"
    assert job_manifest["spec"]["suspend"] is True


def test_kubernetes_a_tier_without_a_class_leaves_the_templates_own():
    pinned = TEMPLATE.replace("spec:\n", "spec:\n  priorityClassName: batch-low\n", 1)
    job_manifest = kube_render.render(job(template=pinned, tier=TierHints("normal")), KubeSettings(), "gridlane").job
    assert job_manifest["spec"]["template"]["spec"]["priorityClassName"] == "batch-low"


def test_slurm_refuses_a_script_that_carries_what_no_script_may_even_past_the_portal():
    with pytest.raises(Exception, match="line 2: --qos"):
        slurm()._submit_step(job(script="#!/bin/bash\n#SBATCH --qos=mine\nsrun python train.py\n"))
