"""Run the worker: a django-q2 cluster for the tasks, and a ticker that asks for a cycle every few seconds."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand
from django_q.tasks import async_task


class Command(BaseCommand):
    help = "Start the Gridlane worker (django-q2 cluster plus a periodic scheduling cycle)."

    def handle(self, *args: Any, **options: Any) -> None:
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        manage = Path(settings.BASE_DIR) / "manage.py"
        cluster = subprocess.Popen([sys.executable, str(manage), "qcluster"])  # noqa: S603 (fixed argv)
        period = settings.GRIDLANE_CYCLE_SECONDS
        self.stdout.write(f"worker: django-q2 cluster pid {cluster.pid}, a cycle every {period:g} s")
        try:
            while not stop.is_set():
                if cluster.poll() is not None:
                    raise SystemExit(f"the django-q2 cluster exited with {cluster.returncode}")
                async_task("portal.worker.tasks.cycle", task_name="cycle", group="cycle")
                stop.wait(period)
        finally:
            if cluster.poll() is None:
                cluster.send_signal(signal.SIGTERM)
                try:
                    cluster.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    cluster.kill()
