"""The batch wrappers (Slurm and PBS scripts, fabrics.ssh.scripts and each fabric's render) with code and packages:
the rendered script run by bash as a node would run it (sbatch reads #SBATCH lines as comments to bash), so the
quoting, the working directory and the PATH are those a job gets."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

from fabrics.base import JobSpec, Resources
from fabrics.pbs import render as pbs
from fabrics.slurm import render as slurm
from tests.fabrics.travel.helpers import tiny_wheel

HOSTILE = "'; touch /tmp/gridlane-pwned; echo '$(id)`id`\"\n"


def repository(root: Path) -> tuple[str, str]:
    """A git repository with helpers/__init__.py (VALUE = 7): its file:// URL and its commit."""
    (root / "helpers").mkdir(parents=True)
    (root / "helpers" / "__init__.py").write_text("VALUE = 7\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", "-C", str(root)]
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    return f"file://{root}", commit


def job(command: str, env: dict[str, str]) -> JobSpec:
    return JobSpec(workload_id=uuid.uuid4(), name="probe", kind="batch", owner="ada", group="ml", queue="q",
                   command=command, per_node=Resources(0, 1000, 1024), env=env)  # fmt: skip


def run(script: str, home: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    python = Path(subprocess.check_output(["which", "python3"], text=True).strip()).parent  # the node's python3
    env = {"PATH": f"{python}:/usr/bin:/bin", "HOME": str(home), "GIT_ALLOW_PROTOCOL": "file",
           "XDG_CACHE_HOME": str(home / "c")}  # fmt: skip
    return subprocess.run(["bash", "-c", script], env=env | extra, cwd=home, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def test_a_slurm_job_runs_its_exact_argv_in_its_code_with_its_packages(tmp_path):
    url, commit = repository(tmp_path / "repo")
    wheel = tiny_wheel(tmp_path / "wheels")
    env = {"GRIDLANE_CODE_GIT": url, "GRIDLANE_CODE_COMMIT": commit,
           "GRIDLANE_REQUIREMENTS": f"--no-index\n{wheel}\n# {HOSTILE}"}  # fmt: skip
    command = """python -c 'import helpers, os, sys, tinypkg; print(helpers.VALUE, tinypkg.VALUE, os.getcwd(), sys.argv[1:])' 'a  b' '$HOME'"""  # noqa: E501
    spec = job(command, env)
    home = tmp_path / "home"
    home.mkdir()
    done = run(slurm.render("", spec, slurm.Options(), reveal=True), home)
    assert done.returncode == 0, done.stderr
    workdir = home / ".gridlane" / "work" / str(spec.workload_id)
    assert done.stdout == f"7 42 {workdir} ['a  b', '$HOME']\n"
    assert not Path("/tmp/gridlane-pwned").exists()


def test_a_pbs_job_makes_its_code_ready_after_its_output_is_redirected_and_fails_90_when_it_cannot(tmp_path):
    spec = job("echo never", {"GRIDLANE_CODE_GIT": "https://127.0.0.1:9/none.git", "GRIDLANE_CODE_COMMIT": "e" * 40})
    script = pbs.render("", spec, pbs.Options(), reveal=True)
    assert script.index('exec >"$_gl_dir/$PBS_JOBID.out"') < script.index("_gl_travel=")
    home = tmp_path / "home"
    (home / ".gridlane").mkdir(parents=True)
    done = run(script, home, PBS_JOBID="7.server")
    assert (home / ".gridlane" / "7.server.exit").read_text() == "90\n"
    err = (home / ".gridlane" / "7.server.err").read_text()
    assert "gridlane: the job's code or packages could not be made ready: git clone failed" in err
    assert (home / ".gridlane" / "7.server.out").read_text() == ""
    assert done.returncode == 90


def test_a_job_that_brings_nothing_gets_no_preamble():
    assert "_gl_travel" not in slurm.render("", job("true", {}), slurm.Options())
