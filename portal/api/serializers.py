"""API shapes. Input serializers parse types only; every rule lives in the workload services."""

from __future__ import annotations

import copy
import json
import threading
import weakref
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, ClassVar, TypeVar, cast

from django.db.models import Count, Model
from django.db.models.manager import BaseManager
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.fields import Field, SkipField
from rest_framework.relations import PKOnlyObject

from portal import access
from portal.api import fast_parse
from portal.api.errors import flatten
from portal.known_fields import KnownFieldsOnly
from portal.queues.models import DEFAULT_TIER
from portal.workloads.calibration import band_for
from portal.workloads.models import Workload, WorkloadEvent
from portal.workloads.services import MAX_BULK, SubmitRequest


def _number(value: Decimal) -> int | float:
    return int(value) if value == value.to_integral_value() else float(value)


RESOURCE_DEFAULTS: dict[str, Any] = {
    "gpus": Decimal(0),
    "cpus": Decimal(1),
    "memory_gb": Decimal(4),
    "nodes": 1,
}


def copied(fields: dict[str, Field[Any, Any, Any, Any]]) -> dict[str, Field[Any, Any, Any, Any]]:
    """Copies of unbound fields for one serializer instance to bind. DRF deep-copies each field, which builds it
    again from its arguments; a plain field (no child field, not a serializer) is copied shallowly here instead:
    its settings (validators, choices, messages) are shared and only read, and bind() sets what is the
    instance's own (its name, its parent, its source) on the copy. A serializer, or a field with a child bound to
    it, is deep-copied as DRF does, so that it binds fields of its own."""
    return {
        name: copy.deepcopy(f) if isinstance(f, serializers.BaseSerializer) or _has_child(f) else _clone(f)
        for name, f in fields.items()
    }


def _clone(field: Field[Any, Any, Any, Any]) -> Field[Any, Any, Any, Any]:
    """A shallow copy of a field, as copy.copy makes it (a new instance sharing its attributes), without the
    pickling protocol copy.copy goes through (a fifth of a submit's answer, field by field)."""
    new = object.__new__(type(field))  # Field.__new__ only records the arguments, which the copy shares
    new.__dict__.update(field.__dict__)
    return new


def _has_child(field: Field[Any, Any, Any, Any]) -> bool:
    return hasattr(field, "child") or hasattr(field, "child_relation")


class CopiedFields(serializers.Serializer[Any]):
    """A serializer whose declared fields are copied for each instance as `copied` does (the submit path's)."""

    def get_fields(self) -> dict[str, Field[Any, Any, Any, Any]]:
        return copied(self._declared_fields)


class ResourcesIn(KnownFieldsOnly, CopiedFields):
    gpus = serializers.DecimalField(max_digits=12, decimal_places=3, default=RESOURCE_DEFAULTS["gpus"])
    cpus = serializers.DecimalField(max_digits=12, decimal_places=3, default=RESOURCE_DEFAULTS["cpus"])
    memory_gb = serializers.DecimalField(max_digits=12, decimal_places=3, default=RESOURCE_DEFAULTS["memory_gb"])
    nodes = serializers.IntegerField(default=1, min_value=-(2**31), max_value=2**31)


