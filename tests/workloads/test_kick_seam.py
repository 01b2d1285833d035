"""The workloads layer asks the worker through its own seam (portal.workloads.kick), which the worker fills."""

from __future__ import annotations

import pytest

from portal.worker import wake
from portal.workloads import kick


@pytest.fixture
def sender():
    """The sender the worker registered at app ready, put back after the test."""
    registered = kick._sender
    yield registered
    kick.register(registered)


def test_the_worker_registers_its_sender_when_its_app_is_ready(sender, settings):
    settings.GRIDLANE_KICK_WORKER = True
    assert sender == kick.Sender(wake.kick, wake.CHANNEL)
    assert kick.in_statement(kick.ADMIT) == [wake.CHANNEL, wake.ADMIT]
    settings.GRIDLANE_KICK_WORKER = False
    assert kick.in_statement(kick.ADMIT) is None


def test_a_kick_goes_to_the_registered_sender_only_while_kicks_are_on(sender, settings):
    asked: list[str] = []
    kick.register(kick.Sender(asked.append))
    settings.GRIDLANE_KICK_WORKER = True
    kick.kick(kick.ADMIT)
    kick.kick()
    assert kick.in_statement() is None  # a sender with no channel: a statement sends no kick of its own
    settings.GRIDLANE_KICK_WORKER = False
    kick.kick()
    assert asked == [kick.ADMIT, kick.EVERYTHING]


def test_with_no_sender_a_kick_does_nothing(sender, settings):
    settings.GRIDLANE_KICK_WORKER = True
    kick.register(None)
    kick.kick()
    assert kick.in_statement() is None
