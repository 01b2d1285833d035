"""The local fabric: runs each workload as a subprocess on the portal host, under a supervisor.

Each job lives in root/<workload id>/: job.sh and job.json (written by `prepare`), work/ (the
job's cwd), stdout.log, stderr.log and supervisor.log, and the supervisor's records: started
(the claim: supervisor pid and start time), child.pid (the job's process group), cancel (a
marker) and result.json; `extend` writes deadline (the end of an extended lease), which the
supervisor follows. Everything the portal needs survives a restart of the portal.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import fabrics
from fabrics import jupyter, templating, travel
from fabrics.base import Capacity, Endpoint, FabricConfig, FabricError, JobSpec, JobState, JobStatus, TemplateError
from fabrics.local import scripts, standin
from fabrics.local.supervisor import DEADLINE, group_alive, signal_group, write_atomic

# Every value becomes one shell-quoted word, so the command reaches bash -c as data. The name
# stays out of the comment: a newline in it would end the comment and start a command.
DEFAULT_TEMPLATE = """\
#!/bin/bash
# Gridlane local job
: workload $workload_id name $name
exec /bin/bash -c $command
"""
# Notebooks: a real Jupyter server on a free loopback port with a random token, chosen when the job starts
# and written to notebook.json in the job's folder (only the portal's user can read it) for `poll`, which
# reports the connect URL once the server's status API answers, and the server's last activity. The token
# stays out of this script (which is stored on the workload) and out of the process list (JUPYTER_TOKEN,
# not a flag).
NOTEBOOK_TEMPLATE = """\
#!/bin/bash
# Gridlane local notebook
: workload $workload_id name $name
set -eu
python=$python
pick='import secrets, socket; s = socket.socket(); s.bind(("127.0.0.1", 0))'
read -r port token < <("$$python" -c "$$pick; print(s.getsockname()[1], secrets.token_urlsafe(32))")
base=$${GRIDLANE_CONNECT_PREFIX:-/}
record='{"port": %s, "token": "%s", "path": "%s"}\\n'
printf "$$record" "$$port" "$$token" "$$base" > "$$GRIDLANE_JOB_DIR/notebook.json.tmp"
mv "$$GRIDLANE_JOB_DIR/notebook.json.tmp" "$$GRIDLANE_JOB_DIR/notebook.json"
export JUPYTER_TOKEN="$$token" JUPYTER_RUNTIME_DIR="$$GRIDLANE_JOB_DIR/jupyter-runtime"
# Each session its own JupyterLab settings and workspaces (nothing shared with another session's, nothing left in
# the home folder), and Jupyter's news off: no "Would you like to get notified about official Jupyter news?" pop-up.
export JUPYTERLAB_SETTINGS_DIR="$$GRIDLANE_JOB_DIR/jupyterlab-settings"
export JUPYTERLAB_WORKSPACES_DIR="$$GRIDLANE_JOB_DIR/jupyterlab-workspaces"
news="$$JUPYTERLAB_SETTINGS_DIR/@jupyterlab/apputils-extension"
mkdir -p "$$news" "$$JUPYTERLAB_WORKSPACES_DIR"
printf '{"fetchNews": "false", "checkForUpdates": false}\n' > "$$news/notification.jupyterlab-settings"
exec "$$python" -m jupyter_server --no-browser --ip 127.0.0.1 --port "$$port" --allow-root \\
  --ServerApp.root_dir="$$PWD" \\
  --ServerApp.base_url="$$base" --ServerApp.allow_remote_access=True
