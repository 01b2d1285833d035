"""Run the worker: a django-q2 cluster for the tasks, a ticker that asks for a cycle every few seconds and, on
PostgreSQL, a listener that admits and dispatches the moment a submit or a cancel commits."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import DatabaseError, connection
from django_q.tasks import async_task

from portal.serving import require_secret_key
from portal.worker import tasks, wake

log = logging.getLogger("gridlane.worker")


class Command(BaseCommand):
    help = "Start the Gridlane worker (django-q2 cluster, a periodic scheduling cycle, and the kick listener)."

    def handle(self, *args: Any, **options: Any) -> None:
        require_secret_key()
        stop = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        manage = Path(settings.BASE_DIR) / "manage.py"
        cluster = _start_cluster(manage)
        period = settings.GRIDLANE_CYCLE_SECONDS
        self.stdout.write(f"worker: django-q2 cluster pid {cluster.pid}, a cycle every {period:g} s")
        threads = _kick_threads(stop) if wake.listening() else []
        for thread in threads:
            thread.start()
        try:
            while not stop.is_set():
                if cluster.poll() is not None:
                    # It gives up when the database is away too long; started again, it waits for it.
                    log.warning("the django-q2 cluster exited with %s; starting it again", cluster.returncode)
                    stop.wait(period)
                    cluster = _start_cluster(manage)
                # Where the listener is up, the cycle asks it to admit and dispatch (tasks.cycle).
                kick = bool(threads) and all(thread.is_alive() for thread in threads)
                try:
                    async_task("portal.worker.tasks.cycle", kick=kick, task_name="cycle", group="cycle")
                except DatabaseError as error:  # the database is away: ask again next period, for as long as it takes
                    log.warning("cannot ask for a cycle (%s); trying again in %g s", error, period)
                    wake.forget_connection()
                stop.wait(period)
        finally:
            stop.set()
            if cluster.poll() is None:
                cluster.send_signal(signal.SIGTERM)
                try:
                    cluster.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    cluster.kill()
            for thread in threads:
                thread.join(timeout=15)


def _start_cluster(manage: Path) -> subprocess.Popen[bytes]:
    """The django-q2 cluster, which dies with this process even when it is SIGKILLed (the kernel tells it), so
    that a worker restarted after a crash never leaves a second cluster behind."""
    return subprocess.Popen([sys.executable, str(manage), "qcluster"], preexec_fn=_die_with_parent)  # noqa: S603


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the parent dies (Linux prctl PR_SET_PDEATHSIG); nothing elsewhere."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass


def _kick_threads(stop: threading.Event) -> list[threading.Thread]:
    """Two threads, each with its own database connection: one admits on every burst of kicks, the other then
    dispatches and syncs (tasks.FollowUp), so that a slow fabric never holds up the next admission."""
    kicked = threading.Event()
    follow = tasks.FollowUp()

    def on_kick(sync: bool) -> None:
        tasks.admit()
        follow.ask(sync)
        kicked.set()

    def follower() -> None:
        try:
            while not stop.is_set():
                if kicked.wait(timeout=1.0):
                    kicked.clear()
                    try:
                        follow.run()
                    except Exception:  # the periodic cycle does the same; keep serving kicks
                        tasks.log.exception("dispatch after a kick failed")
                        wake.forget_connection()
        finally:
            connection.close()

    def listener() -> None:
        try:
            wake.listen(on_kick, stop)
        finally:
            connection.close()

    return [threading.Thread(target=listener, name="kicks"), threading.Thread(target=follower, name="follow-up")]
