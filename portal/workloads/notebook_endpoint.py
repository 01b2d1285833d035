"""A job's web server (a notebook's Jupyter, or an app such as TensorBoard it publishes): where it listens.

At dispatch every job gets a callback URL, a secret and its connect path in its environment (`job_env`).
The secret is derived, never stored: HMAC-SHA256 of the portal's SECRET_KEY over a purpose and the
workload's run id, which is fresh after each preemption, so the job of an earlier attempt cannot speak for
the current one. The job POSTs host, port, token (and, for an app, a label and the path it serves from);
`check_report` reads them strictly and `do_report` keeps them on the workload (`notebook_endpoint`, shown to
no one) with the portal's own link to it: `/connect/<workload id>/`, which portal.connect serves. The local
fabric's notebooks are found by its poll instead (sync stores them through `record`). The worker asks a
notebook's server how it is used (portal.worker.idle) through the same record.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import re
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.conf import settings
from django.utils import timezone

from fabrics.base import Endpoint
from fabrics.ssh.notebook import ENDPOINT_SECRET_ENV, ENDPOINT_URL_ENV
from portal.queues.models import WorkloadKind
from portal.workloads.models import Workload
from portal.workloads.paths import Paths, path_of
from portal.workloads.states import State

log = logging.getLogger("gridlane.services")

PURPOSE = b"gridlane.notebook-endpoint.v1:"
REPORTING = (State.DISPATCHING, State.RUNNING)  # the job may report while it is being started or runs
FIELDS = frozenset({"host", "port", "token", "label", "path"})
_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")  # whole strings only (fullmatch)
TOKEN = re.compile(r"[A-Za-z0-9_-]{16,256}")  # URL-safe, and long enough to guard a server on a shared network
LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._-]{0,39}")  # a button's words: "TensorBoard", "MLflow UI"
CONNECT_PREFIX_ENV = "GRIDLANE_CONNECT_PREFIX"  # the path the job's server is reached under


class Refused(Exception):
    """The report is well formed but this workload takes none now (wrong kind, fabric or state)."""


@dataclass(frozen=True)
class Report:
    endpoint: Endpoint
    label: str  # "" for a notebook's own server


def secret(run_id: UUID) -> str:
    """The secret the job of this run reports with; derived, so nothing is stored."""
    key = settings.SECRET_KEY.encode()
    return hmac.new(key, PURPOSE + str(run_id).encode(), hashlib.sha256).hexdigest()


def connect_path(pk: UUID | str, paths: Paths | None = None) -> str:
    """The workload's own path on the portal, under which its server is reached (portal.connect)."""
    return path_of("connect:root", pk, paths)


def link(w: Workload) -> str:
    """What the user opens: JupyterLab for a notebook, the app's first page otherwise."""
    return settings.GRIDLANE_PUBLIC_URL + connect_path(w.pk) + ("lab" if w.kind == WorkloadKind.NOTEBOOK else "")


def job_env(w: Workload, paths: Paths | None = None) -> dict[str, str]:
    """What every job's environment gets to report a web server: the callback URL, the secret and the path
    the server will be reached under (a Jupyter serves under it: its base_url)."""
    url = settings.GRIDLANE_PUBLIC_URL + path_of("api:workload-endpoint", w.pk, paths)
    return {
        ENDPOINT_URL_ENV: url,
        ENDPOINT_SECRET_ENV: secret(w.run_id),
        CONNECT_PREFIX_ENV: connect_path(w.pk, paths),
    }


def stored(w: Workload) -> Endpoint | None:
    """The server its job reported (or its fabric found); None when there is none, or the record is unreadable."""
    server = w.notebook_endpoint
    if not isinstance(server, dict):
        return None
    try:
        return Endpoint(
            str(server["host"]), int(server["port"]), str(server.get("token", "")), str(server.get("path", "/"))
        )
    except (KeyError, TypeError, ValueError):
        return None


def label(w: Workload) -> str:
    """The words on its button: "notebook", or the name the app gave itself."""
    server = w.notebook_endpoint if isinstance(w.notebook_endpoint, dict) else {}
    return str(server.get("label") or ("notebook" if w.kind == WorkloadKind.NOTEBOOK else "app"))


