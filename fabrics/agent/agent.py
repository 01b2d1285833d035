"""The agent's main loop: register, heartbeat, long-poll for work in the order of its queues, run it.

gridlane agent --server URL --token T --queue a --queue b [--slots N] [--workdir DIR]
gridlane agent --server URL --enroll ONE-TIME-TOKEN --queue a ...   (a burst instance's boot script)
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any

from fabrics.agent import gpus as gpu_query
from fabrics.agent import pbs_jobs, reports, runner
from fabrics.agent.client import Api, ApiError

CLAIM_WAIT_S = 20.0
MAX_CLAIMS = 256  # the most the server hands out in one answer


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--queue", action="append", required=True, help="a queue to serve; repeat, in order")
    parser.add_argument("--name", default=socket.gethostname(), help="this host's name (default: hostname)")
    parser.add_argument("--slots", type=int, default=1, help="jobs run at once (default 1)")
    parser.add_argument("--workdir", default="~/.local/share/gridlane-agent", help="where jobs' directories go")
    parser.add_argument("--gpus", type=int, help="declare GPUs (default: what nvidia-smi reports)")
    parser.add_argument("--gpu-model", default="", help="declare the GPU model when nvidia-smi is absent")
    parser.add_argument("--gpu-memory-mib", type=int, default=0, help="declared memory per GPU, MiB")
    parser.add_argument("--kill-grace", type=float, default=5.0, help="seconds between SIGTERM and SIGKILL")
    parser.add_argument("--sample-every", type=float, default=10.0, help="seconds between usage samples")
    parser.add_argument(
        "--authorized-keys", help="the shared lease account's authorized_keys, for leases that name no person"
    )
    parser.add_argument(
        "--person-accounts",
        choices=("no", "existing", "create"),
        default="no",
        help="leases naming a person log in to their own account: existing ones, or made on first use",
    )
    parser.add_argument("--min-uid", type=int, default=1000, help="the lowest uid a person's account may have")
    parser.add_argument("--nvidia-smi", default="nvidia-smi", help="the nvidia-smi program to ask")
    parser.add_argument("--enroll", help="a one-time enrollment token to exchange for this host's own token")
    parser.add_argument(
        "--pbs-jobs", action="store_true", help="also sample the native PBS jobs on this node (fabrics.agent.pbs_jobs)"
    )


def host_facts(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """What the host offers, and a line saying where the GPU facts came from."""
    found = gpu_query.query(args.nvidia_smi)
    if found:
        facts = {"gpus": len(found), "gpu_model": found[0].name, "gpu_memory_mib": found[0].memory_total_mib}
        note = f"{len(found)} GPU(s) from nvidia-smi: {found[0].name}, {found[0].memory_total_mib} MiB"
        if args.gpus is not None:
            facts["gpus"] = min(args.gpus, len(found))
    elif args.gpus:
        facts = {"gpus": args.gpus, "gpu_model": args.gpu_model, "gpu_memory_mib": args.gpu_memory_mib}
        note = f"no GPUs found by nvidia-smi; declared {args.gpus} {args.gpu_model or 'GPU(s)'}"
    else:
        facts = {"gpus": 0, "gpu_model": "", "gpu_memory_mib": 0}
        note = "no GPUs: nvidia-smi is missing or reports none; reporting none"
    facts |= {"cpus": os.cpu_count() or 1, "memory_mib": _memory_mib()}
    return facts, note


class _Stopped(Exception):
    """Raised in the main thread by the stop signal, to leave a long-poll without waiting for it."""


class Agent:
    def __init__(self, api: Api, args: argparse.Namespace) -> None:
        self.api, self.args = api, args
        self.name: str = args.name
        self.queues: list[str] = args.queue
        self.options = runner.Options(
            workdir=Path(os.path.expanduser(args.workdir)).resolve(),
            kill_grace_s=args.kill_grace,
            sample_every_s=args.sample_every,
            authorized_keys=Path(args.authorized_keys) if args.authorized_keys else None,
            person_accounts=args.person_accounts,
            min_uid=args.min_uid,
            nvidia_smi=args.nvidia_smi,
        )
        self.jobs: dict[str, runner.Job] = {}
        self.lock = threading.Lock()
        self.changed = threading.Event()
        self.stopping = threading.Event()
        self.free_gpus: list[int] = []
        self.heartbeat_s = 5.0
        self.reporter = reports.Reporter(api, self.name)

    def register(self) -> None:
        facts, note = host_facts(self.args)
        self.free_gpus = list(range(int(facts["gpus"]))) if not self.jobs else self.free_gpus
        answer = self.api.post("agent/register/", {"host": self.name, "queues": self.queues, **facts})
        self.heartbeat_s = float(answer.get("heartbeat_s", 5.0))
        print(f"agent {self.name}: registered with {answer['fabric']}, serving {', '.join(self.queues)}; {note}",
              flush=True)  # fmt: skip

    def enroll(self) -> None:
        """Trade the one-time enrollment token for this host's own API token (once: the token then is spent)."""
        answer = self.api.post("agent/enroll/", {"host": self.name, "token": self.args.enroll})
        self.api.token = str(answer["token"])
        print(f"agent {self.name}: enrolled with {answer['fabric']}", flush=True)

    def serve(self) -> int:
        self.options.workdir.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(_Stopped):
            if self.args.enroll:
                while True:
                    try:
                        self.enroll()
                        break
                    except ApiError as error:
                        if error.status:  # refused (spent, expired, unknown): trying again cannot help
                            print(f"agent {self.name}: enrollment refused: {error}", file=sys.stderr, flush=True)
                            return 1
                        print(f"agent {self.name}: {error}; retrying", file=sys.stderr, flush=True)
                        if self.stopping.wait(2.0):
                            return 1
            self._retrying(self.register)
            threading.Thread(target=self._heartbeats, daemon=True).start()
            if getattr(self.args, "pbs_jobs", False):
                threading.Thread(target=self._pbs_jobs, daemon=True).start()
            self.reporter.start()
            self._loop()
        self._drain()
        return 0

    def _loop(self) -> None:
        while not self.stopping.is_set():
            with self.lock:
                free = self.args.slots - len(self.jobs)
            if free <= 0:
                self.changed.wait(1.0)
                self.changed.clear()
                continue
            try:
                # As many claims as there are free slots, in one round trip.
                payload = self.api.post(
                    "agent/claim/", {"host": self.name, "queues": self.queues, "wait": CLAIM_WAIT_S,
                                     "max": min(free, MAX_CLAIMS)},
                    timeout=CLAIM_WAIT_S + 15,
                )  # fmt: skip
            except ApiError as error:
                if error.status == 409:
                    self._lost()
                else:
                    print(f"agent {self.name}: claim failed, retrying: {error}", file=sys.stderr, flush=True)
                    self.stopping.wait(1.0)
                continue
            for claim in (payload or {}).get("claims", [payload] if payload else []):
                self._start(claim)

    def _start(self, payload: dict[str, Any]) -> None:
        job = runner.Job(payload)
        need = -(-int(payload.get("gpus_milli", 0)) // 1000)
        with self.lock:
            indexes, self.free_gpus = self.free_gpus[:need], self.free_gpus[need:]
            self.jobs[job.run_id] = job
        print(f"agent {self.name}: running {job.run_id} from {payload.get('queue')}", flush=True)

        def work() -> None:
            try:
                runner.run(self.api, self.reporter, job, self.options, indexes)
            finally:
                with self.lock:
                    self.jobs.pop(job.run_id, None)
                    self.free_gpus = sorted(self.free_gpus + indexes)
                self.changed.set()

        threading.Thread(target=work, daemon=True).start()

    def _heartbeats(self) -> None:
        while not self.stopping.wait(self.heartbeat_s):
            try:
                answer = self.api.post("agent/heartbeat/", {"host": self.name}, timeout=10)
            except ApiError as error:
                if error.status == 409:
                    self._lost()
                continue
            with self.lock:
                for run_id in answer.get("cancel", []):
                    if run_id in self.jobs:
                        self.jobs[run_id].cancel.set()
                for run_id, ends in answer.get("leases", {}).items():
                    if run_id in self.jobs:
                        self.jobs[run_id].lease_ends_at = datetime.fromisoformat(ends)

    def _pbs_jobs(self) -> None:
        """Every sample interval, the native PBS jobs on this node, read and posted (readings of jobs the portal
        does not know are dropped there; a failed post is not retried: the next interval reads again)."""
        sampler = pbs_jobs.Sampler(nvidia_smi=self.options.nvidia_smi)
        post = pbs_jobs.Poster(self.api.post, self.name)
        while not self.stopping.wait(self.options.sample_every_s):
            readings = {job_id: r for job_id, r in sampler.sample().items()  # those that read anything
                        if r["cpu_utilisation"] is not None or r["gpu_utilisation"] is not None
                        or r.get("gpus")}  # fmt: skip
            if not readings:
                continue
            with contextlib.suppress(ApiError):
                post(readings)

    def _lost(self) -> None:
        """The server gave this host up: stop what it still runs (the server already moved it on), register again."""
        print(f"agent {self.name}: the server marked this host lost; stopping its jobs", file=sys.stderr, flush=True)
        with self.lock:
            for job in self.jobs.values():
                job.cancel.set()
        self._retrying(self.register)

    def _retrying(self, step: Any) -> None:
        while not self.stopping.is_set():
            try:
                step()
                return
            except ApiError as error:
                print(f"agent {self.name}: {error}; retrying", file=sys.stderr, flush=True)
                self.stopping.wait(2.0)

    def stop(self, signum: int, frame: FrameType | None) -> None:
        """SIGTERM or SIGINT: stop claiming at once (even mid long-poll), then stop the jobs."""
        already = self.stopping.is_set()
        self.stopping.set()
        self.changed.set()
        if not already:
            raise _Stopped

    def _drain(self) -> None:
        with self.lock:
            for job in self.jobs.values():
                job.cancel.set()
        deadline = time.monotonic() + self.options.kill_grace_s + 5
        while self.jobs and time.monotonic() < deadline:
            time.sleep(0.1)
        self.reporter.flush(max(deadline - time.monotonic(), 5.0))  # how they ended reaches the server


def main(args: argparse.Namespace, api: Api) -> int:
    agent = Agent(api, args)
    signal.signal(signal.SIGTERM, agent.stop)
    signal.signal(signal.SIGINT, agent.stop)
    return agent.serve()


def _memory_mib() -> int:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for entry in Path("/proc/meminfo").read_text().splitlines():
            if entry.startswith("MemTotal:"):
                return int(entry.split()[1]) // 1024  # "MemTotal:  131891432 kB"
    return 0
