"""Fixtures of the deployment tests."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection

from tests.deploy.helpers import database_url


@pytest.fixture
def scratch_database() -> Iterator[str]:
    """An empty database of its own on the test server; dropped afterwards."""
    name = f"gl_scratch_{uuid.uuid4().hex[:12]}"
    admin = database_url(connection.settings_dict, name="postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield database_url(connection.settings_dict, name=name)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
