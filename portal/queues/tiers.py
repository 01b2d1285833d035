"""Which priority tiers a team may use, read where the submit path reads the team (no statement of its own),
and what a tier asks of the fabrics (fabrics.base.TierHints)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import Aggregate, CharField, Exists, OuterRef, Q, QuerySet, Subquery, TextField, Value
from django.db.models.functions import Cast, Concat

from fabrics.base import TierHints
from portal import sql
from portal.queues.models import PriorityTier

COLUMN = "usable_tiers"
# The three tiers every site starts with (made by migration queues 0015, and by seed_demo where they are missing):
# slug, name, weight, team leads only, order.
STARTING_TIERS = (("low", "Low", 0.0, False, 10), ("normal", "Normal", 1.0, False, 20), ("high", "High", 2.0, True, 30))


@dataclass(frozen=True)
class Usable:
    """A tier a team may use; `leads_only`: only its leads (and IT) may."""

    slug: str
    leads_only: bool = False


class _Joined(Aggregate):
    """Text values joined by spaces: STRING_AGG on PostgreSQL, GROUP_CONCAT on SQLite."""

    function = "STRING_AGG"
    template = "%(function)s(%(expressions)s, ' ')"
    output_field = TextField()

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        return super().as_sql(compiler, connection, function="GROUP_CONCAT", **extra)


def usable_by(group_ref: Any) -> QuerySet[PriorityTier]:
    """The tiers open to every team or to the team `group_ref` (an id, or an OuterRef to one)."""
    allowed = PriorityTier.allowed_groups.through.objects.filter(
        prioritytier_id=OuterRef("pk"), resourcegroup_id=group_ref
    )
    return PriorityTier.objects.filter(Q(open_to_all=True) | Exists(allowed))


def columns(group_ref: str) -> dict[str, Subquery]:
    """A column to annotate a team's rows with (group_ref: the team's id in that query): the tiers it may use,
    as "order:slug:lead|any" items joined by spaces (read back by of_team)."""
    item = Concat(
        Cast("order", CharField()), Value(":"), "slug", Value(":"), Cast("leads_only", CharField()),
        output_field=CharField(),
    )  # fmt: skip
    joined = usable_by(OuterRef(OuterRef(group_ref))).order_by().annotate(one=Value(1)).values("one")
    return {COLUMN: Subquery(joined.annotate(items=_Joined(item)).values("items")[:1])}


def of_team(team: Any) -> list[Usable]:
    """The tiers a team may use, in IT's order, from the column columns() annotated it with."""
    found = []
    for item in (getattr(team, COLUMN, None) or "").split():
        order, slug, lead = item.split(":")
        found.append((int(order), slug, Usable(slug, lead.lower() in ("1", "true", "t"))))
    return [usable for _, _, usable in sorted(found, key=lambda f: (f[0], f[1]))]


def for_team(group_id: int) -> list[Usable]:
    """The tiers a team may use, in IT's order (a query of its own)."""
    return [Usable(slug, leads) for slug, leads in usable_by(group_id).values_list("slug", "leads_only")]


def check(tier: str, usable: Iterable[Usable], team: str, may_lead: bool) -> str:
    """Why `tier` may not be used for this team's work ("" when it may); `may_lead`: the user leads the team, or
    is IT. The message names the tiers the user may choose."""
    usable = list(usable)
    found = next((u for u in usable if u.slug == tier), None)
    choices = ", ".join(u.slug for u in usable if may_lead or not u.leads_only) or "none"
    if found is None:
        return f"Choose a priority tier team {team} may use: {choices}."
    if found.leads_only and not may_lead:
        return f"Only a team lead or IT may use the tier {tier}; choose one of: {choices}."
    return ""


def hints(tier: PriorityTier) -> TierHints:
    """What the tier asks of fabrics with priorities of their own."""
    return TierHints(
        slug=tier.slug,
        slurm_qos=tier.slurm_qos,
        slurm_nice=tier.slurm_nice,
        pbs_priority=tier.pbs_priority,
        kubernetes_priority_class=tier.kubernetes_priority_class,
    )


def hints_of(slugs: Iterable[str]) -> dict[str, TierHints]:
    """The hints of these tiers, by slug (one query, of every tier: a site has a handful, and the query is then
    compiled once); a tier that no longer exists asks nothing."""
    wanted = set(slugs)
    return {t.slug: hints(t) for t in _TIERS.run("all", PriorityTier.objects.all) if t.slug in wanted}


_TIERS = sql.Compiled(PriorityTier)


def moving(old: TierHints, new: TierHints) -> TierHints:
    """What to tell a fabric when queued work moves from tier `old` to `new`: the new tier's values, with a nice
    or a PBS priority the old one set and the new one does not taken back to the default (0). (A QOS has no
    such default to go back to: the job keeps the one it has.)"""
    nice = new.slurm_nice if new.slurm_nice is not None else (0 if old.slurm_nice else None)
    pbs = new.pbs_priority if new.pbs_priority is not None else (0 if old.pbs_priority else None)
    return TierHints(new.slug, new.slurm_qos, nice, pbs, new.kubernetes_priority_class)


def ensure_starting_tiers() -> None:
    """Create whichever of the three starting tiers is missing (open to every team); the others stay as they are."""
    for slug, name, weight, leads_only, order in STARTING_TIERS:
        PriorityTier.objects.get_or_create(
            slug=slug,
            defaults={"name": name, "weight": weight, "leads_only": leads_only, "order": order, "open_to_all": True},
        )
