"""Validation and defaulting on create, as the API server does it for the fields Gridlane sends.

Each check names its field the way the API server does (`spec.template.spec.containers[0].image`),
so a 422 from the double reads like one from a cluster.
"""

from __future__ import annotations

import base64
import binascii
import re
import uuid
from typing import Any, NoReturn

from tests.k8s_double import kueue
from tests.k8s_double.objects import (
    CONFIG_KEY,
    DNS_1035,
    DNS_LABEL,
    DNS_SUBDOMAIN,
    Kind,
    bad_request,
    label_key_error,
    label_value_error,
    quantity,
)
from tests.k8s_double.selectors import OPERATORS, selector_matches

Causes = list[tuple[str, str]]

_NATIVE_RESOURCES = {"cpu", "memory", "ephemeral-storage", "pods"}


def _is_extended(resource: str) -> bool:
    """nvidia.com/gpu and friends: integer-only, never overcommitted (requests must equal limits)."""
    return "/" in resource and not resource.startswith(("kubernetes.io/", "requests.", "hugepages-"))


def validate(kind: Kind, obj: dict[str, Any]) -> Causes:
    causes: Causes = []
    meta = obj.get("metadata") or {}
    name = meta.get("name", "")
    if not name:
        causes.append(("metadata.name", "Required value: name or generateName is required"))
    elif kind.kind == "Service" and (len(name) > 63 or not DNS_1035.match(name)):
        causes.append(
            (
                "metadata.name",
                f'Invalid value: "{name}": a DNS-1035 label must consist of lower case alphanumeric characters '
                "or '-', start with an alphabetic character, and end with an alphanumeric character",
            )
        )
    elif len(name) > 253 or not DNS_SUBDOMAIN.match(name):
        causes.append(
            (
                "metadata.name",
                f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric '
                "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
                "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            )
        )
    causes += _labels(meta.get("labels"), "metadata.labels")
    if kind.kind == "Job":
        causes += _job(obj)
    elif kind.kind == "Pod":
        causes += _pod_spec(obj.get("spec") or {}, "spec")
    elif kind.kind == "Service":
        causes += _service(obj.get("spec") or {})
    elif kind.kind == "Deployment":
        causes += _deployment(obj.get("spec") or {})
    elif kind.kind in ("Secret", "ConfigMap"):
        for part in ("data", "binaryData"):
            for key in obj.get(part) or {}:
                if not CONFIG_KEY.match(key) or len(key) > 253:
                    causes.append((f"{part}[{key}]", f'Invalid value: "{key}": {_CONFIG_KEY_MESSAGE}'))
    elif kind.kind == "Ingress":
        causes += _ingress(obj.get("spec") or {})
    elif kind.group == "kueue.x-k8s.io":  # the CRD's schema and rules hold the rest (admission.py)
        if kind.kind == "ClusterQueue" and (obj.get("spec") or {}).get("namespaceSelector"):
            causes += _selector(obj["spec"]["namespaceSelector"], "spec.namespaceSelector")
    elif kind.kind == "PodGroup":
        min_member = (obj.get("spec") or {}).get("minMember", 0)
        if not isinstance(min_member, int) or min_member < 0:
            causes.append(("spec.minMember", f"Invalid value: {min_member!r}: must be greater than or equal to 0"))
    return causes


_CONFIG_KEY_MESSAGE = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or "
    "'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"
)


