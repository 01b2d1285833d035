"""A PostgreSQL server of the test's own (its own data directory and port), from the installed binaries, so
that a test can stop and restart it under load without touching the shared one."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg

from tests.deploy.helpers import free_port, wait_for


def bindir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    assert found, "PostgreSQL's server binaries are missing (tests/services/postgres/up.sh installs them)"
    return Path(found[-1]).parent


class Server:
    def __init__(self, root: Path, port: int) -> None:
        self.root, self.port = root, port
        self.data, self.log = root / "data", root / "server.log"

    def _run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        # PostgreSQL will not run as root; as root, it runs as the postgres account that owns the folder.
        user = "postgres" if os.geteuid() == 0 else None
        return subprocess.run(argv, check=check, capture_output=True, text=True, user=user, timeout=120)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(str(bindir() / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "-o", options,
                  "start")  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        self._run(str(bindir() / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

    def ready(self) -> bool:
        try:
            with psycopg.connect(self.url("postgres"), connect_timeout=2):
                return True
        except psycopg.OperationalError:
            return False

    def url(self, name: str = "gridlane") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{name}"

    def create_database(self, name: str = "gridlane") -> str:
        with psycopg.connect(self.url("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


@contextmanager
def private_postgres() -> Iterator[Server]:
    root = Path(tempfile.mkdtemp(prefix="gridlane-pg-", dir="/tmp"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
    server = Server(root, free_port())
    try:
        server._run(str(bindir() / "initdb"), "-D", str(server.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        server.start()
        wait_for(server.ready, "the private PostgreSQL server")
        yield server
    finally:
        server.stop("immediate")
        shutil.rmtree(root, ignore_errors=True)


def psql(url: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return list(conn.execute(sql, params))
