"""sbatch scripts are rendered purely: golden files, directive by directive, and what a template may hold."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from fabrics.base import JobSpec, Resources, TemplateError
from fabrics.slurm.fabric import SlurmFabric
from fabrics.slurm.render import APPTAINER_TEMPLATE, PYXIS_TEMPLATE, Options, directives, render
from fabrics.ssh.scripts import docker_uri, enroot_uri
from tests.fabrics.golden import assert_golden

GOLDEN = Path(__file__).parent / "golden"
WORKLOAD = uuid.UUID("3f2a9c0d-1e4b-4c57-9a6e-0123456789ab")


def spec(**overrides: object) -> JobSpec:
    fields: dict[str, object] = {
        "workload_id": WORKLOAD,
        "name": "llama-ft",
        "kind": "training",
        "owner": "alice",
        "group": "vision",
        "queue": "hpc-train",
        "command": "python train.py --epochs 3",
        "per_node": Resources(2000, 16000, 65536),
        "nodes": 1,
        "runtime_limit_s": 4 * 3600,
        "image": "nvcr.io/nvidia/pytorch:24.01-py3",
    }
    return JobSpec(**(fields | overrides))  # type: ignore[arg-type]


GPU_QUEUE = Options(partition="cpu", gpu_partition="gpu")

IT_TEMPLATE = """\
#!/bin/bash -l
#SBATCH --account=vision-lab
#SBATCH --qos=high
# Modules first, then the workload.
module load cuda/12.2
cd "$$SCRATCH" && exec /bin/bash -c $command
"""


@pytest.mark.parametrize(
    ("golden", "template", "job", "options"),
    [
        ("default_gpu.sbatch", "", spec(), GPU_QUEUE),
        ("default_cpu_two_nodes.sbatch", "", spec(per_node=Resources(0, 4000, 2048), nodes=2), GPU_QUEUE),
        ("it_template.sbatch", IT_TEMPLATE, spec(env={"WANDB_MODE": "offline"}), GPU_QUEUE),
        ("pyxis.sbatch", PYXIS_TEMPLATE, spec(), GPU_QUEUE),
        ("apptainer.sbatch", APPTAINER_TEMPLATE, spec(), GPU_QUEUE),
        (
            "gpus_per_node_typed.sbatch",
            "",
            spec(per_node=Resources(250, 1000, 0)),
            Options(gpu_request="gpus-per-node", gpu_type="a100", workdir="/scratch/gridlane"),
        ),
    ],
)
def test_rendered_scripts_match_their_golden_files(golden, template, job, options):
    assert_golden(GOLDEN / golden, render(template, job, options))


def test_the_directives_carry_the_request_and_the_workload_tag():
    lines = directives(spec(per_node=Resources(1500, 2500, 1000), nodes=3, runtime_limit_s=61), GPU_QUEUE)
    assert lines == [
        f"#SBATCH --job-name=gl-{WORKLOAD}",
        f"#SBATCH --comment=gridlane:{WORKLOAD}",
        "#SBATCH --partition=gpu",
        "#SBATCH --nodes=3",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --cpus-per-task=3",  # 2.5 CPUs round up
        "#SBATCH --mem=1000M",
        "#SBATCH --gres=gpu:2",  # 1.5 GPUs take two whole ones
        "#SBATCH --time=2",  # 61 s round up to two minutes
        "#SBATCH --output=.gridlane/%j.out",
        "#SBATCH --error=.gridlane/%j.err",
    ]


def test_a_job_without_gpus_goes_to_the_plain_partition_and_none_to_the_clusters_default():
    cpu_job = spec(per_node=Resources(0, 1000, 0))
    assert "#SBATCH --partition=cpu" in directives(cpu_job, GPU_QUEUE)
    assert not any("--partition" in line for line in directives(cpu_job, Options()))
    assert not any("--mem" in line or "gpu" in line for line in directives(cpu_job, Options()))


@pytest.mark.parametrize(
    "name",
    ["it's", "$(touch ~/pwned)", "`reboot`", "a\nrm -rf ~", 'x"; echo gotcha; "', "#SBATCH --partition=x"],
)
def test_a_hostile_name_or_env_value_stays_quoted_data(name):
    script = render("", spec(name=name, env={"NOTE": name}), GPU_QUEUE)
    directive_lines = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    assert len(directive_lines) == 11
    assert not any(name in line for line in directive_lines)
    assert "export NOTE=" in script


@pytest.mark.parametrize(
    ("template", "complaint"),
    [
        ("#!/bin/bash\n#SBATCH --job-name=x\nexec $command\n", "sets the job name"),
        ("#!/bin/bash\n#SBATCH -o out.txt\nexec $command\n", "sets the job name"),
        ("#!/bin/bash\n#SBATCH --chdir=/scratch\nexec $command\n", "sets the job name"),
        ("#!/bin/bash\necho hi\n#SBATCH --qos=high\nexec $command\n", "sbatch ignores it"),
        ("#!/bin/bash\n#SBATCH --comment=$name\nexec $command\n", "inside a comment"),
        ("#!/bin/bash\necho '$name'\n", "single quotes"),
        ("#!/bin/bash\nexec $nonsense\n", "unknown placeholder"),
    ],
)
def test_check_template_refuses_what_would_break_the_tag_or_the_quoting(template, complaint):
    with pytest.raises(TemplateError, match=complaint):
        SlurmFabric.check_template(template)


def test_check_template_accepts_the_shipped_templates():
    for template in (PYXIS_TEMPLATE, APPTAINER_TEMPLATE, IT_TEMPLATE):
        SlurmFabric.check_template(template)


def test_a_container_template_needs_an_image():
    with pytest.raises(TemplateError, match="names none"):
        render(PYXIS_TEMPLATE, spec(image=""), GPU_QUEUE)


def test_an_environment_name_must_be_a_shell_name():
    with pytest.raises(TemplateError, match="environment variable"):
        render("", spec(env={"BAD NAME": "x"}), GPU_QUEUE)


@pytest.mark.parametrize(
    ("image", "docker", "enroot"),
    [
        (
            "nvcr.io/nvidia/pytorch:24.01-py3",
            "docker://nvcr.io/nvidia/pytorch:24.01-py3",
            "nvcr.io#nvidia/pytorch:24.01-py3",
        ),
        ("ubuntu:22.04", "docker://ubuntu:22.04", "ubuntu:22.04"),
        ("pytorch/pytorch:2.3.0", "docker://pytorch/pytorch:2.3.0", "pytorch/pytorch:2.3.0"),
        (
            "localhost:5000/team/img@sha256:ab",
            "docker://localhost:5000/team/img@sha256:ab",
            "localhost:5000#team/img@sha256:ab",
        ),
        ("/shared/images/torch.sif", "/shared/images/torch.sif", "/shared/images/torch.sif"),
        ("docker://ghcr.io/org/x:1", "docker://ghcr.io/org/x:1", "docker://ghcr.io/org/x:1"),
    ],
)
def test_one_image_reference_reads_right_for_apptainer_and_for_pyxis(image, docker, enroot):
    assert (docker_uri(image), enroot_uri(image)) == (docker, enroot)
