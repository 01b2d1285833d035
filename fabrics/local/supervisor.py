"""Runs local jobs and records how each ended: `python -m fabrics.local.supervisor JOBDIR [JOBDIR ...]`.

Each job directory holds what `LocalFabric.prepare` wrote (job.sh, job.json, work/). One supervisor process
(forked from this one, which exits) runs every job it is given: it claims each by linking `started` into
place, so of any number of supervisors started for one job exactly one runs it, and flushes a slice of claims
to disk at once before it starts their jobs. It runs each job.sh in a process group of its own, stops a job's
whole group at its runtime limit or on its cancel, and writes its result.json; each job ends on its own, and
a SIGTERM to the supervisor stops them all as cancelled. A `deadline` file (an aware ISO time, rewritten
atomically when a lease is extended) moves a job's limit while it runs.

Exit codes in result.json follow the shell: a job killed by signal N is recorded as 128 + N.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
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
    """Create `started` with our pid in it; False when another supervisor got there first. Not yet on disk:
    the caller flushes a whole batch's claims at once (see `_flush`) before any of their jobs runs."""
    tmp = jobdir / f".started.{os.getpid()}.tmp"
    _write_synced(tmp, json.dumps({"pid": os.getpid(), "started_at": started_at}), 0o644, durable=False)
    try:
        # link() is atomic and fails when the name exists: the claim and its content appear together.
        os.link(tmp, jobdir / "started")
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


def _flush(where: Path) -> None:
    """Everything written so far on the filesystem holding `where` reaches the disk: one syncfs for a batch's
    claims or results, where an fsync each cost a journal commit each. os.sync, every filesystem, where syncfs
    is missing."""
    syncfs = getattr(_libc(), "syncfs", None)
    if syncfs is not None:
        try:
            fd = os.open(where, os.O_RDONLY)
        except OSError:
            pass  # gone meanwhile: sync everything instead
        else:
            try:
                if syncfs(fd) == 0:
                    return
            finally:
                os.close(fd)
    os.sync()


@functools.cache
def _libc() -> Any:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


def _say(jobdir: Path, text: str) -> None:
    """A line in the job's own supervisor.log (one process supervises a whole batch)."""
    with contextlib.suppress(OSError), open(jobdir / "supervisor.log", "a", encoding="utf-8") as log:
        log.write(f"{now_iso()} {text}\n")


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
            _say(self.jobdir, "ignoring a deadline file that does not parse")
            return
        self.at = time.monotonic() + (ends - datetime.now(UTC)).total_seconds()
        _say(self.jobdir, f"the job now ends at {ends.isoformat()}")

    @property
    def limit_s(self) -> int:
        return round(self.at - self.started)


class _Job:
    """One claimed job under this supervisor: started by `start`, then moved on by `step` each round until it
    has an outcome. The supervisor reaps every child itself and sets its returncode (see `_reap`)."""

    def __init__(self, jobdir: Path, started_at: str) -> None:
        self.jobdir = jobdir
        self.started_at = started_at
        self.child: subprocess.Popen[bytes] | None = None
        self.sampler: subprocess.Popen[bytes] | None = None
        self.deadline: _Deadline | None = None
        self.grace = _kill_grace()
        self.kill_at: float | None = None  # set once we have asked the group to stop
        self.look_at = 0.0  # when next to look for a cancel marker and at the deadline
        self.cancelled = False
        self.timed_out = False
        self.sampler_stop_at: float | None = None  # when the sampler is ended if it has not ended by itself
        self.outcome: dict[str, Any] | None = None

    def start(self) -> None:
        """Run job.sh in a process group of its own; a job cancelled already, or whose records do not load, has
        its outcome at once."""
        if _Stop.requested or (self.jobdir / "cancel").exists():
            self.outcome = {"state": "cancelled", "exit_code": None, "reason": "cancelled before it started"}
            return
        try:
            workload_id, limit_s, job_env = _load_job(self.jobdir)
            ours = {"GRIDLANE_WORKLOAD_ID": workload_id, "GRIDLANE_JOB_DIR": str(self.jobdir)}
            env = {**job_environment(job_env), **ours}
            with open(self.jobdir / "stdout.log", "ab") as out, open(self.jobdir / "stderr.log", "ab") as err:
                self.child = subprocess.Popen(
                    ["/bin/bash", str(self.jobdir / "job.sh")],
                    cwd=self.jobdir / "work",
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    process_group=0,  # pgid == child pid: one killpg reaches every process it starts
                )
            self.deadline = _Deadline(self.jobdir, limit_s)
            self.sampler = _start_sampler(env, self.child.pid)
            # Not synced: after a power loss the job is gone whatever the file says.
            write_atomic(self.jobdir / "child.pid", str(self.child.pid), durable=False)
        except Exception as exc:  # a result, whatever went wrong, beats a job that never ends
            self.stop_now()
            self.outcome = {"state": "failed", "exit_code": None, "reason": f"the supervisor failed: {exc!r}"}

    def stop_now(self) -> None:
        """Never leave a job running unwatched."""
        if self.child is not None:
            signal_group(self.child.pid, signal.SIGKILL)
        if self.sampler is not None:
            self.sampler.kill()

    def step(self, now: float) -> None:
        """Stop the job's group on cancel, at its deadline, or once its leader has ended (nothing of a job
        outlives it); once the group is gone and the sampler has posted its last readings, the outcome."""
        child, deadline = self.child, self.deadline
        if self.outcome is not None or child is None or deadline is None:
            return
        if self.sampler_stop_at is None:
            if self.kill_at is None:
                if now >= self.look_at:  # each tick, however briskly the supervisor goes round for others
                    self.look_at = now + TICK_S
                    deadline.follow()
                    self.cancelled = _Stop.requested or (self.jobdir / "cancel").exists()
                    self.timed_out = not self.cancelled and child.returncode is None and now >= deadline.at
                if self.cancelled or self.timed_out or child.returncode is not None:
                    signal_group(child.pid, signal.SIGTERM)
                    self.kill_at = now + self.grace
            elif now >= self.kill_at:
                signal_group(child.pid, signal.SIGKILL)
            if child.returncode is None or group_alive(child.pid):
                return
            self.sampler_stop_at = now + SAMPLER_LAST_POST_S  # it sees the job gone within a second, then posts
        if self.sampler is not None and self.sampler.returncode is None:
            if now >= self.sampler_stop_at + KILL_GRACE_S:
                self.sampler.kill()
            elif now >= self.sampler_stop_at:
                self.sampler.terminate()
            return
        self.outcome = self._ended(child.returncode, deadline)

    def _ended(self, returncode: int, deadline: _Deadline) -> dict[str, Any]:
        exit_code = 128 - returncode if returncode < 0 else returncode
        if _Stop.requested or (self.jobdir / "cancel").exists():
            return {"state": "cancelled", "exit_code": exit_code, "reason": "cancelled"}
        if self.timed_out:
            reason = f"stopped at the {deadline.limit_s} s limit"
            return {"state": "timed_out", "exit_code": exit_code, "reason": reason}
        return {"state": "succeeded" if exit_code == 0 else "failed", "exit_code": exit_code}

    def record(self) -> None:
        result = {**(self.outcome or {}), "started_at": self.started_at, "finished_at": now_iso(), "host": _HOST}
        write_atomic(self.jobdir / "result.json", json.dumps(result), durable=False)  # flushed with the round's


