"""sbatch's command line for a user's own script: Gridlane's additions, never inside the script. Pure."""

from __future__ import annotations

import uuid

import pytest

from fabrics.base import FabricConfig, Resources, TemplateError
from fabrics.slurm import directives, native
from fabrics.slurm.fabric import SlurmFabric
from fabrics.slurm.render import Options
from fabrics.ssh import batch
from tests.fabrics.slurm.conftest import job
from tests.fabrics.slurm.test_settings import GOOD

WID = uuid.UUID("3f2a9c0d-1e4b-4c57-9a6e-0123456789ab")


def options(script: str, **overrides: object) -> list[str]:
    spec = job("", workload_id=WID, script=script, runtime_limit_s=1800, **overrides)
    return native.options(spec, directives.read(script), Options(workdir=".gridlane"))


def test_a_bare_script_gets_the_tag_a_name_output_files_the_planned_time_and_the_environment():
    assert options("#!/bin/bash\nhostname\n") == [
        f"--comment=gridlane:{WID}",
        f"--job-name=gl-{WID}",
        "--output=.gridlane/%j.out",
        "--error=.gridlane/%j.err",
        "--time=30",
        f"--export=ALL,GRIDLANE_WORKLOAD_ID={WID}",
    ]


def test_what_the_script_says_itself_is_left_to_it_and_what_the_queue_forces_overrides_it():
    script = "#!/bin/bash\n#SBATCH -J mine -o my.out -t 10 -p cpu\nhostname\n"
    assert options(script, forced={"partition": "gpu", "account": "ml"}) == [
        f"--comment=gridlane:{WID}",
        "--account=ml",
        "--partition=gpu",
        f"--export=ALL,GRIDLANE_WORKLOAD_ID={WID}",
    ]


def test_an_arrays_element_takes_its_groups_indexes_over_the_scripts_own_array_and_one_file_per_index():
    argv = options("#!/bin/bash\n#SBATCH --array=0-99%10\nx\n", array="7", array_id="sweep")
    assert argv[-2] == batch.TASKS  # the indexes of the elements sent together (fabrics.ssh.batch)
    assert "--output=.gridlane/%A_%a.out" in argv
    assert "--job-name=gl-sweep" in argv
    with pytest.raises(TemplateError):
        options("#!/bin/bash\nx\n", array="0-9%2")


def test_elements_share_one_sbatch_unless_the_script_reads_gridlanes_own_variables():
    def key(script: str, index: int, **env: str) -> tuple[str, ...]:
        element_env = {"GRIDLANE_ARRAY_INDEX": str(index), "GRIDLANE_ARRAY_ID": "sweep"} | env
        spec = job("", script=script, array=str(index), array_id="sweep", env=element_env)
        return native.array_key(spec)

    plain = "#!/bin/bash\n#SBATCH --array=0-9\necho $SLURM_ARRAY_TASK_ID\n"
    assert key(plain, 0) == key(plain, 1)
    assert key(plain, 0) != key(plain, 1, OTHER="x")
    reads_own = "#!/bin/bash\necho $GRIDLANE_ARRAY_INDEX\n"
    assert key(reads_own, 0) != key(reads_own, 1)  # each alone, with its own index exported
    two = [job("", script=plain, array=str(i), array_id="sweep", env={"GRIDLANE_ARRAY_INDEX": str(i)}) for i in (0, 1)]
    argv = native.array_options(two, directives.read(plain), Options(), "gridlane:g")
    assert argv[-1] == "--export=ALL"  # the workload ids and indexes differ, so neither goes on the shared line


@pytest.mark.parametrize(
    ("forced", "env"),
    [({"nodes": "2"}, {}), ({"partition": "gpu;rm"}, {}), ({}, {"A": "x,y"}), ({}, {"BAD-NAME": "1"})],
)
def test_what_cannot_go_on_the_command_line_safely_is_refused(forced, env):
    with pytest.raises(TemplateError):
        options("#!/bin/bash\nx\n", forced=forced, env=env)


def test_the_fabric_records_the_script_as_written():
    fabric = SlurmFabric(FabricConfig("hpc", "slurm", Resources(8000, 32000, 64000), GOOD))
    script = "#!/bin/bash\n#SBATCH -N 1\r\nsrun hostname  # as written\n"
    assert fabric.render(job("", script=script)) == script
    with pytest.raises(TemplateError, match="line 2: --dependency"):
        fabric.render(job("", script="#!/bin/bash\n#SBATCH -d afterok:1\nx\n"))
