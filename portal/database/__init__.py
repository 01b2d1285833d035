"""Gridlane's PostgreSQL backend: Django's own, with a health check that costs no round trip (see base.py).
Settings name it (ENGINE "portal.database") wherever DATABASE_URL is a PostgreSQL one."""
