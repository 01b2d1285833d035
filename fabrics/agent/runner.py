"""Runs one claimed job on the host: its own directory and process group, logs streamed in chunks,
cancel and the runtime limit honoured, telemetry sampled, and the end handed to the reporter (reports.py).

Exit codes follow the shell: a job killed by signal N is reported as 128 + N.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fabrics import travel
from fabrics.agent import gpus as gpu_query
from fabrics.agent import keys
from fabrics.agent.client import Api, ApiError
from fabrics.agent.reports import End, Reporter
from fabrics.local.supervisor import group_alive, job_environment, signal_group
from fabrics.ssh import notebook

LOG_EVERY_S = 0.5
TICK_S = 0.1
CHUNK_MAX = 32 * 1024


@dataclass
class Options:
    workdir: Path
    kill_grace_s: float = 5.0
    sample_every_s: float = 10.0
    authorized_keys: Path | None = None  # the shared lease account's file; None: no lease without a person's account
    person_accounts: str = "no"  # leases naming a person: "no" refused, "existing" accounts only, "create" on first use
    min_uid: int = 1000  # a person's account below this uid (a system account) takes no lease
    nvidia_smi: str = "nvidia-smi"


@dataclass
class Job:
    """One claim as the server sent it, plus what the agent learns while it runs."""

    payload: Mapping[str, Any]
    cancel: threading.Event = field(default_factory=threading.Event)
    lease_ends_at: datetime | None = None

    @property
    def run_id(self) -> str:
        return str(self.payload["run_id"])


def command_line(payload: Mapping[str, Any], jobdir: Path) -> list[str]:
    """The argv that runs the job: in its image through podman or apptainer when one is given and the runtime
    exists, else bash. Code and packages that travel with it (fabrics.travel) are made ready in its folder
    first: on this host, before a container starts (which sees the folder as /work); packages go into a virtual
    environment only without an image (one built here would not run in the image's Python)."""
    env = {str(k): str(v) for k, v in dict(payload.get("env", {})).items()}
    command = str(payload.get("command", ""))
    image = str(payload.get("image", ""))
    if image and env.get(travel.REQUIREMENTS_ENV, "").strip():
        refusal = "gridlane: requirements with an image: install them in the image, or submit without one"
        return ["/bin/sh", "-c", 'echo "$0" >&2; exit 90', refusal]
    argv = _command_line(payload, jobdir, command, image)
    if not travel.wanted(env):
        return argv
    # The preamble, then the job's own argv as it would have run ("$@"), in the same process group.
    return ["/bin/bash", "-c", "".join(travel.preamble(env)) + 'exec "$@"\n', "gridlane", *argv]


def _command_line(payload: Mapping[str, Any], jobdir: Path, command: str, image: str) -> list[str]:
    if payload.get("kind") == "notebook" and not command.strip():
        # The host's Jupyter (Gridlane's own dependency, in the agent's Python) through the launcher every
        # fabric's notebooks use: it reports where it listens, and opens through the portal (fabrics.ssh.notebook).
        return ["bash", "-c", notebook.FUNCTION + 'gridlane_notebook "$0" -m jupyterlab', sys.executable]
    if image:
        if shutil.which("podman"):
            return [
                "podman",
                "run",
                "--rm",
                "-v",
                f"{jobdir}/work:/work",
                "-w",
                "/work",
                image,
                "/bin/sh",
                "-c",
                command,
            ]
        if shutil.which("apptainer"):
            return ["apptainer", "exec", "--pwd", "/work", "-B", f"{jobdir}/work:/work", f"docker://{image}",
                    "/bin/sh", "-c", command]  # fmt: skip
    return ["/bin/bash", "-c", command]


def run(api: Api, reporter: Reporter, job: Job, options: Options, gpu_indexes: list[int]) -> None:
    """Run the job to its end and hand its end, with its last readings, to the reporter (which sends it with
    the others that ended meanwhile); never raises for the job's own failure."""
    payload = job.payload
    jobdir = options.workdir / job.run_id
    (jobdir / "work").mkdir(parents=True, exist_ok=True)
    samples: list[dict[str, Any]] = []
    try:
        if payload.get("kind") == "vm":
            state, code, reason = _lease(api, job, options)
        else:
            state, code, reason, samples = _process(api, job, options, jobdir, gpu_indexes)
    except Exception as error:  # a report, whatever went wrong, beats a job that never ends
        state, code, reason = "failed", None, f"the agent failed to run it: {error!r}"
    reporter.end(End(job.run_id, state, code, reason, samples))


def _process(
    api: Api, job: Job, options: Options, jobdir: Path, gpu_indexes: list[int]
) -> tuple[str, int | None, str, list[dict[str, Any]]]:
    """Run the job's process to its end: its state, exit code, reason, and the readings not sent yet."""
    payload = job.payload
    env = job_environment({k: str(v) for k, v in dict(payload.get("env", {})).items()})
    env |= {"GRIDLANE_WORKLOAD_ID": str(payload.get("workload_id", job.run_id)), "GRIDLANE_JOB_DIR": str(jobdir)}
    env.setdefault("GRIDLANE_PYTHON", sys.executable)  # the notebook launcher's own helper
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in gpu_indexes)
    child = subprocess.Popen(
        command_line(payload, jobdir),
        cwd=jobdir / "work",
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        process_group=0,  # one killpg reaches everything it starts
    )
    log = _LogPump(api, job, child)
    sampler = _Sampler(api, job.run_id, child.pid, gpu_indexes, options)
    sampler.maybe_sample()  # the first at once, so even a short job leaves one
    limit = float(payload.get("runtime_limit_s", 3600))
    started = time.monotonic()
    deadline = started + limit
    # A lease extended on the server reaches the job through the heartbeat; from then on its end is the lease's.
    given_end = _when(payload.get("lease_ends_at"))
    next_flush = time.monotonic() + LOG_EVERY_S
    kill_at: float | None = None
    timed_out = cancelled = False
    try:
        while child.poll() is None or group_alive(child.pid):
            if child.returncode is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.wait(timeout=TICK_S)
            else:
                time.sleep(0.02)  # the leader is gone; wait briefly for what it left behind
            now = time.monotonic()
            if now >= next_flush:
                log.flush()
                sampler.maybe_sample()
                sampler.send()
                next_flush = now + LOG_EVERY_S
            if kill_at is None:
                if job.lease_ends_at is not None and job.lease_ends_at != given_end:
                    given_end = job.lease_ends_at
                    deadline = now + (given_end - datetime.now(UTC)).total_seconds()
                    limit = deadline - started
                cancelled = job.cancel.is_set()
                timed_out = not cancelled and child.returncode is None and now >= deadline
                if cancelled or timed_out or child.returncode is not None:
                    signal_group(child.pid, signal.SIGTERM)
                    kill_at = now + options.kill_grace_s
            elif now >= kill_at:
                signal_group(child.pid, signal.SIGKILL)
    except BaseException:
        signal_group(child.pid, signal.SIGKILL)
        raise
    log.close()
    code = child.returncode
    exit_code = 128 - code if code < 0 else code
    last, sampler.samples = sampler.samples, []  # they go with the job's end
    if cancelled:
        return "cancelled", exit_code, "cancelled", last
    if timed_out:
        return "timed_out", exit_code, f"stopped at the {int(limit)} s limit", last
    return ("succeeded" if exit_code == 0 else "failed"), exit_code, "", last


