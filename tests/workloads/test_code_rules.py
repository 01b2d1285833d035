"""The seam a submit's code is checked through (portal.workloads.code_rules): portal.code's rules once its app is
ready, and a refusal on the fields, never a pass, where none are registered."""

from __future__ import annotations

from portal.code import services as code_services
from portal.workloads import code_rules


def test_portal_code_registers_its_rules_when_ready():
    assert code_rules._rules is code_services


def test_with_no_rules_code_and_requirements_are_refused_on_their_fields():
    try:
        code_rules.register(None)
        errors: dict[str, list[str]] = {}
        assert code_rules.check({"digest": "0" * 64}, "numpy\n", errors) == {}
        assert errors == {"code": [code_rules.UNAVAILABLE], "requirements": [code_rules.UNAVAILABLE]}
        quiet: dict[str, list[str]] = {}
        assert code_rules.check(None, "", quiet) == {}
        assert quiet == {}
    finally:
        code_rules.register(code_services)