"""
TEMPLATE_NAMES = frozenset(
    {
        "workload_id",
        "name",
        "owner",
        "group",
        "queue",
        "command",
        "image",
        "nodes",
        "gpus",
        "cpus",
        "memory_mib",
        "runtime_limit_s",
        "python",
    }
)
CLAIM_TIMEOUT_S = 5.0  # how long submit waits for the supervisor to claim the job
CLAIM_PER_JOB_S = 0.02  # and longer for a batch, whose supervisor starts its jobs one after another
CLAIM_POLL_S = 0.02
# Jobs per supervisor: a burst's slices start side by side, each while the next is written (a Python start-up,
# tens of milliseconds, per slice).
LAUNCH_SLICE = 128
SUPERVISOR_LOST = "the local supervisor exited without recording a result"
SOURCE_ROOT = Path(fabrics.__file__).resolve().parents[1]  # so the supervisor imports uninstalled

_RESULT_STATES = {
    "succeeded": JobState.SUCCEEDED,
    "failed": JobState.FAILED,
    "cancelled": JobState.CANCELLED,
    "timed_out": JobState.TIMED_OUT,
}


class LocalFabric:
    MAX_NODES = 1  # one host: a request for more nodes could never run here (refused at submit)

    def __init__(self, config: FabricConfig) -> None:
        self.check_settings(config.settings)
        self.config = config
        self.root = Path(os.path.abspath(os.path.expanduser(config.settings["root"])))

    @classmethod
    def check_template(cls, template: str) -> None:
        """Raise TemplateError for a malformed `$`, an unknown name or a placeholder in an unsafe spot."""
        templating.check(template, TEMPLATE_NAMES)
        templating.check_quoting(template)

    @classmethod
    def check_settings(cls, settings: Mapping[str, Any]) -> None:
        root = settings.get("root")
        if not isinstance(root, str) or not root.strip():
            raise ValueError("the local fabric needs settings.root, the directory its jobs live in")

    def render(self, job: JobSpec) -> str:
        if job.script:  # a user's own script, run as written (fabrics/local/scripts.py)
            try:
                return travel.with_preamble(scripts.wrapper(job), job.env)
            except ValueError as exc:  # it was read at submit; a reader that changed since refuses it here
                raise TemplateError(f"the script cannot run here: {exc}") from exc
        template = job.template or (NOTEBOOK_TEMPLATE if job.kind == "notebook" else DEFAULT_TEMPLATE)
        self.check_template(template)
        # Code and packages that travel with it are made ready in its folder (work/) before the template runs.
        return travel.with_preamble(templating.render(template, template_values(job)), job.env)

    def prepare(self, job: JobSpec) -> Path:
        """Write the job's directory without starting it; `submit` is prepare plus a supervisor."""
        jobdir = self._jobdir(job.workload_id)
        script = self.render(job)
        # Only the portal's user may look: logs and job.json can hold the user's secrets.
        jobdir.mkdir(mode=0o700, parents=True, exist_ok=True)
        (jobdir / "work").mkdir(mode=0o700, exist_ok=True)
        # Not synced to disk (an fsync each was most of a burst's dispatch): a power loss ends every local job,
        # and what the worker trusts afterwards is the supervisor's `started` record, flushed before the job runs.
        write_atomic(jobdir / "job.sh", script, mode=0o700, durable=False)
        if job.script:  # byte for byte; job.sh runs it through its own #! line
            write_atomic(jobdir / scripts.SCRIPT_FILE, job.script, mode=0o700, durable=False)
        spec = {
            "workload_id": str(job.workload_id),
            "runtime_limit_s": job.runtime_limit_s,
            "env": dict(job.env),
        }
        write_atomic(jobdir / "job.json", json.dumps(spec), mode=0o600, durable=False)
        return jobdir

    def submit(self, job: JobSpec) -> str:
        outcome = self.submit_many([job])[job.workload_id]
        if isinstance(outcome, FabricError):
            raise outcome
        return outcome

    def submit_many(self, jobs: Sequence[JobSpec]) -> dict[UUID, str | FabricError]:
        """Prepare the jobs a slice at a time, starting each slice's supervisor as soon as it is written (one
        process supervises a slice; the next slice is written while it starts its jobs), and wait for their
        claims together. A job not claimed in time is a retryable error: the next dispatch finds it by its
        `started` record, or starts it again (a second supervisor loses the claim to the first)."""
        results: dict[UUID, str | FabricError] = {}
        waiting: dict[UUID, Path] = {}
        launchers: list[subprocess.Popen[bytes]] = []
        for at in range(0, len(jobs), LAUNCH_SLICE):
            ready = self._prepare_slice(jobs[at : at + LAUNCH_SLICE], results)
            if not ready:
                continue
            try:
                launchers.append(spawn_supervisors(list(ready.values())))
            except OSError as exc:
                results |= {wid: FabricError(f"cannot start the local job: {exc}", retryable=True) for wid in ready}
                continue
            waiting |= ready
        # Each launcher forks its slice's supervisor and exits; the supervisor claims each job just before it
        # starts it, a few milliseconds apart.
        deadline = time.monotonic() + CLAIM_TIMEOUT_S + CLAIM_PER_JOB_S * len(waiting)
        while waiting:
            failed = any(launcher.poll() not in (None, 0) for launcher in launchers)
            last = failed or time.monotonic() >= deadline
            for wid in _claimed(waiting, everyone=last):
                results[wid] = str(wid)
                del waiting[wid]
            if not waiting or last:
                break
            time.sleep(CLAIM_POLL_S)
        for launcher in launchers:
            launcher.poll()  # reap it: it exits as soon as it has forked its supervisor
        for wid, jobdir in waiting.items():
            log = _tail_bytes(jobdir / "supervisor.log", 2000).decode("utf-8", "replace").strip()
            results[wid] = FabricError(f"the local supervisor did not start the job: {log}", retryable=True)
        return results

    def _prepare_slice(self, jobs: Sequence[JobSpec], results: dict[UUID, str | FabricError]) -> dict[UUID, Path]:
        """Write each job's directory; the ones to start. A job a supervisor owns already is placed (a no-op),
        one that cannot be written gets its error in `results`."""
        ready: dict[UUID, Path] = {}
        for job in jobs:
            jobdir = self._jobdir(job.workload_id)
            if (jobdir / "started").exists():
                results[job.workload_id] = str(job.workload_id)
                continue
            try:
                self.prepare(job)
            except TemplateError as exc:
                results[job.workload_id] = FabricError(f"the job script does not render: {exc}", retryable=False)
                continue
            except OSError as exc:
                results[job.workload_id] = FabricError(f"cannot start the local job: {exc}", retryable=True)
                continue
            ready[job.workload_id] = jobdir
        return ready

    def find(self, workload_id: UUID) -> str | None:
        """The job's id once a supervisor has claimed it; None before that."""
        return str(workload_id) if (self._jobdir(workload_id) / "started").exists() else None

    def poll(self, ids: Sequence[str]) -> dict[str, JobStatus]:
        """Every job's status from its records; running notebooks also ask their server (within a budget)."""
        statuses = {}
        servers: dict[str, Path] = {}
        for external_id in ids:
            try:
                statuses[external_id], server = self._status(external_id)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                reason = f"cannot read the local job's records: {exc}"
                statuses[external_id] = JobStatus(JobState.UNDETERMINED, reason=reason)
                continue
            if server is not None:
                servers[external_id] = server
        budget = jupyter.Budget()  # a hung server never stalls the worker
        for external_id, jobdir in servers.items():
            if budget.spent:
                break  # the rest are asked next time; meanwhile nothing changes for them
            endpoint, last_activity = self._notebook(jobdir, budget)
            statuses[external_id] = replace(statuses[external_id], endpoint=endpoint, last_activity=last_activity)
        return statuses

    def extend(self, external_id: str, ends_at: datetime) -> None:
        """Move the job's end: the supervisor re-reads the deadline file, written whole or not at all."""
        if ends_at.tzinfo is None:
            raise ValueError("ends_at must be an aware datetime")
        jobdir = self._existing_jobdir(external_id)
        if jobdir is None or not (jobdir / "started").exists():
            raise FabricError(f"the local job {external_id} is not running", retryable=False)
        if (jobdir / "result.json").exists():
            raise FabricError(f"the local job {external_id} has already ended", retryable=False)
        try:
            write_atomic(jobdir / DEADLINE, ends_at.astimezone(UTC).isoformat() + "\n", mode=0o600)
        except OSError as exc:
            raise FabricError(f"cannot extend local job {external_id}: {exc}", retryable=True) from exc

    def cancel(self, external_id: str) -> None:
        jobdir = self._existing_jobdir(external_id)
        if jobdir is None:
            return  # nothing was ever prepared, so nothing can run
        try:
            # The marker alone suffices before the job starts: its supervisor checks it first.
            (jobdir / "cancel").touch()
            if (jobdir / "result.json").exists() or not (jobdir / "child.pid").exists():
                return
            pgid = int((jobdir / "child.pid").read_text())
            started = _read_json(jobdir / "started")
            if started is not None and _supervisor_alive(int(started["pid"]), jobdir):
                signal_group(pgid, signal.SIGTERM)  # the supervisor escalates after its grace
            elif group_alive(pgid):
                signal_group(pgid, signal.SIGKILL)  # no supervisor is left to escalate
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise FabricError(f"cannot cancel local job {external_id}: {exc}", retryable=True) from exc

    def tail(self, external_id: str, max_bytes: int = 16_384) -> str:
        """The end of stdout, then of stderr (at most half the bytes) under a marker line."""
        jobdir = self._existing_jobdir(external_id)
        if jobdir is None:
            return ""
        err = _tail_bytes(jobdir / "stderr.log", max_bytes // 2)
        text = _tail_bytes(jobdir / "stdout.log", max_bytes - len(err)).decode("utf-8", "replace")
        if err:
            if text and not text.endswith("\n"):
                text += "\n"
            text += "--- stderr ---\n" + err.decode("utf-8", "replace")
        return text

    def read_log(self, external_id: str, offset: int, length: int) -> tuple[bytes, int]:
        """Bytes of the whole output, read as `tail` shows it (stdout, then stderr under a marker line), and the
        size of that whole; (b"", 0) for a job with no folder left."""
        jobdir = self._existing_jobdir(external_id)
        if jobdir is None:
            return b"", 0
        parts: list[tuple[Path | bytes, int]] = [(jobdir / "stdout.log", _size(jobdir / "stdout.log"))]
        err_size = _size(jobdir / "stderr.log")
        if err_size:
            marker = b"--- stderr ---\n"
            if parts[0][1] and not _tail_bytes(jobdir / "stdout.log", 1).endswith(b"\n"):
                marker = b"\n" + marker
            parts += [(marker, len(marker)), (jobdir / "stderr.log", err_size)]
        total = sum(size for _, size in parts)
        out, at = bytearray(), 0
        for part, size in parts:
            lo, hi = max(offset, at), min(offset + length, at + size)
            if lo < hi:
                if isinstance(part, bytes):
                    out += part[lo - at : hi - at]
                else:
                    with open(part, "rb") as f:
                        f.seek(lo - at)
                        out += f.read(hi - lo)
            at += size
        return bytes(out), total

    def capacity(self) -> Capacity:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return Capacity(self.config.capacity, healthy=False, detail=f"cannot create {self.root}: {exc}")
        if not os.access(self.root, os.W_OK | os.X_OK):
            return Capacity(self.config.capacity, healthy=False, detail=f"{self.root} is not writable")
        return Capacity(self.config.capacity, healthy=True, detail=f"jobs run on this host in {self.root}")

    def _jobdir(self, workload_id: UUID) -> Path:
        return self.root / str(workload_id)

    def _existing_jobdir(self, external_id: str) -> Path | None:
        """The job's directory; None when the id is no workload id or nothing was prepared for it."""
        try:
            canonical = str(UUID(external_id))
        except ValueError:
            return None
        if canonical != external_id:  # anything else could name a path outside root
            return None
        jobdir = self.root / canonical
        return jobdir if jobdir.is_dir() else None

    def _status(self, external_id: str) -> tuple[JobStatus, Path | None]:
        """The job's status from its records, and its directory when it is a running notebook to ask."""
        jobdir = self._existing_jobdir(external_id)
        if jobdir is None:
            return JobStatus(JobState.MISSING), None
        result = _read_json(jobdir / "result.json")
        if result is not None:
            return _finished(result), None
        started = _read_json(jobdir / "started")
        if started is None:
            if (jobdir / "cancel").exists():
                # Any supervisor that starts later records it cancelled without running it.
                return JobStatus(JobState.CANCELLED, reason="cancelled before it started"), None
            return JobStatus(JobState.QUEUED, reason="waiting for the local supervisor"), None
        started_at = _parse_time(started["started_at"])
        if _supervisor_alive(int(started["pid"]), jobdir):
            server = jobdir if (jobdir / "notebook.json").exists() else None
            running = JobStatus(JobState.RUNNING, host=_hostname(), started_at=started_at)
            if self.config.settings.get(standin.SETTING):  # the demo only: see fabrics/local/standin.py
                running = replace(running, gpu_utilisation=standin.utilisation(external_id, datetime.now(UTC)))
            return running, server
        result = _read_json(jobdir / "result.json")  # it may have finished since the first look
        if result is not None:
            return _finished(result), None
        child = jobdir / "child.pid"
        if child.exists() and group_alive(int(child.read_text())):
            reason = "the local supervisor is gone but the job's processes still run"
            return JobStatus(JobState.RUNNING, host=_hostname(), started_at=started_at, reason=reason), None
        return JobStatus(JobState.FAILED, started_at=started_at, reason=SUPERVISOR_LOST), None

    def _notebook(self, jobdir: Path, budget: jupyter.Budget) -> tuple[Endpoint | None, datetime | None]:
        """The notebook's server and last activity once it answers; (None, None) before."""
        # {"port": 41234, "token": "...", "path": "/connect/<workload id>/"}, written by the notebook's script
        notebook = _read_json(jobdir / "notebook.json")
        if notebook is None:
            return None, None
        endpoint = Endpoint("127.0.0.1", int(notebook["port"]), str(notebook["token"]), str(notebook.get("path", "/")))
        answered, last_activity = budget.probe(endpoint)
        return (endpoint, last_activity) if answered else (None, None)


def template_values(job: JobSpec) -> dict[str, object]:
    return templating.job_values(job) | {
        "gpus": _milli(job.per_node.gpus_milli),
        "cpus": _milli(job.per_node.cpus_milli),
        "python": sys.executable,  # notebooks run the portal's own Jupyter server
    }


def spawn_supervisor(jobdir: Path) -> subprocess.Popen[bytes]:
    """Start a supervisor for the job; the process returned forks it away and exits at once."""
    return spawn_supervisors([jobdir])


def spawn_supervisors(jobdirs: Sequence[Path]) -> subprocess.Popen[bytes]:
    """Start one supervisor for the jobs; the process returned forks it away and exits at once. What the
    supervisor says of a job goes to that job's supervisor.log; the process's own output to the first's."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SOURCE_ROOT), env.get("PYTHONPATH", "")) if p)
    with open(jobdirs[0] / "supervisor.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "fabrics.local.supervisor", *(str(d) for d in jobdirs)],
            cwd=jobdirs[0],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,  # no signal to the portal's terminal or group reaches it
        )


def _milli(value: int) -> str:
    """Milli-units as a plain decimal: 250 -> "0.25", 2000 -> "2"."""
    return f"{value // 1000}.{value % 1000:03d}".rstrip("0").rstrip(".")


def _read_json(path: Path) -> Any:
    """The file's JSON; None when the file does not exist."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    return json.loads(text)


def _parse_time(value: Any) -> datetime | None:
    """An aware datetime from ISO text; None when there is none."""
    if not value:
        return None
    parsed = datetime.fromisoformat(str(value))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _finished(result: Mapping[str, Any]) -> JobStatus:
    exit_code = result.get("exit_code")
    return JobStatus(
        _RESULT_STATES[result["state"]],
        exit_code=int(exit_code) if exit_code is not None else None,
        host=str(result.get("host", "")),
        started_at=_parse_time(result.get("started_at")),
        finished_at=_parse_time(result.get("finished_at")),
        reason=str(result.get("reason", "")),
    )


def _supervisor_alive(pid: int, jobdir: Path) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # another user's process took the pid; ours runs as us
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not Path("/proc/self").exists():
        return True  # no /proc to guard against a reused pid
    try:
        # A reused pid runs something else; a zombie's cmdline is empty.
        return str(jobdir) in cmdline.read_bytes().decode("utf-8", "replace").split("\0")
    except OSError:
        return False


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


# How many unclaimed jobs in a row a look for claims passes before it stops (see _claimed).
CLAIM_LOOKAHEAD = 32


def _claimed(waiting: dict[UUID, Path], everyone: bool) -> list[UUID]:
    """The waiting jobs whose supervisor has claimed them. The launcher forks supervisors in order, so they
    claim roughly in order: a look stops after CLAIM_LOOKAHEAD unclaimed in a row, and those after wait for a
    later look (a thousand jobs' files were otherwise looked at every CLAIM_POLL_S). `everyone`: the last
    look, at all of them."""
    found, missed = [], 0
    for wid, jobdir in waiting.items():
        if (jobdir / "started").exists():
            found.append(wid)
            missed = 0
        elif (missed := missed + 1) >= CLAIM_LOOKAHEAD and not everyone:
            break
    return found


def _tail_bytes(path: Path, max_bytes: int) -> bytes:
    """The last max_bytes of the file; b"" when it does not exist."""
    if max_bytes <= 0:
        return b""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - max_bytes))
            return f.read(max_bytes)
    except FileNotFoundError:
        return b""


def _hostname() -> str:
    return socket.gethostname()
