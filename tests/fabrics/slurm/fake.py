"""A login node on this machine: the fabric's scripts run in a local bash, against sbatch, squeue, sacct and
scancel stand-ins that keep their jobs in a JSON file. For what a cluster is not needed to check: which
commands the fabric sends, how often, and what it makes of their answers (a crash between two of them
included). What Slurm itself does with them is for the live tests (test_live.py, test_arrays_live.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fabrics.base import FabricConfig, Resources
from fabrics.slurm.fabric import SlurmFabric
from fabrics.ssh.settings import SshSettings
from fabrics.ssh.transport import RUN_STDIN_SCRIPT, Result
from tests.fabrics.slurm.test_settings import GOOD

# The stand-ins: one Python program, told apart by the name it is called by.
PROGRAM = r"""
import fcntl, json, os, re, sys
from pathlib import Path

state = Path(os.environ["FAKE_SLURM_STATE"])
lock = open(state / "lock", "a")
fcntl.flock(lock, fcntl.LOCK_EX)  # one at a time, as slurmctld takes them: the fabric runs sbatch in parallel
db = state / "jobs.json"
jobs = json.loads(db.read_text()) if db.exists() else {"next": 100, "jobs": {}}
name, args = Path(sys.argv[0]).name, sys.argv[1:]
with open(state / "calls.log", "a") as log:
    log.write(json.dumps([name, *args]) + "\n")


def option(flag, default=""):
    for i, arg in enumerate(args):
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
        if arg == flag and i + 1 < len(args):
            return args[i + 1]
    return default


def tasks(spec):
    out = []
    for part in spec.split("%")[0].split(","):
        first, _, last = part.partition("-")
        out += range(int(first), int(last or first) + 1)
    return out


def save():
    db.write_text(json.dumps(jobs))


if name == "sbatch":
    script = sys.stdin.read()
    if os.environ.get("FAKE_SBATCH") == "refuse":
        print("sbatch: error: Batch job submission failed: Invalid partition name specified", file=sys.stderr)
        sys.exit(1)
    job_id = str(jobs["next"])
    jobs["next"] += 1
    named = re.search(r"^#SBATCH --job-name=(\S+)", script, re.M)
    array = option("--array") or (re.search(r"^#SBATCH --array=(\S+)", script, re.M) or [None, ""])[1]
    jobs["jobs"][job_id] = {
        "name": option("--job-name") or (named[1] if named else "sbatch"),
        "comment": option("--comment"),
        "tasks": tasks(array) if array else None,
        "states": {},
        "argv": args,
        "script": script,
    }
    save()
    if os.environ.get("FAKE_SBATCH") == "silent":  # slurmctld took it; sbatch died before it printed the id
        sys.exit(1)
    print(job_id)
elif name == "squeue":
    wanted = [j for j in option("--jobs").split(",") if j]
    names = [n for n in option("--name").split(",") if n]
    fields = option("-O")
    for job_id, job in jobs["jobs"].items():
        if names and job["name"] not in names:
            continue
        for task in job["tasks"] if job["tasks"] is not None else [None]:
            element = job_id if task is None else f"{job_id}_{task}"
            if wanted and element not in wanted and job_id not in wanted:
                continue
            state = job["states"].get(str(task), "PENDING")
            if option("--format") == "%k %i":
                print(job["comment"], element)
            elif fields:
                values = {"ArrayJobID": job_id, "ArrayTaskID": "N/A" if task is None else str(task), "JobID": job_id,
                          "State": state, "Name": job["name"], "Comment": job["comment"]}
                names_ = [f.split(":")[0] for f in fields.split(",")]
                ends = [f.split(":", 1)[1] for f in fields.split(",")]
                sys.stdout.write("".join(values.get(n, "N/A") + e for n, e in zip(names_, ends)))
elif name == "scancel":
    for target in args:
        job_id, _, task = target.partition("_")
        job = jobs["jobs"].get(job_id)
        if job is None:
            print(f"scancel: error: Kill job error on job id {target}: Invalid job id specified", file=sys.stderr)
            sys.exit(1)
        for t in [task] if task else [str(t) for t in job["tasks"] or [None]]:
            job["states"][t] = "CANCELLED"
    save()
"""


class LocalTransport:
    """What the fabric asks of SshTransport, run by a local bash in `home` with the stand-ins first on PATH."""

    def __init__(self, home: Path, settings: SshSettings) -> None:
        self.home = home
        self.settings = settings
        self.env = dict(os.environ, PATH=f"{home / 'bin'}:{os.environ['PATH']}", FAKE_SLURM_STATE=str(home / "state"))
        self.scripts: list[str] = []

    def run(
        self, argv: Sequence[str], *, stdin: str | None = None, retry: bool = False, timeout: float | None = None
    ) -> Result:
        done = subprocess.run(
            list(argv), input=stdin or "", capture_output=True, text=True, cwd=self.home, env=self.env, check=False
        )
        return Result(done.returncode, done.stdout, done.stderr)

    def run_script(self, script: str, *, retry: bool = False, timeout: float | None = None) -> Result:
        self.scripts.append(script)
        return self.run(RUN_STDIN_SCRIPT, stdin=script)

    def close(self) -> None:
        pass


class FakeCluster:
    def __init__(self, home: Path, **settings: Any) -> None:
        (home / "bin").mkdir(parents=True)
        (home / "state").mkdir()
        program = home / "bin" / "fake_slurm.py"
        program.write_text(f"#!{sys.executable}\n{PROGRAM}")
        program.chmod(0o755)
        for name in ("sbatch", "squeue", "sacct", "scancel"):
            (home / "bin" / name).symlink_to(program)
        self.home = home
        self.fabric = SlurmFabric(FabricConfig("hpc", "slurm", Resources(8000, 32000, 64000), GOOD | settings))
        self.ssh = LocalTransport(home, self.fabric.ssh.settings)
        self.fabric.ssh = self.ssh  # type: ignore[assignment]

    def calls(self, name: str) -> list[list[str]]:
        log = self.home / "state" / "calls.log"
        lines = log.read_text().splitlines() if log.exists() else []
        return [call[1:] for call in map(json.loads, lines) if call[0] == name]

    def jobs(self) -> dict[str, dict[str, Any]]:
        return dict(json.loads((self.home / "state" / "jobs.json").read_text())["jobs"])

    def set_state(self, job_id: str, task: int | None, state: str) -> None:
        path = self.home / "state" / "jobs.json"
        data = json.loads(path.read_text())
        data["jobs"][job_id]["states"][str(task)] = state
        path.write_text(json.dumps(data))

    def sbatch_mode(self, mode: str) -> None:
        """'' (as Slurm), 'refuse' (sbatch refuses) or 'silent' (the job is taken, its id never printed)."""
        self.ssh.env["FAKE_SBATCH"] = mode

    def shell(self, command: str) -> str:
        return self.ssh.run(["bash", "-c", command]).stdout
