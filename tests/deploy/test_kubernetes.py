"""deploy/kubernetes/: every manifest loads through the official client (`kubernetes.utils.create_from_yaml`)
into the API double, which validates it as an API server does, and read back through the client the pieces
fit each other and the rest of deploy/: the probes, the Service, the Ingress and GRIDLANE_BIND agree on one
port; the pods run the systemd units' commands; the ConfigMap and the Secret hold only variables the
environment file names, the Secret only placeholders. Broken copies of the manifests are refused with the
Status an API server sends (or, for the few the client's own models catch, refused by the client and, sent as
they are, by the double), so the acceptance is one that can fail."""

from __future__ import annotations

import base64
import copy
import json
import shlex
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config, utils
from kubernetes.dynamic import DynamicClient

from tests.deploy.helpers import ROOT
from tests.deploy.test_environment_file import in_template
from tests.deploy.test_systemd import read
from tests.k8s_double import ApiDouble

KIT = ROOT / "deploy" / "kubernetes"
MANIFESTS = sorted(p for p in KIT.glob("*.yaml") if p.name != "kustomization.yaml")
NAMESPACE = "gridlane"
IMAGE = "registry.example/gridlane:RELEASE"
SECRET_NAMES = {"DATABASE_URL", "GRIDLANE_SECRET_KEY", "GRIDLANE_OIDC_CLIENT_SECRET"}
WEB = {"app.kubernetes.io/name": "gridlane", "app.kubernetes.io/component": "web"}


@pytest.fixture
def double() -> Iterator[ApiDouble]:
    # No simulated control plane: what is checked is what the API server accepts and stores.
    with ApiDouble(namespaces=(NAMESPACE,), simulate=False) as api:
        yield api


@pytest.fixture
def api_client(double: ApiDouble, tmp_path: Path) -> Iterator[Any]:
    api = config.new_client_from_config(config_file=str(double.kubeconfig(tmp_path / "kubeconfig", NAMESPACE)))
    yield api
    api.close()


def apply_order() -> list[Path]:
    """The manifests as kustomization.yaml lists them: the order the README applies them in."""
    kustomization = yaml.safe_load((KIT / "kustomization.yaml").read_text())
    return [KIT / name for name in kustomization["resources"]]


@pytest.fixture
def kit(api_client: Any) -> Any:
    """The whole kit, created in the double through the client; the client, to read it back with."""
    for manifest in apply_order():
        utils.create_from_yaml(api_client, str(manifest), namespace=NAMESPACE)
    return api_client


# Read back as the client's models (typed loosely here: every field of a model is optional to the type checker).
def deployment(api: Any, name: str) -> Any:
    return client.AppsV1Api(api).read_namespaced_deployment(name, NAMESPACE)


def service(api: Any, name: str = "gridlane-web") -> Any:
    return client.CoreV1Api(api).read_namespaced_service(name, NAMESPACE)


def migration(api: Any) -> Any:
    return client.BatchV1Api(api).read_namespaced_job("gridlane-migrate", NAMESPACE)


def ingresses(api: Any) -> list[Any]:
    return list(client.NetworkingV1Api(api).list_namespaced_ingress(NAMESPACE).items)


def pod_specs(api: Any) -> dict[str, Any]:
    """The pod templates of the web, the connect processes, the worker and the migration Job, by component."""
    return {
        "web": deployment(api, "gridlane-web").spec.template.spec,
        "connect": deployment(api, "gridlane-connect").spec.template.spec,
        "worker": deployment(api, "gridlane-worker").spec.template.spec,
        "migrate": migration(api).spec.template.spec,
    }


def config_map(api: Any) -> dict[str, str]:
    return dict(client.CoreV1Api(api).read_namespaced_config_map("gridlane-config", NAMESPACE).data or {})


def secret(api: Any) -> dict[str, str]:
    data = client.CoreV1Api(api).read_namespaced_secret("gridlane-secrets", NAMESPACE).data or {}
    return {name: base64.b64decode(value).decode() for name, value in data.items()}


