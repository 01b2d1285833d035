"""A request's own GPU type reaches sbatch (fabrics/slurm/render.py): it wins over the type a fabric pins."""

from __future__ import annotations

from dataclasses import replace

from fabrics.base import Resources
from fabrics.slurm.render import DEFAULT_TEMPLATE, Options, render
from tests.fabrics.slurm.conftest import job


def test_the_requests_type_is_asked_for_and_else_the_fabrics():
    spec = job(per_node=Resources(2000, 1000, 256))
    assert "#SBATCH --gres=gpu:h100:2" in render(
        DEFAULT_TEMPLATE, replace(spec, gpu_type="h100"), Options(gpu_type="a100")
    )
    assert "#SBATCH --gres=gpu:a100:2" in render(DEFAULT_TEMPLATE, spec, Options(gpu_type="a100"))
    assert "#SBATCH --gres=gpu:2" in render(DEFAULT_TEMPLATE, spec, Options())
