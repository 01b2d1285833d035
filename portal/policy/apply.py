"""Plan and apply a policy document: what differs from the live policy, then each difference made through the
same check_save/do_save as the admin API (so through the admin's forms), in one transaction, or nothing.

Rules:
- Each section is the whole of its kind: an object it does not hold is deleted, one it holds is made or changed;
  a section the document leaves out is not touched.
  A field an object leaves out keeps its live value (a new object's, the model's default).
- Kinds are made and changed in document order and deleted in reverse; a department's quota grows before its
  teams' and shrinks after them, so that each step fits in the one above.
- Every live policy row is locked for the transaction (an admin edit waits for it); a document that would change
  anything and whose version is no longer the live policy's is refused whole (409). (One that changes nothing is
  not: the document just applied, with the version it was exported with, applies again as no change.)
- Any refusal anywhere undoes everything; the refusals are named `section[key].field`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, transaction

from portal.accounts.audit import SECRET_KEY_RE
from portal.policy import changes, document
from portal.policy.kinds import KINDS, Kind


@dataclass
class Change:
    kind: str
    key: str
    action: str  # "create", "change" or "delete"
    fields: dict[str, Any] = field(default_factory=dict)  # field -> [live, wanted] (create: wanted; delete: live)

    def shown(self) -> dict[str, Any]:
        return {"kind": self.kind, "key": self.key, "action": self.action, "fields": self.fields}


class _Undo(Exception):
    """Raised inside the transaction to roll a plan back (or an apply that was refused)."""


def diff(wanted: dict[str, list[dict[str, Any]]], current: dict[str, list[dict[str, Any]]]) -> list[Change]:
    """What applying `wanted` over `current` changes, in the order apply makes the changes."""
    made: list[Change] = []
    gone: list[Change] = []
    for kind in KINDS.values():
        if kind.name not in wanted:
            continue  # a section the document leaves out is not managed by it
        have = {kind.key_of(i): i for i in current.get(kind.name, [])}
        want = {kind.key_of(i): i for i in wanted.get(kind.name, [])}
        for item in wanted.get(kind.name, []):
            key = kind.key_of(item)
            if key not in have:
                made.append(Change(kind.name, key, "create", dict(item)))
                continue
            different = {k: [have[key].get(k), v] for k, v in item.items() if k in have[key] and have[key][k] != v}
            different |= {k: [None, v] for k, v in item.items() if k not in have[key]}  # unknown: refused later
            if different:
                made.append(Change(kind.name, key, "change", different))
        gone = [Change(kind.name, k, "delete", dict(i)) for k, i in have.items() if k not in want] + gone
    return _quota_order(made) + gone


def _quota_order(made: list[Change]) -> list[Change]:
    """Quotas that grow, departments first; then those that shrink, teams first (others keep their place)."""
    quotas = [c for c in made if c.kind == "quotas"]
    if not quotas:
        return made
    depth = {t.slug: (1 if t.parent_id else 0) for t in KINDS["teams"].queryset()}

    def order(c: Change) -> tuple[int, int]:
        grows = c.action == "create" or _more(c.fields.get("gpu_reservation"))
        level = depth.get(c.key.partition(".")[0], 1)
        return (0, level) if grows else (1, -level)

    at = made.index(quotas[0])
    rest = [c for c in made if c.kind != "quotas"]
    return rest[:at] + sorted(quotas, key=order) + rest[at:]


def _more(pair: Any) -> bool:
    if not isinstance(pair, list):
        return False
    before, after = pair
    return isinstance(before, int | float) and isinstance(after, int | float) and after > before


def _lock_everything() -> None:
    for kind in KINDS.values():
        list(kind.model._default_manager.order_by().select_for_update().values_list("pk", flat=True))


def run(text: str, commit: bool, observe: Callable[[], Any] | None = None) -> tuple[dict[str, Any], Any]:
    """Plan (commit=False: made, then undone) or apply a document. The report: the live version before, the
    changes, and the version after; and what `observe()` returned, called with the changes made (e.g. the site
    as the what-if engine reads it), before they are undone or committed. Raises changes.Refused (400, naming
    each refusal; 409, a stale version) or document.Unreadable."""
    base, wanted = document.read(text)
    report: dict[str, Any] = {}
    observed = None
    try:
        with transaction.atomic():
            _lock_everything()
            current = document.live()
            report["version"] = document.version(current)
            found = diff(wanted, current)
            if found and base is not None and base != report["version"]:
                raise changes.Stale({"version": [
                    f"The live policy changed since this document was read (version {base}; now "
                    f"{report['version']}): export it again and redo the change there."]})  # fmt: skip
            errors: dict[str, list[str]] = {}
            if document.GRANTS in wanted and wanted[document.GRANTS] != current[document.GRANTS]:
                errors[document.GRANTS] = ["Temporary grants are asked for and decided on the grants pages."]
            for change in found:
                for name, messages in _make(change, wanted).items():
                    errors[f"{change.kind}[{change.key}].{name}"] = messages
            if errors:
                raise changes.Refused(errors)
            report["changes"] = [c.shown() for c in found]
            report["after"] = document.version(document.live()) if found else report["version"]
            observed = observe() if observe is not None else None
            if not commit:
                raise _Undo
    except _Undo:
        pass
    return report, observed


def _make(change: Change, wanted: dict[str, list[dict[str, Any]]]) -> dict[str, list[str]]:
    """Make one change (in a savepoint, so that a database refusal leaves the rest to check); its errors."""
    kind = KINDS[change.kind]
    try:
        with transaction.atomic():
            obj = kind.get(change.key)
            if change.action == "delete":
                changes.check_delete(kind, obj)
                changes.do_delete(kind, obj)
                return {}
            values = next(i for i in wanted[kind.name] if kind.key_of(i) == change.key)
            values = _keep_secrets(kind, values, obj)
            changes.do_save(changes.check_save(kind, values, obj, partial=obj is not None))
    except changes.Refused as error:
        return error.errors
    except IntegrityError as error:
        return {"detail": [str(error).splitlines()[0][:300]]}
    return {}


def _keep_secrets(kind: Kind, values: dict[str, Any], obj: Any) -> dict[str, Any]:
    """A fabric's settings keys that look secret are never exported: keep the live ones."""
    if kind.name != "fabrics" or obj is None or not isinstance(values.get("settings"), dict):
        return values
    kept = {k: v for k, v in (obj.settings or {}).items() if SECRET_KEY_RE.search(str(k))}
    return {**values, "settings": {**values["settings"], **kept}}
