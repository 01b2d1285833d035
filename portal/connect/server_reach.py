"""Where a job's reported web server may be reached from the portal (the connect proxy, the idle check), by
portal.outbound's rules: only on the fabric's own nodes as Gridlane knows them, or on a network IT lists
(GRIDLANE_CONNECT_NETWORKS); nothing else, public addresses included.

The fabric's nodes as Gridlane knows them: the nodes its fabric reports its running jobs on (`Workload.host`, a
node list expanded: Slurm's, or every execution host of a PBS job), the hosts of its agents, its login node
(`settings.host`), and the portal host itself for the local fabric. A job names its server; it never names the
network it may be on. A Kubernetes job's server is on one of its own pods' IPs, as the fabric's last poll
reported them (PodAddresses, kept by portal/worker/pods.py), or on a network IT lists: never another pod's, a
node's, or anywhere else on the pod network.

`reach` returns the endpoint to connect to: the checked address in place of the name (a name that resolves
elsewhere later changes nothing). For a fabric reached through its login node (`connect_via: ssh`) whose
node names the portal cannot resolve, the name must be one of the fabric's node names, spelt as the fabric
spells it, and the login node resolves it.
"""

from __future__ import annotations

import ipaddress
from dataclasses import replace

from django.conf import settings

from fabrics import hostlist  # Slurm's node lists, and PBS's hosts as Gridlane keeps them
from fabrics.base import Endpoint
from portal import outbound
from portal.agents.models import AgentHost
from portal.worker.models import PodAddresses
from portal.workloads.models import Workload
from portal.workloads.states import State

LIVE = (State.DISPATCHING, State.RUNNING, State.CANCELLING)
_LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


def node_names(w: Workload) -> set[str]:
    """The names of the workload's fabric's nodes as Gridlane knows them (lower case, no trailing dot); none on
    Kubernetes, where a job's server is on its own pods (pod_addresses)."""
    found = set(hostlist.expand(w.host or ""))
    fabric = w.fabric
    if fabric is None:
        return found
    if fabric.kind == "kubernetes":
        return set()
    others = Workload.objects.filter(fabric_id=fabric.pk, state__in=LIVE).exclude(host="")
    for text in others.values_list("host", flat=True).distinct()[: hostlist.NODES_KEPT]:
        found.update(hostlist.expand(text))
    found.update(AgentHost.objects.filter(fabric_id=fabric.pk).values_list("name", flat=True)[: hostlist.NODES_KEPT])
    login = (fabric.settings or {}).get("host")
    if isinstance(login, str) and login:
        found.add(login)
    return {name.lower().rstrip(".") for name in found if name}


def pod_addresses(w: Workload) -> list[str]:
    """A Kubernetes workload's pods' IPs as its fabric's last poll reported them; [] before any."""
    found = PodAddresses.objects.filter(workload_id=w.pk).values_list("addresses", flat=True).first()
    return [str(a) for a in found or []]


def _network(address: str) -> outbound.Network | None:
    try:
        return ipaddress.ip_network(address)
    except ValueError:
        return None


def networks(w: Workload, names: set[str], resolver: outbound.Resolver = outbound.resolve) -> list[outbound.Network]:
    """IT's networks, the addresses of the fabric's nodes (those the portal can resolve), and loopback for the
    local fabric (its node is the portal host)."""
    found = outbound.networks(settings.GRIDLANE_CONNECT_NETWORKS)
    if w.fabric is not None and w.fabric.kind == "local":
        found.extend(_LOOPBACK)
    if w.fabric is not None and w.fabric.kind == "kubernetes":
        found.extend(n for a in pod_addresses(w) if (n := _network(a)) is not None)
    for name in sorted(names):
        try:
            address = outbound.literal(name)
            addresses = [address] if address is not None else resolver(name, 0)
        except outbound.Refused:
            continue  # a node the portal cannot resolve: its name may still match (through the login node)
        found.extend(ipaddress.ip_network(a) for a in addresses)
    return found


def reach(w: Workload, server: Endpoint, resolver: outbound.Resolver = outbound.resolve) -> Endpoint:
    """The endpoint to connect to for the workload's server: its host replaced by the checked address (or,
    through a login node, by the fabric's own spelling of the node's name); outbound.Refused saying why not."""
    names = node_names(w)
    via_ssh = w.fabric is not None and (w.fabric.settings or {}).get("connect_via", "direct") == "ssh"
    host = server.host.lower().rstrip(".")
    if via_ssh and host in names and outbound.literal(host) is None:
        try:
            resolver(host, server.port)
        except outbound.Refused:
            return server  # only the login node can resolve it, and it is a node of the fabric: it goes there
    checked = outbound.check(server.host, server.port, networks(w, names, resolver), public=False, resolver=resolver)
    return replace(server, host=str(checked.address))


def problem(w: Workload, server: Endpoint, resolver: outbound.Resolver = outbound.resolve) -> str:
    """Why the job may not report this server ("" when it may), for the report's `host` field. While the
    fabric has not yet said which node the job runs on (on Kubernetes: which IPs its pods have), a private
    address (not loopback, not link-local) is kept: the connect proxy checks it again, against the node (the
    pods), on every connection."""
    try:
        reach(w, server, resolver)
    except outbound.Refused as refused:
        kubernetes = w.fabric is not None and w.fabric.kind == "kubernetes"
        if not w.host or (kubernetes and not pod_addresses(w)):
            try:
                address = outbound.literal(server.host)
            except outbound.Refused:
                return str(refused)
            if address is not None and outbound.kind(address) == "private":
                return ""
        return f"{refused} A job's server must be on a node of its fabric."
    return ""
