"""Runs local jobs and records how each ended: `python -m fabrics.local.supervisor JOBDIR [JOBDIR ...]`.

Each job directory holds what `LocalFabric.prepare` wrote (job.sh, job.json, work/); each job gets a
supervisor process of its own (forked from this one). The supervisor claims the job by linking `started`
into place, so of any number of supervisors started for one job exactly one runs it. It then runs job.sh
in its own process group, stops the whole group at the runtime limit or on cancel, and writes result.json.
A `deadline` file (an aware ISO time, rewritten atomically when a lease is extended) moves the limit while
it runs.

Exit codes in result.json follow the shell: a job killed by signal N is recorded as 128 + N.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from fabrics.sampler import SAMPLER, SAMPLES_URL_ENV, WATCH_ENV

SAMPLER_LAST_POST_S = 12  # its check of the job (1 s) and one post (at most 10 s)
KILL_GRACE_S = 5.0  # between SIGTERM and SIGKILL to the job's process group
GRACE_ENV = "GRIDLANE_LOCAL_KILL_GRACE_S"  # lets tests shorten the grace
TICK_S = 0.1  # how often the supervisor looks for a cancel marker or the deadline
DEADLINE = "deadline"  # in the job directory: when present, the time the job must end by


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


def _write_synced(path: Path, text: str, mode: int, durable: bool = True) -> None:
    fd = os.open(path, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        if durable:
            os.fsync(f.fileno())
    os.chmod(path, mode)  # the umask may have narrowed it


def write_atomic(path: Path, text: str, mode: int = 0o644, durable: bool = True) -> None:
    """Write via a temporary file and rename, so a reader never sees half a file; `durable` (the default) also
    waits for the disk, so the file outlives a power loss (not needed for what a power loss makes moot)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    _write_synced(tmp, text, mode, durable)
    os.replace(tmp, path)


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs; zombies (dead, unreaped) do not count."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    # killpg also succeeds for a group of zombies, which an init that does not reap leaves behind.
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
            return True
    return False


def signal_group(pgid: int, sig: signal.Signals) -> None:
    """Send sig to the whole group; a group that is already gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _kill_grace() -> float:
    try:
        return max(0.0, float(os.environ.get(GRACE_ENV, KILL_GRACE_S)))
    except ValueError:
        return KILL_GRACE_S


def _claim(jobdir: Path, started_at: str) -> bool:
    """Create `started` with our pid in it; False when another supervisor got there first."""
    tmp = jobdir / f".started.{os.getpid()}.tmp"
    _write_synced(tmp, json.dumps({"pid": os.getpid(), "started_at": started_at}), 0o644)
    try:
        # link() is atomic and fails when the name exists: the claim and its content appear together.
        os.link(tmp, jobdir / "started")
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


class _Stop:
    """Set by SIGTERM or SIGINT to the supervisor; the main loop does the killing."""

    requested = False

    @classmethod
    def handle(cls, signum: int, frame: FrameType | None) -> None:
        cls.requested = True


def _load_job(jobdir: Path) -> tuple[str, int, dict[str, str]]:
    job: Any = json.loads((jobdir / "job.json").read_text(encoding="utf-8"))
    env = job["env"]
    if not isinstance(env, Mapping) or not all(isinstance(v, str) for v in env.values()):
        raise ValueError("job.json: env must map names to strings")
    return str(job["workload_id"]), int(job["runtime_limit_s"]), {str(k): v for k, v in env.items()}


# What a job inherits from the portal host: enough to find programs and behave, none of the portal's
# own secrets (database URL, secret key, tokens).
INHERITED = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LC_ALL",
    "TZ",
    "TMPDIR",
    "XDG_CACHE_HOME",  # where code and packages that travel with jobs are cached (fabrics.travel.node)
    "GRIDLANE_CACHE",
    "GRIDLANE_LOCAL_KILL_GRACE_S",
)


def job_environment(job_env: Mapping[str, str]) -> dict[str, str]:
    inherited = {k: v for k, v in os.environ.items() if k in INHERITED or k.startswith("LC_")}
    return {**inherited, **job_env}


def _run(jobdir: Path, workload_id: str, limit_s: int, job_env: Mapping[str, str]) -> dict[str, Any]:
    """Run job.sh to its end; the result fields that depend on how it ended."""
    env = {**job_environment(job_env), "GRIDLANE_WORKLOAD_ID": workload_id, "GRIDLANE_JOB_DIR": str(jobdir)}
    with open(jobdir / "stdout.log", "ab") as out, open(jobdir / "stderr.log", "ab") as err:
        child = subprocess.Popen(
            ["/bin/bash", str(jobdir / "job.sh")],
            cwd=jobdir / "work",
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            process_group=0,  # pgid == child pid: one killpg reaches every process it starts
        )
    beside = _start_sampler(env, child.pid)
    try:
        write_atomic(jobdir / "child.pid", str(child.pid))
        return _watch(jobdir, child, limit_s)
    except BaseException:
        signal_group(child.pid, signal.SIGKILL)  # never leave a job running unwatched
        raise
    finally:
        if beside is not None:
            _stop_sampler(beside)


def _start_sampler(env: Mapping[str, str], pid: int) -> subprocess.Popen[bytes] | None:
    """The GPU sampler (fabrics.sampler) beside the job, where the job has a samples URL and the host has
    nvidia-smi on the job's PATH; None otherwise (the workload then has no utilisation data)."""
    if not env.get(SAMPLES_URL_ENV) or shutil.which("nvidia-smi", path=env.get("PATH")) is None:
        return None
    return subprocess.Popen(
        [sys.executable, "-c", SAMPLER],
        env={**env, WATCH_ENV: str(pid)},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # out of the job's group: the job's own end is not muddled by it
    )


