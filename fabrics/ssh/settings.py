"""How to reach a cluster's login node: the connection half of a Slurm or PBS fabric's settings.

    {"host": "login1.hpc.example.org", "port": 22, "user": "gridlane",
     "known_hosts": "login1.hpc.example.org ssh-ed25519 AAAAC3Nz...",
     "key_file": "/etc/gridlane/hpc_ed25519"}

The host key is stored with the fabric and checked on every connection; nothing is ever added to it.
The private key stays a file on the portal host: the settings only name it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_HOST = re.compile(r"^[A-Za-z0-9.:_-]+$")
_USER = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9._-]*$")


@dataclass(frozen=True)
class SshSettings:
    host: str
    user: str
    known_hosts: str  # known_hosts lines for this host, as `ssh-keyscan` prints them
    key_file: str
    port: int = 22
    connect_timeout_s: float = 10.0
    command_timeout_s: float = 120.0
    keepalive_s: int = 15

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> SshSettings:
        """The SSH settings in a fabric's settings; ValueError names the first one missing or wrong."""
        host = settings.get("host")
        if not isinstance(host, str) or not _HOST.match(host):
            raise ValueError("settings.host: the login node's host name or address")
        user = settings.get("user")
        if not isinstance(user, str) or not _USER.match(user):
            raise ValueError("settings.user: the cluster account Gridlane submits as")
        known_hosts = settings.get("known_hosts")
        if not isinstance(known_hosts, str) or not known_hosts.strip():
            raise ValueError("settings.known_hosts: the login node's host key line (ssh-keyscan prints it)")
        key_file = settings.get("key_file")
        if not isinstance(key_file, str) or not key_file.strip():
            raise ValueError("settings.key_file: the path of the private key on the portal host")
        port = settings.get("port", 22)
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise ValueError("settings.port: a TCP port number")
        return cls(
            host=host,
            user=user,
            known_hosts=known_hosts,
            key_file=key_file,
            port=port,
            connect_timeout_s=_positive(settings, "connect_timeout_s", 10.0),
            command_timeout_s=_positive(settings, "command_timeout_s", 120.0),
            keepalive_s=int(_positive(settings, "keepalive_s", 15)),
        )


def _positive(settings: Mapping[str, Any], key: str, default: float) -> float:
    value = settings.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ValueError(f"settings.{key}: a positive number of seconds")
    return float(value)