def decode(kind: Kind, obj: dict[str, Any]) -> None:
    """What the API server does while it decodes a body, before validation: annotations and a ConfigMap's values
    must be strings, a Secret's data base64, and its stringData joins data (and is gone). A fault is a 400."""

    def cannot(detail: str) -> NoReturn:
        raise bad_request(f'{kind.kind} in version "{kind.version}" cannot be handled as a {kind.kind}: {detail}')

    def unmarshal(value: Any, field: str, go_type: str) -> NoReturn:
        cannot(f"json: cannot unmarshal {_json_type(value)} into Go struct field {field} of type {go_type}")

    for value in ((obj.get("metadata") or {}).get("annotations") or {}).values():
        if not isinstance(value, str):  # `timeout: 75` in YAML is a number: annotations want "75"
            unmarshal(value, "ObjectMeta.metadata.annotations", "string")
    if kind.kind == "ConfigMap":
        for value in (obj.get("data") or {}).values():
            if not isinstance(value, str):
                unmarshal(value, "ConfigMap.data", "string")
    if kind.kind != "Secret":
        return
    for value in (obj.get("data") or {}).values():
        if not isinstance(value, str):
            unmarshal(value, "Secret.data", "[]uint8")
        elif (byte := _illegal_base64_at(value)) is not None:
            cannot(f"illegal base64 data at input byte {byte}")
    string_data = obj.pop("stringData", None) or {}
    for key, value in string_data.items():
        if not isinstance(value, str):
            unmarshal(value, "Secret.stringData", "string")
        obj.setdefault("data", {})[key] = base64.b64encode(value.encode()).decode()


def _json_type(value: Any) -> str:
    """How Go's encoding/json names the JSON it found: `number`, `bool`, `object`, `array`."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return {dict: "object", list: "array", type(None): "null"}.get(type(value), "string")


def _illegal_base64_at(value: str) -> int | None:
    """Where Go's base64.StdEncoding gives up on the text, or None when it decodes."""
    if m := re.search(r"[^A-Za-z0-9+/=]", value):
        return m.start()
    try:
        base64.b64decode(value, validate=True)
    except binascii.Error:
        return len(value.rstrip("=")) // 4 * 4
    return None


def _labels(labels: Any, field: str) -> Causes:
    causes: Causes = []
    for key, value in (labels or {}).items():
        if (error := label_key_error(key)) is not None:
            causes.append((field, f'Invalid value: "{key}": {error}'))
        if (error := label_value_error(value)) is not None:
            causes.append((f"{field}", f'Invalid value: "{value}": {error}'))
    return causes


def _job(obj: dict[str, Any]) -> Causes:
    spec = obj.get("spec") or {}
    name = (obj.get("metadata") or {}).get("name", "")
    causes: Causes = []
    if len(name) > 63:
        # The Job controller labels its pods with job-name=<name>: a label value caps at 63.
        causes.append(("spec.template.labels", f'Invalid value: "{name}": must be no more than 63 characters'))
    for field in ("parallelism", "completions", "backoffLimit", "ttlSecondsAfterFinished"):
        value = spec.get(field)
        if value is not None and (not isinstance(value, int) or value < 0):
            causes.append((f"spec.{field}", f"Invalid value: {value!r}: must be greater than or equal to 0"))
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None and (not isinstance(deadline, int) or deadline <= 0):
        causes.append(("spec.activeDeadlineSeconds", f"Invalid value: {deadline!r}: must be greater than 0"))
    mode = spec.get("completionMode", "NonIndexed")
    if mode not in ("NonIndexed", "Indexed"):
        causes.append(
            ("spec.completionMode", f'Unsupported value: "{mode}": supported values: "Indexed", "NonIndexed"')
        )
    if mode == "Indexed" and spec.get("completions") is None:
        causes.append(("spec.completions", "Required value: when completion mode is Indexed"))
    causes += _per_index(spec, mode)
    template = spec.get("template") or {}
    causes += _labels((template.get("metadata") or {}).get("labels"), "spec.template.metadata.labels")
    pod_spec = template.get("spec") or {}
    restart = pod_spec.get("restartPolicy")
    if restart not in ("Never", "OnFailure"):
        causes.append(
            (
                "spec.template.spec.restartPolicy",
                'Required value: valid values: "OnFailure", "Never"'
                if restart is None
                else f'Unsupported value: "{restart}": supported values: "OnFailure", "Never"',
            )
        )
    causes += _pod_spec(pod_spec, "spec.template.spec")
    return causes


