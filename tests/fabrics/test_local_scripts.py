"""A user's own sbatch script on the local fabric: run as written through its own #! line, with what one host can
honour (--output, --error, --open-mode, --job-name, an array's index) and a refusal naming the line for what it
cannot (fabrics/local/scripts.py)."""

from __future__ import annotations

import pytest

from fabrics import native
from fabrics.base import FabricConfig, JobState, Resources
from fabrics.local import scripts
from fabrics.local.fabric import LocalFabric
from fabrics.slurm.directives import DirectiveError
from tests.fabrics.test_local import finished, job


@pytest.fixture
def fabric(tmp_path):
    return LocalFabric(FabricConfig("here", "local", Resources(1000, 8000, 16384), {"root": str(tmp_path / "jobs")}))


def script_job(script: str, **overrides):
    return job("", script=script, **overrides)


def test_a_script_runs_as_written_with_slurms_variables_and_its_exit_status(fabric):
    script = '#!/bin/bash\n#SBATCH -J named\necho "$SLURM_JOB_NAME $SLURM_CPUS_PER_TASK $0"\nexit 4\n'
    spec = script_job(script)
    status = finished(fabric, fabric.submit(spec))
    assert (status.state, status.exit_code) == (JobState.FAILED, 4)
    assert fabric.tail(str(spec.workload_id)) == f"named 1 {fabric.root / str(spec.workload_id) / 'script'}\n"
    assert (fabric.root / str(spec.workload_id) / "script").read_text() == script  # byte for byte


def test_output_and_error_go_where_the_script_says_and_to_the_log(fabric):
    script = "#!/bin/bash\n#SBATCH --output=logs/%x-%j.out\n#SBATCH --error=err-%j.txt\necho out\necho err >&2\n"
    spec = script_job(script, name="probe")
    status = finished(fabric, fabric.submit(spec))
    assert status.state is JobState.SUCCEEDED
    work = fabric.root / str(spec.workload_id) / "work"
    assert (work / "logs" / f"probe-{spec.workload_id}.out").read_text() == "out\n"
    assert (work / f"err-{spec.workload_id}.txt").read_text() == "err\n"
    assert fabric.tail(str(spec.workload_id)) == "out\n--- stderr ---\nerr\n"


def test_output_alone_takes_stderr_too_and_an_array_element_knows_its_index(fabric):
    script = '#!/bin/bash\n#SBATCH --output=all.log\necho "task $SLURM_ARRAY_TASK_ID"\necho oops >&2\n'
    spec = script_job(script, array="7", array_id="a1")
    assert finished(fabric, fabric.submit(spec)).state is JobState.SUCCEEDED
    assert (fabric.root / str(spec.workload_id) / "work" / "all.log").read_text() == "task 7\noops\n"


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("#SBATCH --exclusive", "line 2: --exclusive: the local fabric cannot honour it (the local fabric shares"),
        ("#SBATCH --signal=USR1@60", "line 2: --signal: the local fabric cannot honour it"),
        ("#SBATCH --nice=5", "line 2: --nice: the local fabric cannot honour it"),
    ],
)
def test_what_one_host_cannot_honour_is_refused_naming_the_line(line, says):
    policy = native.Policy.of("local", {})
    with pytest.raises(DirectiveError) as refused:
        policy.check(native.read("local", f"#!/bin/bash\n{line}\necho hi\n"))
    assert str(refused.value).startswith(says)


def test_a_local_target_takes_nothing_forced_and_no_extra_directives():
    with pytest.raises(ValueError, match="may force nothing"):
        native.Policy.of("local", {"forced": {"partition": "gpu"}})
    with pytest.raises(ValueError, match="honours only the directives it reads"):
        native.check_extra("local", ["mail-type"])
    assert scripts.filename("%x_%j_%%_%N", script_job("#!/bin/bash\n"), "n").endswith("_%_%N")
