"""A VM lease logs in to the person's own account on the host, never a shared one: a real agent (as root,
as on a bare-metal host) makes the account on first use and grants the key in its own authorized_keys,
and a real key-only sshd on 127.0.0.1 lets the person in during the lease and locks them out after it."""

from __future__ import annotations

import pwd
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paramiko
import pytest

from portal.accounts.models import PosixAccount, PosixPolicy
from portal.workloads.states import State
from tests.agents.test_agents_live import reach
from tests.agents.test_leases import free_port, lease
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def person() -> Iterator[str]:
    """A POSIX user name no account on this host has yet; the account is removed after the test."""
    name = f"gl-lease-{uuid.uuid4().hex[:8]}"
    yield name
    subprocess.run(["userdel", "--remove", name], capture_output=True, check=False)


@pytest.fixture
def person_sshd(tmp_path: Path, person: str) -> Iterator[dict[str, Any]]:
    """A key-only sshd that lets only `person` in, with the keys in their own ~/.ssh (strict modes on)."""
    root = tmp_path / "sshd"
    root.mkdir()
    host_key = root / "host_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(host_key)], check=True)
    port = free_port()
    config = root / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\nAuthorizedKeysFile .ssh/authorized_keys\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n"
        f"PermitRootLogin no\nStrictModes yes\nUsePAM no\nPidFile {root}/sshd.pid\nAllowUsers {person}\n"
    )
    proc = subprocess.Popen(
        ["/usr/sbin/sshd", "-D", "-e", "-f", str(config)], stderr=subprocess.DEVNULL, start_new_session=True
    )

    def listening() -> bool:
        import socket

        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    wait_until(listening, timeout=10)
    yield {"port": port, "host_key": paramiko.Ed25519Key.from_private_key_file(host_key)}
    proc.terminate()
    proc.wait(timeout=10)


def whoami(sshd: dict[str, Any], user: str, key: paramiko.PKey) -> str | None:
    """Who `user` is once logged in with this key, or None when sshd refuses the key."""
    client = paramiko.SSHClient()
    client.get_host_keys().add(f"[127.0.0.1]:{sshd['port']}", "ssh-ed25519", sshd["host_key"])
    try:
        client.connect("127.0.0.1", port=sshd["port"], username=user, pkey=key,
                       allow_agent=False, look_for_keys=False, timeout=10)  # fmt: skip
        _, out, _ = client.exec_command("id -un; echo $HOME")
        return out.read().decode().strip()
    except paramiko.AuthenticationException:
        return None
    finally:
        client.close()


def authorized_keys(user: str) -> str:
    try:
        return Path(pwd.getpwnam(user).pw_dir, ".ssh", "authorized_keys").read_text()
    except (KeyError, FileNotFoundError):
        return ""


@pytest.fixture
def mapped(alice: Any, hosts: dict[str, Any], person: str) -> str:
    """IT runs jobs as their owners on the agent pool; alice is `person` there."""
    PosixPolicy.objects.create(fabric=hosts["fabric"], claim="")
    PosixAccount.objects.create(user=alice, fabric=hosts["fabric"], posix_user=person)
    return person


def test_a_lease_logs_in_to_the_persons_own_account_made_on_first_use_and_locks_them_out_after(
    alice, submit, hosts, cycling, start_agent, mapped, person_sshd, tmp_path
):
    key = paramiko.RSAKey.generate(2048)
    shared = tmp_path / "shared" / "authorized_keys"
    with pytest.raises(KeyError):
        pwd.getpwnam(mapped)  # no such account before the lease
    w = lease(submit, alice, key, "0.002")  # 7 seconds
    start_agent("host-1", "gpu-a", extra=("--person-accounts", "create", "--authorized-keys", str(shared)))
    reach(w, State.RUNNING)
    wait_until(lambda: "gridlane-lease-" in authorized_keys(mapped))
    entry = pwd.getpwnam(mapped)
    assert entry.pw_uid >= 1000
    keys_file = Path(entry.pw_dir, ".ssh", "authorized_keys")
    assert (keys_file.stat().st_uid, keys_file.stat().st_mode & 0o777) == (entry.pw_uid, 0o600)
    assert whoami(person_sshd, mapped, key) == f"{mapped}\n{entry.pw_dir}"
    assert not shared.exists()  # the shared lease account was never used

    reach(w, State.SUCCEEDED)
    assert "gridlane-lease-" not in authorized_keys(mapped)
    assert whoami(person_sshd, mapped, key) is None


def test_a_host_that_gives_no_one_their_own_account_fails_the_lease_rather_than_share_one(
    alice, submit, hosts, cycling, start_agent, mapped, tmp_path
):
    shared = tmp_path / "shared" / "authorized_keys"
    w = lease(submit, alice, paramiko.RSAKey.generate(2048), "1")
    start_agent("host-1", "gpu-a", extra=("--authorized-keys", str(shared)))
    reach(w, State.FAILED)
    assert "this host gives no one their own account" in w.events.last().reason
    assert not shared.exists()


def test_a_system_account_takes_no_lease(alice, submit, hosts, cycling, start_agent, mapped):
    subprocess.run(["useradd", "--system", "--create-home", mapped], check=True)
    w = lease(submit, alice, paramiko.RSAKey.generate(2048), "1")
    start_agent("host-1", "gpu-a", extra=("--person-accounts", "existing"))
    reach(w, State.FAILED)
    assert "a system account takes no lease" in w.events.last().reason
    assert authorized_keys(mapped) == ""