def _per_index(spec: dict[str, Any], mode: str) -> Causes:
    """backoffLimitPerIndex, maxFailedIndexes and the podFailurePolicy's FailIndex, as the API server checks them."""
    causes: Causes = []
    per_index, most = spec.get("backoffLimitPerIndex"), spec.get("maxFailedIndexes")
    for field, value in (("backoffLimitPerIndex", per_index), ("maxFailedIndexes", most)):
        if value is not None and (not isinstance(value, int) or value < 0):
            causes.append((f"spec.{field}", f"Invalid value: {value!r}: must be greater than or equal to 0"))
    if per_index is not None and mode != "Indexed":
        causes.append(("spec.backoffLimitPerIndex", "Forbidden: requires indexed completion mode"))
    if most is not None and per_index is None:
        causes.append(("spec.maxFailedIndexes", "Required value: must be specified when maxFailedIndexes is specified"))
    completions = spec.get("completions")
    if isinstance(most, int) and isinstance(completions, int) and most > completions:
        causes.append(("spec.maxFailedIndexes", f"Invalid value: {most}: must be less than or equal to completions"))
    for i, rule in enumerate((spec.get("podFailurePolicy") or {}).get("rules") or []):
        action = rule.get("action")
        if action not in ("FailJob", "FailIndex", "Ignore", "Count"):
            causes.append((f"spec.podFailurePolicy.rules[{i}].action", f'Unsupported value: "{action}"'))
        elif action == "FailIndex" and per_index is None:
            causes.append(
                (
                    f"spec.podFailurePolicy.rules[{i}].action",
                    'Invalid value: "FailIndex": requires the backoffLimitPerIndex to be set',
                )
            )
    return causes


def job_update(old: dict[str, Any], new: dict[str, Any]) -> Causes:
    """What may not change on a Job once created: its completion mode, selector, backoff limit per index and pod
    template; completions only together with parallelism, kept equal (an elastic Indexed Job). Parallelism may."""
    before, after = old.get("spec") or {}, new.get("spec") or {}
    causes: Causes = []
    for field in ("completionMode", "backoffLimitPerIndex", "selector", "template"):
        if before.get(field) != after.get(field):
            causes.append((f"spec.{field}", "Invalid value: field is immutable"))
    if before.get("completions") != after.get("completions"):
        elastic = after.get("completionMode") == "Indexed" and after.get("completions") == after.get("parallelism")
        if not elastic:
            value = after.get("completions")
            causes.append(("spec.completions", f"Invalid value: {value}: field is immutable"))
    return causes


def _go_map(labels: dict[str, Any]) -> str:
    """How the API server prints a map in a message: `map[string]string{"a":"b"}`, keys sorted."""
    return "map[string]string{" + ", ".join(f'"{k}":"{labels[k]}"' for k in sorted(labels)) + "}"


def _selector(selector: dict[str, Any], field: str) -> Causes:
    causes = _labels(selector.get("matchLabels"), f"{field}.matchLabels")
    for i, expression in enumerate(selector.get("matchExpressions") or []):
        operator = expression.get("operator", "")
        if operator not in OPERATORS:
            causes.append(
                (
                    f"{field}.matchExpressions[{i}].operator",
                    f'Invalid value: "{operator}": not a valid selector operator',
                )
            )
        elif operator in ("In", "NotIn") and not expression.get("values"):
            causes.append(
                (
                    f"{field}.matchExpressions[{i}].values",
                    "Required value: must be specified when `operator` is 'In' or 'NotIn'",
                )
            )
    return causes


def _deployment(spec: dict[str, Any]) -> Causes:
    causes: Causes = []
    for name in ("replicas", "revisionHistoryLimit", "minReadySeconds"):
        value = spec.get(name)
        if value is not None and (not isinstance(value, int) or value < 0):
            causes.append((f"spec.{name}", f"Invalid value: {value!r}: must be greater than or equal to 0"))
    template = spec.get("template") or {}
    labels = (template.get("metadata") or {}).get("labels") or {}
    selector = spec.get("selector")
    if selector is None:
        causes.append(("spec.selector", "Required value"))
    elif not selector.get("matchLabels") and not selector.get("matchExpressions"):
        empty = (
            "v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement(nil)}"
        )
        causes.append(("spec.selector", f"Invalid value: {empty}: empty selector is invalid for deployment"))
    else:
        causes += _selector(selector, "spec.selector")
        if not selector_matches(selector, labels):
            causes.append(
                (
                    "spec.template.metadata.labels",
                    f"Invalid value: {_go_map(labels)}: `selector` does not match template `labels`",
                )
            )
    causes += _labels(labels, "spec.template.metadata.labels")
    strategy = (spec.get("strategy") or {}).get("type", "RollingUpdate")
    if strategy not in ("RollingUpdate", "Recreate"):
        causes.append(
            ("spec.strategy.type", f'Unsupported value: "{strategy}": supported values: "Recreate", "RollingUpdate"')
        )
    pod_spec = template.get("spec") or {}
    restart = pod_spec.get("restartPolicy", "Always")
    if restart != "Always":
        causes.append(
            ("spec.template.spec.restartPolicy", f'Unsupported value: "{restart}": supported values: "Always"')
        )
    causes += _pod_spec(pod_spec, "spec.template.spec")
    return causes


