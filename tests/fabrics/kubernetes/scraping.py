"""A real Prometheus for the Kubernetes readers' tests (DCGM, cAdvisor): it scrapes loopback stand-ins every second.
Each job's target gets its own `namespace` label, which makes Prometheus rename the stand-in's to
exported_namespace, as a scrape through Kubernetes service discovery does."""

from __future__ import annotations

import http.server
import subprocess
import threading
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.conftest import wait_until
from tests.deploy.helpers import free_port


@contextmanager
def scraping(tmp_path: Path, jobs: Mapping[str, tuple[int, str]]) -> Iterator[str]:
    """Prometheus's URL while it scrapes each job's stand-in: {job name: (port, the target's namespace label)}."""
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n"
        + "".join(
            f"  - job_name: {name}\n"
            f"    static_configs: [{{targets: ['127.0.0.1:{target}'], labels: {{namespace: {namespace}}}}}]\n"
            for name, (target, namespace) in jobs.items()
        )
    )
    proc = subprocess.Popen(
        ["/usr/bin/prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=(tmp_path / "prometheus.log").open("wb"),
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: proc.poll() is not None or ready(url), timeout=60, every=0.2)
        assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()[-1500:]
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def serving(body: Callable[[], bytes]) -> http.server.ThreadingHTTPServer:
    """A stand-in exporter on a loopback port (`.server_address[1]`): every GET answers `body()` in Prometheus's
    text format. Shut it down when done."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            data = body()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