def record(w: Workload, endpoint: Endpoint, label: str = "") -> bool:
    """Keep the server on the workload while it is being started or runs; False when it no longer is."""
    server = {"host": endpoint.host, "port": endpoint.port, "token": endpoint.token, "path": endpoint.path}
    if label:
        server["label"] = label
    moved = Workload.objects.filter(pk=w.pk, state__in=REPORTING).update(
        connect_url=link(w), notebook_endpoint=server, updated_at=timezone.now()
    )
    if moved == 1:
        w.notebook_endpoint, w.connect_url = server, link(w)
    return moved == 1


def reporter(pk: UUID, authorization: str) -> Workload | None:
    """The workload whose job sent `Authorization: Bearer <secret>`; None for a wrong secret or no such
    workload alike (the same work either way, so the answer tells nothing of which)."""
    w = Workload.objects.select_related("fabric").filter(pk=pk).first()
    matches = speaks_for(w.run_id if w is not None else pk, authorization)
    return w if w is not None and matches else None


def speaks_for(run_id: UUID, authorization: str) -> bool:
    """Whether `Authorization: Bearer <secret>` carries the secret of this run (in constant time)."""
    scheme, _, given = authorization.strip().partition(" ")
    matches = hmac.compare_digest(given.strip().encode("utf-8", "replace"), secret(run_id).encode())
    return matches and scheme.lower() == "bearer"


def check_report(data: Any, pk: UUID | str) -> tuple[Report | None, dict[str, list[str]]]:
    """The server in a report body, or the errors per field: the host a DNS name or an IP address, the port
    1-65535 (a JSON number), the token URL-safe (optional for an app); an app's label in a few plain words,
    and the path it serves from: "/" or the workload's connect path (a Jupyter's base_url); nothing else."""
    if not isinstance(data, dict):
        return None, {"detail": ['Send a JSON object: {"host": ..., "port": ..., "token": ...}.']}
    errors: dict[str, list[str]] = {}
    for name in sorted(set(data) - FIELDS):
        errors[str(name)[:50]] = ["Unknown field."]
    host, port, token = data.get("host"), data.get("port"), data.get("token")
    if not isinstance(host, str) or not _host(host):
        errors["host"] = ["A host name or an IP address (not 0.0.0.0) that the user's browser can reach."]
        host = ""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        errors["port"] = ["A TCP port number, 1 to 65535."]
        port = 0
    if "token" in data and (not isinstance(token, str) or not TOKEN.fullmatch(token)):
        errors["token"] = ["16 to 256 URL-safe characters (letters, digits, - and _)."]
    words = data.get("label", "")
    if not isinstance(words, str) or (words and not LABEL.fullmatch(words)):
        errors["label"] = ["1 to 40 letters, digits, spaces, dots, - or _, such as TensorBoard."]
    path = data.get("path", "/")
    if path not in ("/", connect_path(pk)):
        errors["path"] = [f'Where the server serves from: "/" or "{connect_path(pk)}" (its base URL).']
    if errors:
        return None, errors
    return Report(Endpoint(host.lower(), port, token if isinstance(token, str) else "", path), words), {}


def do_report(w: Workload, report: Report) -> str:
    """Keep the job's server on the workload; Refused when it takes no report now. Returns the portal's link."""
    if w.kind == WorkloadKind.NOTEBOOK and not report.endpoint.token:
        raise Refused("A notebook's server reports its token: the portal passes it on, the browser never sees it.")
    if not record(w, report.endpoint, report.label):
        state = w.get_state_display().lower()
        raise Refused(f"The workload is {state}; it takes a report only while it starts or runs.")
    log.info("workload %s reported its server at %s:%s", w.pk, report.endpoint.host, report.endpoint.port)
    return link(w)


def _host(host: str) -> bool:
    if "%" in host:
        return False  # an IPv6 zone: meaningless to the user's browser
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        labels = host.split(".")
        return len(host) <= 253 and all(_LABEL.fullmatch(label) for label in labels) and not labels[-1].isdigit()
    return not address.is_unspecified
