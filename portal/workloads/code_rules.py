"""The seam between a submit's checks and portal.code, the layer above that owns the rules for code that travels
with a command (a bundle's digest, a git reference, a requirements file, and that the team uploaded the bundle).

The workloads layer owns this seam and imports nothing from portal.code; portal.code registers its rules when its
app is ready (portal.code.apps). It fails closed: with no rules registered, a submit that names code or
requirements is refused on those fields, never let through unchecked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from portal.accounts.models import ResourceGroup

UNAVAILABLE = "Code that travels with a command is not available on this portal."


class Rules(Protocol):
    def check(self, code: Any, requirements: str, errors: dict[str, list[str]]) -> dict[str, str]: ...

    def check_owned(self, code: Mapping[str, str], group: ResourceGroup, errors: dict[str, list[str]]) -> None: ...


_rules: Rules | None = None


def register(rules: Rules | None) -> None:
    """Set (None: take away) the rules a submit's code is checked by."""
    global _rules
    _rules = rules


def check(code: Any, requirements: str, errors: dict[str, list[str]]) -> dict[str, str]:
    """The code reference as kept on the workload ({} for none), adding what is wrong to errors."""
    if _rules is None:
        if code not in (None, {}):
            errors.setdefault("code", []).append(UNAVAILABLE)
        if requirements:
            errors.setdefault("requirements", []).append(UNAVAILABLE)
        return {}
    return _rules.check(code, requirements, errors)


def check_owned(code: Mapping[str, str], group: ResourceGroup, errors: dict[str, list[str]]) -> None:
    """A bundle the workload's team has uploaded; one it has not is refused (nothing to check without rules:
    check refused the code already)."""
    if _rules is not None:
        _rules.check_owned(code, group, errors)