_PATH_TYPES = ("Exact", "ImplementationSpecific", "Prefix")


def _ingress(spec: dict[str, Any]) -> Causes:
    causes: Causes = []
    rules = spec.get("rules") or []
    if not rules and spec.get("defaultBackend") is None:
        causes.append(
            (
                "spec",
                "Invalid value: []networking.IngressRule(nil): either `defaultBackend` or `rules` must be specified",
            )
        )
    if spec.get("defaultBackend") is not None:
        causes += _backend(spec["defaultBackend"], "spec.defaultBackend")
    name = spec.get("ingressClassName")
    if name is not None and not DNS_SUBDOMAIN.match(name):
        causes.append(("spec.ingressClassName", f'Invalid value: "{name}": a lowercase RFC 1123 subdomain ...'))
    for i, tls in enumerate(spec.get("tls") or []):
        for j, host in enumerate(tls.get("hosts") or []):
            if not DNS_SUBDOMAIN.match(host.removeprefix("*.")):
                causes.append(
                    (f"spec.tls[{i}].hosts[{j}]", f'Invalid value: "{host}": a wildcard DNS-1123 subdomain ...')
                )
    for i, rule in enumerate(rules):
        host = rule.get("host", "")
        if host and not DNS_SUBDOMAIN.match(host.removeprefix("*.")):
            causes.append((f"spec.rules[{i}].host", f'Invalid value: "{host}": a lowercase RFC 1123 subdomain ...'))
        http = rule.get("http")
        if http is None:
            continue
        if not http.get("paths"):
            causes.append((f"spec.rules[{i}].http.paths", "Required value"))
        for j, path in enumerate(http.get("paths") or []):
            where = f"spec.rules[{i}].http.paths[{j}]"
            path_type, text = path.get("pathType"), path.get("path", "")
            if path_type is None:
                causes.append((f"{where}.pathType", "Required value: pathType must be specified"))
            elif path_type not in _PATH_TYPES:
                supported = ", ".join(f'"{t}"' for t in _PATH_TYPES)
                causes.append((f"{where}.pathType", f'Unsupported value: "{path_type}": supported values: {supported}'))
            if path_type in ("Exact", "Prefix") and not text.startswith("/"):
                causes.append((f"{where}.path", f'Invalid value: "{text}": must be an absolute path'))
            causes += _backend(path.get("backend"), f"{where}.backend")
    return causes


def _backend(backend: Any, field: str) -> Causes:
    service = (backend or {}).get("service")
    if service is None and (backend or {}).get("resource") is None:
        return [(field, 'Invalid value: "": one backend (`service` or `resource`) must be specified')]
    if service is None:
        return []
    causes: Causes = []
    name = service.get("name", "")
    if not name:
        causes.append((f"{field}.service.name", "Required value"))
    elif len(name) > 63 or not DNS_1035.match(name):
        causes.append((f"{field}.service.name", f'Invalid value: "{name}": a DNS-1035 label must consist of ...'))
    port = service.get("port") or {}
    if port.get("name") and port.get("number"):
        causes.append((f"{field}.service.port", "Invalid value: cannot set both port name & port number"))
    elif port.get("name"):
        if not _PORT_NAME.match(port["name"]):
            causes.append((f"{field}.service.port.name", f'Invalid value: "{port["name"]}": must be a valid port name'))
    elif port.get("number") is not None:
        causes += _port_number(port["number"], f"{field}.service.port.number")
    else:
        causes.append((f"{field}.service.port", "Invalid value: port name or number is required"))
    return causes