_HOST = socket.gethostname()
# Jobs claimed, flushed to disk and started together: one syncfs for each, and a look at the running between.
CLAIM_CHUNK = 64


def supervise(jobdirs: Sequence[Path]) -> int:
    """Claim, run and record each job; those another supervisor claimed first are left to it. Claims reach the
    disk before their jobs run, and results before the next round (so after a power loss a job that ran is
    never run again, and one that ended says how)."""
    signal.signal(signal.SIGTERM, _Stop.handle)
    signal.signal(signal.SIGINT, _Stop.handle)
    jobs: list[_Job] = []  # the jobs still going
    try:
        _supervise(jobdirs, jobs)
    except BaseException:
        for job in jobs:
            job.stop_now()  # never leave a job running unwatched
        raise
    return 0


def _supervise(jobdirs: Sequence[Path], jobs: list[_Job]) -> None:
    live: dict[int, _Job] = {}  # by the pid of each child of ours: job leaders and samplers
    for at in range(0, len(jobdirs), CLAIM_CHUNK):
        mine = []
        for jobdir in jobdirs[at : at + CLAIM_CHUNK]:
            started_at = now_iso()  # each its own: which job started last decides who is preempted first
            if _claim(jobdir, started_at):
                mine.append(_Job(jobdir, started_at))
        if not mine:
            continue
        _flush(mine[0].jobdir)
        jobs.extend(mine)
        for job in mine:
            job.start()
            for proc in (job.child, job.sampler):
                if proc is not None:
                    live[proc.pid] = job
        jobs[:] = _round(jobs, live)
    while jobs:
        # Briskly while a finished leader's group is going (as a lone supervisor's wait would), else each tick.
        going = any(j.sampler_stop_at is None and j.child is not None and j.child.returncode is not None for j in jobs)
        time.sleep(0.02 if going else TICK_S)
        jobs[:] = _round(jobs, live)


def _round(jobs: list[_Job], live: dict[int, _Job]) -> list[_Job]:
    """Reap what ended, move every job on, record the outcomes (flushed together); the jobs still going."""
    _reap(live)
    now = time.monotonic()
    going: list[_Job] = []
    ended: list[_Job] = []
    for job in jobs:
        try:
            job.step(now)
        except Exception as exc:
            job.stop_now()
            job.outcome = {"state": "failed", "exit_code": None, "reason": f"the supervisor failed: {exc!r}"}
        (going if job.outcome is None else ended).append(job)
    for job in ended:
        try:
            job.record()
        except OSError as exc:  # a full disk, say: the others' results are still worth writing
            _say(job.jobdir, f"cannot record the result: {exc!r}")
    if ended:
        _flush(ended[0].jobdir)
    return going


def _reap(live: dict[int, _Job]) -> None:
    """Collect every child of ours that has ended, setting its returncode as Popen would (-N for signal N)."""
    while live:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        job = live.pop(pid, None)
        if job is None:
            continue
        for proc in (job.child, job.sampler):
            if proc is not None and proc.pid == pid:
                proc.returncode = os.waitstatus_to_exitcode(status)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m fabrics.local.supervisor JOBDIR [JOBDIR ...]", file=sys.stderr)
        return 2
    jobdirs = [Path(os.path.abspath(a)) for a in argv]
    missing = [str(d) for d in jobdirs if not d.is_dir()]
    if missing:
        print(f"no job directory {', '.join(missing)}", file=sys.stderr)
        return 2
    # Fork the supervisor away so it is reparented from the portal, which then need not reap it; this process
    # exits at once, and the caller waits for the claims instead. One supervisor runs a whole batch: a Python
    # process forked per job cost more than the job's own start (copied pages, an fsync per claim).
    if os.fork() == 0:
        code = 1
        try:
            code = supervise(jobdirs)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