class WorkloadIn(KnownFieldsOnly, CopiedFields):
    queue = serializers.CharField(max_length=50)
    kind = serializers.CharField(max_length=20, default="training")
    name = serializers.CharField(max_length=200, trim_whitespace=False, allow_blank=True, default="")
    command = serializers.CharField(allow_blank=True, default="", trim_whitespace=False)
    script = serializers.CharField(allow_blank=True, default="", trim_whitespace=False)
    manifest = serializers.CharField(
        allow_blank=True, default="", trim_whitespace=False, help_text="A Kubernetes batch/v1 Job, YAML or JSON."
    )
    image = serializers.CharField(allow_blank=True, allow_null=True, default="", max_length=400)
    resources = ResourcesIn(default=dict)
    runtime_limit_minutes = serializers.IntegerField(
        required=False, allow_null=True, min_value=-(2**31), max_value=2**31
    )
    priority = serializers.CharField(
        default=DEFAULT_TIER, max_length=20, help_text="A priority tier the team may use (IT defines them)."
    )
    lease_hours = serializers.DecimalField(max_digits=9, decimal_places=3, required=False, allow_null=True)
    group = serializers.SlugField(required=False, allow_null=True)
    array = serializers.CharField(
        allow_blank=True, default="", max_length=200, help_text="An array: one element per index, e.g. 0-99%10."
    )
    code = serializers.JSONField(
        required=False, allow_null=True, default=None,
        help_text='Code that travels with the command: {"digest": "<sha256>"} of a bundle the team uploaded '
        '(PUT /api/v1/code/<sha256>/), or {"git": "<https or ssh URL>", "commit": "<40 hex digits>"}.',
    )  # fmt: skip
    requirements = serializers.CharField(
        allow_blank=True, default="", trim_whitespace=False,
        help_text="A requirements file's text (up to 64 KiB): a virtual environment built and cached on the node.",
    )  # fmt: skip
    gpu_type = serializers.CharField(
        allow_blank=True, default="", max_length=40, help_text="A GPU type some target of the queue has (h100...)."
    )

    @classmethod
    def parse(cls, data: Any) -> SubmitRequest:
        """The request `data` validates into: what `WorkloadIn(data=data)` would give, or the ValidationError
        with the errors its is_valid() would leave (the same detail). Validated by an instance kept for each
        thread and used again: a new one copies and binds its sixteen fields and its nested serializer first,
        which was more than half of a submit's parsing (validating reads the fields and writes nothing on them)."""
        parsers = getattr(_KEPT, "parsers", None)
        if parsers is None:
            parsers = _KEPT.parsers = {}
        parser = parsers.get(cls) or parsers.setdefault(cls, cls())
        valid = fast_parse.validated(parser, data)
        if valid is None:
            try:
                valid = parser.run_validation(data)
            except ValidationError:  # told as a new instance tells it (its `errors` words some on its own)
                incoming = cls(data=data)
                incoming.is_valid()
                raise ValidationError(incoming.errors) from None
        return request_of(valid, data.get("resources") if isinstance(data, dict) else None)


_KEPT = threading.local()  # each thread's `parsers`: {serializer class: the instance of it that parses}


def request_of(d: dict[str, Any], raw_resources: Any, **text: str) -> SubmitRequest:
    """A submission from a WorkloadIn's validated data; `raw_resources` is what the caller sent as
    "resources" (the resources they named), `text` overrides the text fields (see BulkIn.requests)."""
    r = RESOURCE_DEFAULTS | dict(d.get("resources") or {})
    given = tuple(k for k in RESOURCE_DEFAULTS if isinstance(raw_resources, dict) and k in raw_resources)
    return SubmitRequest(
        queue=d["queue"],
        kind=d["kind"],
        name=text.get("name", d["name"]),
        command=text.get("command", d["command"]),
        script=text.get("script", d["script"]),
        image=d.get("image") or "",
        gpus=r["gpus"],
        cpus=r["cpus"],
        memory_gb=r["memory_gb"],
        nodes=r["nodes"],
        runtime_limit_minutes=d.get("runtime_limit_minutes"),
        priority=d["priority"],
        lease_hours=d.get("lease_hours"),
        group=d.get("group"),
        resources_given=given,
        array=d["array"],
        manifest=text.get("manifest", d["manifest"]),
        code=d.get("code"),
        requirements=d["requirements"],
        gpu_type=d["gpu_type"],
    )


class BulkItemIn(WorkloadIn):
    idempotency_key = serializers.RegexField(
        r"^[\x21-\x7e]{1,200}$", required=False, allow_null=True, help_text="1-200 printable ASCII characters."
    )


class BulkIn(KnownFieldsOnly, serializers.Serializer[Any]):
    items = serializers.ListField(child=serializers.DictField(), allow_empty=False, max_length=MAX_BULK)

    def requests(self) -> tuple[list[tuple[int, SubmitRequest, str | None]], dict[int, dict[str, list[str]]]]:
        """Each item that parses as (its index, its request, its key); the others' errors by index.

        A batch is mostly items of a few shapes that differ in their text (a name, a command, a key): the
        rest of an item is parsed once per distinct shape, and each text field on its own by its field of one
        bound serializer (a serializer per item deep-copies its fields: most of a 1,000-item batch's time)."""
        item = BulkItemIn()
        fields = item.fields
        shapes: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
        items: list[tuple[int, SubmitRequest, str | None]] = []
        errors: dict[int, dict[str, list[str]]] = {}
        for index, data in enumerate(self.validated_data["items"]):
            text = {k: data[k] for k in TEXT_FIELDS if isinstance(data.get(k), str)}
            rest = {k: v for k, v in data.items() if k not in text}
            key = json.dumps(rest, sort_keys=True, default=str)
            if key not in shapes:
                shapes[key] = _validated(item, rest)
            valid, wrong = shapes[key]
            wrong = dict(wrong)
            parsed = {}
            for name, value in text.items():
                try:
                    parsed[name] = fields[name].run_validation(value)
                except serializers.ValidationError as error:
                    wrong[name] = error.detail
            if wrong:
                errors[index] = flatten(wrong)
                continue
            raw = data.get("resources")
            items.append(
                (index, request_of(valid, raw, **parsed), parsed.get("idempotency_key", valid.get("idempotency_key")))
            )
        return items, errors