class _LogPump:
    """A job's output, read by a thread of its own as it comes and sent to Gridlane in chunks of at most
    CHUNK_MAX on each flush; an answer that says the run is cancelled sets the job's cancel."""

    def __init__(self, api: Api, job: Job, child: subprocess.Popen[bytes]) -> None:
        self.api, self.job = api, job
        self.chunks: list[bytes] = []
        self.lock = threading.Lock()
        self.fd = child.stdout.fileno() if child.stdout is not None else -1
        self.reader = threading.Thread(target=self._pump, daemon=True)
        self.reader.start()

    def _pump(self) -> None:
        for piece in iter(lambda: os.read(self.fd, 8192), b""):
            with self.lock:
                self.chunks.append(piece)

    def flush(self) -> None:
        with self.lock:
            data = b"".join(self.chunks)
            self.chunks.clear()
        for start in range(0, len(data), CHUNK_MAX):
            text = data[start : start + CHUNK_MAX].decode("utf-8", "replace")
            with contextlib.suppress(ApiError):
                answer = self.api.post(f"agent/runs/{self.job.run_id}/log/", {"chunk": text})
                if answer and answer.get("cancel"):
                    self.job.cancel.set()

    def close(self) -> None:
        """Wait a little for the last output, then send it."""
        self.reader.join(timeout=2)
        self.flush()


