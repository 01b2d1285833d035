"""deploy/gridlane.env, the environment file both systemd units and the Kubernetes manifests read, names
exactly the variables the reference (docs/reference.md) documents: none missing for IT, none undocumented."""

from __future__ import annotations

import re

from tests.deploy.helpers import ROOT

VARIABLE = re.compile(r"\b(?:GRIDLANE_[A-Z0-9_]+|DATABASE_URL)\b")
# The reference also names variables that are not the server's: the command line's and the jobs' own.
NOT_THE_SERVERS = {"GRIDLANE_JOB_DIR", "GRIDLANE_WORKLOAD_ID", "GRIDLANE_URL", "GRIDLANE_TOKEN",
                   "GRIDLANE_ENDPOINT_URL", "GRIDLANE_ENDPOINT_SECRET", "GRIDLANE_CONNECT_PREFIX",
                   "GRIDLANE_CACHE", "GRIDLANE_ARRAY_INDEX", "GRIDLANE_ARRAY_ID"}  # fmt: skip


def in_reference() -> set[str]:
    return set(VARIABLE.findall((ROOT / "docs" / "reference.md").read_text())) - NOT_THE_SERVERS


def in_template() -> set[str]:
    names = set()
    for line in (ROOT / "deploy" / "gridlane.env").read_text().splitlines():
        if match := re.fullmatch(r"#?((?:GRIDLANE_[A-Z0-9_]+|DATABASE_URL))=.*", line.strip()):
            names.add(match[1])
    return names


def test_the_environment_file_names_every_variable_the_reference_documents_and_no_other():
    assert in_reference() - in_template() == set(), "document these in deploy/gridlane.env"
    assert in_template() - in_reference() == set(), "document these in docs/reference.md"
    assert len(in_template()) > 40


def test_the_environment_file_requires_what_production_cannot_do_without():
    required = {
        line.split("=", 1)[0]
        for line in (ROOT / "deploy" / "gridlane.env").read_text().splitlines()
        if line and not line.startswith("#")
    }
    assert {"DATABASE_URL", "GRIDLANE_SECRET_KEY", "GRIDLANE_ALLOWED_HOSTS", "GRIDLANE_TRUSTED_PROXIES"} <= required
    assert "GRIDLANE_DEMO" not in required