# Fields that differ from item to item of a batch, each parsed on its own (see BulkIn.requests).
TEXT_FIELDS = ("name", "command", "script", "manifest", "idempotency_key")


def _validated(item: BulkItemIn, data: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """An item's validated data (its text fields at their defaults), and its errors (DRF's detail)."""
    try:
        return item.run_validation(data), {}
    except serializers.ValidationError as error:
        return {}, error.detail if isinstance(error.detail, dict) else {"detail": error.detail}


class BulkItemOut(serializers.Serializer[Any]):
    id = serializers.UUIDField()
    name = serializers.CharField()
    state = serializers.CharField()
    created = serializers.BooleanField(help_text="False: an earlier workload with the same idempotency key.")


class BulkOut(serializers.Serializer[Any]):
    items = BulkItemOut(many=True, help_text="In the order sent.")


M = TypeVar("M", bound=Model)


class ModelOut(serializers.ModelSerializer[M]):
    """A ModelSerializer whose fields are worked out from its model once per class, then copied for each
    instance (`copied`). ModelSerializer works them out again for every instance: for a submit's answer
    (WorkloadDetailOut) that was about a third of the time it took."""

    _built: ClassVar[dict[type, dict[str, Field[Any, Any, Any, Any]]]] = {}

    def get_fields(self) -> dict[str, Field[Any, Any, Any, Any]]:
        built = ModelOut._built.get(type(self))
        if built is None:  # (two threads may both build it first: the same fields, either kept)
            built = ModelOut._built[type(self)] = super().get_fields()
        return copied(built)  # each instance binds fields of its own

    def to_representation(self, instance: Any) -> dict[str, Any]:
        """What DRF's Serializer.to_representation gives, from a plan made once per class (`_plan`): no fields
        copied and bound for each instance answered, which was most of the time an answer took."""
        plan = ModelOut._plans.get(type(self)) or self._plan()
        answer = {}
        for name, represent in plan:
            try:
                answer[name] = represent(self, instance)
            except SkipField:  # an optional attribute the instance lacks: left out, as DRF leaves it
                continue
        return answer

    _plans: ClassVar[dict[type, list[tuple[str, Callable[[Any, Any], Any]]]]] = {}

    def _plan(self) -> list[tuple[str, Callable[[Any, Any], Any]]]:
        """For each field the answer shows, in order, how to work out its value. A plain field (a value read
        from the instance and formatted by the field's own settings alone) is bound once, to a serializer of
        this class kept for the purpose, and used for every instance; a method field calls its method on the
        serializer answering (its context: the request); anything else (a nested serializer, a related or
        hyperlinked field, a file) is bound afresh for each answer, as DRF does. A list of a ModelOut whose own
        plan is plain fields alone (a workload's events) is answered item by item from that plan."""
        prototype = type(self)()
        plan: list[tuple[str, Callable[[Any, Any], Any]]] = []
        for name, field in prototype.fields.items():
            if field.write_only:
                continue
            if isinstance(field, serializers.SerializerMethodField):
                plan.append((name, _method(field.method_name)))
            elif type(field) in PLAIN_FIELDS and not getattr(field.default, "requires_context", False):
                plan.append((name, _plain(field)))
            elif isinstance(field, serializers.ListSerializer) and _all_plain(field.child):
                plan.append((name, _many(field)))
            else:
                plan.append((name, _bound_afresh(name, field)))
        ModelOut._plans[type(self)] = plan
        return plan


# Fields whose reading and formatting depend on the field's own settings alone (not on its serializer, its
# context or the request): bound once, they serve every instance (ModelOut._plan).
PLAIN_FIELDS: frozenset[type] = frozenset({
    serializers.BooleanField, serializers.CharField, serializers.ChoiceField, serializers.DateField,
    serializers.DateTimeField, serializers.DecimalField, serializers.EmailField, serializers.FloatField,
    serializers.IntegerField, serializers.JSONField, serializers.ModelField, serializers.SlugField,
    serializers.UUIDField,
})  # fmt: skip


def _method(method_name: str) -> Callable[[Any, Any], Any]:
    return lambda serializer, instance: getattr(serializer, method_name)(instance)


def _plain(field: Field[Any, Any, Any, Any]) -> Callable[[Any, Any], Any]:
    to_representation = field.to_representation
    (name, *more) = field.source_attrs or [""]

    def represent(serializer: Any, instance: Any) -> Any:
        value = field.get_attribute(instance)
        return None if value is None else to_representation(value)

    def represent_attribute(serializer: Any, instance: Any) -> Any:
        """represent, reading the one attribute at once where DRF's field would read it as it is: from an object
        that is no mapping, there and not callable. Anything else (a method DRF calls, a missing attribute that
        takes the field's default or is left out) goes DRF's own way."""
        if _is_mapping(type(instance)):
            return represent(serializer, instance)
        try:
            value = getattr(instance, name)
        except Exception:
            return represent(serializer, instance)
        if callable(value):
            return represent(serializer, instance)
        return None if value is None else to_representation(value)

    chosen = represent if more or name in ("", "*") else represent_attribute
    _PLAIN.add(chosen)
    return chosen


def _is_mapping(kind: type) -> bool:
    """DRF reads a mapping's items, not its attributes (each kind of object asked once)."""
    found = _MAPPING.get(kind)
    if found is None:
        found = _MAPPING[kind] = issubclass(kind, Mapping)
    return found


_MAPPING: dict[type, bool] = {}


def _all_plain(child: Any) -> bool:
    """Whether child is a ModelOut whose plan has plain fields alone: it reads nothing of the serializer answering."""
    if not isinstance(child, ModelOut):
        return False
    plan = ModelOut._plans.get(type(child)) or child._plan()
    return all(represent in _PLAIN for _, represent in plan)


_PLAIN: weakref.WeakSet[Callable[[Any, Any], Any]] = weakref.WeakSet()  # what _plain made


def _many(field: serializers.ListSerializer[Any]) -> Callable[[Any, Any], Any]:
    """A list field (bound once, to the prototype) answered as DRF's ListSerializer answers, a manager's rows
    (prefetched ones included) through .all(), each item by one child kept for the purpose."""
    child = cast("type[ModelOut[Any]]", type(field.child))()  # a ModelOut (_all_plain)

    def represent(serializer: Any, instance: Any) -> Any:
        value = field.get_attribute(instance)
        if value is None:
            return None
        items = value.all() if isinstance(value, BaseManager) else value
        return [child.to_representation(item) for item in items]

    return represent


def _bound_afresh(name: str, field: Field[Any, Any, Any, Any]) -> Callable[[Any, Any], Any]:
    def represent(serializer: Any, instance: Any) -> Any:
        own = copy.deepcopy(field)
        own.bind(name, serializer)
        value = own.get_attribute(instance)
        check = value.pk if isinstance(value, PKOnlyObject) else value
        return None if check is None else own.to_representation(value)

    return represent


class EventOut(ModelOut[WorkloadEvent]):
    class Meta:
        model = WorkloadEvent
        fields = ["at", "from_state", "to_state", "reason"]


class WorkloadOut(ModelOut[Workload]):
    queue = serializers.CharField(source="queue.slug")
    group = serializers.CharField(source="group.slug")
    owner = serializers.CharField(source="owner.username")
    fabric = serializers.CharField(source="fabric.name", allow_null=True, default=None)
    resources = serializers.SerializerMethodField()
    runtime_limit_minutes = serializers.SerializerMethodField()
    lease_hours = serializers.SerializerMethodField(help_text="Notebooks and VMs: the lease, in hours from the start.")
    connect_url = serializers.SerializerMethodField(
        help_text="Its web server through the portal (/connect/<id>/...), for whoever may open it: the owner, and "
        "the team once shared. The server's own address and token are never shown."
    )
    array_parent = serializers.UUIDField(source="array_parent_id", allow_null=True, read_only=True)
    elements = serializers.SerializerMethodField(help_text="An array's parent: how many elements are in each state.")
    first_estimated_start = serializers.DateTimeField(
        allow_null=True, read_only=True, help_text="The first estimated start it was shown; null: none yet."
    )
    last_estimated_start = serializers.DateTimeField(
        allow_null=True, read_only=True, help_text="The latest estimated start it was shown before it started."
    )
    estimate_error_seconds = serializers.IntegerField(
        source="estimate_error_s", allow_null=True, read_only=True,
        help_text="Once started: its start minus the latest estimate, in seconds (late is positive).",
    )  # fmt: skip

    class Meta:
        model = Workload
        fields = [
            "id",
            "name",
            "kind",
            "queue",
            "group",
            "owner",
            "state",
            "pending_reason",
            "pending_reason_code",
            "estimated_start",
            "resources",
            "runtime_limit_minutes",
            "priority",
            "image",
            "submitted_at",
            "admitted_at",
            "started_at",
            "finished_at",
            "lease_hours",
            "lease_ends_at",
            "idle_stop_at",
            "exit_code",
            "connect_url",
            "fabric",
            "array",
            "array_index",
            "array_parent",
            "elements",
            "first_estimated_start",
            "last_estimated_start",
            "estimate_error_seconds",
        ]
        read_only_fields = fields

    def get_elements(self, w: Workload) -> dict[str, int] | None:
        if not w.is_array:
            return None
        counts = self.context.get("element_counts")
        if counts is None:  # one workload: count its elements now
            counts = element_counts([w.pk])
        return counts.get(w.pk, {})

    def get_resources(self, w: Workload) -> dict[str, int | float]:
        return {
            "gpus": _number(w.gpus),
            "cpus": _number(w.cpus),
            "memory_gb": _number(w.memory_gb),
            "nodes": w.nodes,
        }

    def get_connect_url(self, w: Workload) -> str:
        request = self.context.get("request")
        if request is None or not w.connect_url:
            return ""
        if request.user.pk == w.owner_id:
            return w.connect_url
        if not w.shared_with_team:
            return ""
        if "member_groups" not in self.context:  # once per response, not once per workload
            self.context["member_groups"] = set(access.member_group_ids(request.user))
        return w.connect_url if w.group_id in self.context["member_groups"] else ""

    def get_lease_hours(self, w: Workload) -> float | None:
        hours = w.lease_hours
        return None if hours is None else _number(hours)

    def get_runtime_limit_minutes(self, w: Workload) -> int:
        return w.runtime_limit_s // 60


def element_counts(parent_ids: list[Any]) -> dict[Any, dict[str, int]]:
    """Per array parent, its elements by state: one query for any number of parents."""
    counts: dict[Any, dict[str, int]] = {}
    if not parent_ids:
        return counts
    rows = (
        Workload.objects.filter(array_parent_id__in=parent_ids)
        .values_list("array_parent_id", "state")
        .annotate(n=Count("pk"))
        .order_by()
    )
    for parent_id, state, n in rows:
        counts.setdefault(parent_id, {})[state] = n
    return counts


class BandOut(serializers.Serializer[Any]):
    low_seconds = serializers.IntegerField(help_text="Add to the estimate: its early end (0 or less).")
    high_seconds = serializers.IntegerField(help_text="Add to the estimate: its late end (0 or more).")


class WorkloadDetailOut(WorkloadOut):
    events = EventOut(many=True, read_only=True)
    command = serializers.CharField()
    script = serializers.CharField()
    code = serializers.JSONField(help_text="The code that travels with it ({} for none).")
    requirements = serializers.CharField()
    estimate_band = serializers.SerializerMethodField(
        help_text="While it has an estimated start: the band its queue's recent estimates kept to (the central 90 % "
        "of their errors over 7 days); null without an estimate, or where too few recent starts had one."
    )

    class Meta(WorkloadOut.Meta):
        fields = [*WorkloadOut.Meta.fields, "command", "script", "code", "requirements", "events", "estimate_band"]
        read_only_fields = fields

    @extend_schema_field(BandOut(allow_null=True))
    def get_estimate_band(self, w: Workload) -> dict[str, int] | None:
        if w.estimated_start is None:
            return None
        found = band_for(w.queue_id)
        return None if found is None else {"low_seconds": found[0], "high_seconds": found[1]}


class EstimatesOut(serializers.Serializer[Any]):
    starts = serializers.IntegerField(help_text="Starts over the last 7 days that had an estimate.")
    median_abs_error_seconds = serializers.IntegerField()
    p90_abs_error_seconds = serializers.IntegerField()
    band_low_seconds = serializers.IntegerField(
        allow_null=True, help_text="The band put around a new estimate: add to it (0 or less); null: too few starts."
    )
    band_high_seconds = serializers.IntegerField(allow_null=True, help_text="Add to the estimate (0 or more).")


class QueueOut(serializers.Serializer[Any]):
    slug = serializers.CharField()
    name = serializers.CharField()
    description = serializers.CharField()
    kinds = serializers.ListField(child=serializers.CharField())
    default_runtime_minutes = serializers.IntegerField()
    max_runtime_minutes = serializers.IntegerField()
    backlog = serializers.IntegerField(help_text="Workloads waiting to start.")
    running = serializers.IntegerField()
    p95_wait_seconds = serializers.FloatField(allow_null=True, help_text="Over the last 7 days; null without data.")
    estimates = EstimatesOut(
        allow_null=True, help_text="How good its estimated starts were over the last 7 days; null: no start had one."
    )
