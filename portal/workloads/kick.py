"""The seam between the workloads layer and the worker: asking the worker to admit and dispatch (and sync) once
the current transaction commits.

The workloads layer owns this seam and imports nothing from the worker; the worker registers its sender when
its app is ready (portal.worker.apps: portal.worker.wake). With no sender registered (a process without the
worker app), or with GRIDLANE_KICK_WORKER off, a kick does nothing and new work waits for the periodic cycle.

A statement that records work may send its kick itself (`in_statement`): on PostgreSQL a kick is a NOTIFY on
the sender's channel, delivered when the transaction commits, so the kick costs no round trip of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

# What a kick asks for, sent as its payload: EVERYTHING is all a kick does (admit, dispatch, and bring status
# in: a cancel stops the job on its fabric there); ADMIT only admit and dispatch (a submit: new work, no status
# to fetch).
EVERYTHING = ""
ADMIT = "admit"


@dataclass(frozen=True)
class Sender:
    """How the worker is asked: `send(need)` once the current transaction commits; `channel`, where a
    statement may NOTIFY the worker itself (PostgreSQL), or None."""

    send: Callable[[str], None]
    channel: str | None = None


_sender: Sender | None = None


def register(sender: Sender | None) -> None:
    """Set (None: take away) the one sender kicks go to."""
    global _sender
    _sender = sender


def kick(need: str = EVERYTHING) -> None:
    """Ask the worker for `need` once the current transaction commits (nothing when kicks are off)."""
    if settings.GRIDLANE_KICK_WORKER and _sender is not None:
        _sender.send(need)


def in_statement(need: str = EVERYTHING) -> list[str] | None:
    """The channel and payload for a `pg_notify(%s, %s)` a statement sends itself, or None when it sends no
    kick (kicks off, no sender, or a sender with no channel)."""
    if not settings.GRIDLANE_KICK_WORKER or _sender is None or _sender.channel is None:
        return None
    return [_sender.channel, need]
