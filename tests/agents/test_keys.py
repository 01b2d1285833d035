"""A lease's line in authorized_keys: expiry-time and from options, and removal of only its own line."""

from __future__ import annotations

from datetime import UTC, datetime

from fabrics.agent import keys

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyBodyForTests user@laptop"
END = datetime(2026, 12, 1, 8, 30, 5, tzinfo=UTC)


def test_the_line_carries_expiry_and_from_and_names_its_lease():
    line = keys.line(KEY, "run-1", END, "10.0.0.0/8")
    assert line == (
        'expiry-time="20261201083005Z",from="10.0.0.0/8" ssh-ed25519 '
        "AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyBodyForTests gridlane-lease-run-1"
    )


def test_revoking_one_lease_keeps_the_others_and_the_owners_own_keys(tmp_path):
    path = tmp_path / ".ssh" / "authorized_keys"
    path.parent.mkdir()
    path.write_text("ssh-ed25519 AAAAownerskey owner\n")
    keys.grant(path, KEY, "run-1", END)
    keys.grant(path, KEY, "run-2", END)
    keys.grant(path, KEY, "run-1", END.replace(hour=9))  # an extension replaces the line
    assert path.read_text().count("gridlane-lease-run-1") == 1
    assert "20261201093005Z" in path.read_text()
    keys.revoke(path, "run-1")
    assert path.read_text().splitlines() == [
        "ssh-ed25519 AAAAownerskey owner",
        keys.line(KEY, "run-2", END),
    ]
    assert oct(path.stat().st_mode & 0o777) == "0o600"
