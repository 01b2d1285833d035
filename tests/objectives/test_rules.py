"""The Prometheus alert rules shipped in deploy/prometheus/: they parse (promtool, Debian's, which the test
Prometheus brings: tests/services/prometheus/up.sh), their unit tests pass, and every metric they name is one
that GET /metrics exports."""

from __future__ import annotations

import re
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import yaml

from portal.objectives import evaluate
from portal.objectives.models import WaitObjective
from portal.queues.models import Queue

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
PROMTOOL = "/usr/bin/promtool"
NAME = re.compile(r"\b(gridlane_[a-z0-9_]+)\b")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PROMTOOL, *args], cwd=RULES, capture_output=True, text=True, timeout=60, check=False)


def test_promtool_checks_the_rules_and_their_unit_tests_pass():
    checked = run("check", "rules", "gridlane-rules.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS" in checked.stdout
    tested = run("test", "rules", "gridlane-rules.test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_every_metric_the_rules_name_is_exported(client, cast):
    WaitObjective.objects.create(
        slug="train-p95", name="Training starts", kind="queue", queue=Queue.objects.get(slug="train")
    )
    evaluate.step(datetime.now(UTC))  # an evaluated objective: its gauges are exported
    exported = client.get("/metrics").content.decode()
    names = set(re.findall(r"^# TYPE (\S+) ", exported, flags=re.MULTILINE))
    rules = yaml.safe_load((RULES / "gridlane-rules.yml").read_text())
    used = {name for group in rules["groups"] for rule in group["rules"] for name in NAME.findall(rule["expr"])}
    assert {"gridlane_wait_objective_burn_rate", "gridlane_wait_objective_burn_threshold"} <= used
    assert used - names == set()
    assert 'gridlane_wait_objective_burn_rate{objective="train-p95",window="fast_long"}' in exported
