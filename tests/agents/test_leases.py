"""VM leases through a real agent and a real sshd on 127.0.0.1 (key-only, on a free port): the user logs
in with paramiko during the lease and is refused after it ends and after it is cancelled."""

from __future__ import annotations

import getpass
import socket
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import paramiko
import pytest
from django.utils import timezone

from portal.accounts.models import AuditEvent
from portal.agents.models import Claim, LeaseKey
from portal.workloads import services
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.agents.test_agents_live import reach, state_of
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def sshd(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A key-only sshd whose only authorized_keys is the lease account's file the agent manages."""
    root = tmp_path / "sshd"
    root.mkdir()
    host_key = root / "host_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True)
    keys = tmp_path / "lease-account" / "authorized_keys"
    keys.parent.mkdir(mode=0o700)
    port = free_port()
    config = root / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\nAuthorizedKeysFile {keys}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
        f"PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\nPidFile {root}/sshd.pid\n"
        f"AllowUsers {getpass.getuser()}\n"
    )
    proc = subprocess.Popen(
        ["/usr/sbin/sshd", "-D", "-e", "-f", str(config)], stderr=subprocess.DEVNULL, start_new_session=True
    )

    def listening() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    wait_until(listening, timeout=60)
    yield {"port": port, "authorized_keys": keys, "host_key": paramiko.Ed25519Key.from_private_key_file(host_key)}
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def user_key() -> paramiko.RSAKey:
    return paramiko.RSAKey.generate(2048)


def logs_in(sshd: dict[str, Any], key: paramiko.PKey) -> bool:
    """Whether the lease account takes this key now (and runs a command with it)."""
    client = paramiko.SSHClient()
    client.get_host_keys().add(f"[127.0.0.1]:{sshd['port']}", "ssh-ed25519", sshd["host_key"])
    try:
        client.connect("127.0.0.1", port=sshd["port"], username=getpass.getuser(), pkey=key,
                       allow_agent=False, look_for_keys=False, timeout=10)  # fmt: skip
        _, out, _ = client.exec_command("echo inside")
        return bool(out.read().decode().strip() == "inside")
    except paramiko.AuthenticationException:
        return False
    finally:
        client.close()


def lease(submit: Any, alice: Any, key: paramiko.RSAKey, hours: str) -> Any:
    w = submit(alice, queue="gpu-a", kind="vm", name="box", command="lease", lease_hours=Decimal(hours))
    LeaseKey.objects.create(workload=w, public_key=f"ssh-rsa {key.get_base64()} alice", from_addresses="127.0.0.1")
    return w


def test_the_user_logs_in_during_the_lease_and_is_refused_after_it_ends(
    alice, submit, hosts, cycling, start_agent, sshd, user_key
):
    w = lease(submit, alice, user_key, "0.002")  # 7 seconds
    start_agent("host-1", "gpu-a", extra=("--authorized-keys", str(sshd["authorized_keys"])))
    reach(w, State.RUNNING)
    wait_until(lambda: "gridlane-lease-" in sshd["authorized_keys"].read_text())
    assert 'from="127.0.0.1"' in sshd["authorized_keys"].read_text()
    assert logs_in(sshd, user_key)

    reach(w, State.SUCCEEDED)
    assert w.lease_ends_at is not None
    assert AuditEvent.objects.filter(action="lease.expiring", target=str(w.pk)).count() == 1
    assert "gridlane-lease-" not in sshd["authorized_keys"].read_text()
    assert not logs_in(sshd, user_key)


def test_a_cancelled_lease_takes_access_away(alice, submit, hosts, cycling, start_agent, sshd, user_key):
    w = lease(submit, alice, user_key, "1")
    start_agent("host-1", "gpu-a", extra=("--authorized-keys", str(sshd["authorized_keys"])))
    reach(w, State.RUNNING)
    wait_until(lambda: "gridlane-lease-" in sshd["authorized_keys"].read_text())
    assert logs_in(sshd, user_key)

    services.do_cancel(alice, w)
    reach(w, State.CANCELLED)
    assert not logs_in(sshd, user_key)


def test_an_extended_lease_keeps_access_past_its_first_end(alice, submit, hosts, cycling, start_agent, sshd, user_key):
    w = lease(submit, alice, user_key, "0.002")  # 7 seconds
    start_agent("host-1", "gpu-a", extra=("--authorized-keys", str(sshd["authorized_keys"])))
    reach(w, State.RUNNING)
    wait_until(lambda: "gridlane-lease-" in sshd["authorized_keys"].read_text())
    w = Workload.objects.select_related("queue", "fabric").get(pk=w.pk)
    first_end = w.lease_ends_at
    assert first_end is not None

    services.extend(alice, w, Decimal("0.003"))  # 10 seconds more
    assert w.lease_ends_at == first_end + timedelta(seconds=10)
    assert Claim.objects.get(run_id=w.pk).lease_ends_at == w.lease_ends_at
    # The agent learns the new end from its heartbeat and writes it into the key's line.
    wait_until(lambda: f'expiry-time="{w.lease_ends_at:%Y%m%d%H%M%SZ}"' in sshd["authorized_keys"].read_text())
    wait_until(lambda: timezone.now() > first_end + timedelta(seconds=1), timeout=60)
    assert state_of(w) == State.RUNNING
    assert logs_in(sshd, user_key)

    reach(w, State.SUCCEEDED)
    # Each end is warned of as it nears: the first one, and the new one.
    assert AuditEvent.objects.filter(action="lease.expiring", target=str(w.pk)).count() == 2
    assert not logs_in(sshd, user_key)
