"""A notebook on a batch cluster reports where its Jupyter server listens (fabrics.ssh.notebook).

At dispatch the job gets a callback URL and a secret in its environment (`job_env`). The secret is
derived, never stored: HMAC-SHA256 of the portal's SECRET_KEY over a purpose and the workload's run
id, which is fresh after each preemption, so the job of an earlier attempt cannot speak for the
current one. The job POSTs host, port and token; `check_report` reads them strictly and `do_report`
stores the link the fabric's `notebook_url` makes of them, while the notebook is being started or
runs. Sync leaves that link alone: it only writes a connect URL a fabric's poll knows. `do_report`
also keeps host, port and token apart (`Workload.notebook_endpoint`, shown to no one), so the worker
can ask the server how it is used (portal.worker.idle): the fabric cannot know.
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
from django.urls import reverse
from django.utils import timezone

from fabrics.registry import fabric_class
from fabrics.ssh.notebook import ENDPOINT_SECRET_ENV, ENDPOINT_URL_ENV
from portal.queues.models import WorkloadKind
from portal.workloads.models import Workload
from portal.workloads.states import State

log = logging.getLogger("gridlane.services")

PURPOSE = b"gridlane.notebook-endpoint.v1:"
REPORTING = (State.DISPATCHING, State.RUNNING)  # the job may report while it is being started or runs
FIELDS = frozenset({"host", "port", "token"})
_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?")  # whole strings only (fullmatch)
TOKEN = re.compile(r"[A-Za-z0-9_-]{16,256}")  # URL-safe, and long enough to guard a server on a shared network


class Refused(Exception):
    """The report is well formed but this workload takes none now (wrong kind, fabric or state)."""


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    token: str


def secret(run_id: UUID) -> str:
    """The secret the job of this run reports with; derived, so nothing is stored."""
    key = settings.SECRET_KEY.encode()
    return hmac.new(key, PURPOSE + str(run_id).encode(), hashlib.sha256).hexdigest()


def takes_reports(w: Workload) -> bool:
    """A notebook on a fabric whose jobs report their server (Slurm, PBS)."""
    if w.kind != WorkloadKind.NOTEBOOK or w.fabric is None:
        return False
    try:
        cls = fabric_class(w.fabric.kind)
    except ValueError:
        return False
    return callable(getattr(cls, "notebook_connect_url", None))


def job_env(w: Workload) -> dict[str, str]:
    """What the job's environment needs to report its server: the callback URL and the secret (else nothing)."""
    if not takes_reports(w):
        return {}
    url = settings.GRIDLANE_PUBLIC_URL + reverse("api:workload-endpoint", args=[w.pk])
    return {ENDPOINT_URL_ENV: url, ENDPOINT_SECRET_ENV: secret(w.run_id)}


def reporter(pk: UUID, authorization: str) -> Workload | None:
    """The workload whose job sent `Authorization: Bearer <secret>`; None for a wrong secret or no such
    workload alike (the same work either way, so the answer tells nothing of which)."""
    w = Workload.objects.select_related("fabric").filter(pk=pk).first()
    scheme, _, given = authorization.strip().partition(" ")
    expected = secret(w.run_id if w is not None else pk)
    matches = hmac.compare_digest(given.strip().encode("utf-8", "replace"), expected.encode())
    return w if w is not None and matches and scheme.lower() == "bearer" else None


def check_report(data: Any) -> tuple[Endpoint | None, dict[str, list[str]]]:
    """The endpoint in a report body, or the errors per field: the host a DNS name or an IP address,
    the port 1-65535 (a JSON number), the token URL-safe; nothing else."""
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
    if not isinstance(token, str) or not TOKEN.fullmatch(token):
        errors["token"] = ["16 to 256 URL-safe characters (letters, digits, - and _)."]
        token = ""
    return (None, errors) if errors else (Endpoint(host.lower(), port, token), {})


def do_report(w: Workload, endpoint: Endpoint) -> str:
    """Store the notebook's link on the workload; Refused when it takes no report now. Returns the link."""
    if not takes_reports(w) or w.fabric is None:
        raise Refused("Only a notebook on a Slurm or PBS fabric reports its server.")
    make_url = fabric_class(w.fabric.kind).notebook_connect_url  # type: ignore[attr-defined]
    url = str(make_url(w.fabric.settings, endpoint.host, endpoint.port, endpoint.token))
    if len(url) > Workload._meta.get_field("connect_url").max_length:  # type: ignore[operator]
        raise Refused("The link this makes is too long to keep; ask IT to shorten the fabric's notebook_url.")
    server = {"host": endpoint.host, "port": endpoint.port, "token": endpoint.token}
    moved = Workload.objects.filter(pk=w.pk, kind=WorkloadKind.NOTEBOOK, state__in=REPORTING).update(
        connect_url=url, notebook_endpoint=server, updated_at=timezone.now()
    )
    if moved != 1:
        state = w.get_state_display().lower()
        raise Refused(f"The notebook is {state}; it takes a report only while it starts or runs.")
    log.info("notebook %s reported its server at %s:%s", w.pk, endpoint.host, endpoint.port)
    return url


def _host(host: str) -> bool:
    if "%" in host:
        return False  # an IPv6 zone: meaningless to the user's browser
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        labels = host.split(".")
        return len(host) <= 253 and all(_LABEL.fullmatch(label) for label in labels) and not labels[-1].isdigit()
    return not address.is_unspecified
