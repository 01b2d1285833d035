"""The django-q2 task behind a what-if: load the run by id and replay it (services.do_replay)."""

from __future__ import annotations

from portal.whatif import services


def replay(run_id: int) -> None:
    services.do_replay(run_id)
