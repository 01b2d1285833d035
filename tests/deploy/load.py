"""A submitting client for the fault tests: submitters that each send one workload after another through the
API, retrying a 503 with the same Idempotency-Key (as a careful client does) until the portal takes it."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Attempt:
    started: float
    ended: float
    port: int
    status: int  # 0: no answer at all
    request_id: str
    retry_after: str
    json_errors: bool


class Load:
    """Submitters that each send one workload after another, retrying a 503 with the same Idempotency-Key, as a
    careful client does, until the portal takes it."""

    def __init__(
        self, ports: list[int], token: str, marker: Path, limit: int | None = None, pause_s: float = 0
    ) -> None:
        self.ports, self.token, self.marker, self.limit, self.pause_s = ports, token, marker, limit, pause_s
        self.attempts: list[Attempt] = []
        self.taken: dict[str, str] = {}  # submission key -> workload id
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(n,), daemon=True) for n in range(2)]

    def run(self, n: int) -> None:
        i = 0
        while not self.stopping.is_set():
            if self.limit is not None and i >= self.limit // len(self.threads):
                return
            key = f"load-{n}-{i}"
            body = json.dumps({
                "queue": "train", "kind": "batch", "name": key, "resources": {"gpus": 0, "cpus": 0.1, "memory_gb": 0.1},
                "command": f'echo "$GRIDLANE_WORKLOAD_ID" >> {self.marker}', "runtime_limit_minutes": 5,
            }).encode()  # fmt: skip
            tries = 0
            while True:
                port = self.ports[(i + tries + n) % len(self.ports)]
                attempt = self.send(port, body, key)
                tries += 1
                if attempt.status in (200, 201):
                    break
                time.sleep(0.2)
            i += 1
            time.sleep(self.pause_s)

    def send(self, port: int, body: bytes, key: str) -> Attempt:
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/v1/workloads/", data=body, method="POST",
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json",
                     "Idempotency-Key": key, "X-Forwarded-Proto": "https", "Host": "gridlane.test"},
        )  # fmt: skip
        started = time.time()
        status, headers, payload = 0, {}, b""
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                status, headers, payload = response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as error:
            status, headers, payload = error.code, dict(error.headers), error.read()
        except OSError:
            pass
        try:
            parsed = json.loads(payload)
        except ValueError:
            parsed = None
        attempt = Attempt(started, time.time(), port, status, headers.get("X-Request-ID", ""),
                          headers.get("Retry-After", ""), isinstance(parsed, dict) and "errors" in parsed)  # fmt: skip
        with self.lock:
            self.attempts.append(attempt)
            if status in (200, 201) and isinstance(parsed, dict):
                self.taken[key] = str(parsed["id"])
        return attempt

    def taken_count(self) -> int:
        with self.lock:
            return len(self.taken)
