"""The whole policy as one YAML document: read from the database, written with comments for units, read back.

Sections come in the order apply needs them (fabrics, teams, queues, targets, quotas, tiers, profiles, burst
pools, instance types), each sorted by key (teams: departments before their teams), each object's fields in its
admin form's order: the same policy always writes the same text. Temporary grants close the document for reading
only (they are asked for and decided on the grants pages).

No secrets: fabric credentials are references by name (a key file's path, a kubeconfig context, a burst pool's
`env:PREFIX`); a fabric settings key that looks like a secret is left out, and apply keeps its live value.

`version` is a digest of the policy the document was written from: apply refuses (409) a document whose version
is no longer the live policy's, so that nobody applies over a change they have not seen.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

import yaml
from django.utils import timezone

from portal.accounts.audit import SECRET_KEY_RE
from portal.policy.changes import digest
from portal.policy.kinds import KINDS, Kind
from portal.queues.models import QuotaGrant

FORMAT = "gridlane/policy-v1"
GRANTS = "grants"
HEADER = """\
# Gridlane policy. Units are in the comments; empty (null) means "none" where a comment says so.
# gridlane policy plan FILE shows what applying it would change; gridlane policy apply FILE applies it, all or nothing.
"""


def live() -> dict[str, list[dict[str, Any]]]:
    """Every policy object by kind, as documents hold them, in document order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for kind in KINDS.values():
        items = [without_secrets(kind, kind.read(obj)) for obj in kind.queryset()]
        out[kind.name] = ordered(kind, items)
    out[GRANTS] = grants()
    return out


def ordered(kind: Kind, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Items by key; teams by depth first (a department before its teams), so that apply can make them in order."""
    if kind.name != "teams":
        return sorted(items, key=kind.key_of)
    parents = {i.get("slug"): i.get("parent") for i in items}

    def depth(slug: Any) -> int:
        seen, n = set(), 0
        while parents.get(slug) is not None and slug not in seen:
            seen.add(slug)
            slug, n = parents[slug], n + 1
        return n

    return sorted(items, key=lambda i: (depth(i.get("slug")), str(i.get("slug"))))


def without_secrets(kind: Kind, values: dict[str, Any]) -> dict[str, Any]:
    settings = values.get("settings")
    if kind.name == "fabrics" and isinstance(settings, dict):
        values["settings"] = {k: v for k, v in settings.items() if not SECRET_KEY_RE.search(str(k))}
    return values


def grants() -> list[dict[str, Any]]:
    """Temporary grants asked for or approved that have not ended, for reading."""
    rows = QuotaGrant.objects.filter(state__in=QuotaGrant.LIVE, ends_at__gt=timezone.now()).select_related(
        "team", "fabric"
    )
    items = [
        {"team": g.team.slug, "fabric": g.fabric.name, "gpus": float(g.gpus), "starts_at": g.starts_at.isoformat(),
         "ends_at": g.ends_at.isoformat(), "state": g.state}
        for g in rows
    ]  # fmt: skip
    return sorted(items, key=lambda g: (g["team"], g["fabric"], g["starts_at"]))


def version(policy: Mapping[str, Any]) -> str:
    return digest(dict(policy))


# --- Writing -------------------------------------------------------------------------------------------------


def write(policy: Mapping[str, list[dict[str, Any]]]) -> str:
    """The document's text: a header, its format and version, then each section."""
    lines = [HEADER.rstrip("\n"), f"format: {FORMAT}", f"version: {version(policy)}  # of the policy it was read from"]
    for name, items in policy.items():
        kind = KINDS.get(name)
        note = "  # for reading: asked for and decided on the grants pages" if kind is None else ""
        lines.append("")
        lines.append(f"{name}:{note}" if items else f"{name}: []{note}")
        for item in items:
            lines.extend(_item(kind, item))
    return "\n".join(lines) + "\n"


def _item(kind: Kind | None, item: Mapping[str, Any]) -> Iterator[str]:
    units = kind.units if kind is not None else {}
    first = True
    for name, value in item.items():
        lead = "  - " if first else "    "
        first = False
        comment = f"  # {units[name]}" if name in units else ""
        yield f"{lead}{name}: {_scalar(value)}{comment}"


PLAIN = re.compile(r"[A-Za-z][A-Za-z0-9_.@/+-]*(?::[A-Za-z0-9_.@/+-]+)*(?: [A-Za-z0-9_.@/+-]+)*")
WORDS = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"}  # what YAML reads as other than text


def _scalar(value: Any) -> str:
    """One value on one line: numbers, booleans and null as YAML writes them; text plain where YAML reads it back
    as the same text, else as a JSON string (which YAML reads as it is); lists and mappings as JSON (flow style)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str) and PLAIN.fullmatch(value) and value.lower() not in WORDS:
        return value
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


# --- Reading -------------------------------------------------------------------------------------------------


class Unreadable(ValueError):
    """A document that is not a policy document, with `{field: [message]}`."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__(errors)
        self.errors = errors


def read(text: str) -> tuple[str | None, dict[str, list[dict[str, Any]]]]:
    """The document's version (None when it names none) and its sections; Unreadable naming what is wrong."""
    try:
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 (a safe loader)
    except yaml.YAMLError as error:
        raise Unreadable({"document": [f"Not YAML: {str(error)[:300]}"]}) from None
    if not isinstance(data, dict):
        raise Unreadable({"document": ["A policy document is a mapping of sections."]})
    allowed = {"format", "version", GRANTS, *KINDS}
    errors = {str(k): [f"Unknown section; a document has: {', '.join(sorted(allowed))}."] for k in data
              if k not in allowed}  # fmt: skip
    if data.get("format", FORMAT) != FORMAT:
        errors["format"] = [f"This reads {FORMAT}."]
    sections: dict[str, list[dict[str, Any]]] = {}
    for name in (*KINDS, GRANTS):
        if name not in data:
            continue
        items = data.get(name) or []
        if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
            errors[name] = ["A section is a list of mappings."]
            continue
        sections[name] = [{str(k): v for k, v in i.items()} for i in items]
    if errors:
        raise Unreadable(errors)
    found = data.get("version")
    return (None if found is None else str(found)), sections
