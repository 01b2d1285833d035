"""deploy/systemd/: systemd's own analyzer accepts both units (against a root folder with stand-ins for the
installed programs), and each runs hardened: its own user, a read-only system, restarted when it stops."""

from __future__ import annotations

import configparser
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.deploy.helpers import ROOT

UNITS = sorted((ROOT / "deploy" / "systemd").glob("*.service"))


def unit_root(tmp_path: Path, units: list[Path]) -> Path:
    """A root folder holding the units, systemd's own units, and a stand-in for each program they start."""
    root = tmp_path / "root"
    (root / "etc/systemd/system").mkdir(parents=True)
    shutil.copytree("/usr/lib/systemd/system", root / "usr/lib/systemd/system", symlinks=True)
    for unit in units:
        shutil.copy(unit, root / "etc/systemd/system" / unit.name)
        for line in unit.read_text().splitlines():
            if line.startswith(("ExecStart=", "ExecReload=")):
                program = root / line.split("=", 1)[1].split()[0].lstrip("/")
                program.parent.mkdir(parents=True, exist_ok=True)
                program.write_text("#!/bin/sh\n")
                program.chmod(0o755)
    return root


def verify(root: Path, *names: str) -> subprocess.CompletedProcess[str]:
    paths = [str(root / "etc/systemd/system" / name) for name in names]
    return subprocess.run(["systemd-analyze", "verify", f"--root={root}", *paths], capture_output=True, text=True)


def read(unit: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # systemd's keys are case-sensitive
    parser.read_string(unit.read_text())
    return parser


def test_systemd_accepts_every_unit(tmp_path):
    assert [u.name for u in UNITS] == ["gridlane-connect.service", "gridlane-web.service", "gridlane-worker.service"]
    root = unit_root(tmp_path, UNITS)
    result = verify(root, *(u.name for u in UNITS))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def test_the_analyzer_would_notice_a_broken_unit(tmp_path):
    broken = tmp_path / "gridlane-broken.service"
    broken.write_text(UNITS[0].read_text().replace("ProtectSystem=strict", "ProtectSytem=strict"))
    result = verify(unit_root(tmp_path, [broken]), broken.name)
    assert "Unknown key 'ProtectSytem'" in result.stderr


@pytest.mark.parametrize("unit", UNITS, ids=[u.name for u in UNITS])
def test_each_unit_runs_hardened_as_its_own_user_and_comes_back(unit, tmp_path):
    service = read(unit)["Service"]
    assert (service["User"], service["Group"]) == ("gridlane", "gridlane")
    assert service["ProtectSystem"] == "strict"
    assert service["NoNewPrivileges"] == "yes"
    assert service["PrivateTmp"] == "yes"
    assert service["CapabilityBoundingSet"] == ""
    assert service["Restart"] == "always"
    assert read(unit)["Unit"]["StartLimitIntervalSec"] == "0"  # never gives up restarting
    assert service["EnvironmentFile"] == "/etc/gridlane/gridlane.env"  # deploy/gridlane.env, filled in
    # systemd's own exposure score (0 safest, 10 least): both well inside "OK".
    root = unit_root(tmp_path, [unit])
    installed = root / "etc/systemd/system" / unit.name
    result = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", f"--root={root}", str(installed)],
        capture_output=True,
        text=True,
    )
    score = float(result.stdout.rsplit("Overall exposure level for", 1)[1].split(":")[1].split()[0])
    assert score < 4.0, result.stdout[-500:]
