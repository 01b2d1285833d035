"""Upgrades and backups, as the README's production section tells IT to run them: an upgrade from the previous
release's migrations with live data keeps it all; `manage.py backup` makes a copy that restores, on PostgreSQL
(pg_dump's custom format) and in the embedded SQLite mode (SQLite's online backup)."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys

import psycopg
import pytest
from django.core.management import call_command

from portal.workloads.models import Workload
from tests.deploy.helpers import ROOT, manage, production_env


def step(env, function: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", f"from tests.deploy import upgrade; upgrade.{function}()"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_an_upgrade_from_the_previous_release_keeps_live_data(scratch_database, tmp_path):
    env = production_env(scratch_database, tmp_path)
    made = step(env, "at_release")
    assert set(made) == {"pending", "running", "succeeded"}

    # The README's procedure: the worker stopped (drained), then migrate, then everything started again.
    result = manage(env, "migrate", "--no-input")
    assert result.returncode == 0, result.stderr
    found = step(env, "after_upgrade")
    assert found["token_user"] == "alice"  # a token issued before the upgrade still signs in
    assert found["workloads"] == {
        "job-pending": ["pending", "vision", "train", 1000, 1],
        "job-running": ["running", "vision", "train", 1000, 2],
        "job-succeeded": ["succeeded", "vision", "train", 1000, 2],
    }
    assert found["samples"] == 1
    assert found["audit"] == ["alice"]


@pytest.mark.django_db(transaction=True)
def test_a_postgres_backup_restores_into_an_empty_database(alice, submit, tmp_path, scratch_database):
    for i in range(3):
        submit(alice, name=f"kept-{i}")
    out = tmp_path / "gridlane.dump"
    call_command("backup", output=str(out), stdout=open(tmp_path / "out.txt", "w"))  # noqa: SIM115
    assert out.read_bytes()[:5] == b"PGDMP"  # pg_dump's custom format
    assert oct(out.stat().st_mode & 0o777) == "0o600"
    guidance = (tmp_path / "out.txt").read_text()
    assert "pg_restore --no-owner" in guidance

    pg_restore = shutil.which("pg_restore")
    assert pg_restore is not None
    subprocess.run([pg_restore, "--no-owner", f"--dbname={scratch_database}", str(out)], check=True, timeout=300)
    with psycopg.connect(scratch_database) as conn:
        names = sorted(r[0] for r in conn.execute("SELECT name FROM workloads_workload"))
    assert names == sorted(Workload.objects.values_list("name", flat=True))
    assert names == ["kept-0", "kept-1", "kept-2"]


def test_an_embedded_sqlite_backup_is_a_working_copy(tmp_path):
    database = tmp_path / "gridlane.sqlite3"
    env = production_env(f"sqlite:///{database}", tmp_path, GRIDLANE_DEMO="1")
    for argv in (["migrate", "--no-input"], ["seed_demo"], ["backup", "--output", str(tmp_path / "copy.sqlite3")]):
        result = manage(env, *argv)
        assert result.returncode == 0, result.stderr
    assert "cp " in result.stdout  # how to put it back
    with sqlite3.connect(tmp_path / "copy.sqlite3") as copy:
        assert copy.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        users = sorted(r[0] for r in copy.execute("SELECT username FROM auth_user"))
    assert users == ["alice", "bob", "charlie", "it"]