# IANA_SVC_NAME: at most 15 characters, lower case letters, digits and '-', at least one letter, no '--'.
_PORT_NAME = re.compile(r"^(?=.{1,15}$)(?=.*[a-z])(?!.*--)[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _port_number(value: Any, field: str) -> Causes:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 65536:
        return [(field, f"Invalid value: {value!r}: must be between 1 and 65535, inclusive")]
    return []


def _port_ref(value: Any, field: str) -> Causes:
    """A probe's or a Service's target port: a number, or the name of a container port."""
    if isinstance(value, str):
        return [] if _PORT_NAME.match(value) else [(field, f'Invalid value: "{value}": must contain only ...')]
    return _port_number(value, field)


_HANDLERS = ("exec", "httpGet", "tcpSocket", "grpc")


def _container_extras(container: dict[str, Any], where: str, volumes: set[str]) -> Causes:
    """Ports, probes, volume mounts and envFrom: what the Deployments of Gridlane's own kit send."""
    causes: Causes = []
    names: set[str] = set()
    for i, port in enumerate(container.get("ports") or []):
        causes += _port_number(port.get("containerPort"), f"{where}.ports[{i}].containerPort")
        if (name := port.get("name")) is not None:
            if not _PORT_NAME.match(name):
                causes.append((f"{where}.ports[{i}].name", f'Invalid value: "{name}": must be a valid port name'))
            elif name in names:
                causes.append((f"{where}.ports[{i}].name", f'Duplicate value: "{name}"'))
            names.add(name)
    for probe_name in ("livenessProbe", "readinessProbe", "startupProbe"):
        probe = container.get(probe_name)
        if probe is None:
            continue
        field = f"{where}.{probe_name}"
        handlers = [h for h in _HANDLERS if probe.get(h) is not None]
        if len(handlers) != 1:
            message = "must specify a handler type" if not handlers else "may not specify more than 1 handler type"
            causes.append((field, f"Required value: {message}"))
        if (http := probe.get("httpGet")) is not None:
            causes += _port_ref(http.get("port"), f"{field}.httpGet.port")
            scheme = http.get("scheme", "HTTP")
            if scheme not in ("HTTP", "HTTPS"):
                causes.append(
                    (f"{field}.httpGet.scheme", f'Unsupported value: "{scheme}": supported values: "HTTP", "HTTPS"')
                )
        if probe_name != "readinessProbe" and probe.get("successThreshold", 1) != 1:
            causes.append((f"{field}.successThreshold", f"Invalid value: {probe['successThreshold']}: must be 1"))
    for i, mount in enumerate(container.get("volumeMounts") or []):
        if mount.get("name") not in volumes:
            causes.append((f"{where}.volumeMounts[{i}].name", f'Not found: "{mount.get("name", "")}"'))
        if not mount.get("mountPath"):
            causes.append((f"{where}.volumeMounts[{i}].mountPath", "Required value"))
    for i, source in enumerate(container.get("envFrom") or []):
        refs = [r for r in ("configMapRef", "secretRef") if source.get(r) is not None]
        if len(refs) != 1:
            causes.append(
                (f"{where}.envFrom[{i}]", 'Invalid value: "": must specify one of: `configMapRef` or `secretRef`')
            )
        for ref in refs:
            if not source[ref].get("name"):
                causes.append((f"{where}.envFrom[{i}].{ref}.name", "Required value"))
    return causes


def _pod_spec(spec: dict[str, Any], field: str) -> Causes:
    causes: Causes = []
    containers = spec.get("containers") or []
    volumes: set[str] = set()
    for i, volume in enumerate(spec.get("volumes") or []):
        name = volume.get("name", "")
        if not DNS_LABEL.match(name) or len(name) > 63:
            causes.append((f"{field}.volumes[{i}].name", f'Invalid value: "{name}": a lowercase RFC 1123 label ...'))
        elif name in volumes:
            causes.append((f"{field}.volumes[{i}].name", f'Duplicate value: "{name}"'))
        volumes.add(name)
    if not containers:
        causes.append((f"{field}.containers", "Required value"))
    # Init containers are checked as containers are, and no two of either share a name.
    listed = [(f"{field}.containers[{i}]", c) for i, c in enumerate(containers)]
    listed += [(f"{field}.initContainers[{i}]", c) for i, c in enumerate(spec.get("initContainers") or [])]
    seen: set[str] = set()
    for where, container in listed:
        cname = container.get("name", "")
        if cname in seen:
            causes.append((f"{where}.name", f'Duplicate value: "{cname}"'))
        seen.add(cname)
        if not cname or len(cname) > 63 or not DNS_LABEL.match(cname):
            causes.append(
                (f"{where}.name", f'Invalid value: "{cname}": a lowercase RFC 1123 label must consist of ...')
            )
        if not container.get("image"):
            causes.append((f"{where}.image", "Required value"))
        for key in ("command", "args"):
            value = container.get(key)
            if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                causes.append((f"{where}.{key}", "Invalid value: must be a list of strings"))
        for j, env in enumerate(container.get("env") or []):
            if not env.get("name"):
                causes.append((f"{where}.env[{j}].name", "Required value"))
        causes += _resources(container.get("resources") or {}, f"{where}.resources")
        causes += _container_extras(container, where, volumes)
    subdomain = spec.get("subdomain")
    if subdomain is not None and not DNS_LABEL.match(subdomain):
        causes.append((f"{field}.subdomain", f'Invalid value: "{subdomain}": a lowercase RFC 1123 label ...'))
    return causes


def _resources(resources: dict[str, Any], field: str) -> Causes:
    causes: Causes = []
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    for part, values in (("requests", requests), ("limits", limits)):
        for resource, value in values.items():
            where = f"{field}.{part}[{resource}]"
            try:
                amount = quantity(value)
            except ValueError as exc:
                causes.append((where, f'Invalid value: "{value}": {exc}'))
                continue
            if amount < 0:
                causes.append((where, f'Invalid value: "{value}": must be greater than or equal to 0'))
            if _is_extended(resource) and amount != amount.to_integral_value():
                causes.append((where, f'Invalid value: "{value}": must be an integer'))
            if resource not in _NATIVE_RESOURCES and not _is_extended(resource):
                causes.append(
                    (where, f'Invalid value: "{resource}": must be a standard resource type or fully qualified')
                )
    for resource, value in requests.items():
        if not _is_extended(resource):
            continue
        if resource not in limits:
            causes.append((f"{field}.limits", "Required value: Limit must be set for non overcommitable resources"))
        elif quantity(limits[resource]) != quantity(value):
            causes.append(
                (
                    f"{field}.requests",
                    f'Invalid value: "{value}": must be equal to {resource} limit of {limits[resource]}',
                )
            )
    return causes


def _service(spec: dict[str, Any]) -> Causes:
    causes: Causes = []
    for i, port in enumerate(spec.get("ports") or []):
        number = port.get("port")
        if not isinstance(number, int) or not 0 < number < 65536:
            causes.append((f"spec.ports[{i}].port", f"Invalid value: {number!r}: must be between 1 and 65535"))
    if not spec.get("ports") and spec.get("clusterIP") != "None":
        causes.append(("spec.ports", "Required value"))
    return causes


_PROBE_DEFAULTS = {"timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3}


def _default_container(container: dict[str, Any]) -> None:
    for port in container.get("ports") or []:
        port.setdefault("protocol", "TCP")
    for probe_name in ("livenessProbe", "readinessProbe", "startupProbe"):
        if (probe := container.get(probe_name)) is not None:
            for key, value in _PROBE_DEFAULTS.items():
                probe.setdefault(key, value)
            if (http := probe.get("httpGet")) is not None:
                http.setdefault("scheme", "HTTP")
    image = container.get("image", "")
    tag = image.rsplit("/", 1)[-1]
    latest = ":" not in tag or tag.endswith(":latest")
    container.setdefault("imagePullPolicy", "Always" if latest and "@" not in image else "IfNotPresent")
    container.setdefault("resources", {})
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")


def default_pod_spec(spec: dict[str, Any]) -> None:
    for container in spec.get("containers") or []:
        _default_container(container)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("terminationGracePeriodSeconds", 30)


def default(kind: Kind, obj: dict[str, Any]) -> None:
    """Fill in the defaults the API server adds, so responses look like a cluster's."""
    if kind.group == "kueue.x-k8s.io" and kind.kind != "Workload":
        kueue.default(kind.kind, obj, created=True)
        return
    if kind.kind == "Secret":
        obj.setdefault("type", "Opaque")
    spec = obj.setdefault("spec", {}) if kind.kind not in ("Namespace", "Secret", "ConfigMap") else None
    if kind.kind == "Job" and spec is not None:
        uid = obj["metadata"]["uid"]
        name = obj["metadata"]["name"]
        # With a backoff limit per index, the Job's own limit defaults to the largest int32: each index has its own.
        spec.setdefault("backoffLimit", 2147483647 if spec.get("backoffLimitPerIndex") is not None else 6)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("completions", 1)
        spec.setdefault("manualSelector", False)
        spec.setdefault("parallelism", 1)
        spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
        spec.setdefault("suspend", False)
        spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
        template = spec.setdefault("template", {})
        tmeta = template.setdefault("metadata", {})
        tmeta.setdefault("creationTimestamp", None)
        tmeta.setdefault("labels", {}).update(
            {
                "batch.kubernetes.io/controller-uid": uid,
                "batch.kubernetes.io/job-name": name,
                "controller-uid": uid,
                "job-name": name,
            }
        )
        obj["metadata"].setdefault("labels", {}).update(
            {
                "batch.kubernetes.io/controller-uid": uid,
                "batch.kubernetes.io/job-name": name,
                "controller-uid": uid,
                "job-name": name,
            }
        )
        default_pod_spec(template.setdefault("spec", {}))
        obj.setdefault("status", {})
    elif kind.kind == "Pod" and spec is not None:
        default_pod_spec(spec)
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
        spec.setdefault("priority", 0)
        spec.setdefault("serviceAccount", "default")
        spec.setdefault("serviceAccountName", "default")
        spec.setdefault(
            "tolerations",
            [
                {"effect": "NoExecute", "key": f"node.kubernetes.io/{taint}", "operator": "Exists"}
                | {"tolerationSeconds": 300}
                for taint in ("not-ready", "unreachable")
            ],
        )
        obj.setdefault("status", {"phase": "Pending", "qosClass": "BestEffort"})
    elif kind.kind == "Service" and spec is not None:
        if spec.get("clusterIP") != "None":
            spec["clusterIP"] = f"10.96.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250 + 2}"
        spec["clusterIPs"] = [spec["clusterIP"]]
        spec.setdefault("internalTrafficPolicy", "Cluster")
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("sessionAffinity", "None")
        spec.setdefault("type", "ClusterIP")
        for port in spec.get("ports") or []:
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port.get("port"))
        obj.setdefault("status", {"loadBalancer": {}})
    elif kind.kind == "Deployment" and spec is not None:
        spec.setdefault("replicas", 1)
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
        strategy = spec.setdefault("strategy", {"type": "RollingUpdate"})
        if strategy.get("type", "RollingUpdate") == "RollingUpdate":
            strategy["type"] = "RollingUpdate"
            strategy.setdefault("rollingUpdate", {}).setdefault("maxSurge", "25%")
            strategy["rollingUpdate"].setdefault("maxUnavailable", "25%")
        template = spec.setdefault("template", {})
        template.setdefault("metadata", {}).setdefault("creationTimestamp", None)
        default_pod_spec(template.setdefault("spec", {}))
        obj.setdefault("status", {})
    elif kind.kind == "Ingress" and spec is not None:
        obj.setdefault("status", {"loadBalancer": {}})
    elif kind.kind == "PodGroup" and spec is not None:
        obj.setdefault("status", {"phase": "Pending"})
    elif kind.kind == "Namespace":
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
        obj.setdefault("status", {"phase": "Active"})