def _stop_sampler(sampler: subprocess.Popen[bytes]) -> None:
    """The sampler sees the job gone within a second and posts its last readings; one that does not is ended."""
    try:
        sampler.wait(timeout=SAMPLER_LAST_POST_S)
        return
    except subprocess.TimeoutExpired:
        sampler.terminate()
    try:
        sampler.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        sampler.kill()
        sampler.wait()


def read_deadline(jobdir: Path) -> datetime | None:
    """The end the deadline file names; None when there is none or it does not parse."""
    try:
        ends = datetime.fromisoformat((jobdir / DEADLINE).read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None
    return ends if ends.tzinfo else None


class _Deadline:
    """The job's end on the monotonic clock: the runtime limit, or what the deadline file says now."""

    def __init__(self, jobdir: Path, limit_s: int) -> None:
        self.jobdir = jobdir
        self.started = time.monotonic()
        self.at = self.started + limit_s
        self.seen: tuple[int, int] | None = None  # (inode, mtime) of the deadline file last read

    def follow(self) -> None:
        """Re-read the deadline file when it changed: a rename gives it a new inode, so no rewrite is missed."""
        try:
            stat = os.stat(self.jobdir / DEADLINE)
        except OSError:
            return
        if (stat.st_ino, stat.st_mtime_ns) == self.seen:
            return
        self.seen = (stat.st_ino, stat.st_mtime_ns)
        ends = read_deadline(self.jobdir)
        if ends is None:
            print(f"{now_iso()} ignoring a deadline file that does not parse", file=sys.stderr, flush=True)
            return
        self.at = time.monotonic() + (ends - datetime.now(UTC)).total_seconds()
        print(f"{now_iso()} the job now ends at {ends.isoformat()}", file=sys.stderr, flush=True)

    @property
    def limit_s(self) -> int:
        return round(self.at - self.started)


def _watch(jobdir: Path, child: subprocess.Popen[bytes], limit_s: int) -> dict[str, Any]:
    """Wait for the job's whole group to end, stopping it on cancel or at the limit."""
    deadline = _Deadline(jobdir, limit_s)
    grace = _kill_grace()
    kill_at: float | None = None  # set once we have asked the group to stop
    timed_out = False
    returncode: int | None = None
    while returncode is None or group_alive(child.pid):
        if returncode is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                returncode = child.wait(timeout=TICK_S)
        else:
            time.sleep(0.02)  # the leader is gone; wait briefly for what it left behind
        now = time.monotonic()
        if kill_at is None:
            deadline.follow()
            cancelled = _Stop.requested or (jobdir / "cancel").exists()
            timed_out = not cancelled and returncode is None and now >= deadline.at
            # Nothing of a job outlives it: leftovers of a finished leader are stopped too.
            if cancelled or timed_out or returncode is not None:
                signal_group(child.pid, signal.SIGTERM)
                kill_at = now + grace
        elif now >= kill_at:
            signal_group(child.pid, signal.SIGKILL)
    exit_code: int = 128 - child.returncode if child.returncode < 0 else child.returncode
    if _Stop.requested or (jobdir / "cancel").exists():
        return {"state": "cancelled", "exit_code": exit_code, "reason": "cancelled"}
    if timed_out:
        return {"state": "timed_out", "exit_code": exit_code, "reason": f"stopped at the {deadline.limit_s} s limit"}
    return {"state": "succeeded" if exit_code == 0 else "failed", "exit_code": exit_code}


def supervise(jobdir: Path) -> int:
    """Claim, run and record one job; 0 also when another supervisor had claimed it."""
    signal.signal(signal.SIGTERM, _Stop.handle)
    signal.signal(signal.SIGINT, _Stop.handle)
    started_at = now_iso()
    if not _claim(jobdir, started_at):
        return 0
    outcome: dict[str, Any]
    if _Stop.requested or (jobdir / "cancel").exists():
        outcome = {"state": "cancelled", "exit_code": None, "reason": "cancelled before it started"}
    else:
        try:
            outcome = _run(jobdir, *_load_job(jobdir))
        except Exception as exc:  # a result, whatever went wrong, beats a job that never ends
            outcome = {"state": "failed", "exit_code": None, "reason": f"the supervisor failed: {exc!r}"}
    result = {**outcome, "started_at": started_at, "finished_at": now_iso(), "host": socket.gethostname()}
    write_atomic(jobdir / "result.json", json.dumps(result))
    return 0


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m fabrics.local.supervisor JOBDIR [JOBDIR ...]", file=sys.stderr)
        return 2
    jobdirs = [Path(os.path.abspath(a)) for a in argv]
    missing = [str(d) for d in jobdirs if not d.is_dir()]
    if missing:
        print(f"no job directory {', '.join(missing)}", file=sys.stderr)
        return 2
    # Fork a supervisor per job so each is reparented away from the portal, which then need not reap
    # them; this process exits once it has, and the caller waits for the claims instead. One interpreter
    # starts a whole batch's supervisors: a fork costs a millisecond, a Python start-up a hundred.
    for jobdir in jobdirs:
        if os.fork() == 0:
            if len(jobdirs) > 1:
                _log_to(jobdir / "supervisor.log")
                os.chdir(jobdir)
            code = 1
            try:
                code = supervise(jobdir)
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
    os._exit(0)


def _log_to(path: Path) -> None:
    """Point this process's stdout and stderr at its own job's log."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
