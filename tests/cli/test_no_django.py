"""The CLI and the agent run on hosts without Django: importing them must not pull it in."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_cli_and_the_agent_import_without_django():
    probe = (
        "import sys, gridlane_cli.main, fabrics.agent.agent, fabrics.agent.runner;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'portal', 'rest_framework')))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"