def _lease(api: Api, job: Job, options: Options) -> tuple[str, int | None, str]:
    """Grant SSH access until the lease ends or is cancelled, then take it back."""
    payload = job.payload
    person = str(payload.get("run_as", ""))
    account: Any = None
    if person:  # the person's own account on this host, never the shared one
        if options.person_accounts not in ("existing", "create"):
            return "failed", None, "this host gives no one their own account (start the agent with --person-accounts)"
        try:
            account = keys.person_account(person, create=options.person_accounts == "create", min_uid=options.min_uid)
        except keys.AccountError as error:
            return "failed", None, str(error)
    elif options.authorized_keys is None:
        return "failed", None, "this agent grants no leases (start it with --authorized-keys)"
    public_key = str(payload.get("public_key", ""))
    if not public_key:
        return "failed", None, "the lease has no SSH public key"
    ends = payload.get("lease_ends_at")
    job.lease_ends_at = datetime.fromisoformat(ends) if ends else None
    if job.lease_ends_at is None:
        return "failed", None, "the lease has no end"
    granted_until = job.lease_ends_at
    from_addresses = str(payload.get("from_addresses", ""))

    def grant(until: datetime) -> None:
        if account is not None:
            keys.person_grant(account, public_key, job.run_id, until, from_addresses)
        elif options.authorized_keys is not None:
            keys.grant(options.authorized_keys, public_key, job.run_id, until, from_addresses)

    grant(granted_until)
    try:
        while not job.cancel.is_set():
            if job.lease_ends_at != granted_until:  # extended: the heartbeat brought the new end
                granted_until = job.lease_ends_at
                grant(granted_until)
            if datetime.now(UTC) >= granted_until:
                return "succeeded", 0, "the lease ended"
            job.cancel.wait(TICK_S)
        return "cancelled", None, "cancelled"
    finally:
        if account is not None:
            keys.person_revoke(account, job.run_id)
        elif options.authorized_keys is not None:
            keys.revoke(options.authorized_keys, job.run_id)


def _when(value: Any) -> datetime | None:
    """An aware datetime from the server's ISO text; None for none (or text that is not one)."""
    try:
        parsed = datetime.fromisoformat(str(value)) if value else None
    except ValueError:
        return None
    return parsed if parsed is not None and parsed.tzinfo else None