def port_number(container: Any, port: int | str) -> int:
    """A port given by number or by the name of one of the container's ports."""
    if isinstance(port, int):
        return port
    return next(int(p.container_port) for p in container.ports if p.name == port)


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def env_file_values() -> dict[str, str]:
    lines = (ROOT / "deploy" / "gridlane.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def test_the_kustomization_lists_every_manifest_in_apply_order():
    assert sorted(apply_order()) == MANIFESTS
    kinds = [doc["kind"] for manifest in apply_order() for doc in yaml.safe_load_all(manifest.read_text())]
    assert kinds == ["Secret", "ConfigMap", "Job", "Deployment", "Deployment", "Service", "Deployment", "Service",
                     "Ingress", "Ingress"]  # fmt: skip


def test_every_manifest_loads_through_the_official_client_and_the_double_keeps_it(double, api_client, tmp_path):
    created = []
    for manifest in apply_order():
        for objects in utils.create_from_yaml(api_client, str(manifest), namespace=NAMESPACE):
            created += [(type(o).__name__, o.metadata.name, o.metadata.labels) for o in objects]
    assert [(kind, name) for kind, name, _ in created] == [
        ("V1Secret", "gridlane-secrets"),
        ("V1ConfigMap", "gridlane-config"),
        ("V1Job", "gridlane-migrate"),
        ("V1Deployment", "gridlane-web"),
        ("V1Deployment", "gridlane-connect"),
        ("V1Service", "gridlane-connect"),
        ("V1Deployment", "gridlane-worker"),
        ("V1Service", "gridlane-web"),
        ("V1Ingress", "gridlane"),
        ("V1Ingress", "gridlane-connect"),
    ]
    assert all(labels["app.kubernetes.io/name"] == "gridlane" for _, _, labels in created)
    for resource in ("secrets", "configmaps", "jobs", "deployments", "services", "ingresses"):
        assert double.objects(resource, NAMESPACE, selector="app.kubernetes.io/name=gridlane"), resource
    # The client's discovery (what kubectl and server-side apply go by) finds every kind of the kit.
    discovery = DynamicClient(api_client, cache_file=str(tmp_path / "discovery.json"))
    for manifest in MANIFESTS:
        for doc in yaml.safe_load_all(manifest.read_text()):
            assert discovery.resources.get(api_version=doc["apiVersion"], kind=doc["kind"]).namespaced


def test_the_web_probes_ask_readyz_and_healthz_on_the_port_the_service_and_gunicorn_use(kit):
    web = deployment(kit, "gridlane-web")
    assert web.spec.replicas == 2
    (container,) = web.spec.template.spec.containers
    ready, live = container.readiness_probe.http_get, container.liveness_probe.http_get
    assert ready.path.split("?")[0] == "/readyz"
    assert live.path == "/healthz"
    (service_port,) = service(kit).spec.ports
    assert service_port.port == 80
    target = port_number(container, service_port.target_port)
    assert port_number(container, ready.port) == port_number(container, live.port) == target
    assert config_map(kit)["GRIDLANE_BIND"].rsplit(":", 1)[1] == str(target)
    # A probe's own Host header is the pod's address, which Django refuses: the probes name an allowed host.
    allowed = config_map(kit)["GRIDLANE_ALLOWED_HOSTS"].split(",")
    for probe in (ready, live):
        assert {h.name: h.value for h in probe.http_headers}["Host"] in allowed


def test_the_service_selects_the_web_pods_and_not_the_workers_or_the_migration(kit):
    selector = service(kit).spec.selector
    web, worker = deployment(kit, "gridlane-web"), deployment(kit, "gridlane-worker")
    job = migration(kit)
    assert selector == WEB
    assert selects(selector, web.spec.template.metadata.labels)
    assert not selects(selector, worker.spec.template.metadata.labels)
    assert not selects(selector, job.spec.template.metadata.labels)
    assert worker.spec.template.metadata.labels["app.kubernetes.io/component"] == "worker"
    assert job.spec.template.metadata.labels["app.kubernetes.io/component"] == "migrate"


def test_the_ingresses_send_connect_to_the_connect_service_the_rest_to_the_web_over_tls(kit):
    allowed = config_map(kit)["GRIDLANE_ALLOWED_HOSTS"].split(",")
    paths = {}
    for ingress in ingresses(kit):
        tls_hosts = {host for tls in ingress.spec.tls for host in tls.hosts}
        for rule in ingress.spec.rules:
            assert rule.host in tls_hosts
            assert rule.host in allowed
            for path in rule.http.paths:
                backend = path.backend.service
                ports = {(p.name, p.port) for p in service(kit, backend.name).spec.ports}
                assert any(backend.port.name == name or backend.port.number == number for name, number in ports)
                paths[path.path] = (path.path_type, backend.name, ingress.metadata.annotations)
    assert paths["/"][:2] == ("Prefix", "gridlane-web")
    assert paths["/"][2]["nginx.ingress.kubernetes.io/proxy-body-size"] == "1m"  # the API's limit
    assert paths["/connect/"][:2] == ("Prefix", "gridlane-connect")
    connect = paths["/connect/"][2]
    assert connect["nginx.ingress.kubernetes.io/proxy-read-timeout"] == "3600"  # as deploy/nginx
    assert connect["nginx.ingress.kubernetes.io/proxy-body-size"] == "0"  # uploads stream through
    pods = deployment(kit, "gridlane-connect").spec.template.metadata.labels
    assert selects(service(kit, "gridlane-connect").spec.selector, pods)
    assert not selects(service(kit).spec.selector, pods)


def test_the_pods_run_the_commands_of_the_systemd_units_and_the_job_migrates(kit):
    specs = pod_specs(kit)
    units = (("web", "gridlane-web.service"), ("connect", "gridlane-connect.service"),
             ("worker", "gridlane-worker.service"))  # fmt: skip
    for component, unit in units:
        service = read(ROOT / "deploy" / "systemd" / unit)["Service"]
        (container,) = specs[component].containers
        assert container.command == shlex.split(service["ExecStart"]), component
        assert container.working_dir == service["WorkingDirectory"]
        environment = dict(pair.split("=", 1) for pair in service.get("Environment", "").split())
        own = {e.name: e.value for e in container.env or []}
        assert {k: v for k, v in environment.items() if k != "GRIDLANE_BIND"} == {
            k: v for k, v in own.items() if k != "GRIDLANE_BIND"}, component  # fmt: skip
    (migrate,) = specs["migrate"].containers
    (worker,) = specs["worker"].containers
    assert migrate.command == [*worker.command[:2], "migrate", "--no-input"]  # the worker's python and manage.py
    assert specs["migrate"].restart_policy == "Never"


def test_every_variable_of_the_config_map_and_the_secret_is_one_the_environment_file_names(kit):
    in_config_map, in_secret = set(config_map(kit)), set(secret(kit))
    assert in_secret == SECRET_NAMES
    assert not in_config_map & SECRET_NAMES, "secrets belong in the Secret"
    assert (in_config_map | in_secret) - in_template() == set(), "name these in deploy/gridlane.env first"
    # Everything the environment file requires (its uncommented lines) is set by the kit.
    assert set(env_file_values()) <= in_config_map | in_secret


def test_the_secret_template_carries_only_the_environment_files_placeholders(kit):
    values = secret(kit)
    assert all("CHANGE-ME" in value for value in values.values())
    assert values == {name: env_file_values()[name] for name in SECRET_NAMES}
    assert "stringData" in yaml.safe_load((KIT / "secret.yaml").read_text())  # readable, to fill in by hand


def test_every_pod_runs_unprivileged_on_a_read_only_system_with_the_kits_environment(kit):
    for component, spec in pod_specs(kit).items():
        assert spec.security_context.run_as_non_root, component
        assert spec.enable_service_links is False  # or Kubernetes adds GRIDLANE_WEB_* variables of its own
        volumes = {v.name: v for v in spec.volumes}
        (container,) = spec.containers
        assert container.image == IMAGE
        context = container.security_context
        assert (context.allow_privilege_escalation, context.read_only_root_filesystem) == (False, True), component
        assert context.capabilities.drop == ["ALL"]
        assert all(volumes[m.name].empty_dir is not None for m in container.volume_mounts)  # writable: /tmp only
        assert set(container.resources.requests) == set(container.resources.limits) == {"cpu", "memory"}
        sources = [(s.config_map_ref or s.secret_ref).name for s in container.env_from]
        assert sources == ["gridlane-config", "gridlane-secrets"]
    assert pod_specs(kit)["web"].automount_service_account_token is False  # the web never calls the API
    assert pod_specs(kit)["connect"].automount_service_account_token is False


def broken(name: str, change: Callable[[dict[str, Any]], None], index: int = 0) -> dict[str, Any]:
    doc = copy.deepcopy(list(yaml.safe_load_all((KIT / name).read_text()))[index])
    change(doc)
    return doc


def miss_the_template(doc: dict[str, Any]) -> None:
    doc["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] = "api"


def drop_path_type(doc: dict[str, Any]) -> None:
    del doc["spec"]["rules"][0]["http"]["paths"][0]["pathType"]


# (the broken copy, the Status code, the field its cause names (None: refused while decoding), the message,
#  whether the official client's own models refuse it before sending: kubectl and others send it all the same)
BREAKAGES = {
    "a Deployment whose selector does not match its template": (
        broken("web.yaml", miss_the_template),
        422,
        "spec.template.metadata.labels",
        "`selector` does not match template `labels`",
        False,
    ),
    "a Deployment without a selector": (
        broken("worker.yaml", lambda d: d["spec"].pop("selector")),
        422,
        "spec.selector",
        "Required value",
        True,
    ),
    "a Deployment whose selector is empty": (
        broken("worker.yaml", lambda d: d["spec"].update(selector={"matchLabels": {}})),
        422,
        "spec.selector",
        "empty selector is invalid for deployment",
        False,
    ),
    "a mount of a volume the pod does not have": (
        broken("web.yaml", lambda d: d["spec"]["template"]["spec"].pop("volumes")),
        422,
        "spec.template.spec.containers[0].volumeMounts[0].name",
        'Not found: "tmp"',
        False,
    ),
    "an Ingress path without a pathType": (
        broken("ingress.yaml", drop_path_type),
        422,
        "spec.rules[0].http.paths[0].pathType",
        "Required value: pathType must be specified",
        True,
    ),
    "an Ingress backend without a port": (
        broken("ingress.yaml", lambda d: d["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"].pop("port")),
        422,
        "spec.rules[0].http.paths[0].backend.service.port",
        "port name or number is required",
        False,
    ),
    "a ConfigMap value that YAML reads as a number": (
        broken("configmap.yaml", lambda d: d["data"].update(GRIDLANE_WEB_WORKERS=2)),
        400,
        None,
        "cannot unmarshal number into Go struct field ConfigMap.data of type string",
        True,
    ),
    "Secret data that is not base64": (
        broken("secret.yaml", lambda d: d.update(data={"GRIDLANE_SECRET_KEY": "CHANGE-ME"})),
        400,
        None,
        "illegal base64 data",
        False,
    ),
}
COLLECTIONS = {
    "Deployment": "/apis/apps/v1/namespaces/{}/deployments",
    "Ingress": "/apis/networking.k8s.io/v1/namespaces/{}/ingresses",
    "ConfigMap": "/api/v1/namespaces/{}/configmaps",
    "Secret": "/api/v1/namespaces/{}/secrets",
}


def post(double: ApiDouble, doc: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The object sent as it is, as kubectl would send it: the Status code and body."""
    request = urllib.request.Request(
        double.url + COLLECTIONS[doc["kind"]].format(NAMESPACE),
        data=json.dumps(doc).encode(),
        headers={"Authorization": f"Bearer {double.token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def assert_refused(status: dict[str, Any], doc: dict[str, Any], code: int, field: str | None, message: str) -> None:
    assert (status["kind"], status["status"], status["code"]) == ("Status", "Failure", code)
    assert message in status["message"]
    if field is not None:
        assert status["reason"] == "Invalid"
        assert status["message"].startswith(f"{doc['kind']}.")
        assert doc["metadata"]["name"] in status["message"]
        causes = {cause["field"]: cause["message"] for cause in status["details"]["causes"]}
        assert message in causes[field]


@pytest.mark.parametrize(
    ("doc", "code", "field", "message", "client_refuses"), BREAKAGES.values(), ids=BREAKAGES.keys()
)
def test_the_double_refuses_a_broken_copy_as_an_api_server_would(
    double, api_client, doc, code, field, message, client_refuses
):
    if client_refuses:
        with pytest.raises(ValueError, match="validation error"):  # pydantic's, before anything is sent
            utils.create_from_yaml(api_client, yaml_objects=[copy.deepcopy(doc)], namespace=NAMESPACE)
    else:
        with pytest.raises(utils.FailToCreateError) as failed:
            utils.create_from_yaml(api_client, yaml_objects=[copy.deepcopy(doc)], namespace=NAMESPACE)
        (error,) = failed.value.api_exceptions
        assert error.status == code
        assert_refused(json.loads(error.body), doc, code, field, message)
    sent, status = post(double, doc)
    assert sent == code
    assert_refused(status, doc, code, field, message)
    resource = {"Deployment": "deployments", "Ingress": "ingresses", "ConfigMap": "configmaps", "Secret": "secrets"}
    assert double.get(resource[doc["kind"]], NAMESPACE, doc["metadata"]["name"]) is None
