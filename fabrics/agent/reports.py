"""How jobs ended, sent to the server many at a time: one request (agent/ends/) carries every end that
finished since the last one, with each job's last readings. A burst of short jobs was two requests per job (its
usage, then its status), most of what an agent asked of the portal.

A server without that endpoint (404) is told one job at a time, as before. A report the server cannot take
now (it is away) is tried again, five times a second apart, then given up, as a job's own report was."""

from __future__ import annotations

import queue
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from fabrics.agent.client import Api, ApiError

MAX_BATCH = 1000  # the most ends one request carries (the server's own limit)
TRIES = 5


@dataclass
class End:
    run_id: str
    state: str
    exit_code: int | None
    reason: str
    samples: list[dict[str, Any]] = field(default_factory=list)

    def body(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "state": self.state, "exit_code": self.exit_code, "reason": self.reason,
                "samples": self.samples}  # fmt: skip


class Reporter:
    """Takes ends from the jobs' threads (`end`) and sends them from its own (`serve`), as many at once as have
    come in while the last request was on its way."""

    def __init__(self, api: Api, host: str, pause_s: float = 1.0) -> None:
        self.api, self.host, self.pause_s = api, host, pause_s
        self.waiting: queue.Queue[End] = queue.Queue()
        self.batches = True  # until the server says it has no batch endpoint

    def end(self, end: End) -> None:
        self.waiting.put(end)

    def start(self) -> None:
        threading.Thread(target=self.serve, name="reports", daemon=True).start()

    def serve(self) -> None:
        while True:
            self.send_waiting(block=True)

    def flush(self, timeout_s: float) -> bool:
        """Wait until every end taken so far was sent (or given up); False when timeout_s passed first."""
        deadline = time.monotonic() + timeout_s
        while self.waiting.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.05)
        return not self.waiting.unfinished_tasks

    def send_waiting(self, block: bool = False) -> int:
        """Send what is waiting (with `block`, wait for something first); returns how many ends went."""
        batch: list[End] = []
        try:
            batch.append(self.waiting.get(block=block))
            while len(batch) < MAX_BATCH:
                batch.append(self.waiting.get_nowait())
        except queue.Empty:
            pass
        try:
            if batch:
                self._send(batch)
        finally:
            for _ in batch:
                self.waiting.task_done()
        return len(batch)

    def _send(self, batch: list[End]) -> None:
        for attempt in range(TRIES):
            try:
                if self.batches:
                    self.api.post("agent/ends/", {"host": self.host, "runs": [e.body() for e in batch]})
                else:
                    for end in batch:
                        self._one(end)
                return
            except ApiError as error:
                if error.status in (404, 405) and self.batches:  # a server from before agent/ends/
                    self.batches = False
                    continue
                print(f"agent {self.host}: reporting {len(batch)} ends failed ({error}); "
                      f"try {attempt + 1} of {TRIES}", file=sys.stderr, flush=True)  # fmt: skip
                if error.status and error.status < 500:
                    return  # refused: trying again cannot help
                time.sleep(self.pause_s)

    def _one(self, end: End) -> None:
        if end.samples:
            self.api.post(f"agent/runs/{end.run_id}/usage/", {"samples": end.samples})
        status = {"host": self.host, "state": end.state, "exit_code": end.exit_code, "reason": end.reason}
        self.api.post(f"agent/runs/{end.run_id}/status/", status)
