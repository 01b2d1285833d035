"""The dry run's answer as the API schema shows it (portal.worker.dryrun makes it)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers


class CostOut(serializers.Serializer[Any]):
    amount = serializers.CharField(help_text="The runtime limit at the target's prices, as a decimal string.")
    currency = serializers.CharField(help_text="The site's currency (GRIDLANE_CURRENCY); empty: not named.")


class DryRunOut(serializers.Serializer[Any]):
    outcome = serializers.ChoiceField(["admit", "wait"], help_text="admit: it would start now; wait: it would wait.")
    target = serializers.CharField(allow_null=True, help_text="The fabric it would start on (or wait for first).")
    estimated_start = serializers.DateTimeField(allow_null=True)
    estimate_band = serializers.ListField(
        child=serializers.DateTimeField(), allow_null=True, help_text="[earliest, latest] around the estimate."
    )
    position = serializers.IntegerField(allow_null=True, help_text="Its place among its queue's waiting work.")
    reason_code = serializers.CharField(help_text="The scheduler's reason code while it would wait; else empty.")
    reason = serializers.CharField(help_text="Why, in words.")
    borrowing = serializers.BooleanField(help_text="It would run beyond its team's reservation on the target.")
    preemptible = serializers.BooleanField(help_text="Borrowing in a queue whose borrowed work may be preempted.")
    estimated_cost = CostOut(allow_null=True)
    snapshot_at = serializers.DateTimeField(help_text="When the state it was decided on was read.")


class BulkDryRunOut(serializers.Serializer[Any]):
    items = DryRunOut(many=True)


def rendered(answer: dict[str, Any]) -> dict[str, Any]:
    """One answer as DryRunOut shows it, through one serializer bound once per process: instantiating a serializer
    deep-copies its declared fields, which was a tenth of a dry run's time at hundreds a second. Its fields keep
    no state between calls (output only), so the one instance serves every thread."""
    return _ONE.to_representation(answer)


_ONE = DryRunOut()
_ONE.fields  # noqa: B018 (bound now, at import: never raced by two threads' first answers)
