"""`make run`: the web server and the worker side by side on 127.0.0.1; Ctrl-C stops both, and everything
they started (the worker's django-q2 cluster and its processes).

Each child runs in a process group of its own, so a Ctrl-C reaches this command alone, which then stops the
children in order: the leader first (the worker stops its cluster cleanly), then anything left in its group.
Local jobs are not in those groups: their supervisors run in sessions of their own and keep running, and the
next start follows them to their end (see README.md).

The portal's public URL (the address in every Open button, notification link and the callback URLs jobs use)
follows the port served here unless IT sets `GRIDLANE_PUBLIC_URL`: both children get it in their environment.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

LEADER_GRACE_S = 20.0  # for a child to stop by itself (the worker waits up to 15 s for its cluster)
GROUP_GRACE_S = 5.0  # for what is left in its group after SIGTERM, before SIGKILL


class Command(BaseCommand):
    help = "Serve the portal and run the worker until interrupted."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
        parser.add_argument("--host", default="127.0.0.1")

    def handle(self, *args: Any, **options: Any) -> None:
        manage = str(Path(settings.BASE_DIR) / "manage.py")
        address = f"{options['host']}:{options['port']}"
        env = child_env(os.environ, options["host"], options["port"])
        # Static files are served from the apps (WHITENOISE_USE_FINDERS); an absent STATIC_ROOT only draws a
        # warning from WhiteNoise on every start.
        Path(settings.STATIC_ROOT).mkdir(parents=True, exist_ok=True)
        stopping = False

        def stop(*_: Any) -> None:
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        children = [
            # uvicorn serves portal.asgi: Django, and the connect path (notebooks through the portal, WebSockets).
            subprocess.Popen(  # noqa: S603
                [
                    sys.executable,
                    "-m",
                    "uvicorn",
                    "portal.asgi:application",
                    "--host",
                    options["host"],
                    "--port",
                    str(options["port"]),
                    "--no-access-log",
                    "--timeout-graceful-shutdown",
                    "10",
                ],
                cwd=settings.BASE_DIR,
                env=env,
                start_new_session=True,
            ),
            subprocess.Popen([sys.executable, manage, "gridlane_worker"], env=env, start_new_session=True),  # noqa: S603
        ]
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
                stop_group(child)
        if stopping:
            self.stdout.write(still_running())
        failed = [c for c in children if c.returncode not in (0, -signal.SIGTERM, None)]
        if failed and not stopping:
            raise SystemExit(f"a portal process exited with {failed[0].returncode}")


def still_running(limit: int = 10) -> str:
    """What keeps running once the portal stops (its work on the local fabric and elsewhere: jobs, notebooks,
    VM leases), and how to stop it; a line saying nothing does when nothing does. Never raises: the portal is
    stopping anyway."""
    from portal.workloads.models import Workload
    from portal.workloads.states import FINISHED

    try:
        active = list(
            Workload.objects.exclude(state__in=FINISHED)
            .filter(array_parent__isnull=True)
            .order_by("submitted_at")
            .values_list("pk", "name", "kind", "state", "owner__username")[: limit + 1]
        )
    except Exception:  # the database may be gone first
        return ""
    if not active:
        return "Stopped. No work was running or waiting.\n"
    lines = ["Stopped the portal and its worker. This work keeps running (or waiting) and resumes with the next start:"]
    for pk, name, kind, state, owner in active[:limit]:
        lines.append(f"  {pk}  {kind:<9} {state:<11} {owner}/{name}")
    if len(active) > limit:
        lines.append("  ... and more (My workloads lists them all)")
    lines.append(
        "Stop one with `gridlane cancel ID` or its Cancel button; running local jobs end at their runtime limit."
    )
    return "\n".join(lines) + "\n"


def child_env(environ: Mapping[str, str], host: str, port: int) -> dict[str, str]:
    """The children's environment: this one, with `GRIDLANE_PUBLIC_URL` set to the address served unless it
    is set already (IT's choice wins). A wildcard host is reached on loopback."""
    env = dict(environ)
    if not env.get("GRIDLANE_PUBLIC_URL", "").strip():
        reachable = "127.0.0.1" if host in {"0.0.0.0", "", "::"} else host  # noqa: S104 (a name, not a bind)
        if ":" in reachable:
            reachable = f"[{reachable}]"
        env["GRIDLANE_PUBLIC_URL"] = f"http://{reachable}:{port}"
    return env


def stop_group(child: subprocess.Popen[bytes]) -> None:
    """Wait for a child that was asked to stop, then end whatever is left of its process group (its own
    children that outlived it), politely first. The group's id is the child's pid (start_new_session)."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        child.wait(timeout=LEADER_GRACE_S)
    for signum, grace in ((signal.SIGTERM, GROUP_GRACE_S), (signal.SIGKILL, GROUP_GRACE_S)):
        if not _group_alive(child.pid):
            break
        try:
            os.killpg(child.pid, signum)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + grace
        while _group_alive(child.pid) and time.monotonic() < deadline:
            child.poll()  # reap the leader, if it is the one left
            time.sleep(0.1)
    child.poll()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover (a group member we may not signal still exists)
        return True
    return True
