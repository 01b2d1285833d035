"""manage.py backup: a consistent copy of the database, taken while Gridlane runs.

PostgreSQL: `pg_dump --format=custom` (restore with pg_restore, below). The embedded SQLite mode: SQLite's
online backup API, page by page, so a copy taken while the web and the worker write is still consistent.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

RESTORE_POSTGRES = """Restore (PostgreSQL), with the web processes and the worker stopped:
  createdb -O gridlane gridlane_restored
  pg_restore --no-owner --role=gridlane --dbname=gridlane_restored {path}
then point DATABASE_URL at gridlane_restored (or drop the old database and rename), run
`manage.py migrate` (a backup from an older release is brought up to date) and start the units again."""

RESTORE_SQLITE = """Restore (embedded SQLite), with `make run` (or the web and the worker) stopped:
  cp {path} {database}
then start it again; `manage.py migrate` brings a backup from an older release up to date."""


class Command(BaseCommand):
    help = "Back up the database while Gridlane runs (pg_dump custom format, or SQLite's online backup)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--output", "-o", help="Where to write it (default: GRIDLANE_VAR_DIR/backups/<time>).")

    def handle(self, *args: Any, **options: Any) -> None:
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        vendor = connection.vendor
        suffix = ".dump" if vendor == "postgresql" else ".sqlite3"
        path = Path(options["output"] or Path(settings.VAR_DIR) / "backups" / f"gridlane-{stamp}{suffix}")
        path.parent.mkdir(parents=True, exist_ok=True)
        if vendor == "postgresql":
            self._postgres(path)
            guidance = RESTORE_POSTGRES.format(path=path)
        elif vendor == "sqlite":
            self._sqlite(path)
            guidance = RESTORE_SQLITE.format(path=path, database=settings.DATABASES["default"]["NAME"])
        else:
            raise CommandError(f"no backup for a {vendor} database")
        path.chmod(0o600)  # it holds everything, token hashes included
        self.stdout.write(f"Backed up to {path} ({path.stat().st_size} bytes).\n{guidance}")
        self.stdout.write(str(path))

    def _postgres(self, path: Path) -> None:
        pg_dump = shutil.which("pg_dump")
        if pg_dump is None:
            raise CommandError("pg_dump is not installed (Debian: apt-get install postgresql-client)")
        db = settings.DATABASES["default"]
        argv = [pg_dump, "--format=custom", f"--file={path}", f"--dbname={db['NAME']}"]
        for flag, value in (("--host", db.get("HOST")), ("--port", db.get("PORT")), ("--username", db.get("USER"))):
            if value:
                argv.append(f"{flag}={value}")
        env = os.environ | ({"PGPASSWORD": str(db["PASSWORD"])} if db.get("PASSWORD") else {})
        result = subprocess.run(argv, env=env, capture_output=True, text=True)  # noqa: S603 (an argv list)
        if result.returncode != 0:
            raise CommandError(f"pg_dump failed: {result.stderr.strip()}")

    def _sqlite(self, path: Path) -> None:
        source = sqlite3.connect(str(settings.DATABASES["default"]["NAME"]))
        target = sqlite3.connect(str(path))
        try:
            with target:
                source.backup(target)
        finally:
            target.close()
            source.close()
