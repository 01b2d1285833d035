"""`make run`: the web server and the worker side by side on 127.0.0.1; Ctrl-C stops both."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser


class Command(BaseCommand):
    help = "Serve the portal and run the worker until interrupted."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--host", default="127.0.0.1")

    def handle(self, *args: Any, **options: Any) -> None:
        manage = str(Path(settings.BASE_DIR) / "manage.py")
        address = f"{options['host']}:{options['port']}"
        children = [
            subprocess.Popen([sys.executable, manage, "runserver", "--noreload", address]),  # noqa: S603
            subprocess.Popen([sys.executable, manage, "gridlane_worker"]),  # noqa: S603
        ]
        stopping = False

        def stop(*_: Any) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        self.stdout.write(
            f"\nGridlane is up at http://{address}/\n"
            + ("Demo sign-ins: alice, bob, charlie, it (password: gridlane-demo)\n" if settings.DEMO else "")
            + "Press Ctrl-C to stop.\n"
        )
        try:
            while not stopping and all(c.poll() is None for c in children):
                time.sleep(0.2)
        finally:
            for child in children:
                if child.poll() is None:
                    child.send_signal(signal.SIGTERM)
            for child in children:
                try:
                    child.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    child.kill()
        failed = [c for c in children if c.returncode not in (0, -signal.SIGTERM, None)]
        if failed and not stopping:
            raise SystemExit(f"a portal process exited with {failed[0].returncode}")