class _Sampler:
    """GPU (nvidia-smi, this job's GPUs), CPU and memory (its process group, from /proc) every so often."""

    def __init__(self, api: Api, run_id: str, pgid: int, gpu_indexes: list[int], options: Options) -> None:
        self.api, self.run_id, self.pgid, self.gpu_indexes, self.options = api, run_id, pgid, gpu_indexes, options
        self.samples: list[dict[str, Any]] = []
        self.last_cpu: tuple[float, float] | None = None
        self.next_at = 0.0

    def maybe_sample(self) -> None:
        now = time.monotonic()
        if now < self.next_at:
            return
        self.next_at = now + self.options.sample_every_s
        self.samples.append(self.sample())

    def sample(self) -> dict[str, Any]:
        # The first, taken as the job starts, reads its leader alone (the whole of a group that young: one file
        # where a scan of /proc reads one per process on the host); later ones, the group from a shared scan.
        if self.last_cpu is None:
            now, (ticks, rss_pages) = time.monotonic(), _process_usage(self.pgid)
        else:
            now, ticks, rss_pages = GROUPS.usage(self.pgid, max_age_s=min(1.0, self.options.sample_every_s / 2))
        cpu = None
        if self.last_cpu is not None and now > self.last_cpu[0]:
            cpu = 100.0 * (ticks - self.last_cpu[1]) / os.sysconf("SC_CLK_TCK") / (now - self.last_cpu[0])
        self.last_cpu = (now, ticks)
        sample: dict[str, Any] = {
            "at": datetime.now(UTC).isoformat(),
            "cpu_utilisation": cpu,
            "memory_mib": rss_pages * os.sysconf("SC_PAGE_SIZE") // (1024 * 1024),
            "gpu_utilisation": None,
            "gpu_memory_mib": None,
        }
        if self.gpu_indexes:
            mine = [g for g in gpu_query.query(self.options.nvidia_smi) if g.index in self.gpu_indexes]
            utils = [g.utilisation for g in mine if g.utilisation is not None]
            sample["gpu_utilisation"] = sum(utils) / len(utils) if utils else None
            sample["gpu_memory_mib"] = sum(g.memory_used_mib for g in mine) if mine else None
        return sample

    def send(self) -> None:
        if not self.samples:
            return
        with contextlib.suppress(ApiError):
            self.api.post(f"agent/runs/{self.run_id}/usage/", {"samples": self.samples})
            self.samples = []


def _stat_usage(stat: str) -> tuple[str, float, int]:
    """A "/proc/PID/stat" line's process group, CPU ticks (user + system) and resident pages."""
    # "pid (comm) state ppid pgrp ... utime stime ... rss": the fields after the comm, which may hold spaces.
    fields = stat[stat.rfind(")") + 2 :].split()
    if len(fields) <= 21:
        return "", 0.0, 0
    return fields[2], float(int(fields[11]) + int(fields[12])), int(fields[21])


def _process_usage(pid: int, proc: Path = Path("/proc")) -> tuple[float, int]:
    """CPU ticks and resident pages of one process (0 and 0 once it is gone)."""
    try:
        _, ticks, rss = _stat_usage((proc / str(pid) / "stat").read_text())
    except OSError:
        return 0.0, 0
    return ticks, rss


class ProcessGroups:
    """CPU ticks and resident pages of every process group on the host, read from /proc by one scan shared by
    the samplers of all the jobs the agent runs: a scan reads one file per process on the host, and a scan for
    each job's sample was half of what a burst of short jobs cost the agent."""

    def __init__(self, proc: Path = Path("/proc"), clock: Any = time.monotonic) -> None:
        self.proc, self.clock = proc, clock
        self.taken_at = -float("inf")
        self.groups: dict[str, tuple[float, int]] = {}
        self.lock = threading.Lock()

    def usage(self, pgid: int, max_age_s: float) -> tuple[float, float, int]:
        """(when the scan was taken, on `clock`; the group's CPU ticks; its resident pages) from a scan at most
        `max_age_s` old (a new one when the last is older): 0 and 0 for a group with no live process."""
        with self.lock:
            if self.clock() - self.taken_at >= max_age_s:
                self.taken_at, self.groups = self.clock(), self._scan()
            ticks, rss = self.groups.get(str(pgid), (0.0, 0))
            return self.taken_at, ticks, rss

    def _scan(self) -> dict[str, tuple[float, int]]:
        groups: dict[str, tuple[float, int]] = {}
        if not self.proc.is_dir():
            return groups
        for entry in self.proc.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                group, ticks, rss = _stat_usage((entry / "stat").read_text())
            except OSError:  # it ended meanwhile
                continue
            had_ticks, had_rss = groups.get(group, (0.0, 0))
            groups[group] = (had_ticks + ticks, had_rss + rss)
        return groups


GROUPS = ProcessGroups()
